"""Cut-aware list scheduling for hierarchical machines (chassis joined by slow links).

On DGX2, AMD or NDv2 clusters the bound that binds is the *set cut* of a chassis
(:mod:`ccplan.bounds`, "Set cuts"): every chunk a chassis lacks must cross the slow links
into it at least once. A schedule that meets that bound sends **one copy per chunk across
the cut into each chassis** and fans it out inside over the fast links. The general
heuristics (:mod:`~ccplan.heuristics.mteg`, :mod:`~ccplan.heuristics.layered`) do not know
the chassis: they carry a second copy of a chunk over a slow link whenever that arrives a
slot earlier than the way through the chassis, and the wasted link-slots are what separate
them from the bound (DGX2 x4 AllGather: 100-115 slots against 64).

Clusters (:func:`cluster_levels`) are nested partitions, coarsest first: the connected parts
of the graph, then for every link speed the components of the links strictly faster than it
(the bounds' bandwidth clusters: chassis; inside an AMD chassis the GCD quads and pairs),
then single nodes. A switch whose GPU neighbours all lie in one cluster belongs to it (AMD's
per-pair NIC switches, so the cut of the chassis is the link into that switch). The rule
applies at every level: a chunk enters each cluster once, through a path inside the parent
cluster, and the last level (single nodes) is the delivery itself.

The construction is a global earliest-finish list schedule. A candidate is chunk ``c`` into
a cluster that wants it (holds a node that wants it) and has no copy yet, whose parent
cluster has one: the earliest arrival at any node of the cluster, found by an
earliest-arrival search (Dijkstra in the time-expanded graph) inside the parent, from the
parent's holders of ``c``, against the link reservations of
:class:`~ccplan.heuristics.mteg.Reservations` (occupancy windows, ``omega``, outages,
single-port). Each (chunk, parent) keeps its earliest candidate on one heap, keyed by the
arrival minus ``cross_bias`` per level above the last (coarser first). The smallest key is
committed when its path is still free, else its search is redone (a lazy heap: reservations
only grow, so keys never decrease); after a commit the searches of that chunk whose sources
changed are redone. The copy rule (a node holds a chunk once) holds by construction: a
search never enters a node that has the chunk.

Cost: one Dijkstra inside a cluster per commit of the chunk there (the whole graph for
crossings), so it suits the scale where the cut decides (a few to tens of chassis), not
thousands of GPUs.
"""

from __future__ import annotations

import heapq
import logging
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ccplan.contract import Outcome, SolveOptions, constructor_outcome, register
from ccplan.errors import CCPlanError, ValidationError
from ccplan.heuristics.mteg import Reservations
from ccplan.instances.clusters import _clusters_above
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology
from ccplan.limits import NEVER, Deadline
from ccplan.schedule.core import Schedule, Send

log = logging.getLogger(__name__)

_PROGRESS_EVERY = 10.0  # seconds between progress notes on the log


@dataclass(frozen=True)
class CutAwareOptions:
    """Parameters of the cut-aware list scheduler.

    Parameters
    ----------
    cross_bias : int, optional
        Slots by which a candidate one level coarser is preferred (a crossing feeds a whole
        chassis, a fan-out one GPU; 0: pure earliest finish). Default: twice the longest link
        latency ``L``, so a crossing that arrives up to two slow hops later still goes first
        (DGX2 x4: bias 0 and 10 give 93 and 91 slots, 15 to 1000 give 69, bound 64).
    """

    cross_bias: int | None = None

    def __post_init__(self) -> None:
        if self.cross_bias is None:
            return
        if not isinstance(self.cross_bias, int) or isinstance(self.cross_bias, bool) or self.cross_bias < 0:
            raise ValidationError(
                f"cut-aware option cross_bias must be a non-negative integer, got {self.cross_bias!r}"
            )

    def label(self) -> str:
        """Short name of the variant, for reports."""
        return "cut-aware" + ("" if self.cross_bias is None else f"[bias={self.cross_bias}]")


def cluster_levels(topo: Topology) -> list[np.ndarray]:
    """Nested partitions of the nodes, coarsest first: label per node position per level.

    Level 0 is the connected parts of the whole graph; then, for every link speed but the
    fastest in increasing order, the components of the links strictly faster than it (the
    bandwidth clusters of :mod:`ccplan.bounds`: chassis on NDv2, DGX2 or AMD, then the GCD
    quads and pairs inside an AMD chassis), each split into its strongly connected parts
    (:func:`_strong_parts`); the last level is every node on its own. Equal consecutive
    partitions are kept once.
    """
    bw = np.array([lk.bandwidth_GBps for lk in topo.links], dtype=float)
    n = len(topo.node_ids)
    levels = [_clusters_above(topo, np.ones(len(bw), dtype=bool))]
    for speed in np.unique(bw)[:-1] if len(bw) else []:
        labels = _strong_parts(topo, _clusters_above(topo, bw > speed))
        if len(np.unique(labels)) < n and not _same_partition(labels, levels[-1]):
            levels.append(labels)
    finest = np.arange(n, dtype=np.int64)
    if not _same_partition(finest, levels[-1]):
        levels.append(finest)
    return levels


