"""Pyomo -> OR-tools CP-SAT adapter (the only module of ccplan that imports CP-SAT).

A model built by :func:`ccplan.model.milp.build_model` carries its rows as numpy arrays
(:mod:`ccplan.model.rows`); each component that still holds exactly those rows is copied
from the arrays into the ``CpModelProto``. Every other row is translated one by one: walked
once with :class:`pyomo.repn.linear.LinearRepnVisitor` and written straight into the proto
(``docs/exact.md`` section 2); no file is involved. CP-SAT only accepts integer data, so

- every variable must be binary or integer with finite integral bounds;
- every coefficient must be integral (checked with a tolerance of ``1e-9 * max(1, |c|)``);
- an equality must have an integral right-hand side; a ``<=`` row is tightened to
  ``floor(ub)`` and a ``>=`` row to ``ceil(lb)``, which is exact because the row's activity
  is an integer;
- fixed variables are folded into the row constant; a row left with no variable is checked
  and, when violated, turned into an empty row CP-SAT reports as infeasible.

Error messages name the constraint and the variable; names are built only on error because
Pyomo rebuilds a component name on every access.

The paper's MILP (constraints (2)-(14) of ``000_*.txt``) only has binaries ``x, y, z`` and
integers ``D``, so the whole model passes these checks.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np

from ccplan.errors import CCPlanError, SolverUnavailableError, ValidationError
from ccplan.model.rows import RowBlock, array_form, paused_gc

if TYPE_CHECKING:
    from pyomo.core.base.constraint import ConstraintData
    from pyomo.core.base.var import VarData

    from ccplan.limits import Deadline

log = logging.getLogger(__name__)

ProgressCallback = Callable[[float, float | None, float | None, float | None], None]
"""``(elapsed seconds, incumbent, bound, relative gap)``; incumbent/gap are None before the
first solution. Called from CP-SAT's threads: keep it short (the CLI prints one line)."""

HINT_STATUSES: tuple[str, ...] = ("none", "accepted", "rejected", "unknown")

_STATUS_NAMES: dict[str, str] = {
    "OPTIMAL": "optimal",
    "FEASIBLE": "feasible",
    "INFEASIBLE": "infeasible",
    "UNKNOWN": "unknown",
}

# First message CP-SAT writes about the user's hint (before presolve); later messages of the
# same shape refer to the presolved model and must not override it.
_HINT_MESSAGES: tuple[tuple[str, str], ...] = (
    ("The solution hint is complete and is feasible", "accepted"),
    ("The solution hint is complete, but it is infeasible", "rejected"),
    ("The solution hint is incomplete", "unknown"),
)

_TOL = 1e-9
_INT_MAX = 2**62 - 1  # cp_model.INT_MAX, repeated so the check does not import ortools


def _cp_model() -> Any:
    """Import ``ortools.sat.python.cp_model`` or say which package is missing."""
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise SolverUnavailableError(
            "CP-SAT is not available: install the 'ortools' package (pip install ortools==9.15.6755)"
            f" [{exc}]"
        ) from None
    return cp_model


def validate_params_text(text: str) -> str:
    """Check CP-SAT ``SatParameters`` in protobuf text format; return it normalised.

    Raises
    ------
    ValidationError
        Unknown field or bad value; the message names the field as protobuf reports it.
    """
    if not text.strip():
        return ""
    _cp_model()
    from google.protobuf import text_format
    from ortools.sat import sat_parameters_pb2

    params = sat_parameters_pb2.SatParameters()
    try:
        text_format.Merge(text, params)  # Merge: a repeated scalar field keeps its last value
    except text_format.ParseError as exc:
        raise ValidationError(f"params_text: invalid CP-SAT parameter: {exc}") from None
    return str(text_format.MessageToString(params, as_one_line=True))


