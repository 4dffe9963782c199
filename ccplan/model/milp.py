"""The paper's MILP, constraints (1)-(14) of ``000_*.txt`` section 1.2, written in Pyomo.

Variables (the paper's Table 1, with a chunk ``k = (s, c)`` named by the collective):

- ``x[s, c, e, t]`` (binary): chunk ``(s, c)`` leaves on link ``e`` (index into
  ``topology.links``) in slot ``t``; only ``t + L_e <= H`` exists (the send must arrive in the
  horizon, like the MTEG transmission edges of Algorithm 1 line 10);
- ``y[s, c, v, t]`` (binary): node ``v`` holds chunk ``(s, c)`` at the start of slot ``t``,
  ``t = 0 .. H``;
- ``z[s, c, v, t]`` (binary): ``v`` holds the chunk from slot ``t`` on and did not before (first
  receive); only for demands ``(chunk, v)`` of the collective;
- ``D`` (integer, ``0 .. H``): the makespan. The paper's ``D_{s,v,c}`` is the named expression
  ``arrival[s, c, v] = sum_t t * z[s, c, v, t]`` (equation (14) read as a sum).

Each equation is one named component (``obj_1``, ``c2_initial_hold`` ... ``c14_makespan``) whose
``doc`` quotes the equation; ``docs/model.md`` explains every place where the implemented row
differs from the typeset one (objective, (5), (6), (7) with ``l > 1``, (14)) and why the
implemented one is the canonical slot semantics of DESIGN.md.

The collective enters through its precondition (``holders``), postcondition (``wanted``) and
``demands`` (wanted and not held at slot 0); for AllGather this is exactly the paper's model.
All coefficients and right-hand sides are integers, as the CP-SAT adapter requires.

The default build is *sparse*: variables that reachability fixes to zero are not created
(see :func:`build_model`); ``dense=True`` creates every index so the two can be compared.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyomo.environ as pyo
from pyomo.common.collections import ComponentMap
from pyomo.core.base.var import VarData

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.model.size import INF as INF  # re-exported: ModelIndex.earliest uses it
from ccplan.model.size import reach_windows, y_window
from ccplan.schedule.core import Schedule, Send

log = logging.getLogger(__name__)

_META_ATTR = "_ccplan_index"

Term = tuple[int, VarData]
Key = tuple[int, ...]

PAPER_COMPONENTS: tuple[str, ...] = (
    "obj_1",
    "c2_initial_hold",
    "c3_initial_empty",
    "c4_source_sends",
    "c5_causality",
    "c6_buffer",
    "c7_capacity",
    "c8_receive",
    "c9_first_receive_once",
    "c10_first_receive_held",
    "c11_first_receive_new",
    "c12_first_receive_mark",
    "c13_first_receive_initial",
    "c14_makespan",
)
"""Names of the components that implement the paper's objective and equations (2)-(14)."""

SINGLE_PORT_COMPONENTS: tuple[str, ...] = ("single_port_send", "single_port_receive")
"""Extra rows of the ``single_port`` option (the one-send/one-receive model of ``001_*.txt``)."""

CUT_THROUGH_COMPONENTS: tuple[str, ...] = ("c6_buffer_cut_through",)
"""Rows that replace (6) at the switches under ``switch_model == "cut-through"`` (TE-CCL's
bufferless switch; docs/model.md). The paper's (6) stays the default and keeps every other node."""

CUT_COMPONENTS: tuple[str, ...] = ("cut_lower_bound", "cut_receive_once", "cut_arrival_by_send")
"""Valid redundant rows added with ``cuts=True``; NOT part of the paper (see docs/model.md)."""

