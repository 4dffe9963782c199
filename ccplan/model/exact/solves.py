"""One model and one solve of the exact engine: the size check before a build (:func:`_admit`),
the build, the warm start as a hint, the backend call and what its answer proves about the
makespan; the feasibility question "D <= h ?" and the model shared by a run's questions."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from ccplan.errors import ValidationError
from ccplan.model.run import (
    BUILD_SHARE,
    BackendResult,
    _progress,
    _RefusedError,
    _Run,
    solve_model_with,
)
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)


def _admit(run: _Run, horizon: int) -> None:
    """Refuse (raise :class:`_RefusedError`) a model that would not fit the memory budget or the
    time left, judged by its estimated size before anything is built."""
    from ccplan.model.size import estimate_size

    extra = run.options.extra
    est = estimate_size(run.instance, horizon, dense=bool(extra.get("dense", False)),
                        cuts=bool(extra.get("cuts", True)))
    run.estimate = {"horizon": horizon, "variables": est.variables, "rows": est.rows,
                    "nonzeros": est.nonzeros, "bytes": est.bytes, "seconds": round(est.seconds, 3)}
    if est.bytes > run.memory_budget:
        raise _RefusedError(f"model for H={horizon} too large ({est.describe()}) for the memory budget "
                       f"of {run.memory_budget / 1e9:.1f} GB")
    remaining = run.remaining()
    if remaining is not None and est.seconds > BUILD_SHARE * remaining:
        raise _RefusedError(f"model for H={horizon} ({est.describe()}) needs ~{est.seconds:.0f} s to build, "
                       f"{remaining:.0f} s of the time limit are left")


def _build(run: _Run, horizon: int) -> Any:
    """Build the model for ``horizon`` (after :func:`_admit` accepted it)."""
    from ccplan.model.milp import build_model, model_size

    _admit(run, horizon)
    t0 = time.perf_counter()
    extra = run.options.extra
    model = build_model(
        run.instance,
        horizon,
        dense=bool(extra.get("dense", False)),
        lower_bound=run.global_bound if run.lower_bound_cut else None,
        cuts=bool(extra.get("cuts", True)),
    )
    run.build_seconds += time.perf_counter() - t0
    run.model_size = dict(model_size(model))
    return model


def _dump(run: _Run, horizon: int) -> None:
    """Write the optimisation model over the full horizon H (the heuristic's makespan, as the
    paper proposes for other solvers), whatever the strategy later builds."""
    from ccplan.model.milp import write_model

    assert run.options.dump_model is not None
    write_model(_build(run, horizon), run.options.dump_model)
    run.dumped = True


def _hint(run: _Run, model: Any, horizon: int) -> Mapping[Any, float] | None:
    """The warm start as a complete hint, when it fits the model's horizon."""
    from ccplan.model.milp import hint_from_schedule

    if not run.options.warm_start or run.warm is None or run.warm_makespan is None:
        return None
    if run.warm_makespan > horizon:
        return None
    try:
        hint = hint_from_schedule(model, run.instance, run.warm)
    except (ValidationError, TypeError) as exc:
        # The solve goes on without a hint; the schedule stays the fallback incumbent.
        log.warning("no warm-start hint from %s: %s", run.warm_method, exc)
        run.hint_error = f"{type(exc).__name__}: {exc}"
        return None
    run.hint_method = run.warm_method
    return hint


def _solve(run: _Run, model: Any, horizon: int, hint: Mapping[Any, float] | None, *,
           feasibility: bool, domains: Mapping[Any, tuple[int, int]] | None = None) -> BackendResult:
    from ccplan.model.milp import schedule_from_model

    opts = run.options
    remaining = run.remaining()
    log_path = opts.log_path
    if log_path is not None and run.steps:
        # one log per solve; the first keeps the requested name
        log_path = log_path.with_name(f"{log_path.stem}.step{len(run.steps)}-h{horizon}{log_path.suffix}")
    offset = time.perf_counter() - run.start
    res = solve_model_with(
        run.backend,
        model,
        time_limit=None if remaining is None else max(remaining, 0.05),
        workers=opts.workers,
        seed=opts.seed,
        params_text=run.params_text,
        hint=hint,
        log_path=log_path,
        progress_callback=_progress(run, offset),
        stop_after_first_solution=feasibility,
        **({} if domains is None else {"domains": domains}),
    )
    run.solve_seconds += res.wall_seconds
    run.translate_seconds += res.translate_seconds
    for t, obj, bound in res.trajectory:
        run.trajectory.append((offset + t, obj, max(bound, float(run.global_bound))))
    step: dict[str, Any] = {
        "horizon": horizon,
        "question": "D <= h ?" if feasibility else "min D",
        "status": res.status,
        "objective": res.objective,
        "bound": res.bound,
        "seconds": round(res.wall_seconds, 3),
        "hint_status": res.hint_status,
    }
    if not run.steps:
        run.hint_status = res.hint_status
    if res.has_solution:
        schedule = schedule_from_model(model, run.instance)
        schedule = Schedule.of(schedule.sends, method="milp")
        run.offer(schedule, f"{res.backend}@H={horizon}")
        step["makespan"] = verify(run.instance, schedule).makespan_slots
    run.steps.append(step)
    if res.details.get("interrupted"):
        step["interrupted"] = True
        raise KeyboardInterrupt  # the incumbent is saved; the strategy stops here
    return res


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-6)


