"""The exact engine ``milp``: the paper's MILP (constraints (2)-(14)) solved by CP-SAT.

Pipeline (DESIGN.md: the heuristic hands the exact engine its horizon and an incumbent):

1. an upper bound: the makespan of a heuristic schedule (method
   ``extra["warm_start_method"]``, default ``"heuristic"``), or, when no heuristic is
   registered, of :func:`greedy_schedule` below; ``options.horizon`` overrides it;
2. a lower bound: ``ccplan.bounds.lower_bound_slots`` (latency, ingress and cut bounds);
3. the Pyomo model (``ccplan.model.milp.build_model``), optionally written out
   (``options.dump_model``);
4. a size check (``ccplan.model.size.estimate_size``) before every build: a model above the
   memory budget or the time left is not built, and the best verified schedule comes back
   as ``feasible`` with ``details["fallback"]``;
   then a search strategy (:data:`STRATEGIES`): ``direct`` minimises D over the horizon in
   one solve; ``ascending`` asks "is there a schedule with D <= h?" for h = lower bound,
   +1, ... on a model built for horizon h, so the first "yes" is optimal and every "no"
   raises the bound; ``descending`` asks the same questions downwards from the warm start,
   so the first "no" proves the incumbent optimal; ``auto`` (default) picks ``direct`` for
   small models and ``ascending`` for large ones (with a time limit: ascending for half of
   it, then large-neighbourhood search, :mod:`ccplan.model.lns`, when the gap is open);
   ``lns`` runs that search for the whole run, and a refused whole model falls back to it;
   ``extra["prove"]`` adds CP-SAT's own refutation of "D <= m - 1" for the final makespan m;
5. the backend (:data:`BACKENDS`): CP-SAT (default) or HiGHS (cross-checks);
6. when the solver returns no incumbent but the heuristic schedule exists, that schedule is
   returned with status ``feasible`` (CP-SAT can time out in presolve even with a complete
   hint; ``docs/exact.md``).

The CP-SAT defaults (:data:`DEFAULT_CPSAT_PARAMS`) were measured with
``benchmarks/exact.py``; ``docs/exact.md`` lists the measurements.

Layout: :mod:`~ccplan.model.exact.engine` (the entry point :func:`solve_milp`),
:mod:`~ccplan.model.exact.warmstart` (steps 1 and 6: the warm start, :func:`greedy_schedule`),
:mod:`~ccplan.model.exact.solves` (one size check, build and backend call; the questions),
:mod:`~ccplan.model.exact.strategies` (step 4's strategies, the refusal fallbacks and the
flow-over-time bound). This package re-exports their public names; the backends and the run
state are in :mod:`ccplan.model.run`.
"""

from __future__ import annotations

from ccplan.model.exact.engine import solve_milp
from ccplan.model.exact.solves import QUESTION_SPAN
from ccplan.model.exact.strategies import (
    AUTO_ASCENDING_SHARE,
    AUTO_DIRECT_NONZEROS,
    AUTO_FIRST_QUESTION_SHARE,
    AUTO_QUESTION_SHARE,
    DEFAULT_STRATEGY,
    HEURISTIC_INSTEAD_FACTOR,
    RELAX_CAP,
    RELAX_DESTINATIONS,
    RELAX_MAX_ARCS,
    RELAX_SHARE,
    STRATEGIES,
    Strategy,
)
from ccplan.model.exact.warmstart import (
    WARM_START_CAP,
    WARM_START_COMPANIONS,
    WARM_START_FIRST_ROUND,
    WARM_START_PATIENCE,
    WARM_START_SHARE,
    WARM_START_TINY_NONZEROS,
    greedy_schedule,
)
from ccplan.model.run import (
    BACKENDS,
    BUILD_SHARE,
    DEFAULT_CPSAT_PARAMS,
    BackendResult,
    solve_model_with,
)

__all__ = [
    "AUTO_ASCENDING_SHARE",
    "AUTO_DIRECT_NONZEROS",
    "AUTO_FIRST_QUESTION_SHARE",
    "AUTO_QUESTION_SHARE",
    "BACKENDS",
    "BUILD_SHARE",
    "DEFAULT_CPSAT_PARAMS",
    "DEFAULT_STRATEGY",
    "HEURISTIC_INSTEAD_FACTOR",
    "QUESTION_SPAN",
    "RELAX_CAP",
    "RELAX_DESTINATIONS",
    "RELAX_MAX_ARCS",
    "RELAX_SHARE",
    "STRATEGIES",
    "WARM_START_CAP",
    "WARM_START_COMPANIONS",
    "WARM_START_FIRST_ROUND",
    "WARM_START_PATIENCE",
    "WARM_START_SHARE",
    "WARM_START_TINY_NONZEROS",
    "BackendResult",
    "Strategy",
    "greedy_schedule",
    "solve_milp",
    "solve_model_with",
]
