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

Index sets and rows are generated with numpy, one CSR block per equation
(:mod:`ccplan.model.rows`), then installed as that equation's named component; the blocks
stay on the model so the CP-SAT adapter can fill its proto from them without walking every
Pyomo row (``docs/exact.md`` section 2). :func:`horizon_restriction` turns a model for
``H`` into the model for a smaller horizon by fixing variables, so one build answers
several "D <= h ?" questions.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyomo.environ as pyo
from pyomo.common.collections import ComponentMap
from pyomo.core.base.var import VarData
from pyomo.core.expr.numeric_expr import LinearExpression, MonomialTermExpression

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.model.rows import NO_BOUND, ArrayForm, RowBlock, attach, csr_block, paused_gc
from ccplan.model.size import INF as INF  # re-exported: ModelIndex.earliest uses it
from ccplan.model.size import StartState, reach_windows, y_window
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
    start : StartState or None
        The state the model starts from (a window model of the slots ``start.slot .. H``);
        None for the whole model.
    """

    instance: Instance
    horizon: int
    dense: bool
    cuts: bool
    lower_bound: int | None
    earliest: Mapping[tuple[Chunk, int], int]
    latest: Mapping[tuple[Chunk, int], int]
    nonzeros: int
    start: StartState | None = None


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


@dataclass(frozen=True)
class _Plan:
    """Index sets of one build as numpy arrays (before any Pyomo object exists).

    Columns are numbered ``x`` first (chunk, link, slot order), then ``y`` (chunk, node,
    slot), then ``z`` (demanded chunk, node, slot), then ``D``. ``y[k, v, t]`` exists for
    ``ylo[k, v] <= t <= yhi[k, v]`` and is column ``ycol0[k, v] + t``; chunks and nodes are
    positions (``chunks[k]``, ``nodes[v]``).
    """

    chunks: tuple[Chunk, ...]
    nodes: tuple[int, ...]
    src: np.ndarray  # node position of each link's tail
    dst: np.ndarray  # node position of each link's head
    held: np.ndarray  # (K, N) bool: node holds the chunk at slot 0
    xk: np.ndarray
    xe: np.ndarray
    xt: np.ndarray
    ylo: np.ndarray  # (K, N); ylo > yhi: no y
    yhi: np.ndarray
    ycol0: np.ndarray  # (K, N): column of y[k, v, t] is ycol0 + t
    yk: np.ndarray
    yv: np.ndarray
    yt: np.ndarray
    zk: np.ndarray
    zv: np.ndarray
    zt: np.ndarray
    zcol0: np.ndarray  # (K, N): column of z[k, v, t] is zcol0 + t (demands only)
    earliest: dict[tuple[Chunk, int], int]
    latest: dict[tuple[Chunk, int], int]
    origin: int  # first slot of the model (the start state's slot; 0 for the whole model)
    demands: tuple[tuple[Chunk, int], ...]  # demands the model must meet

    @property
    def nx(self) -> int:
        return int(self.xk.size)

    @property
    def ny(self) -> int:
        return int(self.yk.size)

    @property
    def nz(self) -> int:
        return int(self.zk.size)

    @property
    def d_col(self) -> int:
        return self.nx + self.ny + self.nz

    def y_exists(self, k: np.ndarray, v: np.ndarray, t: np.ndarray) -> np.ndarray:
        return (self.ylo[k, v] <= t) & (t <= self.yhi[k, v])

    def y_col(self, k: np.ndarray, v: np.ndarray, t: np.ndarray) -> np.ndarray:
        return self.ycol0[k, v] + t


def _expand(first: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For windows ``first[i] .. first[i] + count[i] - 1``: (window of each slot, slot)."""
    owner = np.repeat(np.arange(count.size), count)
    starts = np.cumsum(count) - count
    slots = first[owner] + np.arange(int(count.sum()), dtype=np.int64) - starts[owner]
    return owner, slots