_DOCS: dict[str, str] = {
    "obj_1": "(1) min_s max_{v,c} D_{s,v,c}, implemented as min D with D >= D_{s,v,c} (14)",
    "c2_initial_hold": "(2) y_{s,s,c,0} = 1: every holder of a chunk holds it at slot 0",
    "c3_initial_empty": "(3) y_{s,v,c,0} = 0 for v not holding the chunk at slot 0",
    "c4_source_sends": "(4) sum_t sum_{(s,v) in E} x_{s,(s,v),c,t} >= 1: some holder sends each "
    "chunk that has a demand",
    "c5_causality": "(5) x_{s,(u,v),c,t} <= y_{s,u,c,t}: the sender holds the chunk at the start "
    "of the send slot (typeset: y_{s,u,c,t} + sum x_{t-L} >= x_{t+1})",
    "c6_buffer": "(6) y_{s,v,c,t} = y_{s,v,c,t-1} + sum_{(u,v) in E, t-L>=0} x_{s,(u,v),c,t-L_(u,v)} "
    "(typeset with t-L-1; a chunk sent in slot t is usable from t+L)",
    "c6_buffer_cut_through": "(6, cut-through variant) y_{s,w,c,t} = sum_{(u,w) in E, t-L>=0} "
    "x_{s,(u,w),c,t-L_(u,w)} at a bufferless switch w: it holds a chunk only in a slot in which "
    "the chunk arrives (no y_{t-1} term; TE-CCL's buffer = 0 with flow <= incoming)",
    "c7_capacity": "(7) sum_{s,c} sum_{t'=t-l+1..t} x_{s,(u,v),c,t'} <= omega_{(u,v),t}: chunks "
    "occupying a link in slot t (typeset per start slot; equal for l = 1)",
    "c8_receive": "(8) sum_{t=0..H} y_{s,v,c,t} >= 1 for every demand (chunk, v)",
    "c9_first_receive_once": "(9) sum_{t=1..H} z_{s,v,c,t} = 1 for every demand (chunk, v)",
    "c10_first_receive_held": "(10) z_{s,v,c,t} <= y_{s,v,c,t}, t >= 1",
    "c11_first_receive_new": "(11) z_{s,v,c,t} <= 1 - y_{s,v,c,t-1}, t >= 1",
    "c12_first_receive_mark": "(12) z_{s,v,c,t} >= y_{s,v,c,t} - y_{s,v,c,t-1}, t >= 1",
    "c13_first_receive_initial": "(13) z_{s,v,c,0} = y_{s,v,c,0} for demands (dense build only; "
    "the sparse build has no slot-0 index for non-holders)",
    "c14_makespan": "(14) D >= D_{s,v,c} = sum_t t * z_{s,v,c,t} (typeset D_{s,v,c} = t * z_{s,v,c,t})",
    "single_port_send": "single_port (001_*.txt): sum_{e out of u} sum_{s,c} sum_{t'=t-l_e+1..t} "
    "x_{s,e,c,t'} <= 1, one send per node per slot",
    "single_port_receive": "single_port (001_*.txt): sum_{e into v} sum_{s,c} sum_{t'=t-l_e+1..t} "
    "x_{s,e,c,t'} <= 1, one receive per node per slot",
    "cut_lower_bound": "CUT (not in the paper): D >= lower_bound (a proven bound passed by the caller)",
    "cut_receive_once": "CUT (not in the paper): sum_{(u,v) in E} sum_t x_{s,(u,v),c,t} = 1 for every "
    "demand (chunk, v); (6) telescoped from y_0 = 0 to y_H = 1",
    "cut_arrival_by_send": "CUT (not in the paper): D >= sum_{(u,v) in E} sum_t (t + L_(u,v)) "
    "x_{s,(u,v),c,t} for every demand (chunk, v)",
}


@dataclass(frozen=True)
class ModelIndex:
    """What :func:`build_model` knows about the model it built (attached to the model).

    Parameters
    ----------
    instance : Instance
    horizon : int
        ``H``: slots ``0 .. H`` exist for ``y``; sends arrive by ``H``.
    dense : bool
        Every index was created (no reachability pruning).
    cuts : bool
        Redundant valid rows were added.
    lower_bound : int or None
        The bound used by ``cut_lower_bound`` (None when that row is absent).
    earliest : mapping
        ``(chunk, node) -> first slot at which the node can hold the chunk`` (``INF`` when it
        cannot within the horizon); 0 for holders.
    latest : mapping
        ``(chunk, node) -> last slot at which a copy arriving at the node can still help a
        demand`` (``H`` for demanders, ``-INF`` if no demander can be reached).
    nonzeros : int
        Number of (variable, row) coefficients in the constraints.
    """

    instance: Instance
    horizon: int
    dense: bool
    cuts: bool
    lower_bound: int | None
    earliest: Mapping[tuple[Chunk, int], int]
    latest: Mapping[tuple[Chunk, int], int]
    nonzeros: int


