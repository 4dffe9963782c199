r"""The physical lower bound: microseconds no schedule of the collective can beat.

Unlike :mod:`ccplan.bounds` (valid for one chunk count ``C``, slot length ``tau`` and switch
model), :func:`physical_bound` depends only on the machine (bandwidths, alphas, node kinds),
the collective (kind, root, destinations) and its size in bytes. It is a lower bound on the
time of every schedule in the *fluid model* below, which every slot schedule with
``alpha_threshold == 0`` and every alpha-beta replay of one (:mod:`ccplan.schedule.simulate`)
maps into; derivations and validity conditions are in ``docs/model.md``, section "The
physical bound".

Fluid model
-----------
Data is divisible at will (any chunking). A link ``e`` moves at most ``B_e`` bytes per unit of
time (``capacity`` parallel channels multiply ``B_e``); a byte that enters ``e`` at time ``s``
is at the head from ``s + alpha_e``; any node may hold, copy and forward bytes it has (a
switch too: store-and-forward at the finest grain, which also covers cut-through).
``dist(a, b)`` is the shortest path with link weights ``alpha_e``.

Parts (each a valid bound on its own; ``us`` is their maximum)
-------------------------------------------------------------
``latency``
    For a pair ``(u, v)`` where ``v`` needs ``m_uv`` bytes only ``u`` has (or, combining, ``u``'s
    contribution to ``m_uv`` bytes of ``v``'s result): ``T >= dist(u, v) + m_uv / maxflow(u, v)``.
    A byte crossing ``e = (x, y)`` on its way does so in ``[dist(u, x), T - alpha_e - dist(y,
    v)]``, a window no longer than ``T - dist(u, v)``; so the bytes form a ``u``-``v`` flow
    with capacities ``B_e (T - dist(u, v))``.
``throughput``
    Cut bounds with no latency, maximised exactly over all cuts by parametric max-flow
    (Newton on minimum cuts): AllGather ``(M/N) max_{S ⊉ GPUs} |S ∩ GPUs| / B+(S)``
    (ForestColl's formula), Broadcast/Multicast ``M / min_d maxflow(r, d)``, Gather/Scatter
    the rooted analogues, ReduceScatter/Reduce the same on the reversed graph, AllReduce ``M /``
    the smallest cut separating two GPUs, AllToAll the per-destination and per-source flows
    plus the bandwidth-cluster cuts.
``windowed``
    The same flow problems with each link's capacity cut to its window,
    ``B_e max(0, T - a(tail) - alpha_e - b(head))`` (``a``: distance from the problem's
    sources, ``b``: to its sinks) -- the ``cut_us`` of :mod:`ccplan.bounds` with ``mu -> 0``.
    It is at least the throughput of the same problem and combines bandwidth with latency.
``gossip``
    AllReduce only. Without in-switch reduction (``switch_reduce=False``): every byte position
    needs ``2 (N - 1)`` receptions at GPUs, so ``T >= 2 (N - 1) M / sum_v B_in(v)`` (= ``2
    (N-1)/N M / B`` on a symmetric NVSwitch machine); the same over groups of GPUs (bandwidth
    clusters) with ``g`` groups, ``2 (g - 1) M / sum_G F_G``, ``F_G`` the max-flow into ``G``
    from the GPUs (and reducing switches) outside it (:mod:`ccplan.physical._gossip`), which
    stays valid when every switch that may reduce lies in a group (``switch_reduce`` names
    them: all, none or some).

Exactness and cost: the flow problems of one kind are solved for every destination (or
source), or, when verified automorphisms make the GPUs one orbit (a torus), once per orbit.
The windowed problems are solved for all problems of small instances and for the binding ones
of large instances; pair latencies use exact max-flows for the few pairs with the largest
cheap estimate. Every reported number is the value of a real cut or path, so a shortcut can
only make the bound weaker, never invalid.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from types import MappingProxyType
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance
from ccplan.physical._flow import BYTES_PER_US_PER_GBPS, FlowProblem, Member, Net, pair_maxflow
from ccplan.physical._gossip import gossip_value
from ccplan.physical._symmetry import gpu_orbits

log = logging.getLogger(__name__)

PART_NAMES: tuple[str, ...] = ("latency", "throughput", "windowed", "gossip")
"""Names of the parts, in the order used to break ties for :attr:`PhysicalBound.binding`."""

SYMMETRIC_KINDS = frozenset({"allgather", "alltoall", "reducescatter"})
"""Collectives in which every GPU plays the same role (automorphisms need preserve only kinds)."""

_SYMMETRY_MIN_GPUS = 33  # below this, solving every problem is cheaper than looking for symmetry
_WINDOWED_ALL = 64  # solve every windowed problem up to this many, else the binding ones
_WINDOWED_SOME = 16
_LATENCY_ROWS = 512  # pair-latency rows computed (all sources up to this many)
_EXACT_PAIRS = 4


@dataclass(frozen=True)
class PhysicalBound:
    """A lower bound in microseconds on any schedule of the collective on the machine.

    Attributes
    ----------
    us : float
        The bound: the maximum of ``parts``.
    parts : mapping of str to float
        Each part's value in microseconds (``PART_NAMES``; absent parts do not apply).
    binding : str
        The part that attains ``us`` (ties go to the first in ``PART_NAMES``).
    notes : tuple of str
        What was assumed or shortcut (symmetry used, problems sampled, capacity multiplier).
    """

    us: float
    parts: Mapping[str, float]
    binding: str
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not (isinstance(self.us, float) and math.isfinite(self.us) and self.us >= 0):
            raise ValidationError(f"physical_bound.us must be a non-negative finite float, got {self.us!r}")
        for name, value in self.parts.items():
            if name not in PART_NAMES:
                raise ValidationError(f"physical_bound.parts: unknown part {name!r}")
            if not (math.isfinite(value) and value >= 0):
                raise ValidationError(
                    f"physical_bound.parts[{name!r}] must be finite and >= 0, got {value!r}"
                )
        if self.binding not in self.parts:
            raise ValidationError(f"physical_bound.binding {self.binding!r} is not one of the parts")
        if self.parts and self.us != max(self.parts.values()):
            raise ValidationError("physical_bound.us must be the maximum of its parts")
        object.__setattr__(self, "parts", MappingProxyType(dict(self.parts)))
        object.__setattr__(self, "notes", tuple(self.notes))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"us": self.us, "parts": dict(self.parts), "binding": self.binding, "notes": list(self.notes)}


# --------------------------------------------------------------------------- problem views
def _net_of(instance: Instance) -> Net:
    topo = instance.topology
    index = topo.node_index
    kinds = topo.kind
    return Net(
        n=topo.num_nodes,
        src=np.array([index[lk.src] for lk in topo.links], dtype=np.int64),
        dst=np.array([index[lk.dst] for lk in topo.links], dtype=np.int64),
        bw=np.asarray(topo.bandwidth, dtype=float) * BYTES_PER_US_PER_GBPS * instance.capacity,
        alpha=np.asarray(topo.alpha, dtype=float),
        gpu=np.array([kinds[i] == "gpu" for i in topo.node_ids], dtype=bool),
    )


@dataclass
class _Pieces:
    """The collective at the grain that matters: chunks with the same holders and wanted
    nodes merged (so ``C`` cancels). Rows are pieces, columns dense node indices; for a
    combining collective ``hold`` marks the contributors and ``want`` the receivers."""

    hold: sp.csr_array
    want: sp.csr_array
    size: np.ndarray  # bytes per piece

    @cached_property
    def foreign(self) -> sp.csr_array:
        """Wanted and not held (data movement: what must be delivered)."""
        out = sp.csr_array(self.want - self.want.multiply(self.hold))
        out.eliminate_zeros()
        return out

    @cached_property
    def foreign_csc(self) -> sp.csc_array:
        return sp.csc_array(self.foreign)

    @cached_property
    def sole_holder(self) -> np.ndarray:
        """Per piece its one holder, or -1 when it has several."""
        counts = np.diff(self.hold.indptr)
        out = np.full(len(counts), -1, dtype=np.int64)
        one = counts == 1
        out[one] = self.hold.indices[self.hold.indptr[:-1][one]]
        return out

    @cached_property
    def by_holder(self) -> dict[int, np.ndarray]:
        """Sole holder -> its pieces."""
        owner = self.sole_holder
        order = np.argsort(owner, kind="stable")
        keys, starts = np.unique(owner[order], return_index=True)
        groups = np.split(order, starts[1:])
        return {int(k): g for k, g in zip(keys, groups, strict=True) if k >= 0}


def _pieces_of(instance: Instance) -> _Pieces:
    coll = instance.collective
    topo = instance.topology
    ids = np.asarray(topo.node_ids, dtype=np.int64)
    lookup = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
    lookup[ids] = np.arange(len(ids))
    wanted = dict(coll.post)
    groups: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for chunk, holders in coll.pre:
        key = (holders, wanted.get(chunk, ()))
        groups[key] = groups.get(key, 0) + 1
    keys = list(groups)
    size = np.array([_piece_bytes(instance, groups[k]) for k in keys], dtype=float)
    n = topo.num_nodes

    def matrix(which: int) -> sp.csr_array:
        lengths = np.fromiter((len(k[which]) for k in keys), dtype=np.int64, count=len(keys))
        flat = np.fromiter(
            chain.from_iterable(k[which] for k in keys), dtype=np.int64, count=int(lengths.sum())
        )
        indptr = np.r_[0, np.cumsum(lengths)]
        data = np.ones(len(flat), dtype=np.float64)
        out = sp.csr_array((data, lookup[flat], indptr), shape=(len(keys), n))
        out.sort_indices()
        return out

    return _Pieces(matrix(0), matrix(1), size)


@dataclass
class _Plan:
    """The flow problems and pair rows of one instance (indices are dense node indices)."""

    members: list[Member]
    row_sources: list[int]  # nodes u with a pair-latency row
    row_of: Callable[[int], np.ndarray]  # row_of(u)[v]: bytes v needs that only u supplies
    row_net: Net
    pieces: _Pieces | None  # data movement only (set cuts)
    allreduce_bytes: float = 0.0  # > 0 when every chunk is reduced over all GPUs into all GPUs
    orbit: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)


def _piece_bytes(instance: Instance, count: int) -> float:
    # size * count exactly, divided once: the same float for every C (count = C k, pieces = N C)
    return instance.size_bytes * count / instance.collective.pieces


def _plan(instance: Instance, net: Net, symmetry: bool) -> _Plan:
    coll = instance.collective
    pieces = _pieces_of(instance)
    orbit = None
    notes: list[str] = []
    if symmetry and coll.kind in SYMMETRIC_KINDS and int(net.gpu.sum()) >= _SYMMETRY_MIN_GPUS:
        start = time.perf_counter()
        orbit, found = gpu_orbits(net, roles=(~net.gpu).astype(np.int64))
        gpu_orbit_count = len(set(orbit[net.gpu].tolist()))
        notes.append(
            f"symmetry: {found} verified automorphisms, {gpu_orbit_count} GPU orbit(s) "
            f"({time.perf_counter() - start:.2f} s)"
        )
        if found == 0:
            orbit = None
    if coll.combining:
        return _combining_plan(net, pieces, orbit, notes)
    return _movement_plan(net, pieces, orbit, notes)


def _reps(nodes: list[int], orbit: np.ndarray | None) -> list[int]:
    """One node per orbit (all nodes without symmetry)."""
    if orbit is None:
        return nodes
    seen: set[int] = set()
    out = []
    for v in nodes:
        if int(orbit[v]) not in seen:
            seen.add(int(orbit[v]))
            out.append(v)
    return out


def _as_dict(vec: np.ndarray) -> dict[int, float]:
    nz = np.flatnonzero(vec > 0)
    return {int(i): float(vec[i]) for i in nz}


def _movement_plan(net: Net, pieces: _Pieces, orbit: np.ndarray | None, notes: list[str]) -> _Plan:
    foreign = pieces.foreign
    dests = np.flatnonzero(np.asarray(foreign.sum(axis=0)).ravel() > 0).tolist()
    hold_t = sp.csr_array(pieces.hold.T)
    members: list[Member] = []
    for v in _reps(dests, orbit):
        col = pieces.foreign_csc[:, [v]].toarray().ravel()
        # several holders: each may supply the piece in full (valid, only weaker)
        src = hold_t @ (col * pieces.size)
        need = float((col * pieces.size).sum())
        members.append(Member(net, _as_dict(src), {v: need}, f"data into node index {v}"))
    foreign_count = np.diff(foreign.indptr)
    one_sink = np.full(len(foreign_count), -1, dtype=np.int64)
    one = foreign_count == 1
    one_sink[one] = foreign.indices[foreign.indptr[:-1][one]]
    by_holder = pieces.by_holder
    for h in _reps(sorted(by_holder), orbit):
        mine = by_holder[h]
        mine = mine[one_sink[mine] >= 0]
        if not len(mine):
            continue
        sinks = np.zeros(net.n)
        np.add.at(sinks, one_sink[mine], pieces.size[mine])
        if np.count_nonzero(sinks) >= 2:
            members.append(
                Member(net, {h: float(sinks.sum())}, _as_dict(sinks), f"data out of node index {h}")
            )

    def row_of(u: int) -> np.ndarray:
        mine = by_holder.get(u, np.zeros(0, dtype=np.int64))
        return np.asarray(foreign[mine].T @ pieces.size[mine]).ravel()

    return _Plan(members, sorted(by_holder), row_of, net, pieces, orbit=orbit, notes=notes)


def _combining_plan(net: Net, pieces: _Pieces, orbit: np.ndarray | None, notes: list[str]) -> _Plan:
    contrib_csc = sp.csc_array(pieces.hold)
    want_t = sp.csr_array(pieces.want.T)
    contributors = np.flatnonzero(np.diff(contrib_csc.indptr) > 0).tolist()

    def row_of(p: int) -> np.ndarray:
        # p's contribution to each piece must reach each receiver other than p
        mine = contrib_csc[:, [p]].toarray().ravel()
        row = np.asarray(want_t @ (mine * pieces.size)).ravel()
        row[p] = 0.0
        return row

    members: list[Member] = []
    if np.all(np.diff(pieces.want.indptr) == 1):
        # ReduceScatter / Reduce: p's contribution to every chunk reaches that chunk's one
        # receiver; distinct chunks use distinct bytes, so it is one flow out of p. On the
        # reversed graph it is a flow *into* p, a per-destination problem (docs/model.md).
        rev = net.reversed()
        for p in _reps(contributors, orbit):
            row = row_of(p)
            if row.sum() > 0:
                members.append(
                    Member(rev, _as_dict(row), {p: float(row.sum())}, f"contributions of node index {p}")
                )
    else:
        # AllReduce-like: every byte of p's contribution must reach w; the cuts separating
        # two GPUs are all seen from a fixed GPU g0 in one direction or the other.
        g0 = contributors[0]
        out_row = row_of(g0)
        g0_want = sp.csc_array(pieces.want)[:, [g0]].toarray().ravel()
        in_col = np.asarray(sp.csr_array(pieces.hold.T) @ (g0_want * pieces.size)).ravel()
        for v in contributors:
            if v == g0:
                continue
            if out_row[v] > 0:
                members.append(
                    Member(net, {g0: float(out_row[v])}, {v: float(out_row[v])}, f"pair {g0}->{v}")
                )
            if in_col[v] > 0:
                members.append(Member(net, {v: float(in_col[v])}, {g0: float(in_col[v])}, f"pair {v}->{g0}"))
    total = 0.0
    gpus = np.flatnonzero(net.gpu)
    every = np.zeros(net.n)
    every[gpus] = 1.0
    full = len(gpus) >= 2
    for m in (pieces.hold, pieces.want):
        full = full and bool(np.all(np.diff(m.indptr) == len(gpus))) and bool(np.all(m @ every == len(gpus)))
    if full:
        total = float(pieces.size.sum())
    return _Plan(members, contributors, row_of, net, None, allreduce_bytes=total, orbit=orbit, notes=notes)


# --------------------------------------------------------------------------- parts
def _latency_part(plan: _Plan, notes: list[str]) -> float:
    net = plan.row_net
    sources = plan.row_sources
    if not sources:
        return 0.0
    sources = _reps(sources, plan.orbit)
    if len(sources) > _LATENCY_ROWS:
        pick = np.linspace(0, len(sources) - 1, _LATENCY_ROWS).round().astype(int)
        notes.append(f"latency: pair rows of {_LATENCY_ROWS} of {len(sources)} sources")
        sources = [sources[i] for i in sorted(set(pick.tolist()))]
    best = 0.0
    candidates: list[tuple[float, int, int, float, float]] = []
    for block in range(0, len(sources), 64):
        chunk = sources[block : block + 64]
        dist = net.dist_rows(chunk)
        for i, u in enumerate(chunk):
            row = plan.row_of(u)
            want = np.flatnonzero(row > 0)
            if not len(want):
                continue
            d = dist[i, want]
            if not np.all(np.isfinite(d)):
                raise ValidationError(
                    "a demand has no directed path from its source; the instance is infeasible"
                )
            cheap_cap = np.minimum(net.bw_out[u], net.bw_in[want])
            cheap = d + row[want] / cheap_cap
            k = int(np.argmax(cheap))
            best = max(best, float(cheap[k]))
            candidates.append((float(cheap[k]), u, int(want[k]), float(d[k]), float(row[want[k]])))
    candidates.sort(reverse=True)
    for _, u, v, d, m in candidates[:_EXACT_PAIRS]:
        best = max(best, d + m / pair_maxflow(net, u, v))
    return best


def _solve_members(
    members: list[Member], windowed: bool, start: float, starts: dict[int, float] | None = None
) -> tuple[float, dict[int, float], int]:
    """Largest optimum over ``members``, each searched from ``max(start, best so far)`` (or
    from ``starts[i]``); returns it, the members' values where a search moved, and the number
    of max-flows."""
    best = start
    values: dict[int, float] = {}
    flows = 0
    for i, member in enumerate(members):
        prob = FlowProblem(member, windowed=windowed)
        begin = best if starts is None else starts.get(i, best)
        t, moved = prob.search(begin)
        flows += prob.flows
        if moved:
            values[i] = t
            best = max(best, t)
    return best, values, flows


def _set_cut_part(net: Net, plan: _Plan) -> float:
    """Cuts of the bandwidth clusters and their complements: bytes held only inside ``S`` and
    wanted outside cross ``S``'s out-links at least once."""
    pieces = plan.pieces
    if pieces is None:
        return 0.0
    best = 0.0
    for side in _clusters(net):
        for s in (side, ~side):
            outside = (~s).astype(float)
            inside_only = (pieces.hold @ outside) == 0
            leaves = (pieces.want @ outside) > 0
            moved = float(pieces.size[inside_only & leaves].sum())
            out = float(net.bw[s[net.src] & ~s[net.dst]].sum())
            if moved > 0 and out > 0:
                best = max(best, moved / out)
    return best


