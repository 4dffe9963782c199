"""Size of the paper's MILP before it is built, and the reachability windows it uses.

Kept free of Pyomo so that the exact engine can decide whether a model fits the memory
budget and the time left (``docs/exact.md``) without paying for the Pyomo import, and so
that :mod:`ccplan.model.milp` and the estimate share one definition of the sparse index
windows (``earliest``/``latest``, see :func:`ccplan.model.milp.build_model`).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_distances

if TYPE_CHECKING:
    from ccplan.instances.collectives import Collective
    from ccplan.schedule.core import Schedule, Send

INF = 1 << 60
"""Distance of an unreachable node (larger than any horizon)."""


def _earliest_from(
    instance: Instance, sources: Iterable[int] | Mapping[int, int], horizon: int
) -> dict[int, int]:
    """Earliest slot each node can hold a chunk held at slot 0 by ``sources`` (or, given a
    mapping ``node -> slot``, from which each source may forward it; a source's slot is the
    one given, as a node that holds or receives the chunk is not sent it again).

    Dijkstra with link weight ``L``; a link whose occupancy window ``t .. t+l-1`` meets a slot
    with ``omega = 0`` cannot start in ``t``, so the search waits for the next free start (the
    earliest arrival is FIFO in the start time, hence Dijkstra stays exact).
    """
    topo = instance.topology
    occ = instance.occupancy
    lat = instance.latency
    dist: dict[int, int] = {}
    if isinstance(sources, Mapping):
        heap = sorted((int(t), int(v)) for v, t in sources.items())
    else:
        heap = [(0, v) for v in sorted(set(sources))]
    # a source holds the chunk (or receives it in flight) and is never sent it again: its slot
    # is its own, even where another source could reach it sooner
    own = {v for _, v in heap}
    heapq.heapify(heap)
    while heap:
        a, u = heapq.heappop(heap)
        if u in dist:
            continue
        dist[u] = a
        for e in topo.out_links[u]:
            w = topo.links[e].dst
            if w in dist or w in own:
                continue
            t = a
            while t + int(lat[e]) <= horizon and any(
                instance.omega(e, s) == 0 for s in range(t, t + int(occ[e]))
            ):
                t += 1
            arrive = t + int(lat[e])
            if arrive <= horizon:
                heapq.heappush(heap, (arrive, w))
    return dist


def _distance_to(instance: Instance, targets: Iterable[int]) -> dict[int, int]:
    """Shortest ``L``-path length from every node to the nearest of ``targets`` (no outages:
    a valid underestimate, so the latest-time pruning built on it stays exact)."""
    dist = latency_distances(instance.topology, instance.latency.tolist(), targets, reverse=True)
    return {v: int(d) for v, d in dist.items()}


def reach_windows(
    instance: Instance, horizon: int, dense: bool, start: StartState | None = None
) -> tuple[dict[tuple[Chunk, int], int], dict[tuple[Chunk, int], int], dict[Chunk, set[int]]]:
    """``earliest`` and ``latest`` slot of every (chunk, node) and the demanders of each chunk.

    ``dense=True`` opens every window (``0 .. H``), as the dense build does. With ``start``
    the sources are the nodes holding a chunk at ``start.slot`` (or receiving it from a send
    in flight, from its arrival on) and the demanders are the demands still open there.
    """
    topo = instance.topology
    coll = instance.collective
    demanders: dict[Chunk, set[int]] = defaultdict(set)
    for chunk, v in coll.demands if start is None else start.demands(coll):
        demanders[chunk].add(v)
    ready: dict[Chunk, dict[int, int]] = {}
    if start is None:
        for chunk, nodes in coll.holders.items():
            ready[chunk] = dict.fromkeys(nodes, 0)
    else:
        for (chunk, v), t in start.ready.items():
            ready.setdefault(chunk, {})[v] = t
    earliest: dict[tuple[Chunk, int], int] = {}
    latest: dict[tuple[Chunk, int], int] = {}
    cache_e: dict[frozenset[tuple[int, int]], dict[int, int]] = {}
    cache_l: dict[frozenset[int], dict[int, int]] = {}
    for chunk in coll.chunk_ids:
        sources = ready.get(chunk, {})
        src_set = frozenset(sources.items())
        dem_set = frozenset(demanders.get(chunk, ()))
        if src_set not in cache_e:
            cache_e[src_set] = _earliest_from(instance, sources, horizon)
        if dem_set not in cache_l:
            cache_l[dem_set] = _distance_to(instance, dem_set)
        dist_e = cache_e[src_set]
        dist_l = cache_l[dem_set]
        for v in topo.node_ids:
            earliest[(chunk, v)] = 0 if dense else dist_e.get(v, INF)
            to_dem = dist_l.get(v)
            latest[(chunk, v)] = horizon if dense else (-INF if to_dem is None else horizon - to_dem)
    return earliest, latest, demanders



BYTES_PER_NONZERO = 1500
"""Peak resident memory per model nonzero over build, translation and CP-SAT (2 workers).