def model_index(model: pyo.ConcreteModel) -> ModelIndex:
    """The :class:`ModelIndex` of a model made by :func:`build_model`.

    Raises
    ------
    ValidationError
        When ``model`` was not built by :func:`build_model`.
    """
    meta = getattr(model, _META_ATTR, None)
    if not isinstance(meta, ModelIndex):
        raise ValidationError("model was not built by ccplan.model.milp.build_model")
    return meta


@dataclass
class _Plan:
    """Pure-Python index sets of one build (before any Pyomo object exists)."""

    x_keys: list[Key]
    y_ranges: dict[tuple[Chunk, int], tuple[int, int]]
    z_keys: list[Key]
    earliest: dict[tuple[Chunk, int], int]
    latest: dict[tuple[Chunk, int], int]


def _plan(instance: Instance, horizon: int, dense: bool) -> _Plan:
    topo = instance.topology
    coll = instance.collective
    lat = instance.latency
    occ = instance.occupancy
    holders = coll.holders
    earliest, latest, demanders = reach_windows(instance, horizon, dense)

    x_keys: list[Key] = []
    for chunk in coll.chunk_ids:
        s, c = chunk
        held = holders[chunk]
        for e, link in enumerate(topo.links):
            last = horizon - int(lat[e])
            if dense:
                x_keys.extend((s, c, e, t) for t in range(0, last + 1))
                continue
            if link.dst in held:
                continue  # a node holds a chunk at most once: never send it to a holder
            first = earliest[(chunk, link.src)]
            last = min(last, latest[(chunk, link.dst)] - int(lat[e]))
            for t in range(first, last + 1):
                if all(instance.omega(e, q) > 0 for q in range(t, t + int(occ[e]))):
                    x_keys.append((s, c, e, t))

    y_ranges: dict[tuple[Chunk, int], tuple[int, int]] = {}
    z_keys: list[Key] = []
    for chunk in coll.chunk_ids:
        s, c = chunk
        held = holders[chunk]
        dem = demanders.get(chunk, set())
        for v in topo.node_ids:
            kv = (chunk, v)
            lo, hi = y_window(horizon, dense, v in held, v in dem, earliest[kv], latest[kv])
            if lo <= hi:
                y_ranges[kv] = (lo, hi)
            if v in dem:
                z_keys.extend((s, c, v, t) for t in range(lo, hi + 1))
    return _Plan(x_keys=x_keys, y_ranges=y_ranges, z_keys=z_keys, earliest=earliest, latest=latest)


# --------------------------------------------------------------------------- rows
class _Rows:
    """Collects the rows of one named component as ``key -> (terms, lb, ub)``."""

    def __init__(self, name: str, dimen: int) -> None:
        self.name = name
        self.dimen = dimen
        self.rows: dict[Any, tuple[list[Term], int | None, int | None]] = {}

    def add(self, key: Key, terms: list[Term], lb: int | None, ub: int | None) -> None:
        self.rows[key] = (terms, lb, ub)


def _expr(terms: list[Term]) -> Any:
    return pyo.quicksum((c * v for c, v in terms))


def _install(model: pyo.ConcreteModel, rows: _Rows) -> int:
    """Add ``rows`` as one indexed constraint named ``rows.name``; returns its nonzeros."""
    table = rows.rows
    index = pyo.Set(initialize=list(table), dimen=rows.dimen, ordered=pyo.Set.InsertionOrder)
    model.add_component(f"{rows.name}_index", index)

    def rule(_m: Any, *key: int) -> Any:
        terms, lb, ub = table[key]
        body = _expr(terms)
        if lb is not None and lb == ub:
            return body == lb
        return (lb, body, ub)

    model.add_component(rows.name, pyo.Constraint(index, rule=rule, doc=_DOCS[rows.name]))
    return sum(len(t) for t, _, _ in table.values())


