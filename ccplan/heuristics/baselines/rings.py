"""Rings: the Hamiltonian ring order of a topology and the ring (chain) algorithms.

:func:`ring_order` finds a directed ring over the GPUs on direct links or switch-only routes;
the ring ReduceScatter and AllGather steps here are also the building blocks of
:mod:`~ccplan.heuristics.baselines.hierarchical`. :func:`ring_schedule` is the ``ring`` method,
NCCL-style: the rings of :func:`~ccplan.heuristics.baselines.channels.find_channels`, one
channel each, the data split among them; :func:`ring1_schedule` is ``ring-1``, one ring (the
paper's baseline). Both run a pipelined chain per channel for Broadcast and Reduce.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from itertools import pairwise

from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.heuristics.baselines.channels import MAX_CHANNELS, Channels, find_channels
from ccplan.heuristics.baselines.placer import _DETAILS, Placer
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
RingPlan = tuple[Sequence[int], Mapping[int, Sequence[Chunk]]]
"""One channel's ring and the chunks it carries per owner (ReduceScatter) or source (AllGather)."""

Routes = Mapping[tuple[int, int], Sequence[int]]
"""Ring hop ``(a, b)`` -> node path it takes (default: the placer's shortest path)."""


def _rings_rs(
    p: Placer,
    plans: Sequence[RingPlan],
    ready: dict[tuple[Chunk, int], int] | None = None,
    mark: bool = True,
    routes: Routes | None = None,
) -> dict[tuple[Chunk, int], int]:
    """Ring ReduceScatter on every channel of ``plans``, step by step across the channels:
    the chunks owned by ``ring[q]`` start at ``ring[q+1]`` and are reduced along the ring,
    ending at the owner after ``n-1`` hops.

    ``ready[(chunk, node)]`` is the slot from which the node's partial sum is complete (0 for
    the precondition); it is updated in place and returned. ``mark`` records the owners as
    holding the finished reduction.
    """
    if ready is None:
        ready = defaultdict(int)
    pos = [{g: i for i, g in enumerate(ring)} for ring, _ in plans]
    for step in range(max((len(ring) for ring, _ in plans), default=1) - 1):
        for (ring, owned), where in zip(plans, pos, strict=True):
            n = len(ring)
            if step >= n - 1:
                continue
            for owner, chunks in owned.items():
                q = where[owner]
                a, b = ring[(q + 1 + step) % n], ring[(q + 2 + step) % n]
                path = routes.get((a, b)) if routes else None
                for c in chunks:
                    arr = p.reduce_to(c, a, b, ready.get((c, a), 0), sink=owner, path=path)
                    ready[(c, b)] = max(ready.get((c, b), 0), arr)
    if mark:
        for _, owned in plans:
            for owner, chunks in owned.items():
                for c in chunks:
                    p.mark_full(c, owner, ready.get((c, owner), 0))
    return ready


def _ring_rs(
    p: Placer,
    ring: Sequence[int],
    owned: Mapping[int, Sequence[Chunk]],
    ready: dict[tuple[Chunk, int], int] | None = None,
    mark: bool = True,
) -> dict[tuple[Chunk, int], int]:
    """:func:`_rings_rs` on one ring (shortest-path hops)."""
    return _rings_rs(p, [(ring, owned)], ready, mark)


def _rings_ag(p: Placer, plans: Sequence[RingPlan], routes: Routes | None = None) -> None:
    """Ring AllGather on every channel, step by step across the channels: the chunks of
    ``ring[q]`` travel ``q -> q+1 -> ...`` for ``n-1`` hops."""
    pos = [{g: i for i, g in enumerate(ring)} for ring, _ in plans]
    for step in range(max((len(ring) for ring, _ in plans), default=1) - 1):
        for (ring, sources), where in zip(plans, pos, strict=True):
            n = len(ring)
            if step >= n - 1:
                continue
            for src, chunks in sources.items():
                q = where[src]
                a, b = ring[(q + step) % n], ring[(q + step + 1) % n]
                path = routes.get((a, b)) if routes else None
                for c in chunks:
                    p.copy(c, a, b, path=path)


def _ring_ag(p: Placer, ring: Sequence[int], sources: Mapping[int, Sequence[Chunk]]) -> None:
    """:func:`_rings_ag` on one ring (shortest-path hops)."""
    _rings_ag(p, [(ring, sources)])


def _rotate(order: Sequence[int], first: int) -> list[int]:
    k = list(order).index(first)
    return list(order[k:]) + list(order[:k])