@dataclass(frozen=True)
class CpSatOptions:
    """How to run CP-SAT.

    Parameters
    ----------
    time_limit : float, optional
        Wall-clock limit in seconds (``max_time_in_seconds``); None = no limit.
    workers : int
        ``num_workers``; 2 on the 2-core development machines.
    seed : int
        ``random_seed``.
    relative_gap : float
        ``relative_gap_limit``; 0 keeps the proof exact. With a positive gap a stop at the
        gap is reported as ``feasible``, never as ``optimal``.
    params_text : str
        Extra ``SatParameters`` in protobuf text format (``"linearization_level: 2"``);
        validated, an unknown field raises :class:`ValidationError` naming it. Applied last,
        so it overrides the fields above.
    log_path : Path, optional
        The full search log is written (streamed) there.
    progress_callback : callable, optional
        See :data:`ProgressCallback`; called on every incumbent and every bound improvement.
    """

    time_limit: float | None = None
    workers: int = 2
    seed: int = 0
    relative_gap: float = 0.0
    params_text: str = ""
    log_path: Path | None = None
    progress_callback: ProgressCallback | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.time_limit is not None and not (self.time_limit > 0 and math.isfinite(self.time_limit)):
            raise ValidationError(f"time_limit must be a positive number of seconds, got {self.time_limit!r}")
        if not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < 1:
            raise ValidationError(f"workers must be a positive integer, got {self.workers!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValidationError(f"seed must be an integer, got {self.seed!r}")
        if not (0.0 <= self.relative_gap < 1.0):
            raise ValidationError(f"relative_gap must be in [0, 1), got {self.relative_gap!r}")
        if not isinstance(self.params_text, str):
            raise ValidationError(f"params_text must be a string, got {type(self.params_text).__name__}")
        object.__setattr__(self, "params_text", validate_params_text(self.params_text))
        if self.log_path is not None:
            object.__setattr__(self, "log_path", Path(self.log_path))


@dataclass(frozen=True)
class CpSatOutcome:
    """What one CP-SAT run returned.

    Attributes
    ----------
    status : str
        ``optimal`` (proved), ``feasible``, ``infeasible`` (proved) or ``unknown``.
    objective : float or None
        Objective of the incumbent in Pyomo units (sense and constant included).
    best_bound : float or None
        CP-SAT's proven bound in Pyomo units (a lower bound when minimising).
    wall_seconds : float
        Time inside ``CpSolver.solve``.
    trajectory : tuple of (seconds, objective, bound)
        One entry per incumbent, from the solution callback.
    bound_trajectory : tuple of (seconds, bound)
        One entry per bound improvement.
    hint_status : str
        One of :data:`HINT_STATUSES`, read from the log.
    log_lines : tuple of str
        The search log.
    params_text : str
        Every ``SatParameters`` field used, in text format.
    translate_seconds : float
        Pyomo -> proto translation time.
    num_variables, num_constraints : int
        Size of the CP-SAT model.
    interrupted : bool
        Ctrl-C (SIGINT) stopped the search; the other fields describe the search up to that
        point (an incumbent, if any, is loaded as usual). The caller decides what to do next
        (the ``milp`` engine stops and returns its best verified schedule).
    """

    status: str
    objective: float | None
    best_bound: float | None
    wall_seconds: float
    trajectory: tuple[tuple[float, float, float], ...] = ()
    bound_trajectory: tuple[tuple[float, float], ...] = ()
    hint_status: str = "none"
    log_lines: tuple[str, ...] = field(default=(), repr=False)
    params_text: str = ""
    translate_seconds: float = 0.0
    num_variables: int = 0
    num_constraints: int = 0
    interrupted: bool = False

    def __post_init__(self) -> None:
        if self.status not in _STATUS_NAMES.values():
            raise ValueError(f"status must be one of {tuple(_STATUS_NAMES.values())}, got {self.status!r}")
        if self.hint_status not in HINT_STATUSES:
            raise ValueError(f"hint_status must be one of {HINT_STATUSES}, got {self.hint_status!r}")

    @property
    def has_solution(self) -> bool:
        """An incumbent exists (its values were written back to the Pyomo variables)."""
        return self.status in ("optimal", "feasible")


# --------------------------------------------------------------------------- translation
def _integral(value: float, what: Callable[[], str]) -> int:
    """``value`` as an int if it is integral up to the tolerance, else a named error."""
    as_int = round(value)
    if abs(value - as_int) <= _TOL * max(1.0, abs(value)):
        return as_int
    raise ValidationError(f"{what()}: value {value!r} is not integral; CP-SAT needs integer data")


def _describe(where: Callable[[], str], what: str, var: Any) -> str:
    prefix = where()
    return f"{prefix + ': ' if prefix else ''}{what} {var.name}"


@dataclass
class CompiledModel:
    """A Pyomo model translated to a ``CpModel``, reusable for several solves.

    Attributes
    ----------
    cp_model : cp_model.CpModel
    variables : list of VarData
        Pyomo variable of each CP-SAT variable index.
    index : dict
        ``id(VarData) -> CP-SAT index``.
    has_objective : bool
    seconds : float
        Translation time.
    num_constant_rows : int
        Rows left without a free variable (checked, not sent to CP-SAT unless violated).
    array_rows : int
        Rows filled from the model's arrays (:mod:`ccplan.model.rows`) rather than walked.
    restricted : dict
        CP-SAT index -> the domain it had before :func:`restrict_domains` changed it.
    """

    cp_model: Any
    variables: list[VarData]
    index: dict[int, int]
    has_objective: bool
    seconds: float
    num_constant_rows: int = 0
    array_rows: int = 0
    restricted: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def num_constraints(self) -> int:
        """Rows in the CP-SAT model."""
        return len(self.cp_model.proto.constraints)


class _Translator:
    """Walks a Pyomo model once and fills a ``CpModelProto`` (see the module docstring)."""

    def __init__(self, cp_model: Any) -> None:
        from pyomo.repn.linear import LinearRepnVisitor

        self.cpm = cp_model.CpModel()
        self.proto = self.cpm.proto
        self.visitor = LinearRepnVisitor({})
        self.index: dict[int, int] = {}
        self.variables: list[VarData] = []
        self.constant_rows = 0

    def var(self, var_id: int, where: Callable[[], str]) -> int:
        found = self.index.get(var_id)
        if found is not None:
            return found
        var = self.visitor.var_map[var_id]
        lo_i, hi_i = self._domain(var, where)
        new = len(self.variables)
        self.proto.variables.add().domain.extend([lo_i, hi_i])
        self.index[var_id] = new
        self.variables.append(var)
        return new

    def columns(self, columns: list[VarData]) -> None:
        """Register every column of an array form, in column order, so a column's position
        is its CP-SAT index. A fixed column gets the one-value domain of its value (the rows
        filled from arrays keep it as a term; CP-SAT's presolve removes it)."""
        if self.variables:
            raise AssertionError("array columns must be registered before any other variable")
        domains: list[int] = []
        integral_domain: dict[int, bool] = {}  # id(domain set) -> integer-valued
        for pos, var in enumerate(columns):
            if var.fixed:
                value = _integral(float(var.value), partial(_describe, str, "fixed value of", var))
                domains.extend((value, value))
            else:
                # Binary/integer bounds need no rounding; only the domain kind is checked,
                # once per domain object (all x, y, z share Binary).
                dom = var.domain
                ok = integral_domain.get(id(dom))
                if ok is None:
                    ok = integral_domain[id(dom)] = not var.is_continuous()
                lo, hi = var.bounds
                if ok and type(lo) is int and type(hi) is int:
                    domains.extend((lo, hi))
                else:
                    domains.extend(self._domain(var, lambda: "array form"))
            self.index[id(var)] = pos
        self.variables = list(columns)
        add = self.proto.variables.add
        for pos in range(len(columns)):
            add().domain.extend(domains[2 * pos:2 * pos + 2])

    def block(self, block: RowBlock) -> None:
        """Fill the rows of one :class:`~ccplan.model.rows.RowBlock` (integer data by
        construction); columns are CP-SAT indices after :meth:`columns`."""
        cols = block.cols.tolist()
        coefs = block.coefs.tolist()
        ptr = block.indptr.tolist()
        lbs = np.maximum(block.lb, -_INT_MAX).tolist()
        ubs = np.minimum(block.ub, _INT_MAX).tolist()
        add = self.proto.constraints.add
        for r in range(block.rows):
            a, b = ptr[r], ptr[r + 1]
            if a == b:  # no term: the row is 0 in [lb, ub] or a contradiction
                self.constant_rows += 1
                if not lbs[r] <= 0 <= ubs[r]:
                    log.warning("row %s of %s has no variable and is violated", block.keys[r], block.name)
                    add().linear.domain.extend([1, 1])
                continue
            row = add().linear
            row.vars.extend(cols[a:b])
            row.coeffs.extend(coefs[a:b])
            row.domain.extend((lbs[r], ubs[r]))

    def _domain(self, var: VarData, where: Callable[[], str]) -> tuple[int, int]:
        if var.is_continuous():
            raise ValidationError(
                f"{where()}: variable {var.name} is continuous; CP-SAT needs binary or integer variables"
            )
        lo, hi = var.bounds
        if lo is None or hi is None:
            raise ValidationError(
                f"{where()}: variable {var.name} needs finite bounds for CP-SAT, got [{lo}, {hi}]"
            )
        lo_i = _integral(math.ceil(lo - _TOL * max(1.0, abs(lo))), lambda: f"lower bound of {var.name}")
        hi_i = _integral(math.floor(hi + _TOL * max(1.0, abs(hi))), lambda: f"upper bound of {var.name}")
        return lo_i, hi_i

    def terms(self, linear: Mapping[int, float], where: Callable[[], str]) -> tuple[list[int], list[int]]:
        idx: list[int] = []
        coefs: list[int] = []
        for var_id, coef in linear.items():
            if coef == 0:
                continue
            if coef != int(coef):
                var = self.visitor.var_map[var_id]
                coef = _integral(coef, partial(_describe, where, "coefficient of", var))
            idx.append(self.var(var_id, where))
            coefs.append(int(coef))
        return idx, coefs

    def constraint(self, con: ConstraintData) -> None:
        def where() -> str:
            return f"constraint {con.name}"

        lb, body, ub = con.to_bounded_expression(evaluate_bounds=True)
        repn = self.visitor.walk_expression(body)
        if repn.nonlinear is not None:
            raise ValidationError(f"{where()} is nonlinear; CP-SAT needs linear rows")
        mult = float(repn.multiplier)  # 1 after a full walk; kept general on purpose
        const = float(repn.constant) * mult
        linear = repn.linear if mult == 1 else {k: c * mult for k, c in repn.linear.items()}
        idx, coefs = self.terms(linear, where)
        equality = lb is not None and ub is not None and lb == ub
        if not idx:
            ok = (lb is None or const >= lb - _TOL * max(1.0, abs(lb))) and (
                ub is None or const <= ub + _TOL * max(1.0, abs(ub))
            )
            self.constant_rows += 1
            if not ok:
                log.warning("%s has no free variable and is violated (%s not in [%s, %s])",
                            where(), const, lb, ub)
                # An empty row whose domain excludes 0: CP-SAT then proves infeasibility itself.
                self.proto.constraints.add().linear.domain.extend([1, 1])
            return
        if equality:
            assert lb is not None
            rhs = _integral(float(lb) - const, lambda: f"{where()}: right-hand side (constant folded)")
            lo, hi = rhs, rhs
        else:
            lo = -_INT_MAX if lb is None else math.ceil(float(lb) - const - _TOL * max(1.0, abs(lb)))
            hi = _INT_MAX if ub is None else math.floor(float(ub) - const + _TOL * max(1.0, abs(ub)))
        row = self.proto.constraints.add().linear
        row.vars.extend(idx)
        row.coeffs.extend(coefs)
        row.domain.extend([lo, hi])

    def objective(self, obj: Any) -> None:
        from pyomo.core.base.objective import maximize

        def where() -> str:
            return f"objective {obj.name}"

        repn = self.visitor.walk_expression(obj.expr)
        if repn.nonlinear is not None:
            raise ValidationError(f"{where()} is nonlinear; CP-SAT needs a linear objective")
        mult = float(repn.multiplier)
        linear = repn.linear if mult == 1 else {k: c * mult for k, c in repn.linear.items()}
        idx, coefs = self.terms(linear, where)
        offset = float(repn.constant) * mult
        sign = -1 if obj.sense == maximize else 1
        # CP-SAT minimises; a maximisation is stored negated with scaling_factor -1, as
        # CpModel.maximize does, so objective_value comes back in Pyomo units.
        self.proto.objective.vars.extend(idx)
        self.proto.objective.coeffs.extend([sign * c for c in coefs])
        self.proto.objective.offset = sign * offset
        self.proto.objective.scaling_factor = float(sign)


def compile_model(model: Any, *, use_arrays: bool = True, deadline: Deadline | None = None) -> CompiledModel:
    """Translate a Pyomo model (linear, integer data, at most one active objective).

    A model built by :func:`ccplan.model.milp.build_model` carries its rows as arrays
    (:mod:`ccplan.model.rows`); every component still holding exactly those rows is filled
    from the arrays, the others (and every model without arrays, or ``use_arrays=False``)
    row by row through Pyomo's linear walker. Both give the same CP-SAT rows, except that
    a fixed variable of the arrays stays a variable with a one-value domain where the walker
    folds it into the row's constant.

    ``deadline`` (a :class:`ccplan.limits.Deadline`) is checked between the rows walked, so a
    time limit also bounds the translation of a model too big for it.

    Raises
    ------
    ValidationError
        Continuous or unbounded variable, non-integral coefficient or equality rhs,
        nonlinear row, more than one active objective.
    SolverUnavailableError
        ortools is not installed.
    OutOfTimeError
        ``deadline`` passed during the translation.
    """
    from pyomo.core.base.constraint import Constraint
    from pyomo.core.base.objective import Objective

    cp_model = _cp_model()
    start = time.perf_counter()
    with paused_gc():
        tr = _Translator(cp_model)
        form = array_form(model) if use_arrays else None
        if form is not None:
            tr.columns(form.columns)
        array_rows = 0
        for component in model.component_objects(Constraint, active=True, descend_into=True):
            block = None if form is None else form.block_for(component)
            if block is not None:
                tr.block(block)
                array_rows += block.rows
                continue
            for con in component.values():
                if con.active:
                    if deadline is not None:
                        deadline.check()
                    tr.constraint(con)
    objectives = list(model.component_data_objects(Objective, active=True, descend_into=True))
    if len(objectives) > 1:
        raise ValidationError(
            f"model has {len(objectives)} active objectives "
            f"({objectives[0].name}, {objectives[1].name}, ...); CP-SAT takes one"
        )
    if objectives:
        tr.objective(objectives[0])
    seconds = time.perf_counter() - start
    log.debug("translated to CP-SAT: %d vars, %d rows (%d from arrays) in %.2fs", len(tr.variables),
              len(tr.proto.constraints), array_rows, seconds)
    return CompiledModel(tr.cpm, tr.variables, tr.index, bool(objectives), seconds, tr.constant_rows,
                         array_rows)


def restrict_domains(compiled: CompiledModel, domains: Mapping[Any, tuple[int, int]]) -> None:
    """Give the listed variables new CP-SAT domains, every other one its compiled domain.

    This is how one translated model answers several questions (e.g. "D <= h ?" for
    several h on a model built once for the largest h): the Pyomo model is not touched
    and nothing is translated again. ``domains`` maps ``VarData -> (lo, hi)``; an empty
    mapping undoes the last restriction.

    Raises
    ------
    ValidationError
        A variable has no CP-SAT counterpart (fixed and folded at translation) or an empty
        domain is asked for.
    """
    variables = compiled.cp_model.proto.variables
    for pos, (lo, hi) in compiled.restricted.items():
        dom = variables[pos].domain
        dom.clear()
        dom.extend([lo, hi])
    compiled.restricted.clear()
    for var, (lo, hi) in domains.items():
        at = compiled.index.get(id(var))
        if at is None:
            raise ValidationError(f"restrict_domains: variable {var.name} is not in the translated model")
        if lo > hi:
            raise ValidationError(f"restrict_domains: empty domain [{lo}, {hi}] for {var.name}")
        dom = variables[at].domain
        if at not in compiled.restricted:
            compiled.restricted[at] = (int(dom[0]), int(dom[len(dom) - 1]))
        dom.clear()
        dom.extend([int(lo), int(hi)])


def set_objective_limits(
    compiled: CompiledModel, lower: float | None = None, upper: float | None = None
) -> None:
    """Restrict the objective value (Pyomo units) to ``[lower, upper]`` through the objective domain.

    This is how a cut bound ``D >= LB`` or a horizon ``D <= h`` is imposed without touching
    the Pyomo model. Pass both None to remove the restriction.
    """
    obj = compiled.cp_model.proto.objective
    if not compiled.has_objective:
        raise ValidationError("set_objective_limits: the model has no objective")
    obj.domain.clear()
    if lower is None and upper is None:
        return
    scale = obj.scaling_factor or 1.0
    off = obj.offset
    # value = scale * (sum + off)  =>  sum = value / scale - off (scale is +1 or -1)
    lo_v, hi_v = (lower, upper) if scale > 0 else (upper, lower)
    lo = -_INT_MAX if lo_v is None else math.ceil(lo_v / scale - off - _TOL)
    hi = _INT_MAX if hi_v is None else math.floor(hi_v / scale - off + _TOL)
    obj.domain.extend([lo, hi])


def _set_hint(compiled: CompiledModel, hint: Mapping[Any, float]) -> int:
    proto = compiled.cp_model.proto
    proto.clear_solution_hint()
    idx: list[int] = []
    vals: list[int] = []
    for var, value in hint.items():
        pos = compiled.index.get(id(var))
        if pos is None or value is None:
            continue  # fixed or unused variable: nothing for CP-SAT to follow
        idx.append(pos)
        vals.append(_integral(float(value), partial(_describe, str, "hint value of", var)))
    proto.solution_hint.vars.extend(idx)
    proto.solution_hint.values.extend(vals)
    return len(idx)


# --------------------------------------------------------------------------- solve
class _LogSink:
    """Collects log lines and streams them to a file (thread-safe: workers log concurrently)."""

    def __init__(self, path: Path | None) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.file: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file = path.open("w")

    def __call__(self, message: str) -> None:
        # One callback may carry a multi-line block (model statistics, tables).
        parts = message.split("\n")
        with self.lock:
            self.lines.extend(parts)
            if self.file is not None:
                self.file.write("\n".join(parts) + "\n")
                self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


def hint_status_from_log(lines: list[str] | tuple[str, ...], hinted: bool) -> str:
    """Classify the hint from the first hint message of a CP-SAT log."""
    if not hinted:
        return "none"
    for line in lines:
        for needle, status in _HINT_MESSAGES:
            if needle in line:
                return status
    return "unknown"


def _gap(incumbent: float | None, bound: float | None) -> float | None:
    if incumbent is None or bound is None:
        return None
    return abs(incumbent - bound) / max(1.0, abs(incumbent))


def solve_compiled(
    compiled: CompiledModel,
    options: CpSatOptions | None = None,
    hint: Mapping[Any, float] | None = None,
    *,
    stop_after_first_solution: bool = False,
    load_values: bool = True,
) -> CpSatOutcome:
    """Solve a :class:`CompiledModel`; see :func:`solve_with_cpsat`."""
    cp_model = _cp_model()
    opts = options or CpSatOptions()
    hinted = 0
    if hint is not None:
        hinted = _set_hint(compiled, hint)
    else:
        compiled.cp_model.proto.clear_solution_hint()

    solver = cp_model.CpSolver()
    p = solver.parameters
    p.num_workers = opts.workers
    p.random_seed = opts.seed
    p.relative_gap_limit = opts.relative_gap
    p.log_search_progress = True
    p.log_to_stdout = False
    if opts.time_limit is not None:
        p.max_time_in_seconds = float(opts.time_limit)
    if stop_after_first_solution:
        p.stop_after_first_solution = True
    if opts.params_text and not p.merge_text_format(opts.params_text):
        raise ValidationError(f"params_text: CP-SAT rejected {opts.params_text!r}")
    params_text = " ".join(str(p).split("\n")).strip()

    sink = _LogSink(opts.log_path)
    solver.log_callback = sink
    trajectory: list[tuple[float, float, float]] = []
    bounds: list[tuple[float, float]] = []
    state: dict[str, float | None] = {"incumbent": None}
    progress = opts.progress_callback
    start = time.perf_counter()

    def on_bound(bound: float) -> None:
        elapsed = time.perf_counter() - start
        bounds.append((elapsed, float(bound)))
        if progress is not None:
            inc = state["incumbent"]
            progress(elapsed, inc, float(bound), _gap(inc, bound))

    class _Recorder(cp_model.CpSolverSolutionCallback):  # type: ignore[misc,name-defined]
        # Only the objective and bound are read here: reading every value of a 100k-variable
        # model per incumbent would dominate the run.
        def on_solution_callback(self) -> None:
            elapsed = time.perf_counter() - start
            obj = float(self.objective_value) if compiled.has_objective else 0.0
            bound = float(self.best_objective_bound) if compiled.has_objective else 0.0
            trajectory.append((elapsed, obj, bound))
            state["incumbent"] = obj
            if progress is not None:
                progress(elapsed, obj, bound, _gap(obj, bound))

    if compiled.has_objective:
        solver.best_bound_callback = on_bound
    try:
        status_code, interrupted = _solve_interruptibly(solver, compiled.cp_model, _Recorder())
    finally:
        sink.close()
    wall = time.perf_counter() - start
    name = solver.status_name(status_code)
    if name == "MODEL_INVALID":
        raise CCPlanError(f"CP-SAT rejected the translated model: {compiled.cp_model.validate()}")
    status = _STATUS_NAMES[name]
    objective: float | None = None
    best_bound: float | None = None
    if status in ("optimal", "feasible"):
        if compiled.has_objective:
            objective = float(solver.objective_value)
            best_bound = float(solver.best_objective_bound)
            # With a relative gap limit CP-SAT says OPTIMAL at the gap; only a closed gap is a proof.
            if status == "optimal" and abs(objective - best_bound) > 1e-6 * max(1.0, abs(objective)):
                status = "feasible"
        if load_values:
            values = list(solver.response_proto.solution)
            for var, value in zip(compiled.variables, values, strict=True):
                var.set_value(value, skip_validation=True)
    elif status == "unknown" and compiled.has_objective:
        bound = float(solver.best_objective_bound)
        best_bound = bound if math.isfinite(bound) else None
    lines = tuple(sink.lines)
    return CpSatOutcome(
        status=status,
        objective=objective,
        best_bound=best_bound,
        wall_seconds=wall,
        trajectory=tuple(trajectory),
        bound_trajectory=tuple(bounds),
        hint_status=hint_status_from_log(lines, hinted > 0),
        log_lines=lines,
        params_text=params_text,
        translate_seconds=compiled.seconds,
        num_variables=len(compiled.variables),
        num_constraints=compiled.num_constraints,
        interrupted=interrupted,
    )


def _solve_interruptibly(solver: Any, cp_model: Any, callback: Any) -> tuple[Any, bool]:
    """Run ``solver.solve`` in a helper thread so that Ctrl-C reaches Python.

    A Python signal handler only runs in the main thread between bytecodes, never while the
    main thread sits inside ``CpSolver.solve``; CP-SAT's own SIGINT handler
    (``catch_sigint_signal``) would stop the search but hide the interrupt from the caller.
    So the main thread waits in short ``join`` calls, and a ``KeyboardInterrupt`` there
    calls ``stop_search``: CP-SAT returns its incumbent within its next check of the stop
    flag (well under a second once the search runs; presolve checks less often).

    Returns
    -------
    (status code, interrupted)
    """
    solver.parameters.catch_sigint_signal = False
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["status"] = solver.solve(cp_model, callback)
        except BaseException as exc:  # handed to the calling thread below
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=run, name="ccplan-cpsat", daemon=True)
    worker.start()
    interrupted = False
    # Event.wait, not Thread.join: a KeyboardInterrupt inside join(timeout) can leave the
    # thread marked as finished while it still runs (CPython 3.11, bpo-45274's fix).
    while not done.is_set():
        try:
            done.wait(0.1)
        except KeyboardInterrupt:
            interrupted = True
            solver.stop_search()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["status"], interrupted


def solve_with_cpsat(
    model: Any,
    options: CpSatOptions | None = None,
    hint: Mapping[Any, float] | None = None,
) -> CpSatOutcome:
    """Translate a Pyomo model to CP-SAT, solve it and write the incumbent back.

    Parameters
    ----------
    model : pyomo ConcreteModel
        Linear, integer data, binary/integer variables with finite bounds, at most one
        active objective (none = feasibility problem).
    options : CpSatOptions, optional
    hint : mapping VarData -> value, optional
        A (preferably complete) starting assignment; fixed or unused variables are skipped.
        Whether CP-SAT accepted it is read from its log (``hint_status``).

    Returns
    -------
    CpSatOutcome
        On ``optimal``/``feasible`` the incumbent's values are set on the Pyomo variables.
    """
    compiled = compile_model(model)
    return solve_compiled(compiled, options, hint)
