"""What a built model is: the names of its components and the equations they quote
(:data:`PAPER_COMPONENTS` ...), the metadata :func:`build_model` attaches to it
(:class:`ModelIndex`), and what can be read from it without solving: its size
(:func:`model_size`), its LP/MPS file (:func:`write_model`) and the variables that restrict
it to a smaller horizon (:func:`horizon_restriction`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyomo.environ as pyo
from pyomo.core.base.var import VarData

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.model.size import StartState

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
