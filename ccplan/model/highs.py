"""HiGHS through Pyomo's own interface: the cross-check backend of the exact engine.

The same Pyomo model that the CP-SAT adapter translates is handed to Pyomo's
``pyomo.contrib.solver`` HiGHS interface (``highspy`` underneath), so an optimum that CP-SAT
and HiGHS agree on is a statement about the model, not about one translation.

Pitfall P1 of ``../shared/reference/pyomo_cpsat.md``: the ortools wheel bundles
``libhighs.so.1`` 1.12.0 and highspy ships its own copy with the same SONAME, so only
``highspy==1.12.0`` can share a process with ``ortools==9.15.6755``; with another release
whichever loads second fails with an undefined symbol, which we report as unavailable.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from ccplan.errors import SolverUnavailableError, ValidationError

log = logging.getLogger(__name__)

HIGHS_STATUSES: tuple[str, ...] = ("optimal", "feasible", "infeasible", "unknown")

_UNAVAILABLE = "HiGHS is not available: pip install highspy==1.12.0"


@dataclass(frozen=True)
class HighsOutcome:
    """Result of :func:`solve_with_highs`.

    Parameters
    ----------
    status : {"optimal", "feasible", "infeasible", "unknown"}
        ``optimal`` only when the solver proved it (bound meets the incumbent).
    objective : float or None
        Incumbent objective (the makespan ``D``), None without a solution.
    bound : float or None
        HiGHS's best bound on the objective, None when it reports none.
    wall_seconds : float
        Wall-clock time of the solve call (translation included).
    """

    status: str
    objective: float | None
    bound: float | None
    wall_seconds: float

    def __post_init__(self) -> None:
        if self.status not in HIGHS_STATUSES:
            raise ValidationError(f"HighsOutcome.status must be one of {HIGHS_STATUSES}, got {self.status!r}")
        if self.status in ("optimal", "feasible") and self.objective is None:
            raise ValidationError(f"HighsOutcome.objective is required with status {self.status!r}")
        if not (self.wall_seconds >= 0 and math.isfinite(self.wall_seconds)):
            raise ValidationError(f"HighsOutcome.wall_seconds must be >= 0, got {self.wall_seconds!r}")


def highs_available() -> bool:
    """Whether highspy imports in this process (see pitfall P1 in the module docstring)."""
    try:
        import highspy  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


def _solver() -> Any:
    if not highs_available():
        raise SolverUnavailableError(_UNAVAILABLE)
    import pyomo.environ  # noqa: F401  (registers the contrib solvers)
    from pyomo.contrib.solver.common.factory import SolverFactory

    solver = SolverFactory("highs")
    if not solver.available():
        raise SolverUnavailableError(_UNAVAILABLE)
    return solver


def solve_with_highs(
    model: Any, time_limit: float | None = None, mip_rel_gap: float = 0.0
) -> HighsOutcome:
    """Solve a Pyomo model with HiGHS and load the incumbent's values into it.

    Parameters
    ----------
    model : pyomo ConcreteModel
        Typically from :func:`ccplan.model.milp.build_model` (any linear model works).
    time_limit : float, optional
        Wall-clock seconds for HiGHS.
    mip_rel_gap : float
        HiGHS ``mip_rel_gap``; 0 asks for a proof of optimality.

    Returns
    -------
    HighsOutcome
        Values are loaded into the model's variables whenever a feasible solution exists.

    Raises
    ------
    SolverUnavailableError
        highspy cannot be imported (or is the wrong release next to ortools).
    ValidationError
        Negative time limit or gap.
    """
    if time_limit is not None and not time_limit > 0:
        raise ValidationError(f"time_limit must be positive, got {time_limit!r}")
    if not (mip_rel_gap >= 0 and math.isfinite(mip_rel_gap)):
        raise ValidationError(f"mip_rel_gap must be >= 0, got {mip_rel_gap!r}")
    solver = _solver()
    from pyomo.contrib.solver.common.results import SolutionStatus, TerminationCondition

    start = time.perf_counter()
    results = solver.solve(
        model,
        load_solutions=False,
        raise_exception_on_nonoptimal_result=False,
        time_limit=time_limit,
        rel_gap=mip_rel_gap,
    )
    term = results.termination_condition
    has_solution = results.solution_status in (SolutionStatus.feasible, SolutionStatus.optimal)
    if has_solution:
        results.solution_loader.load_vars()
    wall = time.perf_counter() - start

    objective = None if results.incumbent_objective is None else float(results.incumbent_objective)
    bound = None if results.objective_bound is None else float(results.objective_bound)
    if bound is not None and not math.isfinite(bound):
        bound = None
    if term in (TerminationCondition.provenInfeasible, TerminationCondition.infeasibleOrUnbounded):
        # the makespan model is bounded (0 <= D <= H, binaries), so "or unbounded" is infeasible
        status = "infeasible"
    elif has_solution and term == TerminationCondition.convergenceCriteriaSatisfied and (
        mip_rel_gap == 0.0 or (bound is not None and objective is not None and bound >= objective - 1e-6)
    ):
        status = "optimal"
    elif has_solution:
        status = "feasible"
    else:
        status = "unknown"
    if status == "optimal" and bound is None:
        bound = objective
    log.info("HiGHS: %s objective=%s bound=%s in %.2fs", status, objective, bound, wall)
    return HighsOutcome(status=status, objective=objective, bound=bound, wall_seconds=wall)
