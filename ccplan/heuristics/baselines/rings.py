"""Rings: the Hamiltonian ring order of a topology and the ring (chain) algorithms.

:func:`ring_order` finds a directed ring over the GPUs on direct links or switch-only routes;
the ring ReduceScatter and AllGather steps here are also the building blocks of
:mod:`~ccplan.heuristics.baselines.hierarchical`; :func:`ring_schedule` is the ``ring``
method (a pipelined chain for Broadcast and Reduce).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from itertools import pairwise

from ccplan.contract import SolveOptions
from ccplan.heuristics.baselines.placer import Placer
from ccplan.heuristics.baselines.supported import _unsupported
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

_RING_SEARCH_BUDGET = 50_000


# ====================================================================== ring order
def _gpu_graph(topo: Topology) -> dict[int, dict[int, float]]:
    """GPU -> {GPU: bottleneck GB/s} for direct links and routes through switches only."""
    adj: dict[int, dict[int, float]] = {g: {} for g in topo.gpus}
    for g in topo.gpus:
        stack = [(g, math.inf)]
        seen = {g}
        while stack:
            a, bw = stack.pop()
            for li in topo.out_links[a]:
                link = topo.links[li]
                b, nbw = link.dst, min(bw, link.bandwidth_GBps)
                if b in seen:
                    continue
                if topo.kind[b] == "gpu":
                    adj[g][b] = max(adj[g].get(b, 0.0), nbw)
                else:
                    seen.add(b)
                    stack.append((b, nbw))
    return adj


def ring_order(topo: Topology, gpus: Sequence[int] | None = None) -> list[int]:
    """A directed Hamiltonian cycle over ``gpus`` using direct links or switch-only routes.

    Depth-first search with Warnsdorff's rule (fewest onward choices first, then the widest
    link), bounded to a fixed number of expansions; falls back to id order (then logical
    neighbours are routed over shortest paths).
    """
    members = list(gpus if gpus is not None else topo.gpus)
    if len(members) <= 2:
        return members
    allowed = set(members)
    full = _gpu_graph(topo)
    adj = {g: {h: bw for h, bw in full[g].items() if h in allowed} for g in members}
    start = members[0]
    budget = [_RING_SEARCH_BUDGET]
    path = [start]
    used = {start}

    def onward(h: int) -> int:
        return sum(1 for x in adj[h] if x not in used)

    # An explicit stack of candidate iterators, one per node on the path, not recursion:
    # a ring over thousands of GPUs is as deep as it is long.
    frames: list[Iterator[int]] = []

    def enter() -> bool | None:
        """True: the path closes a ring; False: dead end (or budget spent); None: expanded."""
        if len(path) == len(members):
            return start in adj[path[-1]]
        budget[0] -= 1
        if budget[0] < 0:
            return False
        cur = path[-1]
        cands = [h for h in adj[cur] if h not in used]
        cands.sort(key=lambda h: (onward(h), -adj[cur][h], h))
        frames.append(iter(cands))
        return None

    found = enter()
    while found is None and frames:
        h = next(frames[-1], None)
        if h is None:  # every choice after path[-1] failed: step back
            frames.pop()
            if frames:
                used.discard(path.pop())
            continue
        path.append(h)
        used.add(h)
        step = enter()
        if step is True:
            found = True
        elif step is False:
            path.pop()
            used.discard(h)
    if found:
        return path
    log.info("no Hamiltonian ring found on %s; using id order with routed hops", topo.name)
    return members


# ====================================================================== chunk helpers
def _chunks_of(instance: Instance) -> dict[int, list[Chunk]]:
    """Chunk label (source / owner) -> its chunks, sorted."""
    out: dict[int, list[Chunk]] = defaultdict(list)
    for c in instance.collective.chunk_ids:
        out[c[0]].append(c)
    return out


# ====================================================================== ring
def _ring_rs(
    p: Placer,
    ring: Sequence[int],
    owned: Mapping[int, Sequence[Chunk]],
    ready: dict[tuple[Chunk, int], int] | None = None,
    mark: bool = True,
) -> dict[tuple[Chunk, int], int]:
    """Ring ReduceScatter: the chunks owned by ``ring[q]`` start at ``ring[q+1]`` and are
    reduced along the ring, ending at the owner after ``n-1`` hops.

    ``ready[(chunk, node)]`` is the slot from which the node's partial sum is complete (0 for
    the precondition); it is updated in place and returned. ``mark`` records the owners as
    holding the finished reduction.
    """
    n = len(ring)
    pos = {g: i for i, g in enumerate(ring)}
    if ready is None:
        ready = defaultdict(int)
    for step in range(n - 1):
        for owner, chunks in owned.items():
            q = pos[owner]
            a, b = ring[(q + 1 + step) % n], ring[(q + 2 + step) % n]
            for c in chunks:
                arr = p.reduce_to(c, a, b, ready.get((c, a), 0), sink=owner)
                ready[(c, b)] = max(ready.get((c, b), 0), arr)
    if mark:
        for owner, chunks in owned.items():
            for c in chunks:
                p.mark_full(c, owner, ready.get((c, owner), 0))
    return ready


def _ring_ag(p: Placer, ring: Sequence[int], sources: Mapping[int, Sequence[Chunk]]) -> None:
    """Ring AllGather: the chunks of ``ring[q]`` travel ``q -> q+1 -> ...`` for ``n-1`` hops."""
    n = len(ring)
    pos = {g: i for i, g in enumerate(ring)}
    for step in range(n - 1):
        for src, chunks in sources.items():
            q = pos[src]
            a, b = ring[(q + step) % n], ring[(q + step + 1) % n]
            for c in chunks:
                p.copy(c, a, b)


def _rotate(order: Sequence[int], first: int) -> list[int]:
    k = list(order).index(first)
    return list(order[k:]) + list(order[:k])


def ring_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Ring (chain for rooted collectives) on a Hamiltonian cycle of the topology.

    AllGather / ReduceScatter: ``n-1`` steps; AllReduce: ReduceScatter then AllGather,
    ``2(n-1)`` steps; Broadcast / Reduce: pipelined chain from / to the root.
    """
    coll = instance.collective
    ring = options.extra.get("ring") if options.extra else None
    order = [int(g) for g in ring] if ring is not None else ring_order(instance.topology)
    p = Placer(instance)
    kind = coll.kind
    by_label = _chunks_of(instance)
    if kind == "allgather":
        _ring_ag(p, order, by_label)
    elif kind == "reducescatter":
        _ring_rs(p, order, by_label)
    elif kind == "allreduce":
        _ring_rs(p, order, by_label)
        _ring_ag(p, order, by_label)
    elif kind == "broadcast":
        assert coll.root is not None
        chain = _rotate(order, coll.root)
        for c in by_label[coll.root]:
            for a, b in pairwise(chain):
                p.copy(c, a, b)
    elif kind == "reduce":
        assert coll.root is not None
        chain = _rotate(order, coll.root)
        chain = chain[1:] + chain[:1]
        ready: dict[tuple[Chunk, int], int] = defaultdict(int)
        for c in by_label[coll.root]:
            for a, b in pairwise(chain):
                ready[(c, b)] = max(ready[(c, b)], p.reduce_to(c, a, b, ready[(c, a)], sink=coll.root))
    else:
        _unsupported("ring", kind)
    return p.schedule("ring")