def build_model(
    instance: Instance,
    horizon: int,
    *,
    dense: bool = False,
    lower_bound: int | None = None,
    cuts: bool = True,
) -> pyo.ConcreteModel:
    """Build the MILP (1)-(14) of ``000_*.txt`` for ``instance`` with slot horizon ``H``.

    Parameters
    ----------
    instance : Instance
        A data-movement collective (combining collectives are reduced to these first).
    horizon : int
        ``H >= 1``: ``y`` has slots ``0 .. H`` and every send arrives by slot ``H``; the
        optimum is found when ``H`` is at least the optimal makespan (e.g. a heuristic's).
    dense : bool
        Create every index ``x[k, e, t]`` (``t + L_e <= H``), ``y[k, v, 0..H]``,
        ``z[k, v, 0..H]`` and fix nothing (for tests against the sparse build).
    lower_bound : int, optional
        A proven lower bound on the makespan; with ``cuts`` it becomes ``D >= lower_bound``.
    cuts : bool
        Add the valid redundant rows ``cut_receive_once`` and ``cut_arrival_by_send`` (and
        ``cut_lower_bound``); none of them is part of the paper, none changes the optimum.

    Returns
    -------
    pyomo.environ.ConcreteModel
        Variables ``x, y, z, D``; constraints named as in :data:`PAPER_COMPONENTS` (plus
        :data:`SINGLE_PORT_COMPONENTS` with ``instance.single_port`` and
        :data:`CUT_COMPONENTS` with ``cuts``); the expression ``arrival`` (the paper's
        ``D_{s,v,c}``). :func:`model_index` gives the build's metadata.

    Notes
    -----
    Sparse build rules (all exact, argued in docs/model.md): ``earliest(k, v)`` is the
    shortest ``L``-path from the holders of ``k`` (waiting out outages) and ``latest(k, v)`` is
    ``H`` minus the shortest ``L``-path from ``v`` to a demander of ``k`` (``H`` for a
    demander). ``y[k, v, t]`` exists for ``earliest <= t`` (``<= latest`` for nodes that
    only forward), ``x[k, (u, w), t]`` for ``t >= earliest(k, u)``, ``t + L <= latest(k, w)``,
    ``w`` not a holder of ``k`` and no outage in the occupancy window; ``z`` only where ``y``
    of a demand exists. A missing variable is a zero.
    """
    if not isinstance(instance, Instance):
        raise ValidationError("instance must be a ccplan Instance")
    if instance.collective.combining:
        raise ValidationError(
            f"collective {instance.collective.kind!r} is combining; build the model of its "
            "data-movement reduction (AllGather on the reversed topology) instead"
        )
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise ValidationError(f"horizon must be a positive integer, got {horizon!r}")
    if lower_bound is not None and (
        not isinstance(lower_bound, int) or isinstance(lower_bound, bool) or lower_bound < 0
    ):
        raise ValidationError(f"lower_bound must be a non-negative integer, got {lower_bound!r}")

    topo = instance.topology
    coll = instance.collective
    lat = [int(v) for v in instance.latency]
    occ = [int(v) for v in instance.occupancy]
    H = horizon
    plan = _plan(instance, H, dense)
    demands = coll.demands
    holders = coll.holders

    m = pyo.ConcreteModel(name=f"ccplan-milp {instance.describe()} H={H}")
    m.X_INDEX = pyo.Set(initialize=plan.x_keys, dimen=4, ordered=pyo.Set.InsertionOrder,
                        doc="(s, c, link, t): chunk (s, c) may leave on link in slot t")
    y_keys = [
        (chunk[0], chunk[1], v, t)
        for (chunk, v), (lo, hi) in plan.y_ranges.items()
        for t in range(lo, hi + 1)
    ]
    m.Y_INDEX = pyo.Set(initialize=y_keys, dimen=4, ordered=pyo.Set.InsertionOrder,
                        doc="(s, c, v, t): node v may hold chunk (s, c) at the start of slot t")
    m.Z_INDEX = pyo.Set(initialize=plan.z_keys, dimen=4, ordered=pyo.Set.InsertionOrder,
                        doc="(s, c, v, t): demand (chunk, v) may be first received at slot t")
    m.x = pyo.Var(m.X_INDEX, domain=pyo.Binary, doc="x_{s,(u,v),c,t}: chunk sent on link in slot t")
    m.y = pyo.Var(m.Y_INDEX, domain=pyo.Binary, doc="y_{s,v,c,t}: v holds the chunk at the start of t")
    m.z = pyo.Var(m.Z_INDEX, domain=pyo.Binary, doc="z_{s,v,c,t}: v first holds the chunk at slot t")
    m.D = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0, H), doc="makespan in slots")

    x = m.x
    y = m.y
    z = m.z

    def yv(chunk: Chunk, v: int, t: int) -> VarData | None:
        rng = plan.y_ranges.get((chunk, v))
        if rng is None or not rng[0] <= t <= rng[1]:
            return None
        return y[chunk[0], chunk[1], v, t]

    # Index the sends once: by (chunk, receiving node, arrival slot), by (link, start slot).
    inflow: dict[tuple[Chunk, int, int], list[VarData]] = defaultdict(list)
    into: dict[tuple[Chunk, int], list[tuple[int, VarData]]] = defaultdict(list)
    from_holders: dict[Chunk, list[VarData]] = defaultdict(list)
    on_link: dict[tuple[int, int], list[VarData]] = defaultdict(list)
    for s, c, e, t in plan.x_keys:
        var = x[s, c, e, t]
        link = topo.links[e]
        chunk = (s, c)
        inflow[(chunk, link.dst, t + lat[e])].append(var)
        into[(chunk, link.dst)].append((t + lat[e], var))
        if link.src in holders[chunk]:
            from_holders[chunk].append(var)
        on_link[(e, t)].append(var)

    nnz = 0

    # (1): min over s of max is not what the paper optimises (section 1.2 says "the time from
    # the first send until all nodes hold all data"): min D with D >= every D_{s,v,c}.
    m.obj_1 = pyo.Objective(expr=m.D, sense=pyo.minimize, doc=_DOCS["obj_1"])
    m.arrival = pyo.Expression(
        [(chunk[0], chunk[1], v) for chunk, v in demands],
        rule=lambda _m, s, c, v: pyo.quicksum(
            t * z[s, c, v, t] for t in range(*_z_span(plan, (s, c), v)) if t > 0
        ),
        doc="D_{s,v,c} = sum_t t * z_{s,v,c,t}: slot from which v holds the chunk (14)",
    )

    c2 = _Rows("c2_initial_hold", 3)
    c3 = _Rows("c3_initial_empty", 3)
    for chunk in coll.chunk_ids:
        for v in topo.node_ids:
            var = yv(chunk, v, 0)
            if var is None:
                continue  # not created: the sparse build treats it as the constant 0 of (3)
            if v in holders[chunk]:
                c2.add((chunk[0], chunk[1], v), [(1, var)], 1, 1)
            else:
                c3.add((chunk[0], chunk[1], v), [(1, var)], 0, 0)
    nnz += _install(m, c2) + _install(m, c3)

    # (4) only for chunks someone needs; an empty row (no send can leave in time) is implied
    # infeasible by (6)+(8) of that chunk's demands, so it is left out.
    c4 = _Rows("c4_source_sends", 2)
    dem_chunks = sorted({chunk for chunk, _ in demands})
    for chunk in dem_chunks:
        sends = from_holders.get(chunk, [])
        if sends:
            c4.add(chunk, [(1, v) for v in sends], 1, None)
    nnz += _install(m, c4)

    c5 = _Rows("c5_causality", 4)
    for s, c, e, t in plan.x_keys:
        holder = yv((s, c), topo.links[e].src, t)
        if holder is None:  # only possible in a hand-broken plan; keep the row honest
            raise AssertionError(f"x[{s},{c},{e},{t}] has no sender state y")
        c5.add((s, c, e, t), [(1, x[s, c, e, t]), (-1, holder)], None, 0)
    nnz += _install(m, c5)

    c6 = _Rows("c6_buffer", 4)
    c6_cut = _Rows("c6_buffer_cut_through", 4)
    bufferless = instance.bufferless
    for (chunk, v), (lo, hi) in plan.y_ranges.items():
        passing = v in bufferless and v not in holders[chunk]
        rows = c6_cut if passing else c6
        for t in range(max(lo, 1), hi + 1):
            terms: list[Term] = [(1, y[chunk[0], chunk[1], v, t])]
            prev = None if passing else yv(chunk, v, t - 1)
            if prev is not None:
                terms.append((-1, prev))
            terms.extend((-1, var) for var in inflow.get((chunk, v, t), ()))
            rows.add((chunk[0], chunk[1], v, t), terms, 0, 0)
    nnz += _install(m, c6)
    if bufferless:
        nnz += _install(m, c6_cut)

    # (7) as a sliding window over the occupancy l_e: a send started in t' occupies the link
    # in t' .. t'+l_e-1. Rows with no more terms than omega cannot bind and are left out.
    # A send may start as late as H - L_e and occupies l_e slots; that ends before H except
    # for a cut-through hop (L_e = delta_e < l_e), whose last slots are still rows of (7).
    occupied_until = max([H] + [H - lat[e] + occ[e] for e in range(topo.num_links)])
    c7 = _Rows("c7_capacity", 2)
    for e in range(topo.num_links):
        for t in range(0, occupied_until):
            terms = [
                (1, var)
                for q in range(max(0, t - occ[e] + 1), t + 1)
                for var in on_link.get((e, q), ())
            ]
            cap = instance.omega(e, t)
            if len(terms) > cap:
                c7.add((e, t), terms, None, cap)
    nnz += _install(m, c7)

    c8 = _Rows("c8_receive", 3)
    c9 = _Rows("c9_first_receive_once", 3)
    c10 = _Rows("c10_first_receive_held", 4)
    c11 = _Rows("c11_first_receive_new", 4)
    c12 = _Rows("c12_first_receive_mark", 4)
    c13 = _Rows("c13_first_receive_initial", 3)
    c14 = _Rows("c14_makespan", 3)
    for chunk, v in demands:
        s, c = chunk
        lo, hi = plan.y_ranges[(chunk, v)]
        c8.add((s, c, v), [(1, y[s, c, v, t]) for t in range(lo, hi + 1)], 1, None)
        c9.add((s, c, v), [(1, z[s, c, v, t]) for t in range(max(lo, 1), hi + 1)], 1, 1)
        for t in range(max(lo, 1), hi + 1):
            prev = yv(chunk, v, t - 1)
            c10.add((s, c, v, t), [(1, z[s, c, v, t]), (-1, y[s, c, v, t])], None, 0)
            if prev is not None:
                c11.add((s, c, v, t), [(1, z[s, c, v, t]), (1, prev)], None, 1)
            terms = [(1, z[s, c, v, t]), (-1, y[s, c, v, t])]
            if prev is not None:
                terms.append((1, prev))
            c12.add((s, c, v, t), terms, 0, None)
        if lo == 0:
            c13.add((s, c, v), [(1, z[s, c, v, 0]), (-1, y[s, c, v, 0])], 0, 0)
        c14.add((s, c, v), [(1, m.D)] + [(-t, z[s, c, v, t]) for t in range(max(lo, 1), hi + 1)], 0, None)
    for rows in (c8, c9, c10, c11, c12, c13):
        nnz += _install(m, rows)
    # (14) through the named expression arrival[s, c, v] so the LP file reads like the paper;
    # the term count is the same as the rows collected above.
    m.c14_makespan_index = pyo.Set(initialize=list(c14.rows), dimen=3, ordered=pyo.Set.InsertionOrder)
    m.c14_makespan = pyo.Constraint(
        m.c14_makespan_index, rule=lambda _m, s, c, v: m.D - m.arrival[s, c, v] >= 0,
        doc=_DOCS["c14_makespan"],
    )
    nnz += sum(len(t) for t, _, _ in c14.rows.values())

    if instance.single_port:
        send = _Rows("single_port_send", 2)
        recv = _Rows("single_port_receive", 2)
        for node in topo.node_ids:
            for rows, links in ((send, topo.out_links[node]), (recv, topo.in_links[node])):
                for t in range(0, occupied_until):
                    terms = [
                        (1, var)
                        for e in links
                        for q in range(max(0, t - occ[e] + 1), t + 1)
                        for var in on_link.get((e, q), ())
                    ]
                    if len(terms) > 1:
                        rows.add((node, t), terms, None, 1)
        nnz += _install(m, send) + _install(m, recv)

    used_lb: int | None = None
    if cuts:
        if lower_bound is not None and lower_bound > 0:
            used_lb = lower_bound
            m.cut_lower_bound = pyo.Constraint(expr=(lower_bound, m.D, None), doc=_DOCS["cut_lower_bound"])
            nnz += 1
        once = _Rows("cut_receive_once", 3)
        by_send = _Rows("cut_arrival_by_send", 3)
        for chunk, v in demands:
            sends = into.get((chunk, v), [])
            key = (chunk[0], chunk[1], v)
            # an empty "== 1" row would be trivially infeasible; (8) already says so
            if sends:
                once.add(key, [(1, var) for _, var in sends], 1, 1)
                by_send.add(key, [(1, m.D)] + [(-arr, var) for arr, var in sends], 0, None)
        nnz += _install(m, once) + _install(m, by_send)

    meta = ModelIndex(
        instance=instance,
        horizon=H,
        dense=dense,
        cuts=cuts,
        lower_bound=used_lb,
        earliest=dict(plan.earliest),
        latest=dict(plan.latest),
        nonzeros=nnz,
    )
    object.__setattr__(m, _META_ATTR, meta)
    log.debug("built %s: %s", m.name, model_size(m))
    return m