def _plan(instance: Instance, horizon: int, dense: bool, start: StartState | None = None) -> _Plan:
    """The sparse (or dense) index sets of :func:`build_model`, vectorised over chunks x links
    and chunks x nodes; the windows come from :func:`ccplan.model.size.reach_windows`."""
    topo = instance.topology
    coll = instance.collective
    H = horizon
    origin = 0 if start is None else start.slot
    holders = coll.holders if start is None else start.holders(coll)
    chunks = coll.chunk_ids
    nodes = topo.node_ids
    pos = {v: i for i, v in enumerate(nodes)}
    K, N, E = len(chunks), len(nodes), topo.num_links
    lat = np.asarray(instance.latency, dtype=np.int64)
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    src = np.array([pos[link.src] for link in topo.links], dtype=np.int64)
    dst = np.array([pos[link.dst] for link in topo.links], dtype=np.int64)
    earliest, latest, demanders = reach_windows(instance, H, dense, start)
    ea = np.array([[earliest[(k, v)] for v in nodes] for k in chunks], dtype=np.int64).reshape(K, N)
    la = np.array([[latest[(k, v)] for v in nodes] for k in chunks], dtype=np.int64).reshape(K, N)
    held = np.zeros((K, N), dtype=bool)
    dem = np.zeros((K, N), dtype=bool)
    for k, chunk in enumerate(chunks):
        held[k, [pos[v] for v in holders.get(chunk, ())]] = True
        dem[k, [pos[v] for v in demanders.get(chunk, ())]] = True

    # x: one window per (chunk, link), chunk-major like the keys of the Pyomo set.
    last = np.broadcast_to(H - lat, (K, E)).copy()
    if dense:
        first = np.zeros((K, E), dtype=np.int64)
    else:
        first = ea[:, src]
        last = np.minimum(last, la[:, dst] - lat)
        last[held[:, dst]] = -1  # a node holds a chunk at most once: never send it to a holder
    count = np.maximum(last - first + 1, 0)
    owner, xt = _expand(first.ravel(), count.ravel())
    xk, xe = owner // E, owner % E
    # Start slots closed per link: an (E, H + 1) mask, so an outage or a busy port at a slot
    # beyond the horizon can never close a start of another link (a flat key
    # ``e * (H + 1) + t`` with ``t > H`` would alias link ``e + 1``'s early slots).
    closed = np.zeros((E, H + 1), dtype=bool)

    def close(e: int, q: int) -> None:
        # a start whose occupancy window t .. t+l-1 meets slot q has no variable
        lo, hi = max(0, q - int(occ[e]) + 1), min(q, H)
        if lo <= hi:
            closed[e, lo:hi + 1] = True

    if not dense:
        for e, q in instance.outage_set:
            close(e, q)
    if start is not None and (start.busy_send or start.busy_recv):
        # single_port: a port the sends before the window still use is closed to the window
        for busy, ends in ((start.busy_send, topo.out_links), (start.busy_recv, topo.in_links)):
            for v, q in busy:
                for e in ends[v]:
                    close(e, q)
    if closed.any():
        keep = ~closed[xe, xt]
        xk, xe, xt = xk[keep], xe[keep], xt[keep]

    ylo = np.zeros((K, N), dtype=np.int64)
    yhi = np.full((K, N), -1, dtype=np.int64)
    for k in range(K):
        for v in range(N):
            ylo[k, v], yhi[k, v] = y_window(H, dense, bool(held[k, v]), bool(dem[k, v]),
                                            int(ea[k, v]), int(la[k, v]), origin)
    ny_pair = np.maximum(yhi - ylo + 1, 0)
    nx = xk.size
    ycol0 = nx + (np.cumsum(ny_pair.ravel()) - ny_pair.ravel()).reshape(K, N) - ylo
    owner, yt = _expand(ylo.ravel(), ny_pair.ravel())
    yk, yv = owner // N, owner % N
    nz_pair = np.where(dem, ny_pair, 0)
    zcol0 = nx + yk.size + (np.cumsum(nz_pair.ravel()) - nz_pair.ravel()).reshape(K, N) - ylo
    owner, zt = _expand(ylo.ravel(), nz_pair.ravel())
    zk, zv = owner // N, owner % N
    return _Plan(chunks=chunks, nodes=nodes, src=src, dst=dst, held=held, xk=xk, xe=xe, xt=xt,
                 ylo=ylo, yhi=yhi, ycol0=ycol0, yk=yk, yv=yv, yt=yt, zk=zk, zv=zv, zt=zt,
                 zcol0=zcol0, earliest=earliest, latest=latest, origin=origin,
                 demands=coll.demands if start is None else start.demands(coll))