def _infeasible_at(run: _Run, h: int) -> None:
    """The solver proved that no schedule has makespan <= h."""
    if run.incumbent_makespan is not None and run.incumbent_makespan <= h:
        log.error("solver claims no schedule with makespan <= %d, but a verified one has %d: "
                  "model and verifier disagree", h, run.incumbent_makespan)
        return
    if not run.lower_bound_cut and (run.solver_infeasible is None or h > run.solver_infeasible):
        run.solver_infeasible = h
    run.raise_bound(h + 1)


def _prove(run: _Run) -> None:
    """``--prove``: make CP-SAT itself refute "D <= m - 1" for the incumbent's makespan m
    (on a model without the ``D >= LB`` row), unless a strategy step already did."""
    m = run.incumbent_makespan
    if m is None or m < 1 or run.solver_infeasible == m - 1:
        return
    if m - 1 < 1:
        return  # a horizon-0 model has no slot: makespan 1 cannot be beaten by a send
    run.lower_bound_cut = False
    _ask(run, m - 1)


def _bound_from(run: _Run, res: BackendResult, h: int) -> None:
    """Turn a solve's bound on the horizon-h model into a global bound."""
    if res.status == "infeasible":
        _infeasible_at(run, h)
    elif res.bound is not None:
        # The model only covers makespans <= h; every other schedule has makespan >= h + 1.
        run.raise_bound(min(_ceil(res.bound), h + 1))


def _ask(run: _Run, h: int) -> BackendResult | None:
    """One feasibility question "D <= h?" (model for horizon h, bound raised on "no");
    None when the time limit leaves no room to ask it."""
    remaining = run.remaining()
    if remaining is not None and remaining <= 0.05:
        run.fallback = run.fallback or f"time limit reached before the question D <= {h}"
        return None
    model, domains = _question_model(run, h)
    outer = run.soft_deadline
    if run.question_cap is not None:
        # the question (not its model's build) gets at most the cap, then auto hands over
        cap_at = time.perf_counter() + run.question_cap
        run.soft_deadline = cap_at if outer is None else min(outer, cap_at)
    try:
        res = _solve(run, model, h, _hint(run, model, h), feasibility=True, domains=domains)
    finally:
        run.soft_deadline = outer
    _bound_from(run, res, h)
    if res.status == "infeasible" and run.later_question_cap is not None:
        run.question_cap = run.later_question_cap  # answered: the questions are not stalled
    return res


QUESTION_SPAN = 4
"""One model answers the questions ``h .. h + max(QUESTION_SPAN, h // 8)`` (at most up to
one below the incumbent); a question beyond builds the next one. Runs ask few questions
(NDv2 2ch 64 KB: 6, DGX2 2ch 1 MB: 5 in 10 minutes), while the model for a poor warm
start's horizon can be far larger than the first question needs (AMD 2ch 1 GB: 2.93 M
nonzeros at horizon 63 against 1.81 M at the bound 49)."""


def _question_model(run: _Run, h: int) -> tuple[Any, Mapping[Any, tuple[int, int]] | None]:
    """The model that answers "D <= h ?", and the CP-SAT domains that make it do so.

    With CP-SAT one model, built and translated once for the largest horizon the strategy
    may ask (``run.question_top``, at most :data:`QUESTION_SPAN` or h/8 above h), answers
    the questions up to its horizon: the variables the model for
    ``h`` would not have are fixed at 0 and ``D`` is bounded to ``[bound, h]`` in the proto
    (:func:`ccplan.model.milp.horizon_restriction`). Other backends, a refused large
    model or ``extra["reuse_model"] = False`` build the model for ``h`` (domains None).
    """
    from pyomo.common.collections import ComponentMap

    from ccplan.model.milp import horizon_restriction

    if run.backend != "cpsat" or not run.options.extra.get("reuse_model", True):
        return _build(run, h), None
    cached = run.question_model
    if cached is None or cached[1] < h or cached[2] != run.lower_bound_cut:
        top = max(h, min(run.question_top or h, h + max(QUESTION_SPAN, h // 8)))
        try:
            model = _build(run, top)
        except _RefusedError:
            if top == h:
                raise
            top = h
            model = _build(run, top)
        run.question_model = cached = (model, top, run.lower_bound_cut)
    model, top, _ = cached
    domains = ComponentMap((var, (0, 0)) for var in horizon_restriction(model, h))
    domains[model.D] = (run.global_bound if run.lower_bound_cut else 0, h)
    return model, domains
