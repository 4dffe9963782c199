"""What the exact engine's strategies share: the solver backends (CP-SAT through the adapter
:mod:`ccplan.model.cpsat`, HiGHS through Pyomo), one run's state (:class:`_Run`: incumbent,
bounds, trajectory, time) and the progress callback. The exact engine (:mod:`.exact`) and its
large-neighbourhood search (:mod:`.lns`) both build on it; neither imports the other's
internals."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccplan.contract import SolveOptions
from ccplan.errors import SolverUnavailableError, ValidationError
from ccplan.instances.instance import Instance
from ccplan.limits import DEFAULT_MEMORY_BUDGET, note_incumbent
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)

DEFAULT_CPSAT_PARAMS = "linearization_level: 2 max_presolve_iterations: 1 cp_model_probing_level: 0"
"""CP-SAT parameters the ``milp`` engine uses unless ``extra["cpsat_params"]`` adds or
overrides fields (measured on 2 cores, see ``docs/exact.md``)."""


BUILD_SHARE = 0.5
"""A model is only built when its expected build + translation time is at most this share
of the time left: CP-SAT needs the rest to answer anything."""


class _RefusedError(Exception):
    """A model was not built (too large for the memory budget or the time left); the
    message is the one-line reason reported in ``details["fallback"]``."""


@dataclass(frozen=True)
class BackendResult:
    """One solve of a Pyomo model by a named backend, in backend-neutral form.

    Attributes
    ----------
    backend : str
    status : str
        ``optimal | feasible | infeasible | unknown``.
    objective, bound : float or None
        Incumbent objective and proven bound (Pyomo units).
    wall_seconds : float
    trajectory : tuple of (seconds, objective, bound)
    hint_status : str
        ``none | accepted | rejected | unknown`` (HiGHS: always ``none``).
    params_text : str
    """

    backend: str
    status: str
    objective: float | None
    bound: float | None
    wall_seconds: float
    trajectory: tuple[tuple[float, float, float], ...] = ()
    hint_status: str = "none"
    params_text: str = ""
    translate_seconds: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def has_solution(self) -> bool:
        """The Pyomo variables hold an incumbent."""
        return self.status in ("optimal", "feasible")


Backend = Callable[..., BackendResult]


def _cpsat_backend(
    model: Any,
    *,
    time_limit: float | None = None,
    workers: int = 2,
    seed: int = 0,
    params_text: str = "",
    hint: Mapping[Any, float] | None = None,
    log_path: Path | None = None,
    progress_callback: Any = None,
    stop_after_first_solution: bool = False,
    domains: Mapping[Any, tuple[int, int]] | None = None,
) -> BackendResult:
    from ccplan.model.cpsat import CpSatOptions, compile_model, restrict_domains, solve_compiled

    # With ``domains`` the model answers one of several questions: it is translated once
    # (kept on the model) and each question only sets variable domains in the proto.
    compiled = getattr(model, _COMPILED_ATTR, None) if domains is not None else None
    translate_seconds = 0.0
    if compiled is None:
        compiled = compile_model(model)
        translate_seconds = compiled.seconds
        if domains is not None:
            object.__setattr__(model, _COMPILED_ATTR, compiled)
    if domains is not None:
        restrict_domains(compiled, domains)
    if time_limit is not None:
        # The translation is part of the caller's budget: CP-SAT gets what is left of it.
        time_limit = max(time_limit - translate_seconds, 0.05)
    opts = CpSatOptions(
        time_limit=time_limit,
        workers=workers,
        seed=seed,
        params_text=params_text,
        log_path=log_path,
        progress_callback=progress_callback,
    )
    out = solve_compiled(compiled, opts, hint, stop_after_first_solution=stop_after_first_solution)
    return BackendResult(
        backend="cpsat",
        status=out.status,
        objective=out.objective,
        bound=out.best_bound,
        wall_seconds=out.wall_seconds,
        trajectory=out.trajectory,
        hint_status=out.hint_status,
        params_text=out.params_text,
        translate_seconds=translate_seconds,
        details={"cp_variables": out.num_variables, "cp_constraints": out.num_constraints,
                 "bound_trajectory": out.bound_trajectory, "interrupted": out.interrupted},
    )


def _highs_backend(
    model: Any,
    *,
    time_limit: float | None = None,
    hint: Mapping[Any, float] | None = None,
    log_path: Path | None = None,
    **_: Any,
) -> BackendResult:
    try:
        from ccplan.model.highs import solve_with_highs
    except ImportError as exc:
        raise SolverUnavailableError(
            f"HiGHS is not available: install the 'highspy' package (pip install highspy==1.12.0) [{exc}]"
        ) from None
    if hint is not None:
        log.info("the HiGHS backend ignores the warm-start hint")
    if log_path is not None:
        log.info("the HiGHS backend writes no search log to %s", log_path)
    out = solve_with_highs(model, time_limit=time_limit)
    status = str(out.status)
    if status not in ("optimal", "feasible", "infeasible", "unknown"):
        status = "unknown"
    return BackendResult(
        backend="highs",
        status=status,
        objective=None if out.objective is None else float(out.objective),
        bound=None if out.bound is None else float(out.bound),
        wall_seconds=float(out.wall_seconds),
    )


_COMPILED_ATTR = "_ccplan_cpsat_compiled"


BACKENDS: dict[str, Backend] = {"cpsat": _cpsat_backend, "highs": _highs_backend}
"""Pyomo backends by name; ``extra["solver"]`` picks one for the ``milp`` engine."""


def solve_model_with(backend_name: str, model: Any, **kwargs: Any) -> BackendResult:
    """Solve a Pyomo model with the backend ``backend_name`` (see :data:`BACKENDS`).

    Keyword arguments: ``time_limit, workers, seed, params_text, hint, log_path,
    progress_callback, stop_after_first_solution`` (backends ignore what they cannot use).

    Raises
    ------
    ValidationError
        Unknown backend name.
    SolverUnavailableError
        The backend's package is not installed (one line naming the package).
    """
    try:
        backend = BACKENDS[backend_name]
    except KeyError:
        raise ValidationError(
            f"solver {backend_name!r} is unknown (choose from {', '.join(sorted(BACKENDS))})"
        ) from None
    return backend(model, **kwargs)


@dataclass
class _Run:
    """State shared by the strategies of one ``milp`` run."""

    instance: Instance
    options: SolveOptions
    backend: str
    params_text: str
    lower_bound: int
    start: float
    global_bound: int
    warm: Schedule | None = None
    warm_method: str = "none"
    warm_makespan: int | None = None
    incumbent: Schedule | None = None
    incumbent_makespan: int | None = None
    incumbent_source: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    trajectory: list[tuple[float, float, float]] = field(default_factory=list)
    build_seconds: float = 0.0
    translate_seconds: float = 0.0
    solve_seconds: float = 0.0
    model_size: dict[str, Any] = field(default_factory=dict)
    hint_method: str = "none"
    hint_status: str = "none"
    hint_error: str | None = None
    dumped: bool = False
    memory_budget: float = DEFAULT_MEMORY_BUDGET
    estimate: dict[str, Any] = field(default_factory=dict)
    fallback: str | None = None
    interrupted: bool = False
    lower_bound_cut: bool = True
    auto_choice: str | None = None
    warm_facts: dict[str, Any] = field(default_factory=dict)  # first_round_seconds, companion
    solver_infeasible: int | None = None  # largest h a model without the D >= LB row refuted
    question_top: int | None = None  # largest h the strategy may ask (one model answers all)
    question_model: tuple[Any, int, bool] | None = None  # (model, its horizon, D >= LB row)
    soft_deadline: float | None = None  # perf_counter() by which a strategy hands over (auto)
    question_cap: float | None = None  # seconds one "D <= h ?" question may take (auto)
    later_question_cap: float | None = None  # the cap once a question was answered "no" (auto)
    lns_report: Any = None  # ccplan.model.lns.LnsReport of the last LNS run
    flow: dict[str, Any] | None = None  # ccplan.bounds.flow_lp.FlowBound.as_dict() when it ran

    def remaining(self) -> float | None:
        now = time.perf_counter()
        left = None if self.options.time_limit is None else self.options.time_limit - (now - self.start)
        if self.soft_deadline is not None:
            soft = self.soft_deadline - now
            left = soft if left is None else min(left, soft)
        return left

    def offer(self, schedule: Schedule, source: str) -> bool:
        """Keep ``schedule`` if it verifies and beats the incumbent."""
        report = verify(self.instance, schedule)
        if not report.ok or report.makespan_slots is None:
            log.error("%s produced a schedule that fails verification: %s", source, report.violations[0])
            return False
        if self.incumbent_makespan is None or report.makespan_slots < self.incumbent_makespan:
            self.incumbent = schedule
            self.incumbent_makespan = report.makespan_slots
            self.incumbent_source = source
            # for a Ctrl-C that finds the main thread inside a solver (ccplan.limits)
            note_incumbent(self.instance, schedule, source)
            self.trajectory.append(
                (time.perf_counter() - self.start, float(report.makespan_slots), float(self.global_bound))
            )
            return True
        return False

    def raise_bound(self, bound: int) -> None:
        if bound > self.global_bound:
            self.global_bound = bound
            inc = math.nan if self.incumbent_makespan is None else float(self.incumbent_makespan)
            self.trajectory.append((time.perf_counter() - self.start, inc, float(bound)))


def _progress(run: _Run, offset: float) -> Any:
    """Adapt the caller's progress callbacks to CP-SAT's (elapsed, incumbent, bound, gap).

    A feasibility question ("D <= h ?") has no objective of its own, so the run's incumbent
    and proven bound are reported alongside what the current solve says.
    """
    four = run.options.extra.get("progress_callback")
    three = run.options.extra.get("on_progress")  # the CLI's (elapsed, incumbent, bound) printer
    if four is None and three is None:
        return None

    def call(elapsed: float, incumbent: float | None, bound: float | None, gap: float | None) -> None:
        known = [v for v in (incumbent, run.incumbent_makespan) if v is not None]
        incumbent = float(min(known)) if known else None
        bound = float(max(bound if bound is not None else -math.inf, run.global_bound))
        if incumbent is not None and incumbent > 0:
            gap = (incumbent - bound) / incumbent
        if four is not None:
            four(offset + elapsed, incumbent, bound, gap)
        if three is not None:
            three(offset + elapsed, incumbent, bound)

    return call
