r"""A lower bound from a flow-over-time relaxation of the model, one destination at a time.

The analytic bounds of :mod:`ccplan.bounds` count each link's capacity in a time window of
its own. They miss a pipeline effect that sets the makespan of hierarchical machines: on
DGX2 with 4 chassis (AllGather, 1 GB) an odd GPU ``v`` has one in-link (from its NVSwitch,
``L = 1``), and every chunk from another chassis enters ``v``'s chassis over one of the 8
NIC links (``l = L = 10``), lands at an even GPU, goes to the switch (+1) and to ``v`` (+1).
A NIC send that starts at slot ``t`` is on ``v``'s in-link at slot ``t + 11`` at the
earliest; a NIC link starts at most 5 sends in slots ``0 .. 49``, so at most 40 of the 48
remote chunks are on ``v``'s in-link by slot 60, the other 8 take 8 distinct slots from 61
on, and ``D >= 69`` where the analytic bound gives 64. Each argument of this kind is one
cut of the relaxation below, which finds them all.

The relaxation (for one destination ``v`` and a horizon ``D``)
-----------------------------------------------------------------
Take a schedule of makespan ``D`` (the canonical slot semantics of DESIGN.md, the MILP
(2)-(14) of ``000_*.txt``) and a destination ``v`` with demanded chunks ``K_v``. Every chunk
``c in K_v`` reaches ``v`` along a chain of sends that starts at one of ``c``'s slot-0
holders: each node on it holds ``c`` at the start of the slot of its send (so it received
``c`` at least ``L_e`` slots after the previous send on the chain started, and may have kept
it any number of slots), the last send lands at ``v`` by ``D``. Distinct chunks use distinct
sends. Put one unit of flow on each such chain in the time-expanded graph with nodes
``(u, t)``, ``t = 0 .. D``:

- *send arcs* ``f[e, t]``, ``e = (u, x)``, from ``(u, t)`` to ``(x, t + L_e)`` with
  ``t + L_e <= D``: the number of chains whose send on ``e`` starts at ``t``;
- *hold arcs* ``g[u, t]`` from ``(u, t)`` to ``(u, t + 1)`` (unbounded);
- *supply* ``a[c, h]`` into ``(h, 0)`` for each holder ``h`` of ``c``, with
  ``sum_h a[c, h] <= 1`` (each chunk starts one chain);
- *conservation* at every ``(u, t)``, ``u != v``: flow out ``<=`` flow in (a chain may
  be dropped; dropping never helps the objective); no arc leaves ``v`` (a chain ends at
  the first arrival, a node holds a chunk once);
- *capacity*, the MILP's (7) for the canonical occupancy: the sends on ``e`` whose window
  ``t .. t + l_e - 1`` covers slot ``q`` number at most ``omega(e, q)``, so
  ``sum_{t = q - l_e + 1}^{q} f[e, t] <= omega(e, q)`` for every ``q`` (outages included);
- *objective*: the flow into ``v``, ``sum_{e into v} sum_t f[e, t]``.

The chains of the schedule give a feasible point with value ``|K_v|`` (each send carries one
chunk, so the chains of distinct chunks on one link-slot count at most the chunks that
occupy it). Hence if the LP maximum is below ``|K_v|`` no schedule of makespan ``D`` exists.
The maximum grows with ``D`` (a schedule of makespan ``D`` has makespan ``<= D + 1``; the
LP for ``D + 1`` contains the LP for ``D``), so the smallest ``D`` whose LP reaches
``|K_v|`` for every tried ``v`` is a lower bound, and so is the result of any subset of
destinations (a time limit only weakens it). The LP is a relaxation of the model in
three ways: fractional flow, one destination at a time (chains to different
destinations may share sends, so each destination is checked alone), and the chunk
identities forgotten (any chunk may use any link-slot). ``single_port`` is ignored (valid:
it only removes schedules).

Against :mod:`ccplan.bounds`: the LP's cut ``{v}`` is the ingress bound, its cuts through
a set ``S`` with windows are the flow bound's; with ``l_e = 1`` everywhere and no
windows the two coincide. What the LP adds is the combination of cuts in time (a link
whose sends start late delivers late downstream).

Not covered: cut-through switches (a bufferless switch forwards only in its arrival slot
and its hop into a GPU costs ``delta``; the chains there are walks, not modelled here) and
combining collectives; :func:`flow_bound` returns ``None`` for them.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_matrix

log = logging.getLogger(__name__)

LP_METHOD = "highs-ipm"

FEASIBLE_TOLERANCE = 1e-4
"""A certified maximum within this of ``|K_v|`` counts as reaching it (never refutes ``D``).
The value compared is :func:`_certified_maximum`'s, an upper bound on the LP maximum that
weak duality gives from HiGHS's duals whatever the solver's tolerances; a refuting maximum is
a fraction with a small denominator (62.5 of 63 on AMD 4 chassis, 62 of 63 on DGX2 4 chassis),
far below the tolerance."""


@dataclass(frozen=True)
class FlowBound:
    """The result of :func:`flow_bound`.

    Attributes
    ----------
    slots : int
        The lower bound (at least the ``lower`` it was started from).
    destination : int or None
        The destination whose LP refuted ``slots - 1`` (None when nothing was refuted).
    checked : int
        Destinations whose LP reached ``|K_v|`` at ``slots`` (all of them: complete).
    complete : bool
        Every destination was checked at ``slots`` (else the time limit stopped it; the
        bound is still valid).
    lps : int
        Linear programs solved.
    seconds : float
    refuted : tuple of (int, int)
        ``(destination, D)`` for every LP that proved ``D`` infeasible.
    """

    slots: int
    destination: int | None
    checked: int
    complete: bool
    lps: int
    seconds: float
    refuted: tuple[tuple[int, int], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.slots < 0 or self.lps < 0 or self.checked < 0 or self.seconds < 0:
            raise ValueError("FlowBound fields are non-negative")

    def as_dict(self) -> dict[str, object]:
        return {"slots": self.slots, "destination": self.destination, "checked": self.checked,
                "complete": self.complete, "lps": self.lps, "seconds": round(self.seconds, 3),
                "refuted": [list(r) for r in self.refuted]}


def applies(instance: Instance) -> bool:
    """The relaxation covers store-and-forward data movement (module docstring)."""
    return not instance.bufferless and not instance.collective.combining


def _holders(instance: Instance) -> dict[object, tuple[int, ...]]:
    return {chunk: tuple(h) for chunk, h in instance.collective.pre}


def max_flow_into(
    instance: Instance, v: int, horizon: int, *, dist: np.ndarray | None = None,
    time_limit: float | None = None,
) -> float | None:
    """The LP maximum of the module docstring: chains of ``v``'s demanded chunks that can
    reach ``v`` by slot ``horizon``, as the upper bound :func:`_certified_maximum` checks from
    the duals (equal to the maximum up to the solver's tolerances, never below it). Below
    ``|K_v|`` proves no schedule has makespan ``<= horizon``. None when HiGHS stops at
    ``time_limit`` (seconds) first."""
    topo = instance.topology
    n = topo.num_nodes
    pos = topo.node_index  # rows and columns of dist, early and late
    D = int(horizon)
    if dist is None:
        dist = latency_matrix(topo, instance.latency)
    holders = _holders(instance)
    wanted = [c for c, w in instance.collective.demands if w == v]
    if not wanted:
        return 0.0
    sources = sorted({pos[h] for c in wanted for h in holders[c] if h != v})
    # earliest slot a node can hold one of v's chunks; latest it can still help
    early = np.min(dist[sources, :], axis=0) if sources else np.full(n, np.inf)
    early[sources] = 0.0
    to_v = dist[:, pos[v]]
    late = D - to_v
    lat = instance.latency
    occ = instance.occupancy

    col = 0
    f_index: dict[tuple[int, int], int] = {}
    for e, link in enumerate(topo.links):
        u, x = link.src, link.dst
        if u == v or not np.isfinite(early[pos[u]]):
            continue
        if x != v and not np.isfinite(to_v[pos[x]]):
            continue
        lo = int(early[pos[u]])
        hi = D - int(lat[e]) - (0 if x == v else int(to_v[pos[x]]))
        for t in range(lo, hi + 1):
            f_index[(e, t)] = col
            col += 1
    g_index: dict[tuple[int, int], int] = {}
    for u in topo.node_ids:
        pu = pos[u]
        if u == v or not np.isfinite(early[pu]) or not np.isfinite(late[pu]):
            continue
        for t in range(int(early[pu]), int(late[pu])):
            g_index[(u, t)] = col
            col += 1
    a_index: dict[tuple[int, int], int] = {}
    for ci, c in enumerate(wanted):
        for h in holders[c]:
            if h != v:
                a_index[(ci, h)] = col
                col += 1
    if not f_index:
        return 0.0

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    rhs: list[float] = []
    r = 0
    # conservation at (u, t): out - in <= 0
    terms: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
    for (e, t), j in f_index.items():
        link = topo.links[e]
        terms[(link.src, t)].append((j, 1.0))
        if link.dst != v:
            terms[(link.dst, t + int(lat[e]))].append((j, -1.0))
    for (u, t), j in g_index.items():
        terms[(u, t)].append((j, 1.0))
        terms[(u, t + 1)].append((j, -1.0))
    for (_ci, h), j in a_index.items():
        terms[(h, 0)].append((j, -1.0))
    for key in terms:
        for j, coef in terms[key]:
            rows.append(r)
            cols.append(j)
            vals.append(coef)
        rhs.append(0.0)
        r += 1
    # each chunk starts one chain
    by_chunk: dict[int, list[int]] = defaultdict(list)
    for (ci, _h), j in a_index.items():
        by_chunk[ci].append(j)
    for js in by_chunk.values():
        for j in js:
            rows.append(r)
            cols.append(j)
            vals.append(1.0)
        rhs.append(1.0)
        r += 1
    # (7): sends whose window covers slot q
    by_link: dict[int, list[int]] = defaultdict(list)
    for e, t in f_index:
        by_link[e].append(t)
    upper = np.full(col, np.inf)
    for e, ts in by_link.items():
        le = int(occ[e])
        starts = set(ts)
        for q in range(min(ts), max(ts) + le):
            window = [f_index[(e, t)] for t in range(q - le + 1, q + 1) if t in starts]
            if not window:
                continue
            cap = float(instance.omega(e, q))
            if len(window) == 1:
                upper[window[0]] = min(upper[window[0]], cap)
                continue
            for j in window:
                rows.append(r)
                cols.append(j)
                vals.append(1.0)
            rhs.append(cap)
            r += 1
    a_ub = sp.csr_matrix((vals, (rows, cols)), shape=(r, col))
    objective = np.zeros(col)
    for (e, _t), j in f_index.items():
        if topo.links[e].dst == v:
            objective[j] = -1.0
    bounds = np.column_stack([np.zeros(col), upper])
    options = {} if time_limit is None else {"time_limit": max(0.01, float(time_limit))}
    res = linprog(objective, A_ub=a_ub, b_ub=np.array(rhs), bounds=bounds, method=LP_METHOD,
                  options=options)
    if res.status == 1:
        return None  # time limit
    if res.status != 0:
        raise RuntimeError(f"flow relaxation LP for v={v}, D={D}: {res.message}")
    return _certified_maximum(res, a_ub, np.array(rhs), upper, objective, len(wanted))


def _certified_maximum(
    res: Any, a_ub: sp.csr_matrix, rhs: np.ndarray, upper: np.ndarray, objective: np.ndarray,
    supply: int,
) -> float:
    """An upper bound on the LP maximum checked here from the solver's duals (weak duality).

    The LP is ``min c x`` s.t. ``A x <= b``, ``0 <= x <= u`` (``c`` = ``objective``, minus the
    flow into ``v``). For any ``y <= 0`` (rows) and ``w <= 0`` (finite upper bounds) put
    ``s = c - A'y - w``; for every feasible ``x``, ``c x = y A x + w x + s x >= y b + w u -
    sum_j max(0, -s_j) x_j``, and ``x_j <= supply`` (no arc carries more than the chunks put
    in: conservation never creates flow, the time-expanded graph has no cycle; a supply
    variable is <= 1). So the flow into ``v`` is at most ``-(y b + w u) + supply *
    sum_j max(0, -s_j)``, whatever the accuracy of ``y`` and ``w``: HiGHS's rounding can only
    make this bound looser (then no refutation), never let it pass below the true maximum.
    """
    duals_rows = np.minimum(np.asarray(res.ineqlin.marginals, dtype=np.float64), 0.0)
    finite = np.isfinite(upper)
    duals_upper = np.where(finite, np.minimum(np.asarray(res.upper.marginals, dtype=np.float64), 0.0), 0.0)
    reduced = objective - a_ub.T @ duals_rows - duals_upper
    deficit = float(np.maximum(-reduced, 0.0).sum())
    floor = float(rhs @ duals_rows) + float(upper[finite] @ duals_upper[finite])
    return -floor + supply * deficit


def symmetry_classes(instance: Instance) -> dict[int, int]:
    """Colour refinement (1-dimensional Weisfeiler-Leman) of the nodes: a node's colour is its
    kind and demand count, refined by the multisets of ``(l, L, omega, colour)`` over its
    out- and in-links until the partition is stable. Nodes of different colours are not
    symmetric; nodes of one colour usually are (the chassis of DGX2 and AMD). Used only to
    pick which destinations to check (any subset gives a valid bound)."""
    topo = instance.topology
    need: dict[int, int] = defaultdict(int)
    for _c, w in instance.collective.demands:
        need[w] += 1
    held: dict[int, int] = defaultdict(int)
    for _c, hs in instance.collective.pre:
        for h in hs:
            held[h] += 1
    occ, lat, cap = instance.occupancy, instance.latency, instance.link_capacity
    attrs = [(int(occ[e]), int(lat[e]), int(cap[e])) for e in range(topo.num_links)]
    colour = {node.id: hash((node.kind, need[node.id], held[node.id])) for node in topo.nodes}
    classes = len(set(colour.values()))
    while True:
        out: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        inn: dict[int, list[tuple[int, ...]]] = defaultdict(list)
        for e, link in enumerate(topo.links):
            out[link.src].append((*attrs[e], colour[link.dst]))
            inn[link.dst].append((*attrs[e], colour[link.src]))
        new = {u: hash((colour[u], tuple(sorted(out[u])), tuple(sorted(inn[u])))) for u in colour}
        n_new = len(set(new.values()))
        colour = new
        if n_new == classes:
            break
        classes = n_new
    ids: dict[int, int] = {}
    return {u: ids.setdefault(c, len(ids)) for u, c in sorted(colour.items())}


def destination_order(instance: Instance, arrival: dict[int, list[int]] | None = None) -> list[int]:
    """One destination per :func:`symmetry_classes` class, the likeliest to refute first:
    latest arrival in ``arrival`` (destination -> first arrivals of its demands in a known
    schedule: where the schedule struggles), then most arrivals in its last 3 slots, then
    :func:`_order`. On AMD 4 chassis 1 GB the GCDs whose LP refutes 81 slots (5, 6, 13,
    14 of each chassis) are those the ``cut-aware`` schedule serves last; on DGX2 the odd
    GPUs (one in-link)."""
    base = _order(instance)
    rank = {v: i for i, v in enumerate(base)}
    if arrival:
        m = max((max(a) for a in arrival.values() if a), default=0)

        def key(v: int) -> tuple[int, int, int]:
            a = arrival.get(v, [])
            return (-max(a, default=0), -sum(1 for t in a if t >= m - 2), rank[v])

        base.sort(key=key)
    cls = symmetry_classes(instance)
    seen: set[int] = set()
    out = []
    for v in base:
        if cls[v] not in seen:
            seen.add(cls[v])
            out.append(v)
    return out


def _order(instance: Instance) -> list[int]:
    """Destinations, tightest first: least in-link capacity per demanded chunk."""
    topo = instance.topology
    need: dict[int, int] = defaultdict(int)
    for _c, w in instance.collective.demands:
        need[w] += 1
    occ = instance.occupancy
    cap_in: dict[int, float] = defaultdict(float)
    for e, link in enumerate(topo.links):
        cap_in[link.dst] += float(instance.link_capacity[e]) / float(occ[e])
    return sorted(need, key=lambda w: (cap_in[w] / need[w], w))


def flow_bound(
    instance: Instance, lower: int, upper: int | None = None, *, time_limit: float | None = None,
    destinations: list[int] | None = None,
) -> FlowBound | None:
    """The smallest ``D >= lower`` that no destination's LP refutes (module docstring).

    Parameters
    ----------
    instance : Instance
    lower : int
        A valid lower bound to start from (e.g. :func:`ccplan.bounds.lower_bound_slots`).
    upper : int, optional
        Stop raising at this value (a known makespan: its ``D`` is feasible).
    time_limit : float, optional
        Seconds; when they run out the bound reached so far is returned (still valid,
        ``complete`` False).
    destinations : list of int, optional
        Check these only (default: every destination, tightest first).

    Returns
    -------
    FlowBound or None
        None when the relaxation does not apply (:func:`applies`).
    """
    if not applies(instance):
        return None
    t0 = time.perf_counter()
    dist = latency_matrix(instance.topology, instance.latency)
    order = list(destinations) if destinations is not None else _order(instance)
    need: dict[int, int] = defaultdict(int)
    for _c, w in instance.collective.demands:
        need[w] += 1
    D = max(0, int(lower))
    lps = 0
    refuted: list[tuple[int, int]] = []
    who: int | None = None
    i = 0  # order[:i] reach |K_v| at D (so at every larger D: the LP grows with D)
    while i < len(order):
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        if upper is not None and upper <= D:
            break
        v = order[i]
        left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
        value = max_flow_into(instance, v, D, dist=dist, time_limit=left)
        if value is None:
            break
        lps += 1
        if value < need[v] - FEASIBLE_TOLERANCE:
            refuted.append((v, D))
            who = v
            D += 1  # the same destination again at the next D
            continue
        i += 1
    log.info("flow bound %d (%d LPs, %.1f s, %d of %d destinations checked)", D, lps,
             time.perf_counter() - t0, i, len(order))
    return FlowBound(slots=D, destination=who, checked=i, complete=i == len(order),
                     lps=lps, seconds=time.perf_counter() - t0, refuted=tuple(refuted))


# --------------------------------------------------------------------------- every method
FLOW_MAX_ARCS = 20_000
"""By default (``"auto"``) :func:`gated_flow_bound` runs only when links x makespan is at most
this (the LP of one destination has about that many send arcs). Measured at load 3-5: one LP
of DGX2 4 chassis 1 GB (160 links, ``D = 68``, 11,000 arcs) takes 1.2 s, of which HiGHS 1.0 s;
AMD 4 chassis (35,000-45,000 arcs) 8-12 s per LP, DGX2 8 chassis (48,000-81,000) 15-25 s. So
the limit admits DGX2 x4 and AMD x2 with any heuristic's makespan and keeps out the
instances where a single LP would take longer than most engines."""

FLOW_DESTINATIONS = 4
"""Destinations checked (:func:`destination_order`, the schedule's latest served first), as
the exact engine does (``ccplan.model.exact.RELAX_DESTINATIONS``)."""

FLOW_SHARE = 1.0
FLOW_FLOOR = 2.0
FLOW_CAP = 30.0
"""The time limit of :func:`gated_flow_bound` after a solve: ``FLOW_SHARE`` times the
engine's seconds, at least ``FLOW_FLOOR`` and at most ``FLOW_CAP`` seconds
(:func:`flow_budget`), so a run pays at most 2 s or its own time again. The floor is what
the one LP that proves ``cut-aware``'s 69 slots optimal on DGX2 4 chassis takes (``D = 68``,
1.2 s at load 3; :data:`CLOSE_GAP`). ``ccplan bounds`` (:func:`ccplan.bounds.compute_bounds`
with a makespan) gives it ``FLOW_CAP``."""


CLOSE_GAP = 10
""":func:`flow_bound_between` asks ``upper - 1`` first when the gap is at most ``1 /
CLOSE_GAP`` of the makespan (``cut-aware`` on DGX2 4 chassis: 64 against 69, one LP)."""


def flow_budget(engine_seconds: float) -> float:
    """Seconds for :func:`gated_flow_bound` after an engine that took ``engine_seconds``."""
    return min(FLOW_CAP, max(FLOW_FLOOR, FLOW_SHARE * max(0.0, engine_seconds)))


def flow_bound_between(
    instance: Instance, lower: int, upper: int, *, time_limit: float | None = None,
    destinations: list[int] | None = None,
) -> FlowBound | None:
    """The flow-over-time bound between a valid lower bound and a verified makespan, by
    bisection: the value of :func:`flow_bound` ``(instance, lower, upper=upper,
    destinations=...)`` with fewer LPs.

    For each destination ``v`` in turn, with ``b`` the bound so far (when the gap is within
    :data:`CLOSE_GAP`, ``upper - 1`` is asked first: refuted, the bound is ``upper``): if
    ``v``'s LP does not refute ``b`` it cannot raise the bound (the LP maximum grows with ``D``, module
    docstring); otherwise ``upper - 1`` is asked next (refuted: the bound is ``upper``, the
    makespan is optimal, stop) and then the smallest ``D`` in ``(b, upper - 1)`` that ``v``
    does not refute is found by bisection. (Against the step-by-step search of
    :func:`flow_bound`: DGX2 4 chassis 1 GB from 64 to a makespan of 69, 2 LPs instead of 5;
    DGX2 2 chassis 1 MB 2 instead of 7; AMD 2 chassis 6 instead of 5.) Every refutation is
    a proof on its own (the certificate of :func:`max_flow_into`), so the bound ``1 +`` the
    largest refuted ``D`` is valid even where a time limit stops the search. LP answers are
    kept on the instance: a second call (``ccplan bounds`` after ``solve``) solves no LP
    twice.

    Returns
    -------
    FlowBound or None
        None when the relaxation does not apply (:func:`applies`). ``lps`` counts the LPs
        solved by this call; ``complete`` says every destination was settled.
    """
    if not applies(instance):
        return None
    t0 = time.perf_counter()
    memo: dict[tuple[int, int], bool] = instance.__dict__.setdefault("_ccplan_flow_refutes", {})
    dist = latency_matrix(instance.topology, instance.latency)
    order = list(destinations) if destinations is not None else _order(instance)
    need: dict[int, int] = defaultdict(int)
    for _c, w in instance.collective.demands:
        need[w] += 1
    best = max(0, int(lower))
    lps = 0
    refuted: list[tuple[int, int]] = []
    who: int | None = None
    out_of_time = False

    def refutes(v: int, D: int) -> bool | None:
        """Whether ``v``'s LP refutes ``D`` (None: out of time)."""
        nonlocal lps, out_of_time
        if (v, D) not in memo:
            left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
            if left is not None and left <= 0:
                out_of_time = True
                return None
            value = max_flow_into(instance, v, D, dist=dist, time_limit=left)
            if value is None:
                out_of_time = True
                return None
            lps += 1
            memo[(v, D)] = value < need[v] - FEASIBLE_TOLERANCE
        if memo[(v, D)]:
            refuted.append((v, D))
        return memo[(v, D)]

    checked = 0
    for v in order:
        if best >= upper:
            break
        if (upper - best) * CLOSE_GAP <= upper and upper - 1 > best:
            # a close schedule is often optimal: one LP that refutes upper - 1 proves it
            answer = refutes(v, upper - 1)
            if answer is None:
                break
            if answer:
                best, who = upper, v
                checked += 1
                break
        answer = refutes(v, best)
        if answer is None:
            break
        if answer:
            bad, good = best, upper  # bad is refuted; upper is a verified makespan
            if upper - 1 > bad:
                top = refutes(v, upper - 1)
                if top is None:
                    best, who = bad + 1, v
                    break
                if top:
                    bad = upper - 1
                else:
                    good = upper - 1
            while good - bad > 1:
                mid = (bad + good) // 2
                answer = refutes(v, mid)
                if answer is None:
                    break
                if answer:
                    bad = mid
                else:
                    good = mid
            best, who = bad + 1, v
            if out_of_time:
                break
        checked += 1
    seconds = time.perf_counter() - t0
    log.info("flow bound %d between %d and %d (%d LPs, %.1f s, %d of %d destinations)", best, lower,
             upper, lps, seconds, checked, len(order))
    complete = checked == len(order) or (best >= upper and not out_of_time)
    return FlowBound(slots=best, destination=who, checked=checked, complete=complete, lps=lps,
                     seconds=seconds, refuted=tuple(refuted))


