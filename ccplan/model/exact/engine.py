"""The exact engine's entry point, ``milp`` (:func:`solve_milp`): the options it accepts, the
analytic lower bound, the pipeline of the :mod:`ccplan.model.exact` package docstring from the
warm start to the strategy, and the outcome with its details."""

from __future__ import annotations

import csv
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ccplan.contract import Outcome, SolveOptions, register
from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance
from ccplan.limits import memory_budget
from ccplan.model.exact.solves import _dump, _prove
from ccplan.model.exact.strategies import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    _flow_bound,
    _heuristic_instead,
    _lns_instead,
)
from ccplan.model.exact.warmstart import _warm_start
from ccplan.model.run import BACKENDS, DEFAULT_CPSAT_PARAMS, _progress, _RefusedError, _Run
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)


def _lower_bound(instance: Instance) -> int:
    from ccplan.bounds import lower_bound_slots

    return int(lower_bound_slots(instance))


def _write_progress(path: Path, trajectory: list[tuple[float, float, float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["seconds", "objective", "bound"])
        for t, obj, bound in sorted(trajectory):
            writer.writerow([f"{t:.4f}", "" if math.isnan(obj) else f"{obj:g}", f"{bound:g}"])


def _check_extra(extra: Mapping[str, Any]) -> tuple[str, str, str]:
    backend = str(extra.get("solver", "cpsat"))
    if backend not in BACKENDS:
        raise ValidationError(
            f"extra['solver'] {backend!r} is unknown (choose from {', '.join(sorted(BACKENDS))})"
        )
    strategy = str(extra.get("strategy", DEFAULT_STRATEGY))
    if strategy not in STRATEGIES:
        raise ValidationError(
            f"extra['strategy'] {strategy!r} is unknown (choose from {', '.join(sorted(STRATEGIES))})"
        )
    if extra.get("flow_bound", "auto") not in ("auto", True, False):
        raise ValidationError(
            f"extra['flow_bound'] must be 'auto', True or False, got {extra['flow_bound']!r}"
        )
    params = DEFAULT_CPSAT_PARAMS
    user = extra.get("cpsat_params")
    if user:
        if not isinstance(user, str):
            raise ValidationError("extra['cpsat_params'] must be a string in SatParameters text format")
        params = f"{params} {user}"  # a repeated scalar field: the later value wins
    if backend == "cpsat":
        from ccplan.model.cpsat import validate_params_text

        params = validate_params_text(params)
    return backend, strategy, params


@register("milp")
def solve_milp(instance: Instance, options: SolveOptions) -> Outcome:
    """The exact engine: MILP (2)-(14) over a heuristic horizon, solved by CP-SAT.

    Parameters
    ----------
    instance : Instance
    options : SolveOptions
        ``horizon`` (default: the warm-start makespan), ``warm_start`` (complete hint from
        the heuristic schedule), ``time_limit`` (whole run), ``workers``, ``seed``,
        ``log_path`` (CP-SAT log; later solves of a strategy add ``.stepK-hH`` to the name),
        ``progress_path`` (CSV ``seconds,objective,bound``), ``dump_model`` (.lp/.mps of the
        model over the full horizon H). ``extra``: ``solver`` (``cpsat``|``highs``), ``strategy``
        (:data:`STRATEGIES`), ``cpsat_params`` (text format, added to
        :data:`DEFAULT_CPSAT_PARAMS`), ``warm_start_method`` (registered engine, default
        ``heuristic``), ``warm_start_schedule`` (a :class:`Schedule` to start from instead;
        verified first), ``heuristic_time_limit``,
        ``dense``, ``cuts``, ``lower_bound_cut`` (pass the bound to the model as ``D >= LB``,
        default True, False under ``prove``), ``always_solve`` (solve even when the warm
        start meets the lower bound; default False), ``prove`` (CP-SAT refutes one slot
        below the result, ``details["proof"]``), ``memory_budget`` (bytes, default
        :func:`ccplan.limits.memory_budget`), ``reuse_model`` (default True: the "D <= h ?"
        questions of a run share one model and one translation), ``progress_callback``
        (elapsed, incumbent, bound, gap), ``on_progress`` (elapsed, incumbent, bound), ``lns``
        (False: no large-neighbourhood search after a stall or a refusal), ``flow_bound``
        (``"auto"``, True, False: the flow-over-time bound, :func:`_flow_bound`), ``lns_rounds``,
        ``lns_nonzeros``, ``lns_window_nonzeros``, ``lns_slice``, ``lns_neighbourhoods``
        (:func:`ccplan.model.lns.lns_search`). Ctrl-C returns
        the best verified schedule with ``details["interrupted"] = True``.

    Returns
    -------
    Outcome
        ``optimal`` only with a proof (solver optimum, or "infeasible" one slot below the
        incumbent); ``feasible`` with the best verified schedule otherwise (possibly the
        warm start: P5 in docs/exact.md); ``infeasible`` when no schedule fits an explicit
        ``horizon``; ``unknown`` when nothing was found in time.
    """
    start = time.perf_counter()
    if instance.collective.combining:
        raise ValidationError(
            f"milp solves data-movement collectives; {instance.collective.kind!r} is combining "
            "(ccplan.pipeline.solve reduces it to data-movement parts first)"
        )
    backend, strategy, params = _check_extra(options.extra)
    # One budget for the whole run (ccplan.limits: --memory-budget, $CCPLAN_MEMORY_BUDGET);
    # extra["memory_budget"] narrows it for the model alone.
    budget = options.extra.get("memory_budget", memory_budget())
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0:
        raise ValidationError(f"extra['memory_budget'] must be a positive number of bytes, got {budget!r}")
    lower = _lower_bound(instance)
    prove = bool(options.extra.get("prove", False))
    run = _Run(instance, options, backend, params, lower, start, global_bound=lower,
               memory_budget=float(budget),
               # --prove: every "no" must come from the solver alone, not from ccplan.bounds
               lower_bound_cut=bool(options.extra.get("lower_bound_cut", not prove)))

    warm_seconds = 0.0
    horizon: int | None = options.horizon
    try:
        if options.warm_start or options.horizon is None:
            # Ctrl-C here leaves no schedule yet; the except below still returns cleanly.
            run.warm, run.warm_method, warm_seconds = _warm_start(instance, options, lower, run.warm_facts)
        if run.warm is not None:
            run.warm_makespan = verify(instance, run.warm).makespan_slots
            run.offer(run.warm, run.warm_method)
        if run.warm_facts.get("interrupted"):
            raise KeyboardInterrupt  # Ctrl-C during the warm start: its schedule is the answer
        report_progress = _progress(run, 0.0)
        if report_progress is not None:
            # The warm start can take seconds; say what it found before the first model is built.
            report_progress(time.perf_counter() - start, None, None, None)
        horizon = options.horizon if options.horizon is not None else run.warm_makespan
        assert horizon is not None
        if options.horizon is not None and run.warm_makespan is not None:
            horizon = min(horizon, run.warm_makespan)  # nothing above the warm start is worth a slot
        if horizon >= lower:
            _flow_bound(run, horizon)
        met = run.incumbent_makespan is not None and run.incumbent_makespan <= run.global_bound
        if options.dump_model is not None and horizon >= 1:
            _dump(run, horizon)
        if horizon < lower:
            run.steps.append(
                {"horizon": horizon, "status": "infeasible", "reason": f"horizon < lower bound {lower}"}
            )
        elif met and prove:
            # The bound already proves the warm start optimal; the solver is asked on its own.
            _prove(run)
        elif met and not options.extra.get("always_solve", False):
            # The warm start already meets a proven lower bound: nothing left for a solver to prove.
            run.steps.append(
                {"horizon": horizon, "status": "skipped", "reason": "warm start meets the lower bound"}
            )
        else:
            STRATEGIES[strategy](run, horizon)
            if prove:
                _prove(run)
    except _RefusedError as exc:
        run.fallback = str(exc)
        run.steps.append({"horizon": run.estimate.get("horizon"), "status": "refused", "reason": str(exc)})
        log.warning("milp: %s; returning the best verified schedule", exc)
        try:
            # LNS on models of a few chunks when they fit; else the heuristic gets the time
            if not (options.extra.get("lns", True) and _lns_instead(run)):
                _heuristic_instead(run)
        except KeyboardInterrupt:
            run.interrupted = True
    except KeyboardInterrupt:
        # Ctrl-C in the build, the translation or (via the adapter) the search: keep the
        # best verified schedule and say so (contract of ccplan.errors.SolveInterrupted).
        run.interrupted = True
    if options.progress_path is not None:
        _write_progress(options.progress_path, run.trajectory)
    if options.log_path is not None and not any("question" in st for st in run.steps):
        # No solver ran; leave a log that says why instead of no file at all.
        options.log_path.parent.mkdir(parents=True, exist_ok=True)
        note = run.steps[-1].get("reason", "") if run.steps else ""
        options.log_path.write_text(
            f"ccplan milp: no solver run ({note}); warm start {run.warm_method} makespan "
            f"{run.warm_makespan}, lower bound {run.global_bound}\n"
        )

    schedule = run.incumbent
    makespan = run.incumbent_makespan
    if options.horizon is not None and makespan is not None and makespan > options.horizon:
        schedule, makespan = None, None  # the warm start does not fit the requested horizon
    bound = run.global_bound
    if makespan is not None:
        bound = min(bound, makespan)
        status = "optimal" if makespan <= run.global_bound else "feasible"
    elif options.horizon is not None and run.global_bound > options.horizon:
        status = "infeasible"
    else:
        status = "unknown"
    last = run.steps[-1] if run.steps else {}
    details = {
        "backend": backend,
        "strategy": strategy if run.auto_choice is None else f"auto:{run.auto_choice}",
        "horizon": horizon,
        "lower_bound_input": lower,
        "model_size": run.model_size,
        "build_seconds": round(run.build_seconds, 3),
        "translate_seconds": round(run.translate_seconds, 3),
        "solve_seconds": round(run.solve_seconds, 3),
        "warm_start_seconds": round(warm_seconds, 3),
        "warm_start_first_round_seconds": round(run.warm_facts.get("first_round_seconds", 0.0), 3),
        # a companion engine (WARM_START_COMPANIONS) whose schedule beat the portfolio's
        "warm_start_companion": run.warm_facts.get("companion"),
        "cpsat_status": last.get("status"),
        "best_bound": bound,
        "trajectory": [(round(t, 4), o, b) for t, o, b in run.trajectory],
        "hint_method": run.hint_method,
        "hint_status": run.hint_status,
        "hint_error": run.hint_error,
        "heuristic_method": run.warm_method,
        "heuristic_makespan": run.warm_makespan,
        "incumbent_source": run.incumbent_source if schedule is not None else None,
        "cpsat_params": params if backend == "cpsat" else "",
        "steps": run.steps,
        # the analytic bound beside what the solver's answers added to it
        "bounds": {"analytic": lower, "flow": None if run.flow is None else run.flow["slots"],
                   "with_solver": run.global_bound},
        "memory_budget": run.memory_budget,
        "model_estimate": run.estimate,
    }
    if makespan is not None and status == "optimal":
        details["proof"] = (
            "solver" if run.solver_infeasible is not None and run.solver_infeasible >= makespan - 1
            else "lower bound" if makespan <= lower
            else "flow bound" if run.flow is not None and makespan <= run.flow["slots"]
            else "solver and lower bound"
        )
    if run.fallback is not None:
        details["fallback"] = run.fallback
    if run.lns_report is not None:
        details["lns"] = run.lns_report.as_dict()
    if run.flow is not None:
        details["flow_bound"] = run.flow
    if run.interrupted:
        details["interrupted"] = True
    return Outcome(schedule=schedule, status=status, bound_slots=float(bound), details=details)