def _clusters(net: Net) -> list[np.ndarray]:
    """Weak components (with a GPU, not all GPUs) of the links at least as fast as each speed."""
    out: list[np.ndarray] = []
    seen: set[bytes] = set()
    for speed in np.unique(net.bw)[1:]:
        keep = net.bw >= speed
        g = sp.csr_array((np.ones(int(keep.sum())), (net.src[keep], net.dst[keep])), shape=(net.n, net.n))
        _, labels = connected_components(g, directed=True, connection="weak")
        for lab in np.unique(labels):
            side = labels == lab
            if side[net.gpu].any() and not side[net.gpu].all() and side.tobytes() not in seen:
                seen.add(side.tobytes())
                out.append(side)
    return out


def _gossip_part(net: Net, plan: _Plan, reducing: np.ndarray, notes: list[str]) -> float:
    """``2 (g - 1) M / sum_G F_G`` over GPU groups (docs/model.md, "gossip"); ``reducing``
    marks the nodes that may add partial sums besides the GPUs (switches with in-network
    reduction): a partition counts only when each of them lies in a group."""
    total = plan.allreduce_bytes
    if total <= 0:
        return 0.0
    partitions: list[np.ndarray] = []
    if not reducing.any():
        labels = np.where(net.gpu, np.arange(net.n), -1)  # each GPU alone, switches relay
        partitions.append(labels)
    for speed in np.unique(net.bw)[1:]:
        keep = net.bw >= speed
        g = sp.csr_array((np.ones(int(keep.sum())), (net.src[keep], net.dst[keep])), shape=(net.n, net.n))
        _, comp = connected_components(g, directed=True, connection="weak")
        with_gpu = set(comp[net.gpu].tolist())
        labels = np.where(np.isin(comp, list(with_gpu)), comp, -1)
        if (labels[reducing] < 0).any():
            continue  # a reducing switch outside every group would not only relay
        partitions.append(labels)
    return gossip_value(net, partitions, net.gpu | reducing, total, notes)