def _strong_parts(topo: Topology, labels: np.ndarray) -> np.ndarray:
    """Split every cluster into the strongly connected parts of the links inside it.

    A chunk enters a cluster once and is then spread over the links inside it, so each
    cluster below level 0 must reach all its nodes from any one of them. A weak component of
    the fast links need not (4 -> 2 at 50 GB/s joins 2 and 4, but 2 reaches 4 only through a
    slower link out of the cluster), and the search would then end with node 4 unserved. The
    parts stay nested: a part of a finer level is strongly connected inside its coarser
    cluster, so it lies in one part of it. Level 0 stays weak: there the search runs over the
    whole graph, where the instance's reach check holds.
    """
    nodes = topo.node_ids
    pos = {v: i for i, v in enumerate(nodes)}
    src = np.array([pos[lk.src] for lk in topo.links], dtype=np.int64)
    dst = np.array([pos[lk.dst] for lk in topo.links], dtype=np.int64)
    inside = labels[src] == labels[dst] if len(src) else np.zeros(0, dtype=bool)
    graph = sp.csr_array(
        (np.ones(int(inside.sum())), (src[inside], dst[inside])), shape=(len(nodes), len(nodes))
    )
    _, found = connected_components(graph, directed=True, connection="strong")
    return np.asarray(found, dtype=np.int64)


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = np.unique(np.stack([a, b]), axis=1)
    return bool(pairs.shape[1] == len(np.unique(a)) == len(np.unique(b)))


class _Chunk:
    """Search state of one chunk: who has it (arrival slot), which clusters hold a copy and
    how many nodes of each cluster still want it."""

    __slots__ = ("arrival", "entered", "open", "spt", "version", "wanting")

    def __init__(self) -> None:
        self.arrival: dict[int, int] = {}  # node position -> slot from which it holds the chunk
        self.entered: set[tuple[int, int]] = set()  # (level, cluster) holding a copy
        self.wanting: dict[tuple[int, int], int] = {}  # (level, cluster) -> nodes still wanting it
        self.open: dict[tuple[int, int], int] = {}  # scope -> child clusters wanting it, not entered
        # scope -> node -> (arrival, link, send slot) of the last search
        self.spt: dict[tuple[int, int], dict[int, tuple[int, int, int]]] = {}
        self.version: dict[tuple[int, int], int] = {}