Measured on AllGather models of 0.36 M and 0.70 M nonzeros (NDv2 2 chassis 64 KB, DGX2 2
chassis 1 MB): 0.34-0.37 KB per nonzero for the Pyomo model, 0.21-0.28 KB for the
translated proto and 0.36-0.45 KB for CP-SAT's first seconds (presolve); rounded up to
1.5 KB because CP-SAT's LP and clause database keep growing during the search."""

SECONDS_PER_NONZERO = 1.0e-5
"""Build plus translation time per nonzero on the development machines: 3.5-7 us of CPU
and 5-10 us of wall time at a load average of 6 on 2 cores (NDv2 2 chassis 64 KB, DGX2 2
chassis 1 MB, AMD 2 chassis 1 GB, ``benchmarks/model_path.py``), the larger models being
the cheaper per nonzero; the worst wall time is used. (Before the rows were built with
numpy and translated from arrays it was 15 us.)"""


@dataclass(frozen=True)
class ModelEstimate:
    """Size of the model :func:`build_model` would build, computed without building it.

    Variables are counted exactly; rows and nonzeros are upper estimates within a few per
    cent (every capacity row (7) is counted, the build drops those that cannot bind).

    Attributes
    ----------
    variables, rows, nonzeros : int
    bytes : int
        Expected peak memory of build, translation and search
        (``nonzeros * BYTES_PER_NONZERO``).
    seconds : float
        Expected build plus translation time (``nonzeros * SECONDS_PER_NONZERO``).
    """

    variables: int
    rows: int
    nonzeros: int

    @property
    def bytes(self) -> int:
        return self.nonzeros * BYTES_PER_NONZERO

    @property
    def seconds(self) -> float:
        return self.nonzeros * SECONDS_PER_NONZERO

    def describe(self) -> str:
        """``"1.2 M variables, 2.0 M rows, 7.5 M nonzeros, ~11 GB"`` for messages."""
        return (f"{self.variables / 1e6:.2f} M variables, {self.rows / 1e6:.2f} M rows, "
                f"{self.nonzeros / 1e6:.2f} M nonzeros, ~{self.bytes / 1e9:.1f} GB")


def y_window(
    horizon: int, dense: bool, held: bool, demanded: bool, earliest: int, latest: int,
    origin: int = 0,
) -> tuple[int, int]:
    """Slots ``lo .. hi`` in which ``y[chunk, v, t]`` exists (empty when ``lo > hi``).

    The model builder and :func:`estimate_size` both use it, so the estimate counts exactly
    the variables the builder creates. A demanded node's window is capped at ``H``, so an
    unreachable demand still has ``y[.., H]`` (forced to 0 by (6)), which makes (8)
    infeasible instead of an empty row. ``origin`` is the model's first slot (the
    :class:`StartState`'s slot; 0 for the whole model): a holder's window starts there.
    """
    if dense:
        return 0, horizon
    if held:
        return origin, max(origin, min(horizon, latest))
    if demanded:
        return min(earliest, horizon), horizon
    return earliest, min(latest, horizon)