def _z_span(plan: _Plan, chunk: Chunk, v: int) -> tuple[int, int]:
    lo, hi = plan.y_ranges[(chunk, v)]
    return lo, hi + 1


# --------------------------------------------------------------------------- size and I/O
def model_size(model: pyo.ConcreteModel) -> dict[str, int]:
    """Counts of a built model.

    Returns
    -------
    dict
        ``variables`` (all, not fixed), ``binaries``, ``integers`` (general integers),
        ``constraints`` (active rows), ``nonzeros`` (coefficients counted at build time;
        approximate if rows were added afterwards).
    """
    variables = binaries = integers = 0
    for var in model.component_data_objects(pyo.Var, descend_into=True):
        if var.fixed:
            continue
        variables += 1
        if var.is_binary():
            binaries += 1
        elif var.is_integer():
            integers += 1
    constraints = sum(1 for _ in model.component_data_objects(pyo.Constraint, active=True, descend_into=True))
    meta = getattr(model, _META_ATTR, None)
    nonzeros = meta.nonzeros if isinstance(meta, ModelIndex) else -1
    return {
        "variables": variables,
        "binaries": binaries,
        "integers": integers,
        "constraints": constraints,
        "nonzeros": nonzeros,
    }


_WRITE_FORMATS: dict[str, str] = {".lp": "lp", ".mps": "mps"}


