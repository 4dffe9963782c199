"""The rows of the MILP and the build (:func:`build_model`): each equation's rows as one CSR
block over the planned columns (:mod:`ccplan.model.milp.plan`), installed as that equation's
named Pyomo component, with the blocks kept on the model for the CP-SAT adapter."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyomo.environ as pyo
from pyomo.core.base.var import VarData
from pyomo.core.expr.numeric_expr import LinearExpression, MonomialTermExpression

from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance
from ccplan.model.milp.index import _DOCS, _META_ATTR, Key, ModelIndex, model_size
from ccplan.model.milp.plan import _expand, _Plan, _plan
from ccplan.model.rows import NO_BOUND, ArrayForm, RowBlock, attach, csr_block, paused_gc
from ccplan.model.size import StartState

log = logging.getLogger(__name__)


class _Entries:
    """COO entries ``(row, column, coefficient)`` of one component, added in term order."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.coefs: list[np.ndarray] = []

    def add(self, rows: np.ndarray, cols: np.ndarray, coefs: np.ndarray | int) -> None:
        self.rows.append(np.asarray(rows, dtype=np.int64))
        self.cols.append(np.asarray(cols, dtype=np.int64))
        self.coefs.append(np.broadcast_to(np.asarray(coefs, dtype=np.int64), np.shape(rows)))

    def block(self, name: str, keys: list[Any], lb: np.ndarray | int | None,
              ub: np.ndarray | int | None) -> RowBlock:
        n = len(keys)
        empty = np.zeros(0, dtype=np.int64)
        row = np.concatenate(self.rows) if self.rows else empty
        col = np.concatenate(self.cols) if self.cols else empty
        coef = np.concatenate(self.coefs) if self.coefs else empty
        lo = np.broadcast_to(np.asarray(-NO_BOUND if lb is None else lb, dtype=np.int64), (n,))
        hi = np.broadcast_to(np.asarray(NO_BOUND if ub is None else ub, dtype=np.int64), (n,))
        return csr_block(name, keys, row, col, coef, lo, hi)


