"""Recursive doubling (``recursive-doubling``) and Rabenseifner's recursive halving-doubling
(``recursive-halving-doubling``), with the extra GPUs of a non-power of two folded into
partners first and unfolded at the end."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from ccplan.contract import SolveOptions
from ccplan.heuristics.baselines.placer import Placer
from ccplan.heuristics.baselines.rings import _chunks_of
from ccplan.heuristics.baselines.supported import _unsupported
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule


# ====================================================================== recursive doubling / halving
def _fold(n: int) -> tuple[int, dict[int, int]]:
    """Largest power of two ``2^m <= n`` and the partner (a core rank) of every extra rank."""
    core = 1 << (n.bit_length() - 1)
    return core, {e: e - core for e in range(core, n)}


def _rd_exchange(p: Placer, gpus: Sequence[int], have: dict[int, set[Chunk]], core: int) -> None:
    """Recursive doubling among core ranks ``0..core-1``: at mask ``2^k`` rank ``q`` sends its
    peer ``q ^ 2^k`` every chunk the peer lacks; ``have`` is updated in place."""
    mask = 1
    while mask < core:
        new = {q: set(have[q]) for q in range(core)}
        for q in range(core):
            peer = q ^ mask
            for c in sorted(have[q] - have[peer]):
                p.copy(c, gpus[q], gpus[peer])
            new[peer] |= have[q]
        have.update(new)
        mask <<= 1


def _rd_allgather(p: Placer, gpus: Sequence[int], have: dict[int, set[Chunk]]) -> None:
    """Recursive doubling over the core ranks with folding of the extra ranks."""
    n = len(gpus)
    core, partner = _fold(n)
    for e, q in partner.items():
        for c in sorted(have[e]):
            p.copy(c, gpus[e], gpus[q])
        have[q] |= have[e]
    _rd_exchange(p, gpus, have, core)
    for e, q in partner.items():
        for c in sorted(have[q] - have[e]):
            p.copy(c, gpus[q], gpus[e])


def _rh_reducescatter(p: Placer, gpus: Sequence[int], target: Mapping[Chunk, int]) -> dict[Chunk, int]:
    """Recursive halving: at mask ``2^k`` (from ``core/2`` down) rank ``q`` sends the partial sums
    of the chunks whose target core rank differs from ``q`` in that bit to ``q ^ 2^k``.

    ``target`` maps every chunk to the core rank that ends with it. Returns finish slots.
    """
    n = len(gpus)
    core, partner = _fold(n)
    chunks = sorted(target)
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for e, q in partner.items():
        for c in chunks:
            arr = p.reduce_to(c, gpus[e], gpus[q], 0, sink=gpus[target[c]])
            ready[(c, q)] = max(ready[(c, q)], arr)
    block = {q: list(chunks) for q in range(core)}
    mask = core >> 1
    while mask:
        for q in range(core):
            peer = q ^ mask
            keep: list[Chunk] = []
            give: list[Chunk] = []
            for c in block[q]:
                (keep if (target[c] & mask) == (q & mask) else give).append(c)
            for c in give:
                arr = p.reduce_to(c, gpus[q], gpus[peer], ready[(c, q)], sink=gpus[target[c]])
                ready[(c, peer)] = max(ready[(c, peer)], arr)
            block[q] = keep
        mask >>= 1
    finish = {}
    for c in chunks:
        finish[c] = ready[(c, target[c])]
        p.mark_full(c, gpus[target[c]], finish[c])
    return finish


def recursive_doubling_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Recursive doubling: AllGather (blocks double every round) and AllReduce (full-vector
    exchange-and-reduce every round, latency-optimal); non-powers of two fold the extra GPUs
    into partners first and unfold at the end."""
    coll = instance.collective
    gpus = list(instance.topology.gpus)
    rank = {g: i for i, g in enumerate(gpus)}
    p = Placer(instance)
    if coll.kind == "allgather":
        have = {rank[g]: set(cs) for g, cs in _chunks_of(instance).items()}
        for r in range(len(gpus)):
            have.setdefault(r, set())
        _rd_allgather(p, gpus, have)
    elif coll.kind == "allreduce":
        n = len(gpus)
        core, partner = _fold(n)
        chunks = list(coll.chunk_ids)
        ready: dict[tuple[Chunk, int], int] = defaultdict(int)
        for e, q in partner.items():
            for c in chunks:
                # Core GPUs keep their buffers live while exchanging: relay through switches only.
                arr = p.reduce_to(c, gpus[e], gpus[q], 0, switches_only=True)
                ready[(c, q)] = max(ready[(c, q)], arr)
        mask = 1
        while mask < core:
            for q in range(core):
                peer = q ^ mask
                if peer < q:
                    continue
                for c in chunks:
                    at_peer, at_q = p.exchange(c, gpus[q], gpus[peer], ready[(c, q)], ready[(c, peer)])
                    ready[(c, peer)] = max(ready[(c, peer)], at_peer)
                    ready[(c, q)] = max(ready[(c, q)], at_q)
            mask <<= 1
        for q in range(core):
            for c in chunks:
                p.mark_full(c, gpus[q], ready[(c, q)])
        for e, q in partner.items():
            for c in chunks:
                p.copy(c, gpus[q], gpus[e])
    else:
        _unsupported("recursive-doubling", coll.kind)
    return p.schedule("recursive-doubling")


def recursive_halving_doubling_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Rabenseifner: recursive halving ReduceScatter, recursive doubling AllGather, and
    AllReduce as the two in sequence (non-powers of two folded)."""
    coll = instance.collective
    gpus = list(instance.topology.gpus)
    rank = {g: i for i, g in enumerate(gpus)}
    p = Placer(instance)
    if coll.kind == "allgather":
        return recursive_doubling_schedule(instance, options)
    if coll.kind not in ("reducescatter", "allreduce"):
        _unsupported("recursive-halving-doubling", coll.kind)
    core, partner = _fold(len(gpus))
    chunks = list(coll.chunk_ids)
    if coll.kind == "reducescatter":
        # Every chunk must end at its owner (an extra rank's chunks at its partner first).
        target = {c: partner.get(rank[c[0]], rank[c[0]]) for c in chunks}
    else:
        # AllReduce chunk labels are arbitrary: split the buffer evenly over the core ranks,
        # as Rabenseifner halves the vector.
        target = {c: i * core // len(chunks) for i, c in enumerate(chunks)}
    _rh_reducescatter(p, gpus, target)
    if coll.kind == "reducescatter":
        for c in chunks:
            if rank[c[0]] in partner:
                p.copy(c, gpus[target[c]], c[0])
    else:
        have: dict[int, set[Chunk]] = {q: set() for q in range(core)}
        for c, q in target.items():
            have[q].add(c)
        _rd_core_then_unfold(p, gpus, have, partner)
    return p.schedule("recursive-halving-doubling")


def _rd_core_then_unfold(
    p: Placer, gpus: Sequence[int], have: dict[int, set[Chunk]], partner: Mapping[int, int]
) -> None:
    _rd_exchange(p, gpus, have, len(have))
    for e, q in partner.items():
        for c in sorted(have[q]):
            p.copy(c, gpus[q], gpus[e])