def estimate_size(
    instance: Instance, horizon: int, *, dense: bool = False, cuts: bool = True,
    start: StartState | None = None,
) -> ModelEstimate:
    """Count what :func:`build_model` would create for ``horizon``, in time linear in
    chunks x (links + nodes) rather than in the model size.

    The counts follow the sparse build rules of :func:`build_model` (the same
    ``earliest``/``latest`` windows); rows and nonzeros follow equations (2)-(14), the
    single-port rows and the cuts. Used to refuse models that would not fit in memory or
    in the time left before anything is built. ``start``: the model of the slots from
    ``start.slot`` on (:class:`StartState`).
    """
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise ValidationError(f"horizon must be a positive integer, got {horizon!r}")
    topo = instance.topology
    coll = instance.collective
    lat = [int(v) for v in instance.latency]
    occ = [int(v) for v in instance.occupancy]
    H = horizon
    origin = 0 if start is None else start.slot
    holders = coll.holders if start is None else start.holders(coll)
    demands = coll.demands if start is None else start.demands(coll)
    earliest, latest, demanders = reach_windows(instance, H, dense, start)
    # Start slots whose occupancy window meets an outage have no x in the sparse build.
    blocked: dict[int, list[int]] = defaultdict(list)
    if not dense:
        starts: dict[int, set[int]] = defaultdict(set)
        for e, q in instance.outage_set:
            starts[e].update(range(max(0, q - occ[e] + 1), q + 1))
        blocked = defaultdict(list, {e: sorted(ts) for e, ts in starts.items()})
    n_x = nnz_c7 = 0
    for chunk in coll.chunk_ids:
        held = holders.get(chunk, frozenset())
        for e, link in enumerate(topo.links):
            last = H - lat[e]
            if dense:
                first = 0
            elif link.dst in held:
                continue
            else:
                first = earliest[(chunk, link.src)]
                last = min(last, latest[(chunk, link.dst)] - lat[e])
            if last >= first:
                ts = blocked.get(e, ())
                n = last - first + 1 - (bisect_right(ts, last) - bisect_left(ts, first))
                n_x += n
                nnz_c7 += n * occ[e]
    n_y = n_z = y_rows = 0
    for chunk in coll.chunk_ids:
        held = holders.get(chunk, frozenset())
        dem = demanders.get(chunk, set())
        for v in topo.node_ids:
            kv = (chunk, v)
            lo, hi = y_window(H, dense, v in held, v in dem, earliest[kv], latest[kv], origin)
            if lo <= hi:
                n_y += hi - lo + 1
                y_rows += max(0, hi - max(lo, origin + 1) + 1)
            if v in dem and lo <= hi:
                n_z += hi - lo + 1
    n_dem = len(demands)
    c7_rows = topo.num_links * (H - origin)
    # (2)-(3), (5), (6), (7), (8)-(9), (10)-(12), (14)
    rows = len(coll.chunk_ids) * topo.num_nodes + n_x + y_rows + c7_rows + 2 * n_dem + 3 * n_z + n_dem
    # (2)-(3): 1 each; (5): 2 per x; (6): y, previous y, arriving x; (7): l_e per x;
    # (8)-(9): about one per z; (10)-(12): 2 + 2 + 3 per z; (14): one per z plus D.
    nnz = (len(coll.chunk_ids) * topo.num_nodes + 2 * n_x + 2 * y_rows + n_x + nnz_c7
           + 2 * n_z + 7 * n_z + n_z + n_dem)
    if instance.single_port:
        rows += 2 * topo.num_nodes * (H - origin)
        nnz += 2 * nnz_c7
    if cuts:
        rows += 2 * n_dem + 1
        nnz += 2 * n_x + n_dem + 1
    return ModelEstimate(variables=n_x + n_y + n_z + 1, rows=rows, nonzeros=nnz)