def _window_rows(plan: _Plan, owner_of_x: np.ndarray, length: np.ndarray, horizon: int,
                 groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sends occupying a resource in a slot: each send x (start t, occupancy l) counts in
    slots ``t .. t+l-1`` (< H) of its group ``owner_of_x``. Returns (row code
    ``group * H + slot`` of each entry, the entry's x column, count per code)."""
    reps = length[plan.xe]
    xi = np.repeat(np.arange(plan.nx), reps)
    shift = np.arange(int(reps.sum()), dtype=np.int64) - np.repeat(np.cumsum(reps) - reps, reps)
    slot = plan.xt[xi] + shift
    inside = slot < horizon
    xi, slot = xi[inside], slot[inside]
    code = owner_of_x[xi] * horizon + slot
    counts = np.bincount(code, minlength=groups * horizon)
    return code, xi, counts


def _relations(block: RowBlock, columns: list[VarData]) -> list[Any]:
    """One Pyomo relational expression per row of ``block`` (linear, integer data)."""
    cols = block.cols.tolist()
    coefs = block.coefs.tolist()
    ptr = block.indptr.tolist()
    lbs = block.lb.tolist()
    ubs = block.ub.tolist()
    out: list[Any] = []
    for r in range(block.rows):
        args = [columns[c] if a == 1 else MonomialTermExpression((a, columns[c]))
                for c, a in zip(cols[ptr[r]:ptr[r + 1]], coefs[ptr[r]:ptr[r + 1]], strict=True)]
        body = LinearExpression(args)
        lo, hi = lbs[r], ubs[r]
        if lo == hi:
            out.append(body == lo)
        else:
            out.append((None if lo == -NO_BOUND else lo, body, None if hi == NO_BOUND else hi))
    return out


def _install(m: pyo.ConcreteModel, form: ArrayForm, block: RowBlock, dimen: int,
             relations: list[Any] | None = None) -> int:
    """Add ``block`` as one indexed constraint named ``block.name``; returns its nonzeros."""
    index = pyo.Set(initialize=block.keys, dimen=dimen, ordered=pyo.Set.InsertionOrder)
    m.add_component(f"{block.name}_index", index)
    table = dict(zip(block.keys, _relations(block, form.columns) if relations is None else relations,
                     strict=True))
    component = pyo.Constraint(index, rule=lambda _m, *key: table[key], doc=_DOCS[block.name])
    m.add_component(block.name, component)
    form.blocks[block.name] = block
    form.components[block.name] = component
    form.expressions[block.name] = [data.expr for data in component.values()]
    return block.nonzeros


def _keys(plan: _Plan, k: np.ndarray, *rest: np.ndarray) -> list[Key]:
    """Pyomo index tuples ``(s, c, *rest)`` for chunk positions ``k``."""
    s = np.array([chunk[0] for chunk in plan.chunks], dtype=np.int64)[k].tolist() if len(k) else []
    c = np.array([chunk[1] for chunk in plan.chunks], dtype=np.int64)[k].tolist() if len(k) else []
    return list(zip(s, c, *(r.tolist() for r in rest), strict=True))


def build_model(
    instance: Instance,
    horizon: int,
    *,
    dense: bool = False,
    lower_bound: int | None = None,
    cuts: bool = True,
    start: StartState | None = None,
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
    start : StartState, optional
        Build the *window model* of the slots ``a = start.slot .. H`` (sparse only): every
        chunk is free from ``a`` on, the sends before ``a`` are constants. Equations (2)-(14)
        are the same with slot ``a`` in the place of slot 0: (2) holds ``y[k, v, a] = 1``
        for the nodes ``start.ready`` names (a switch holding a copy included; a node whose
        chunk is still in flight holds it in the model but its sends of the chunk start at
        the arrival), the open demands are ``start.demands``, (7) has ``omega`` less
        ``start.used``, ``D >= start.floor``. Variables keep their absolute slots, so
        :func:`schedule_from_model` gives the window's sends; with the sends before ``a`` they
        are a complete schedule (docs/exact.md, "Slot windows").

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
    if start is not None:
        if dense:
            raise ValidationError("a window model (start=...) is built sparse only")
        if instance.bufferless:
            raise ValidationError("a window model (start=...) needs store-and-forward switches")
        if not start.slot < horizon:
            raise ValidationError(f"start.slot {start.slot} must be below the horizon {horizon}")

    with paused_gc():
        return _build(instance, horizon, dense, lower_bound, cuts, start)


def _build(instance: Instance, horizon: int, dense: bool, lower_bound: int | None,
           cuts: bool, start: StartState | None = None) -> pyo.ConcreteModel:
    topo = instance.topology
    lat = np.asarray(instance.latency, dtype=np.int64)
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    H = horizon
    plan = _plan(instance, H, dense, start)
    origin = plan.origin
    nodes = np.array(plan.nodes, dtype=np.int64)
    K, N = plan.held.shape
    nx, ny, d_col = plan.nx, plan.ny, plan.d_col
    xcol = np.arange(nx, dtype=np.int64)

    m = pyo.ConcreteModel(name=f"ccplan-milp {instance.describe()} H={H}")
    m.X_INDEX = pyo.Set(initialize=_keys(plan, plan.xk, plan.xe, plan.xt), dimen=4,
                        ordered=pyo.Set.InsertionOrder,
                        doc="(s, c, link, t): chunk (s, c) may leave on link in slot t")
    m.Y_INDEX = pyo.Set(initialize=_keys(plan, plan.yk, nodes[plan.yv], plan.yt), dimen=4,
                        ordered=pyo.Set.InsertionOrder,
                        doc="(s, c, v, t): node v may hold chunk (s, c) at the start of slot t")
    m.Z_INDEX = pyo.Set(initialize=_keys(plan, plan.zk, nodes[plan.zv], plan.zt), dimen=4,
                        ordered=pyo.Set.InsertionOrder,
                        doc="(s, c, v, t): demand (chunk, v) may be first received at slot t")
    m.x = pyo.Var(m.X_INDEX, domain=pyo.Binary, doc="x_{s,(u,v),c,t}: chunk sent on link in slot t")
    m.y = pyo.Var(m.Y_INDEX, domain=pyo.Binary, doc="y_{s,v,c,t}: v holds the chunk at the start of t")
    m.z = pyo.Var(m.Z_INDEX, domain=pyo.Binary, doc="z_{s,v,c,t}: v first holds the chunk at slot t")
    m.D = pyo.Var(domain=pyo.NonNegativeIntegers, bounds=(0 if start is None else min(start.floor, H), H),
                  doc="makespan in slots")
    form = ArrayForm(columns=[*m.x.values(), *m.y.values(), *m.z.values(), m.D])
    columns = form.columns

    # Demands in the order of coll.demands (sorted), as positions and y windows.
    dk = np.array([plan.chunks.index(chunk) for chunk, _ in plan.demands], dtype=np.int64)
    dv = np.array([plan.nodes.index(v) for _, v in plan.demands], dtype=np.int64)
    dlo, dhi = plan.ylo[dk, dv], plan.yhi[dk, dv]
    demand_row = np.full((K, N), -1, dtype=np.int64)
    demand_row[dk, dv] = np.arange(dk.size)
    dkeys = _keys(plan, dk, nodes[dv])

    # (1): min over s of max is not what the paper optimises (section 1.2 says "the time from
    # the first send until all nodes hold all data"): min D with D >= every D_{s,v,c}.
    m.obj_1 = pyo.Objective(expr=m.D, sense=pyo.minimize, doc=_DOCS["obj_1"])
    z_of_demand = demand_row[plan.zk, plan.zv]
    arrival_terms: list[list[Any]] = [[] for _ in range(dk.size)]
    for d, t, col in zip(z_of_demand.tolist(), plan.zt.tolist(), range(nx + ny, d_col), strict=True):
        if t > 0:
            arrival_terms[d].append(MonomialTermExpression((t, columns[col])))
    arrival_of = dict(zip(dkeys, arrival_terms, strict=True))
    m.arrival = pyo.Expression(
        dkeys,
        rule=lambda _m, s, c, v: LinearExpression(arrival_of[(s, c, v)]),
        doc="D_{s,v,c} = sum_t t * z_{s,v,c,t}: slot from which v holds the chunk (14)",
    )
    nnz = 0

    # (2)/(3): y at slot 0 (a window model: at its first slot), where it exists (the sparse
    # build has none for non-holders: the constant 0 of (3)).
    at0 = np.argwhere((plan.ylo == origin) & (plan.yhi >= origin))  # (k, v) in chunk-major order
    for name, want in (("c2_initial_hold", True), ("c3_initial_empty", False)):
        pick = at0[plan.held[at0[:, 0], at0[:, 1]] == want]
        k, v = pick[:, 0], pick[:, 1]
        rows = _Entries()
        rows.add(np.arange(k.size), plan.y_col(k, v, np.full_like(k, origin)), 1)
        nnz += _install(m, form, rows.block(name, _keys(plan, k, nodes[v]), int(want), int(want)), 3)

    # (4) only for chunks someone needs; an empty row (no send can leave in time) is implied
    # infeasible by (6)+(8) of that chunk's demands, so it is left out.
    from_holder = plan.held[plan.xk, plan.src[plan.xe]]
    c4_chunks = np.unique(plan.xk[from_holder & np.isin(plan.xk, dk)])
    c4_row = np.full(K, -1, dtype=np.int64)
    c4_row[c4_chunks] = np.arange(c4_chunks.size)
    pick = from_holder & (c4_row[plan.xk] >= 0)
    rows = _Entries()
    rows.add(c4_row[plan.xk[pick]], xcol[pick], 1)
    nnz += _install(m, form, rows.block("c4_source_sends", _keys(plan, c4_chunks), 1, None), 2)

    holder_state = plan.y_exists(plan.xk, plan.src[plan.xe], plan.xt)
    if not holder_state.all():  # only possible in a hand-broken plan; keep the row honest
        j = int(np.flatnonzero(~holder_state)[0])
        raise AssertionError(f"x{list(_keys(plan, plan.xk[j:j + 1], plan.xe[j:j + 1], plan.xt[j:j + 1])[0])}"
                             " has no sender state y")
    rows = _Entries()
    rows.add(xcol, xcol, 1)
    rows.add(xcol, plan.y_col(plan.xk, plan.src[plan.xe], plan.xt), -1)
    nnz += _install(m, form, rows.block("c5_causality", list(m.X_INDEX), None, 0), 4)

    # (6) for every y with t >= 1: y_t - y_{t-1} - (sends arriving at t) = 0. At a cut-through
    # switch that does not hold the chunk, the variant c6_buffer_cut_through drops y_{t-1}: the
    # switch holds a chunk only in a slot in which it arrives (docs/model.md).
    ycol = np.arange(nx, nx + ny, dtype=np.int64)
    has_row = plan.yt >= origin + 1
    bufferless = np.isin(nodes, np.fromiter(instance.bufferless, dtype=np.int64))
    passing = bufferless[plan.yv] & ~plan.held[plan.yk, plan.yv]
    arrive = plan.xt + lat[plan.xe]
    head = plan.dst[plan.xe]
    lands_any = plan.y_exists(plan.xk, head, arrive)
    target = np.where(lands_any, plan.y_col(plan.xk, head, arrive) - nx, 0)
    for name, sel, carry in (
        ("c6_buffer", has_row & ~passing, True),
        ("c6_buffer_cut_through", has_row & passing, False),
    ):
        if not carry and not instance.bufferless:
            continue
        row_of_y = np.full(ny, -1, dtype=np.int64)
        row_of_y[sel] = np.arange(int(sel.sum()))
        rows = _Entries()
        rows.add(row_of_y[sel], ycol[sel], 1)
        if carry:
            prev = sel & (plan.yt - 1 >= plan.ylo[plan.yk, plan.yv])
            rows.add(row_of_y[prev], ycol[prev] - 1, -1)
        lands = lands_any & (row_of_y[target] >= 0)
        rows.add(row_of_y[target[lands]], xcol[lands], -1)
        keys6 = _keys(plan, plan.yk[sel], nodes[plan.yv[sel]], plan.yt[sel])
        nnz += _install(m, form, rows.block(name, keys6, 0, 0), 4)

    # (7) as a sliding window over the occupancy l_e: a send started in t' occupies the link
    # in t' .. t'+l_e-1. Rows with no more terms than omega cannot bind and are left out.
    # A send may start as late as H - L_e and occupies l_e slots; that ends before H except
    # for a cut-through hop (L_e = delta_e < l_e), whose last slots are still rows of (7).
    E = topo.num_links
    span = int(max(H, int(np.max(H - lat + occ)) if E else H))
    code, xi, counts = _window_rows(plan, plan.xe, occ, span, E)
    cap = np.repeat(np.asarray(instance.link_capacity, dtype=np.int64), span)
    for e, q in instance.outage_set:
        if q < span:
            cap[e * span + q] = 0
    if start is not None:
        # what the sends before the window still occupy (occupancy l > 1)
        for (e, q), n in start.used.items():
            if q < span:
                cap[e * span + q] = max(0, cap[e * span + q] - n)
    kept = np.flatnonzero(counts > cap)
    row_of_code = np.full(E * span, -1, dtype=np.int64)
    row_of_code[kept] = np.arange(kept.size)
    pick = row_of_code[code] >= 0
    rows = _Entries()
    rows.add(row_of_code[code[pick]], xi[pick], 1)
    keys7 = list(zip((kept // span).tolist(), (kept % span).tolist(), strict=True))
    nnz += _install(m, form, rows.block("c7_capacity", keys7, None, cap[kept]), 2)

    # (8)-(14) per demand (chunk, v): y window lo .. hi, z on the same window.
    dy = np.arange(dk.size)
    rows = _Entries()
    owner, t = _expand(dlo, np.maximum(dhi - dlo + 1, 0))
    rows.add(owner, plan.y_col(dk[owner], dv[owner], t), 1)
    nnz += _install(m, form, rows.block("c8_receive", dkeys, 1, None), 3)
    zcol = np.arange(nx + ny, d_col, dtype=np.int64)
    zpos = plan.zt >= 1
    zd = z_of_demand[zpos]
    rows = _Entries()
    rows.add(zd, zcol[zpos], 1)
    nnz += _install(m, form, rows.block("c9_first_receive_once", dkeys, 1, 1), 3)
    zk, zv, zt, zc = plan.zk[zpos], plan.zv[zpos], plan.zt[zpos], zcol[zpos]
    zkeys = _keys(plan, zk, nodes[zv], zt)
    y_t = plan.y_col(zk, zv, zt)
    has_prev = zt - 1 >= plan.ylo[zk, zv]
    r = np.arange(zk.size)
    rows = _Entries()
    rows.add(r, zc, 1)
    rows.add(r, y_t, -1)
    nnz += _install(m, form, rows.block("c10_first_receive_held", zkeys, None, 0), 4)
    rows = _Entries()
    rows.add(np.arange(int(has_prev.sum())), zc[has_prev], 1)
    rows.add(np.arange(int(has_prev.sum())), y_t[has_prev] - 1, 1)
    keys11 = [key for key, ok in zip(zkeys, has_prev.tolist(), strict=True) if ok]
    nnz += _install(m, form, rows.block("c11_first_receive_new", keys11, None, 1), 4)
    rows = _Entries()
    rows.add(r, zc, 1)
    rows.add(r, y_t, -1)
    rows.add(r[has_prev], y_t[has_prev] - 1, 1)
    nnz += _install(m, form, rows.block("c12_first_receive_mark", zkeys, 0, None), 4)
    first0 = np.flatnonzero(dlo == 0)
    rows = _Entries()
    rows.add(np.arange(first0.size), plan.zcol0[dk[first0], dv[first0]], 1)
    rows.add(np.arange(first0.size), plan.y_col(dk[first0], dv[first0], np.zeros_like(first0)), -1)
    keys13 = [dkeys[i] for i in first0.tolist()]
    nnz += _install(m, form, rows.block("c13_first_receive_initial", keys13, 0, 0), 3)
    # (14) through the named expression arrival[s, c, v] so the LP file reads like the paper.
    rows = _Entries()
    rows.add(dy, np.full(dk.size, d_col), 1)
    rows.add(zd, zcol[zpos], -plan.zt[zpos])
    c14_relations = [m.D - m.arrival[key] >= 0 for key in dkeys]
    nnz += _install(m, form, rows.block("c14_makespan", dkeys, 0, None), 3, c14_relations)

    if instance.single_port:
        for name, end in (("single_port_send", plan.src), ("single_port_receive", plan.dst)):
            code, xi, counts = _window_rows(plan, end[plan.xe], occ, span, N)
            kept = np.flatnonzero(counts > 1)
            row_of_code = np.full(N * span, -1, dtype=np.int64)
            row_of_code[kept] = np.arange(kept.size)
            pick = row_of_code[code] >= 0
            rows = _Entries()
            rows.add(row_of_code[code[pick]], xi[pick], 1)
            keys_sp = list(zip(nodes[kept // span].tolist(), (kept % span).tolist(), strict=True))
            nnz += _install(m, form, rows.block(name, keys_sp, None, 1), 2)

    used_lb: int | None = None
    if cuts:
        if lower_bound is not None and lower_bound > 0:
            used_lb = lower_bound
            m.cut_lower_bound = pyo.Constraint(expr=(lower_bound, m.D, None), doc=_DOCS["cut_lower_bound"])
            nnz += 1
        # every send into a demanded (chunk, v); an empty "== 1" row would be trivially
        # infeasible, and (8) already says so
        into = demand_row[plan.xk, head]
        pick = into >= 0
        have = np.unique(into[pick])
        row_of_demand = np.full(dk.size, -1, dtype=np.int64)
        row_of_demand[have] = np.arange(have.size)
        keys_cut = [dkeys[i] for i in have.tolist()]
        rows = _Entries()
        rows.add(row_of_demand[into[pick]], xcol[pick], 1)
        nnz += _install(m, form, rows.block("cut_receive_once", keys_cut, 1, 1), 3)
        rows = _Entries()
        rows.add(np.arange(have.size), np.full(have.size, d_col), 1)
        rows.add(row_of_demand[into[pick]], xcol[pick], -arrive[pick])
        nnz += _install(m, form, rows.block("cut_arrival_by_send", keys_cut, 0, None), 3)
    attach(m, form)

    meta = ModelIndex(
        instance=instance,
        horizon=H,
        dense=dense,
        cuts=cuts,
        lower_bound=used_lb,
        earliest=dict(plan.earliest),
        latest=dict(plan.latest),
        nonzeros=nnz,
        start=start,
    )
    object.__setattr__(m, _META_ATTR, meta)
    log.debug("built %s: %s", m.name, model_size(m))
    return m