def _reducing_mask(instance: Instance, switch_reduce: bool | Collection[int] | None) -> np.ndarray:
    """Dense-index mask of the switches that may reduce (see :func:`physical_bound`)."""
    topo = instance.topology
    if switch_reduce is None:
        chosen = instance.reducing_switches
    elif isinstance(switch_reduce, bool):
        chosen = frozenset(topo.switches) if switch_reduce else frozenset()
    else:
        chosen = frozenset(switch_reduce)
    mask = np.zeros(topo.num_nodes, dtype=bool)
    for v in chosen:
        if topo.kind.get(v) == "switch":
            mask[topo.node_index[v]] = True
    return mask


# --------------------------------------------------------------------------- entry point
def physical_bound(
    instance: Instance, *, switch_reduce: bool | Collection[int] | None = None, symmetry: bool = True
) -> PhysicalBound:
    """Lower bound in microseconds on every schedule of ``instance``'s collective.

    Depends only on the topology, the collective (kind, root, destinations), ``size_bytes``
    and the ``capacity`` multiplier; not on the chunk count, slot rule, ``alpha_threshold``
    or switch model (module docstring; docs/model.md, "The physical bound").

    Parameters
    ----------
    instance : Instance
    switch_reduce : bool or collection of int, optional
        Which switches may reduce partial sums (NVLS / SHARP): all (True), none (False), the
        node ids given, or by default the instance's own
        :attr:`~ccplan.instances.instance.Instance.reducing_switches`. Only the AllReduce
        ``gossip`` part depends on it: without in-switch reduction it counts ``2 (N - 1)``
        receptions per byte at the GPUs.
    symmetry : bool
        Solve per-destination problems once per orbit of verified automorphisms (large
        AllGather / AllToAll / ReduceScatter instances). Off gives the same value, slower.

    Returns
    -------
    PhysicalBound

    Raises
    ------
    ValidationError
        A demand has no directed path from any source.
    """
    start = time.perf_counter()
    net = _net_of(instance)
    plan = _plan(instance, net, symmetry)
    notes = plan.notes
    if instance.capacity != 1:
        notes.append(
            f"capacity {instance.capacity}: every link counted at {instance.capacity} x its bandwidth"
        )
    parts: dict[str, float] = {}
    parts["latency"] = _latency_part(plan, notes)
    thr, values, flows = _solve_members(plan.members, windowed=False, start=0.0)
    thr = max(thr, _set_cut_part(net, plan))
    parts["throughput"] = thr
    if plan.members:
        if len(plan.members) <= _WINDOWED_ALL:
            chosen = list(range(len(plan.members)))
        else:
            top = sorted(values, key=lambda i: -values[i])[:_WINDOWED_SOME]
            chosen = sorted(set(top) | {0})
            notes.append(f"windowed: {len(chosen)} of {len(plan.members)} flow problems (the binding ones)")
        subset = [plan.members[i] for i in chosen]
        starts = {k: values[i] for k, i in enumerate(chosen) if i in values}
        win, _, more = _solve_members(subset, windowed=True, start=thr, starts=starts)
        flows += more
        parts["windowed"] = win
    if plan.allreduce_bytes > 0:
        parts["gossip"] = _gossip_part(net, plan, _reducing_mask(instance, switch_reduce), notes)
    us = max(parts.values())
    binding = next(name for name in PART_NAMES if name in parts and parts[name] == us)
    log.info(
        "physical bound %.6g us (%s) in %.2f s, %d max-flows", us, binding, time.perf_counter() - start, flows
    )
    return PhysicalBound(us=float(us), parts=parts, binding=binding, notes=tuple(notes))