def _channel_rings(
    instance: Instance, options: SolveOptions
) -> tuple[list[list[int]], Routes | None, Channels | None]:
    """The rings to run: ``extra["ring"]`` (one), else NCCL-style channels, else one ring."""
    extra = options.extra or {}
    if extra.get("ring") is not None:
        return [[int(g) for g in extra["ring"]]], None, None
    limit = extra.get("max_channels", MAX_CHANNELS)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValidationError(f"extra.max_channels must be a positive integer, got {limit!r}")
    found = _cached_channels(instance.topology, limit)
    if found is None:
        return [ring_order(instance.topology)], None, None
    # Distinct rings first, then their repeats: a collective with fewer chunks per GPU than
    # channels uses a prefix, which should spread over the links rather than repeat one ring.
    firsts: list[tuple[int, ...]] = []
    repeats: list[tuple[int, ...]] = []
    for ring in found.rings:
        (repeats if ring in firsts else firsts).append(ring)
    return [list(r) for r in (*firsts, *repeats)], found.routes, found


@lru_cache(maxsize=16)
def _cached_channels(topo: Topology, limit: int) -> Channels | None:
    return find_channels(topo, max_channels=limit)


def _split(chunks: Mapping[int, Sequence[Chunk]], k: int) -> list[dict[int, list[Chunk]]]:
    """Chunk ``i`` of every label to channel ``i mod k``: the channels run at one speed, so each
    carries an equal share of every GPU's data (NCCL splits the buffer the same way)."""
    parts: list[dict[int, list[Chunk]]] = [{g: [] for g in chunks} for _ in range(k)]
    for g, cs in chunks.items():
        for i, c in enumerate(cs):
            parts[i % k][g].append(c)
    return parts


def _run_rings(p: Placer, instance: Instance, rings: Sequence[Sequence[int]], routes: Routes | None) -> int:
    """Place the ring algorithm of the instance's collective on ``rings`` (one channel each);
    returns the number of channels that carry data."""
    coll = instance.collective
    kind = coll.kind
    by_label = _chunks_of(instance)
    most = max((len(cs) for cs in by_label.values()), default=1)
    k = max(1, min(len(rings), most))
    parts = _split(by_label, k)
    if kind == "allgather":
        _rings_ag(p, [(rings[i], parts[i]) for i in range(k)], routes)
    elif kind == "reducescatter":
        _rings_rs(p, [(rings[i], parts[i]) for i in range(k)], routes=routes)
    elif kind == "allreduce":
        _rings_rs(p, [(rings[i], parts[i]) for i in range(k)], routes=routes)
        _rings_ag(p, [(rings[i], parts[i]) for i in range(k)], routes)
    elif kind in ("broadcast", "reduce"):
        assert coll.root is not None
        # NCCL's rooted collectives: a pipelined chain per channel, from (to) the root
        for i in range(k):
            chain = _rotate(rings[i], coll.root)
            if kind == "broadcast":
                for c in parts[i][coll.root]:
                    for a, b in pairwise(chain):
                        p.copy(c, a, b, path=routes.get((a, b)) if routes else None)
                continue
            chain = chain[1:] + chain[:1]
            ready: dict[tuple[Chunk, int], int] = defaultdict(int)
            for c in parts[i][coll.root]:
                for a, b in pairwise(chain):
                    path = routes.get((a, b)) if routes else None
                    arr = p.reduce_to(c, a, b, ready[(c, a)], sink=coll.root, path=path)
                    ready[(c, b)] = max(ready[(c, b)], arr)
    else:
        _unsupported("ring", kind)
    return k


def ring_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """NCCL-style rings: as many channels as the links carry (:mod:`~ccplan.heuristics.baselines.channels`),
    each running the ring algorithm on its share of the data.

    AllGather / ReduceScatter: ``n-1`` steps per channel; AllReduce: ReduceScatter then
    AllGather; Broadcast / Reduce: a pipelined chain per channel from / to the root. The channel
    count goes to the engine's details (``channels``, ``channels_used``, ``channel_GBps``).
    ``extra["ring"]`` runs that one ring; ``extra["max_channels"]`` caps the channels.
    """
    rings, routes, found = _channel_rings(instance, options)
    p = Placer(instance)
    used = _run_rings(p, instance, rings, routes)
    note = _DETAILS.get()
    if note is not None:
        note["channels"] = 1 if found is None else found.k
        note["channels_used"] = used
        if found is not None:
            note["channel_GBps"] = found.speed_GBps
            note["rings"] = [list(r) for r in found.rings]
    return p.schedule("ring")


def ring1_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """One ring (chain for rooted collectives) on a Hamiltonian cycle of the topology.

    AllGather / ReduceScatter: ``n-1`` steps; AllReduce: ReduceScatter then AllGather,
    ``2(n-1)`` steps; Broadcast / Reduce: pipelined chain from / to the root. The ring of the
    paper's figures (method ``ring-1``); ``ring`` is the NCCL-style one.
    """
    ring = options.extra.get("ring") if options.extra else None
    order = [int(g) for g in ring] if ring is not None else ring_order(instance.topology)
    p = Placer(instance)
    _run_rings(p, instance, [order], None)
    note = _DETAILS.get()
    if note is not None:
        note["channels"] = 1
    return p.schedule("ring-1")