def write_model(model: pyo.ConcreteModel, path: str | Path) -> Path:
    """Export the model as CPLEX LP or free MPS, chosen by the file suffix.

    Names are symbolic (``x(0_0_3_2)``, ``c6_buffer(...)``) so rows can be traced back to the
    equations. Returns the path written.

    Raises
    ------
    ValidationError
        For a suffix other than ``.lp`` or ``.mps``.
    """
    target = Path(path)
    fmt = _WRITE_FORMATS.get(target.suffix.lower())
    if fmt is None:
        raise ValidationError(
            f"model file {str(target)!r}: suffix must be one of {', '.join(sorted(_WRITE_FORMATS))}"
        )
    # Pyomo picks the writer from the suffix; passing format="lp" makes it warn that "x.lp"
    # does not match the (internal) cpxlp format name.
    model.write(str(target), io_options={"symbolic_solver_labels": True})
    return target


# --------------------------------------------------------------------------- schedules
def schedule_from_model(model: pyo.ConcreteModel, instance: Instance) -> Schedule:
    """Read the sends (``x > 0.5``) of a solved model as a :class:`Schedule`.

    Variables without a value (never loaded) count as 0.
    """
    meta = model_index(model)
    if meta.instance != instance:
        raise ValidationError("instance differs from the one the model was built for")
    links = instance.topology.links
    sends = []
    for (s, c, e, t), var in model.x.items():
        value = var.value
        if value is not None and value > 0.5:
            link = links[e]
            sends.append(Send(slot=int(t), chunk=(int(s), int(c)), src=link.src, dst=link.dst))
    return Schedule(tuple(sends), method="milp")


