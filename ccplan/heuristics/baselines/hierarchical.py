"""Two-level rings over chassis-like GPU groups (``hierarchical``) and the direct pairwise
exchange (``pairwise``); the groups come from ``options.extra["groups"]`` or
:func:`infer_groups`."""

from __future__ import annotations

from collections import defaultdict

from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.heuristics.baselines.placer import Placer
from ccplan.heuristics.baselines.rings import _chunks_of, _ring_ag, _ring_rs, ring_order
from ccplan.heuristics.baselines.supported import _unsupported
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology
from ccplan.schedule.core import Schedule


# ====================================================================== groups
def infer_groups(topo: Topology) -> list[list[int]]:
    """Chassis-like GPU groups: components left after removing the slowest link class.

    Accepted only when it gives at least two groups of equal size >= 2; otherwise one group.
    Pass ``options.extra["groups"]`` to override.
    """
    bws = sorted({lk.bandwidth_GBps for lk in topo.links})
    if len(bws) < 2:
        return [list(topo.gpus)]
    slow = bws[0]
    parent = {n: n for n in topo.node_ids}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for lk in topo.links:
        if lk.bandwidth_GBps > slow:
            parent[find(lk.src)] = find(lk.dst)
    comps: dict[int, list[int]] = defaultdict(list)
    for g in topo.gpus:
        comps[find(g)].append(g)
    groups = sorted(comps.values(), key=lambda g: g[0])
    sizes = {len(g) for g in groups}
    if len(groups) >= 2 and len(sizes) == 1 and min(sizes) >= 2:
        return groups
    return [list(topo.gpus)]


def _groups_from(instance: Instance, options: SolveOptions) -> list[list[int]]:
    raw = options.extra.get("groups") if options.extra else None
    if raw is None:
        return infer_groups(instance.topology)
    gpus = set(instance.topology.gpus)
    groups = [[int(g) for g in grp] for grp in raw]
    flat = [g for grp in groups for g in grp]
    if sorted(flat) != sorted(gpus):
        raise ValidationError(f"extra.groups must partition the GPUs {sorted(gpus)}, got {raw!r}")
    if len({len(g) for g in groups}) != 1:
        raise ValidationError(f"extra.groups must have equal sizes, got sizes {[len(g) for g in groups]}")
    return groups


# ====================================================================== hierarchical
def hierarchical_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Two-level rings: an intra-group ring and, per local index ("rail"), an inter-group ring.

    AllGather: rail rings first (each GPU gathers its rail), then intra-group rings pass
    everything on. ReduceScatter: intra-group ring ReduceScatter to the GPU of the owner's rail,
    then a rail ring ReduceScatter to the owner. AllReduce: ReduceScatter as above, then the
    AllGather in reverse order (rail ring from the owner, then intra-group rings).
    Groups: ``options.extra["groups"]`` or :func:`infer_groups`.
    """
    coll = instance.collective
    topo = instance.topology
    groups = _groups_from(instance, options)
    intra = [ring_order(topo, g) for g in groups]
    size = len(intra[0])
    if len({len(r) for r in intra}) != 1:
        raise ValidationError(f"hierarchical needs groups of equal size, got {[len(r) for r in intra]}")
    local = {g: j for ring in intra for j, g in enumerate(ring)}
    rails = [[intra[k][j] for k in range(len(intra))] for j in range(size)]
    rails = [ring_order(topo, rail) for rail in rails]
    p = Placer(instance)
    by_label = _chunks_of(instance)
    rail_of = {g: rail for rail in rails for g in rail}
    if coll.kind == "allgather":
        for rail in rails:
            _ring_ag(p, rail, {g: by_label[g] for g in rail})
        for ring in intra:
            _ring_ag(p, ring, {g: [c for h in rail_of[g] for c in by_label[h]] for g in ring})
    elif coll.kind in ("reducescatter", "allreduce"):
        ready: dict[tuple[Chunk, int], int] = defaultdict(int)
        for ring in intra:
            owned = {
                ring[j]: [c for g, cs in by_label.items() if local[g] == j for c in cs] for j in range(size)
            }
            # The rail member ends with its group's partial sum only; the rail ring goes on.
            _ring_rs(p, ring, owned, ready, mark=False)
        for rail in rails:
            _ring_rs(p, rail, {g: by_label[g] for g in rail}, ready, mark=True)
        if coll.kind == "allreduce":
            for rail in rails:
                _ring_ag(p, rail, {g: by_label[g] for g in rail})
            for ring in intra:
                _ring_ag(p, ring, {g: [c for h in rail_of[g] for c in by_label[h]] for g in ring})
    else:
        _unsupported("hierarchical", coll.kind)
    return p.schedule("hierarchical")


# ====================================================================== pairwise (AlltoAll)
def pairwise_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Direct pairwise exchange (NCCL's AlltoAll, also Scatter/Gather): in round ``k`` GPU ``i``
    sends to GPU ``i+k``, every transfer on its shortest path."""
    coll = instance.collective
    if coll.kind not in ("alltoall", "scatter", "gather"):
        _unsupported("pairwise", coll.kind)
    gpus = list(instance.topology.gpus)
    n = len(gpus)
    p = Placer(instance)
    wanted = coll.wanted
    by_pair: dict[tuple[int, int], list[Chunk]] = defaultdict(list)
    for c in coll.chunk_ids:
        (src,) = tuple(coll.holders[c])
        for d in wanted.get(c, ()):
            if d != src:
                by_pair[(src, d)].append(c)
    for k in range(1, n):
        for i in range(n):
            s, d = gpus[i], gpus[(i + k) % n]
            for c in by_pair.get((s, d), ()):
                p.copy(c, s, d)
    return p.schedule("pairwise")