# --------------------------------------------------------------------------- start states
@dataclass(frozen=True)
class StartState:
    """A schedule's state at the start of slot ``slot``: the first slot of a window model.

    :func:`ccplan.model.milp.build_model` with ``start`` builds equations (2)-(14) for the
    slots ``slot .. H`` only, every chunk free there: (2) fixes ``y`` at ``slot`` to the
    holdings (GPUs and switches alike: a switch may hold a copy), and the sends before
    ``slot`` are constants. :func:`start_state` reads it off a verified schedule.

    Attributes
    ----------
    slot : int
        ``a``: the window model's sends start at ``a`` or later.
    ready : mapping
        ``(chunk, node) -> slot`` from which the node may forward the chunk: ``a`` when it
        holds the chunk at slot ``a``, the arrival slot (``> a``) when a send started before
        ``a`` is still in flight to it. Such a node is a holder in the window model (it never
        receives the chunk again) whose sends of the chunk start at its ready slot.
    used : mapping
        ``(link index, q) -> chunks`` that sends started before ``a`` keep on the link in a
        slot ``q >= a`` (occupancy ``l > 1``): subtracted from ``omega`` in (7).
    busy_send, busy_recv : frozenset of (node, slot)
        Ports those sends occupy in slots ``>= a`` (``single_port`` only; empty otherwise).
    floor : int
        Latest first arrival of a demand met by the sends before ``a`` (in flight
        included): the whole schedule's makespan is at least this.
    """

    slot: int
    ready: Mapping[tuple[Chunk, int], int]
    used: Mapping[tuple[int, int], int] = field(default_factory=dict)
    busy_send: frozenset[tuple[int, int]] = frozenset()
    busy_recv: frozenset[tuple[int, int]] = frozenset()
    floor: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.slot, int) or isinstance(self.slot, bool) or self.slot < 0:
            raise ValidationError(f"start.slot must be a non-negative integer, got {self.slot!r}")
        early = [key for key, t in self.ready.items() if t < self.slot]
        if early:
            chunk, v = early[0]
            raise ValidationError(
                f"start.ready: chunk {list(chunk)} at node {v} is ready before slot {self.slot}"
            )
        if any(q < self.slot or n < 0 for (_e, q), n in self.used.items()):
            raise ValidationError(f"start.used must name slots >= {self.slot} and non-negative counts")

    def holders(self, coll: Collective) -> dict[Chunk, frozenset[int]]:
        """Chunk -> nodes holding it in the window model (held at ``slot`` or in flight)."""
        out: dict[Chunk, set[int]] = {chunk: set() for chunk in coll.chunk_ids}
        for chunk, v in self.ready:
            out.setdefault(chunk, set()).add(v)
        return {chunk: frozenset(nodes) for chunk, nodes in out.items()}

    def demands(self, coll: Collective) -> tuple[tuple[Chunk, int], ...]:
        """The collective's demands still open at ``slot`` (neither held nor in flight)."""
        return tuple(d for d in coll.demands if d not in self.ready)


def link_slots_taken(
    instance: Instance, sends: Iterable[Send], first_slot: int = 0
) -> tuple[dict[tuple[int, int], int], frozenset[tuple[int, int]], frozenset[tuple[int, int]]]:
    """What ``sends`` occupy from ``first_slot`` on: units per (link index, slot) over each
    send's ``occupancy`` slots (the load equation (7) counts) and, under ``single_port``, the
    (node, slot) pairs whose send and receive ports they hold."""
    index = instance.topology.link_index
    occ = instance.occupancy
    used: dict[tuple[int, int], int] = defaultdict(int)
    busy_send: set[tuple[int, int]] = set()
    busy_recv: set[tuple[int, int]] = set()
    for send in sends:
        e = index[(send.src, send.dst)]
        for q in range(max(send.slot, first_slot), send.slot + int(occ[e])):
            used[(e, q)] += 1
            if instance.single_port:
                busy_send.add((send.src, q))
                busy_recv.add((send.dst, q))
    return dict(used), frozenset(busy_send), frozenset(busy_recv)


def start_state(instance: Instance, schedule: Schedule, slot: int) -> StartState:
    """The state of ``schedule`` (valid for ``instance``) at the start of ``slot``.

    Raises
    ------
    ValidationError
        ``instance`` has cut-through (bufferless) switches, which hold a chunk only in the
        slot it passes: their state at a slot is not a holding.
    """
    if instance.bufferless:
        raise ValidationError(
            "a start state needs store-and-forward switches; this instance has cut-through ones"
        )
    if not isinstance(slot, int) or isinstance(slot, bool) or slot < 0:
        raise ValidationError(f"start slot must be a non-negative integer, got {slot!r}")
    coll = instance.collective
    index = instance.topology.link_index
    lat = instance.latency
    ready: dict[tuple[Chunk, int], int] = {}
    for chunk, nodes in coll.holders.items():
        for v in nodes:
            ready[(chunk, v)] = slot
    wanted = set(coll.demands)
    floor = 0
    before = [send for send in schedule.sends if send.slot < slot]
    for send in before:
        arrive = send.slot + int(lat[index[(send.src, send.dst)]])
        key = (send.chunk, send.dst)
        at = max(arrive, slot)
        ready[key] = min(ready.get(key, at), at)
        if key in wanted:
            floor = max(floor, arrive)
    used, busy_send, busy_recv = link_slots_taken(instance, before, slot)
    return StartState(slot=slot, ready=ready, used=used, busy_send=busy_send, busy_recv=busy_recv,
                      floor=floor)