def gated_flow_bound(
    instance: Instance, lower: int, upper: int | None, *, engine_seconds: float = 0.0,
    arrivals: Any = None, mode: object = "auto", time_limit: float | None = None,
) -> FlowBound | None:
    """The flow-over-time bound where it is worth its time (what ``ccplan.pipeline.solve``,
    ``ccplan.bounds.compute_bounds`` and ``ccplan bounds`` report).

    Runs :func:`flow_bound_between` only when ``upper`` (a verified makespan) is above
    ``lower`` (the gap is open), the relaxation applies (store-and-forward data movement:
    :func:`applies`), ``mode`` is not False, and, for ``mode == "auto"``, links x ``upper``
    is at most :data:`FLOW_MAX_ARCS`; within :func:`flow_budget` ``(engine_seconds)``
    seconds, over :data:`FLOW_DESTINATIONS` destinations of :func:`destination_order`.
    ``mode`` True lifts the size limit (the time limit stays). ``time_limit`` replaces the
    budget.

    Parameters
    ----------
    arrivals : mapping, optional
        ``(chunk, node) -> slot`` of the schedule (``Report.arrivals``): the destinations
        it serves last are checked first.

    Returns
    -------
    FlowBound or None
        None when it did not run.
    """
    if mode is False or upper is None or upper <= lower or not applies(instance):
        return None
    if mode == "auto" and instance.topology.num_links * upper > FLOW_MAX_ARCS:
        return None
    per: dict[int, list[int]] = {}
    if arrivals is not None:
        for chunk, v in instance.collective.demands:
            at = arrivals.get((chunk, v))
            if at is not None:
                per.setdefault(v, []).append(int(at))
    order = destination_order(instance, per)[:FLOW_DESTINATIONS]
    budget = flow_budget(engine_seconds) if time_limit is None else time_limit
    return flow_bound_between(instance, lower, upper, time_limit=budget, destinations=order)
