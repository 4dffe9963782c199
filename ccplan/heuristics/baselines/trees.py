"""Trees: the binomial tree (``tree``) and NCCL's double binary tree (``double-binary-tree``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from ccplan.contract import SolveOptions
from ccplan.heuristics.baselines.placer import Placer
from ccplan.heuristics.baselines.rings import _rotate
from ccplan.heuristics.baselines.supported import _unsupported
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule


# ====================================================================== binomial tree
def _ranks(instance: Instance, root: int | None) -> list[int]:
    gpus = list(instance.topology.gpus)
    return _rotate(gpus, root) if root is not None else gpus


def _binomial_bcast(p: Placer, ranks: Sequence[int], chunks: Sequence[Chunk]) -> None:
    n = len(ranks)
    mask = 1
    while mask < n:
        for r in range(mask):
            if r + mask < n:
                for c in chunks:
                    p.copy(c, ranks[r], ranks[r + mask])
        mask <<= 1


def _binomial_reduce(p: Placer, ranks: Sequence[int], chunks: Sequence[Chunk]) -> int:
    """Children ``r + 2^k`` (``2^k > r``) reduce into ``r``; ranks in decreasing order are a
    topological order (every child has a larger rank than its parent)."""
    n = len(ranks)
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for r in range(n - 1, 0, -1):
        parent = r - (1 << (r.bit_length() - 1))
        for c in chunks:
            arr = p.reduce_to(c, ranks[r], ranks[parent], ready[(c, r)], sink=ranks[0])
            ready[(c, parent)] = max(ready[(c, parent)], arr)
    finish = 0
    for c in chunks:
        p.mark_full(c, ranks[0], ready[(c, 0)])
        finish = max(finish, ready[(c, 0)])
    return finish


def tree_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Binomial tree (``001_*.txt``): broadcast, reduce, AllReduce = reduce + broadcast.

    Ranks are the GPUs in id order rotated so the root is rank 0 (AllReduce: the first GPU).
    """
    coll = instance.collective
    p = Placer(instance)
    chunks = list(coll.chunk_ids)
    if coll.kind == "broadcast":
        _binomial_bcast(p, _ranks(instance, coll.root), chunks)
    elif coll.kind == "reduce":
        _binomial_reduce(p, _ranks(instance, coll.root), chunks)
    elif coll.kind == "allreduce":
        ranks = _ranks(instance, None)
        _binomial_reduce(p, ranks, chunks)
        _binomial_bcast(p, ranks, chunks)
    else:
        _unsupported("tree", coll.kind)
    return p.schedule("tree")


# ====================================================================== double binary tree
def _inorder_parent(pos: int, n: int) -> int | None:
    """Parent of position ``pos`` (1-based) in the in-order binary tree on ``1..n``.

    The height of ``pos`` is its number of trailing zeros; the parent is ``pos +- lowbit`` (the
    one with the next bit set), repeated while it falls beyond ``n``; the root is the largest
    power of two ``<= n``.
    """
    root = 1 << (n.bit_length() - 1)
    if pos == root:
        return None
    p = pos
    while True:
        b = p & -p
        p = p - b if (p // (2 * b)) % 2 == 1 else p + b
        if p <= n:
            return p


def double_binary_trees(n: int) -> tuple[dict[int, int | None], dict[int, int | None]]:
    """Parent maps (rank -> parent rank) of NCCL's two complementary binary trees.

    Tree 1 puts rank ``r`` at position ``r+1``; tree 2 shifts every rank by one position, so the
    leaves of one tree (odd positions) are interior nodes of the other.
    """
    t1: dict[int, int | None] = {}
    t2: dict[int, int | None] = {}
    for pos in range(1, n + 1):
        par = _inorder_parent(pos, n)
        t1[pos - 1] = None if par is None else par - 1
        t2[pos % n] = None if par is None else par % n
    return t1, t2


def _tree_allreduce(
    p: Placer, gpus: Sequence[int], parent: Mapping[int, int | None], chunks: Sequence[Chunk]
) -> None:
    depth: dict[int, int] = {}

    def d(r: int) -> int:
        if r not in depth:
            par = parent[r]
            depth[r] = 0 if par is None else d(par) + 1
        return depth[r]

    order = sorted(parent, key=lambda r: (-d(r), r))
    root = next(r for r in parent if parent[r] is None)
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for r in order:
        par = parent[r]
        if par is None:
            continue
        for c in chunks:
            arr = p.reduce_to(c, gpus[r], gpus[par], ready[(c, r)], sink=gpus[root])
            ready[(c, par)] = max(ready[(c, par)], arr)
    for c in chunks:
        p.mark_full(c, gpus[root], ready[(c, root)])
    for r in reversed(order):
        par = parent[r]
        if par is not None:
            for c in chunks:
                p.copy(c, gpus[par], gpus[r])


def double_binary_tree_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """NCCL's double binary tree AllReduce: half the chunks on each tree, reduce up then
    broadcast down, pipelined by chunk."""
    coll = instance.collective
    if coll.kind != "allreduce":
        _unsupported("double-binary-tree", coll.kind)
    gpus = list(instance.topology.gpus)
    p = Placer(instance)
    chunks = list(coll.chunk_ids)
    half = (len(chunks) + 1) // 2
    t1, t2 = double_binary_trees(len(gpus))
    _tree_allreduce(p, gpus, t1, chunks[:half])
    if chunks[half:]:
        _tree_allreduce(p, gpus, t2, chunks[half:])
    return p.schedule("double-binary-tree")