# --------------------------------------------------------------------------- rows
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
    ``z`` marks the arrival slot of each demand, ``D`` is the makespan. For a window model
    (``build_model(..., start=...)``) ``schedule`` is the whole schedule the start state was
    read from: its sends before the window are the model's constants, its holdings and
    sends in flight at the window's first slot are the model's holders there.

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
    origin = 0 if meta.start is None else meta.start.slot
    if meta.start is None:
        for chunk, nodes in coll.holders.items():
            for v in nodes:
                arrival[(chunk, v)] = 0
    else:
        for held in meta.start.ready:
            arrival[held] = origin  # a holder of the window model (in flight included)
    for send in _contributing(instance, schedule):
        if send.slot < origin:
            continue  # a constant of the window model
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
    if meta.start is not None:
        # the whole schedule's makespan: the open demands' arrivals and the constants' floor
        makespan = max([meta.start.floor, *(arrival[d] for d in meta.start.demands(coll))])
    if meta.lower_bound is not None and makespan < meta.lower_bound:
        raise ValidationError(
            f"hint schedule has makespan {makespan} below the model's lower_bound {meta.lower_bound}"
        )
    values[model.D] = makespan
    return values


# --------------------------------------------------------------------------- smaller horizons
def horizon_restriction(model: pyo.ConcreteModel, horizon: int) -> list[VarData]:
    """The variables to fix at 0 so that ``model`` (built for ``H``) is the model for ``horizon``.

    The sparse windows of a smaller horizon ``h <= H`` are those of ``H`` shifted by
    ``H - h`` at the late end (``latest`` is ``H`` minus a distance) and cut at ``h`` (no
    arrival after ``h``); ``earliest`` does not depend on the horizon. So the model for
    ``h`` is the model for ``H`` with every ``x[k, (u, w), t]`` with
    ``t + L > latest_H(k, w) - (H - h)`` (dense: ``t + L > h``) and every ``z[.., t]`` with
    ``t > h`` fixed at 0, and ``D <= h``: a later ``y`` then only repeats ``y[.., h]`` (no
    send arrives after ``h``). Fixing these (and bounding ``D``) answers "is there a
    schedule with ``D <= h``?" without building the model again; the tests compare the
    free ``x`` with a fresh build for ``h``.

    Raises
    ------
    ValidationError
        ``horizon`` is not in ``1 .. H``.
    """
    meta = model_index(model)
    H = meta.horizon
    if not isinstance(horizon, int) or isinstance(horizon, bool) or not 1 <= horizon <= H:
        raise ValidationError(f"horizon must be an integer in 1 .. {H}, got {horizon!r}")
    if horizon == H:
        return []
    topo = meta.instance.topology
    lat = [int(v) for v in meta.instance.latency]
    heads = [link.dst for link in topo.links]
    shift = H - horizon
    out: list[VarData] = []
    for (s, c, e, t), var in model.x.items():
        last = horizon if meta.dense else meta.latest[((s, c), heads[e])] - shift
        if t + lat[e] > last:
            out.append(var)
    out.extend(var for (_s, _c, _v, t), var in model.z.items() if t > horizon)
    return out