def cut_aware_schedule(
    instance: Instance, options: CutAwareOptions | None = None, deadline: Deadline = NEVER
) -> Schedule:
    """Build a schedule that crosses each cluster cut once per chunk (see the module docstring).

    Raises
    ------
    ValidationError
        Combining collectives (built elsewhere from data-movement ones).
    CCPlanError
        A wanted chunk that no holder can reach.
    OutOfTimeError
        ``deadline`` passed before the schedule was complete (checked before every search).
    """
    opts = options or CutAwareOptions()
    coll = instance.collective
    if coll.combining:
        raise ValidationError(f"cut-aware schedules data-movement collectives; {coll.kind!r} is combining")
    topo = instance.topology
    nodes = list(topo.node_ids)
    pos = {v: i for i, v in enumerate(nodes)}
    levels = [lv.tolist() for lv in cluster_levels(topo)]
    depth = len(levels) - 1  # the finest level: every node alone
    # parent_of[l][k]: the level l-1 cluster that holds cluster k of level l (levels are nested)
    parent_of: list[dict[int, int]] = [{}] + [
        {k: up for k, up in zip(levels[lvl], levels[lvl - 1], strict=True)} for lvl in range(1, len(levels))
    ]
    tail = [pos[lk.src] for lk in topo.links]
    head = [pos[lk.dst] for lk in topo.links]
    lat = [int(x) for x in instance.latency]
    # out_scope[l][x]: links leaving x inside x's level-l cluster (level l is a search scope)
    out_scope: list[list[list[int]]] = []
    for lv in levels[:-1]:
        outs: list[list[int]] = [[] for _ in nodes]
        for j in range(topo.num_links):
            if lv[tail[j]] == lv[head[j]]:
                outs[tail[j]].append(j)
        out_scope.append(outs)
    res = Reservations(instance)
    bias_step = 2 * max(lat, default=1) if opts.cross_bias is None else opts.cross_bias

    chunk_ids = list(coll.chunk_ids)
    state = [_Chunk() for _ in chunk_ids]
    cidx = {c: i for i, c in enumerate(chunk_ids)}
    for c, hs in coll.holders.items():
        st = state[cidx[c]]
        for v in hs:
            st.arrival[pos[v]] = 0
            st.entered.update((lv_i, lv[pos[v]]) for lv_i, lv in enumerate(levels))
    for c, v in coll.demands:
        st = state[cidx[c]]
        p = pos[v]
        if p not in st.arrival:
            for lv_i, lv in enumerate(levels):
                key = (lv_i, lv[p])
                st.wanting[key] = st.wanting.get(key, 0) + 1
    for st in state:
        for lvl, k in st.wanting:
            if lvl > 0 and (lvl, k) not in st.entered:
                parent = (lvl - 1, parent_of[lvl][k])
                st.open[parent] = st.open.get(parent, 0) + 1

    heap: list[tuple[int, int, int, int, int, int]] = []  # (key, node, chunk, level, scope, version)

    def search(ci: int, lvl: int, scope: int) -> None:
        """Earliest-arrival tree of chunk ``ci`` inside cluster ``scope`` of level ``lvl`` and
        the candidates it offers: the first node of each wanting, unentered child cluster."""
        deadline.check()
        st = state[ci]
        sid = (lvl, scope)
        ver = st.version.get(sid, 0) + 1
        st.version[sid] = ver
        lv = levels[lvl]
        out = out_scope[lvl]
        best: dict[int, tuple[int, int, int]] = {}
        todo = [(a, x) for x, a in st.arrival.items() if lv[x] == scope]
        heapq.heapify(todo)
        done: set[int] = set()
        arrival = st.arrival
        while todo:
            arr, x = heapq.heappop(todo)
            if x in done:
                continue
            done.add(x)
            for j in out[x]:
                y = head[j]
                if y in arrival or y in done:
                    continue
                t = res.free_start(j, arr)
                a2 = t + lat[j]
                old = best.get(y)
                if old is None or a2 < old[0]:
                    best[y] = (a2, j, t)
                    heapq.heappush(todo, (a2, y))
        st.spt[sid] = best
        child = levels[lvl + 1]
        # only the scope's earliest candidate: the search is redone after any change anyway
        first = min(
            ((a2, y) for y, (a2, _, _) in best.items()
             if st.wanting.get((lvl + 1, child[y])) and (lvl + 1, child[y]) not in st.entered),
            default=None,
        )
        if first is not None:
            a2, y = first
            heapq.heappush(heap, (a2 - bias_step * (depth - 1 - lvl), y, ci, lvl, scope, ver))

    def scopes_to_search(st: _Chunk, touched: set[int]) -> list[tuple[int, int]]:
        """Scopes with new holders that still have a child cluster to enter."""
        out = []
        for lvl in range(depth):
            for k in {levels[lvl][p] for p in touched}:
                if st.open.get((lvl, k)):
                    out.append((lvl, k))
        return out

    for ci, st in enumerate(state):
        for lvl, k in scopes_to_search(st, set(st.arrival)):
            search(ci, lvl, k)

    sends: list[Send] = []
    def deliveries_left() -> int:
        return sum(n for st in state for (lvl, _), n in st.wanting.items() if lvl == depth)

    total = deliveries_left()
    started = time.perf_counter()
    next_note = started + _PROGRESS_EVERY
    while heap:
        if time.perf_counter() >= next_note:
            # long runs say how far they are; the CLI shows it with -v
            next_note = time.perf_counter() + _PROGRESS_EVERY
            log.info("cut-aware: %d of %d deliveries done, %.0f s", total - deliveries_left(), total,
                     time.perf_counter() - started)
        _, y, ci, lvl, scope, ver = heapq.heappop(heap)
        st = state[ci]
        if ver != st.version.get((lvl, scope)) or (lvl + 1, levels[lvl + 1][y]) in st.entered:
            continue
        spt = st.spt[(lvl, scope)]
        hops: list[tuple[int, int]] = []
        x = y
        while x not in st.arrival:
            _, j, t = spt[x]
            hops.append((j, t))
            x = tail[j]
        hops.reverse()
        if not all(res.is_free(j, t) for j, t in hops):
            search(ci, lvl, scope)  # another commit took one of its link-slots or ports
            continue
        touched: set[int] = set()
        for j, t in hops:
            res.reserve(j, t)
            v = head[j]
            sends.append(Send(slot=t, chunk=chunk_ids[ci], src=nodes[tail[j]], dst=nodes[v]))
            st.arrival[v] = t + lat[j]
            touched.add(v)
            wants = st.wanting.get((depth, v), 0) > 0
            for lv_i, lv in enumerate(levels):
                key = (lv_i, lv[v])
                if key not in st.entered:
                    st.entered.add(key)
                    if lv_i > 0 and st.wanting.get(key):
                        st.open[(lv_i - 1, parent_of[lv_i][key[1]])] -= 1
                if wants:
                    st.wanting[key] -= 1
        for sid in scopes_to_search(st, touched):
            search(ci, *sid)
    for ci, st in enumerate(state):
        left = [k for (lvl, k), n in st.wanting.items() if lvl == depth and n]
        if left:
            raise CCPlanError(
                f"chunk {list(chunk_ids[ci])} cannot reach node {nodes[min(left)]}: no path from its holders"
            )
    return Schedule(tuple(sends), method="cut-aware")


@register("cut-aware")
def cut_aware_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``cut-aware``: one copy per chunk across each chassis cut (``extra``: ``cross_bias``)."""
    bias = options.extra.get("cross_bias")
    opts = CutAwareOptions(cross_bias=None if bias is None else int(bias))
    return constructor_outcome(
        lambda deadline: cut_aware_schedule(instance, opts, deadline), options.time_limit, opts.label()
    )
