r"""Closed-form alpha-beta costs of the classic collective algorithms.

Hockney model (``003_*.txt`` and ``reference/msccl_and_peers.md`` section 4.1), one function
per algorithm of :mod:`ccplan.heuristics.baselines`; ``alpha`` is the per-message latency (µs),
``beta`` the time per byte (µs/B), ``size`` the TE-CCL buffer size (bytes) and ``n`` the number
of GPUs. These are the textbook figures the slotted schedules are compared with.
"""

from __future__ import annotations

import math


# ====================================================================== closed-form costs
def ring_allgather_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Ring AllGather: ``(n-1)`` steps, each one message of ``size/n`` bytes per link.

    ``T = (n-1) (alpha + size/n * beta)`` (``003_*.txt``, ring row halved; msccl_and_peers §4.1).
    """
    return (n - 1) * (alpha + size / n * beta)


def ring_reducescatter_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Ring ReduceScatter: the time-reverse of ring AllGather, same cost (reduction free)."""
    return ring_allgather_cost(n, size, alpha, beta)


def ring_allreduce_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Ring AllReduce = ReduceScatter + AllGather: ``2(n-1)(alpha + size/n * beta)``
    (``003_*.txt``: ``2(N-1) alpha + 2 M (N-1)/N beta``)."""
    return 2 * ring_allgather_cost(n, size, alpha, beta)


def chain_broadcast_cost(n: int, size: float, alpha: float, beta: float, pieces: int = 1) -> float:
    """Pipelined chain broadcast in ``k = pieces``: ``(n-2+k)(alpha + size/k * beta)``."""
    if n <= 1:
        return 0.0
    return (n - 2 + pieces) * (alpha + size / pieces * beta)


def binomial_broadcast_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Binomial-tree broadcast, one port per node: ``ceil(log2 n)`` rounds of one full message,
    ``T = ceil(log2 n) (alpha + size * beta)`` (``001_*.txt``, Broadcast)."""
    return _ceil_log2(n) * (alpha + size * beta)


def binomial_reduce_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Binomial-tree reduce: the mirror of the broadcast, same cost (``001_*.txt``, Reduce)."""
    return binomial_broadcast_cost(n, size, alpha, beta)


def tree_allreduce_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Reduce then broadcast on a binomial tree, unpipelined: ``2 ceil(log2 n)(alpha + size beta)``
    (``001_*.txt``, AllReduce; ``003_*.txt`` gives the pipelined ``2 log N alpha + 2 M beta``)."""
    return 2 * binomial_broadcast_cost(n, size, alpha, beta)


def double_binary_tree_allreduce_cost(
    n: int, size: float, alpha: float, beta: float, pieces: int = 1
) -> float:
    """Double binary tree AllReduce (NCCL), each tree carrying ``size/2`` in ``pieces`` pieces.

    A binary tree of depth ``d = floor(log2 n)`` pipelines ``k`` pieces up in ``d + k - 1``
    message times when an interior node receives from its two children on different links;
    the broadcast back down is the same. With each tree carrying half the data and the two trees
    on disjoint interior nodes: ``T ~= 2 (d + k - 1)(alpha + size/(2k) beta)``, which tends to
    ``2 log2 n alpha + size beta`` per tree-direction pair for large ``k`` (``reference`` §4.1).
    """
    if n <= 1:
        return 0.0
    d = max(1, math.floor(math.log2(n)))
    return 2 * (d + pieces - 1) * (alpha + size / (2 * pieces) * beta)


def recursive_doubling_allgather_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Recursive doubling AllGather.

    ``n = 2^m``: round ``k`` exchanges ``2^k`` blocks of ``size/n``, so
    ``T = m alpha + (n-1)/n size beta`` (Thakur et al.; ``001_*.txt`` AllGather, hypercube).
    Otherwise the ``r = n - 2^m`` extra GPUs first hand their block to a partner
    (``alpha + size/n beta``), the ``2^m`` core GPUs double with up to two blocks per original
    core GPU (round ``k`` at most ``2^(k+1)`` blocks), and the partners hand back what the
    extras lack (``alpha + (n-1)/n size beta``); the value returned is then this upper bound.
    """
    if n <= 1:
        return 0.0
    m = math.floor(math.log2(n))
    core = 1 << m
    if core == n:
        return m * alpha + (n - 1) / n * size * beta
    rounds = sum(alpha + (2 << k) * size / n * beta for k in range(m))
    return (alpha + size / n * beta) + rounds + (alpha + (n - 1) / n * size * beta)


def recursive_halving_doubling_allreduce_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Rabenseifner AllReduce: recursive halving ReduceScatter + recursive doubling AllGather.

    Power of two: ``2 log2 n alpha + 2 (n-1)/n size beta`` (``003_*.txt`` lists
    ``log N alpha + 2 M beta``; the standard count has one message per round in each half).
    Otherwise the ``r = n - 2^m`` extra GPUs first send their whole vector to a partner and get
    the result back at the end: add ``2 (alpha + size beta)`` and use ``2^m`` in the formula.
    """
    if n <= 1:
        return 0.0
    m = math.floor(math.log2(n))
    core = 1 << m
    t = 2 * m * alpha + 2 * (core - 1) / core * size * beta
    if core != n:
        t += 2 * (alpha + size * beta)
    return t


def hierarchical_allreduce_cost(
    groups: int, per_group: int, size: float, alpha_intra: float, beta_intra: float,
    alpha_inter: float, beta_inter: float,
) -> float:
    """2D hierarchical AllReduce: intra ring ReduceScatter, inter ring AllReduce of ``1/g`` of the
    buffer on every rail, intra ring AllGather:
    ``2 (g-1)(a_i + size/g b_i) + 2 (G-1)(a_o + size/(g G) b_o)`` (``003_*.txt``, layered)."""
    g, big = per_group, groups
    return 2 * (g - 1) * (alpha_intra + size / g * beta_intra) + 2 * (big - 1) * (
        alpha_inter + size / (g * big) * beta_inter
    )


def _ceil_log2(n: int) -> int:
    return 0 if n <= 1 else math.ceil(math.log2(n) - 1e-12)