def _contributing(instance: Instance, schedule: Schedule) -> list[Send]:
    """The sends that lie on some path to a demand (the others cannot change the makespan
    and may have no variable in the sparse build, whose latest-time rule drops them)."""
    demanders: dict[Chunk, set[int]] = defaultdict(set)
    for chunk, v in instance.collective.demands:
        demanders[chunk].add(v)
    forwarding: dict[Chunk, set[int]] = defaultdict(set)
    kept: list[Send] = []
    # A non-holder receives a chunk once and forwards it only later, so walking the sends
    # backwards decides every send into w after all sends out of w. A cut-through switch may
    # receive a chunk several times, each before it forwards it; its hop into a GPU may land
    # in its own slot, so within a slot the switches' sends are walked last (the verifier's
    # order reversed).
    bufferless = instance.bufferless
    ordered = sorted(schedule.sends, key=lambda s: (s.slot, s.src not in bufferless))
    for send in reversed(ordered):
        if send.dst in demanders[send.chunk] or send.dst in forwarding[send.chunk]:
            kept.append(send)
            forwarding[send.chunk].add(send.src)
    kept.reverse()
    return kept


def hint_from_schedule(
    model: pyo.ConcreteModel, instance: Instance, schedule: Schedule
) -> ComponentMap:
    """A complete assignment of every model variable that encodes ``schedule``.

    Returns a :class:`pyomo.common.collections.ComponentMap` (a mapping ``VarData -> int``
    keyed by identity: Pyomo variables are not hashable).

    The schedule is verified first. Sends that help no demand are dropped (they cannot lower
    the makespan); the others set ``x = 1``; ``y[k, v, t] = 1`` from the arrival slot on,
    ``z`` marks the arrival slot of each demand, ``D`` is the makespan.

    Raises
    ------
    ValidationError
        If the schedule fails verification, its makespan exceeds the horizon, a send has no
        variable in this (sparse) build, or the makespan is below the model's
        ``cut_lower_bound`` (the bound passed to :func:`build_model` was wrong).
    """
    from ccplan.schedule.verify import verify

    meta = model_index(model)
    if meta.instance != instance:
        raise ValidationError("instance differs from the one the model was built for")
    report = verify(instance, schedule)
    if not report.ok:
        raise ValidationError(f"hint schedule fails verification: {report.violations[0]}")
    assert report.makespan_slots is not None
    H = meta.horizon
    if report.makespan_slots > H:
        raise ValidationError(
            f"hint schedule has makespan {report.makespan_slots} > horizon {H} of the model"
        )
    topo = instance.topology
    lat = instance.latency
    coll = instance.collective
    values = ComponentMap((var, 0) for var in model.component_data_objects(pyo.Var, descend_into=True))

    arrival: dict[tuple[Chunk, int], int] = {}
    passing: dict[tuple[Chunk, int], set[int]] = defaultdict(set)  # cut-through switches
    for chunk, nodes in coll.holders.items():
        for v in nodes:
            arrival[(chunk, v)] = 0
    for send in _contributing(instance, schedule):
        e = topo.link_index[(send.src, send.dst)]
        key = (send.chunk[0], send.chunk[1], e, send.slot)
        if key not in model.x:
            raise ValidationError(
                f"hint: {send.describe()} has no variable x{list(key)} in this build "
                f"(horizon {H}, earliest/latest pruning of the sparse model)"
            )
        values[model.x[key]] = 1
        if send.dst in instance.bufferless and send.dst not in coll.holders[send.chunk]:
            passing[(send.chunk, send.dst)].add(send.slot + int(lat[e]))
        else:
            arrival[(send.chunk, send.dst)] = send.slot + int(lat[e])

    for (s, c, v, t), var in model.y.items():
        if ((s, c), v) in passing:
            values[var] = int(t in passing[((s, c), v)])
            continue
        at = arrival.get(((s, c), v))
        values[var] = int(at is not None and at <= t)
    for (s, c, v, t), var in model.z.items():
        values[var] = int(arrival.get(((s, c), v)) == t and t > 0)
    makespan = max((arrival[(chunk, v)] for chunk, v in coll.demands), default=0)
    if meta.lower_bound is not None and makespan < meta.lower_bound:
        raise ValidationError(
            f"hint schedule has makespan {makespan} below the model's lower_bound {meta.lower_bound}"
        )
    values[model.D] = makespan
    return values
