"""``ccplan solve``: compute a schedule with one engine (or ``--chunks auto``), write the
schedule, report, log, progress and model files all or none, and on an interrupt save the
best verified schedule so far.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ccplan.cli.args import (
    _add_instance_args,
    _instance,
    _method_name,
    _positive_float,
    _positive_int,
    _seed_int,
    _size_line,
    switch_model_of,
)
from ccplan.cli.output import EXIT_INTERRUPTED, EXIT_NO_SCHEDULE, EXIT_OK, EXIT_VIOLATION, _fmt, _saved_line
from ccplan.cli.progress import _progress_printer, _show_progress_notes
from ccplan.cli.signals import _clock, _stopping, _take_interrupt

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ccplan.pipeline.solve import Result


_SOLVE_OUTPUTS = {
    "schedule": "--out",
    "report": "--report",
    "solver log": "--log",
    "progress": "--progress",
    "model": "--dump-model",
}


def _solve_outputs(args: argparse.Namespace) -> Any:
    from ccplan.atomic import OutputSet

    paths = {
        "schedule": args.out,
        "report": args.report,
        "solver log": args.log,
        "progress": args.progress,
        "model": args.dump_model,
    }
    return OutputSet({k: Path(v) if v else None for k, v in paths.items()}, _SOLVE_OUTPUTS)


def _stage_result(outputs: Any, result: Any, data: dict[str, Any]) -> None:
    from ccplan.schedule import save_schedule

    staged = outputs.path("schedule")
    if result.schedule is not None and staged is not None:
        save_schedule(staged, result.instance, result.schedule)
    outputs.write_text("report", json.dumps(data, indent=1) + "\n")


def _time_left(limit: float | None) -> float | None:
    """What is left of ``--time-limit`` since :func:`main` started: the limit holds for the
    command, so the imports and the instance building before the engine count against it.
    The engine keeps at least a quarter of the limit, so a short limit on a slow start still
    leaves it time for a first schedule (the command then overruns by at most that quarter)."""
    if limit is None:
        return None
    return max(0.25 * limit, limit - (time.perf_counter() - _clock["start"]))


def _rescue_solve(outputs: Any, instance: Any, method: str) -> str:
    """For the signal watcher, when the engine does not return in time after Ctrl-C/SIGTERM
    (its main thread inside a solver's native code): write the best verified schedule the
    engine noted (:func:`ccplan.limits.note_incumbent`) as the interrupt path would, remove
    every staged file, and say what was saved."""
    from ccplan import limits
    from ccplan.contract import Outcome, SolveOptions
    from ccplan.pipeline.solve import _verified_result

    saved: list[tuple[str, Path]] = []
    try:
        best = limits.best_incumbent()
        # only a schedule of this very instance (not of a twin an engine solved instead)
        if best is not None and best[0] is instance:
            details = {"interrupted": True, "incumbent_source": best[2]}
            outcome = Outcome(schedule=best[1], status="feasible", details=details)
            seconds = time.perf_counter() - _clock["start"]
            no_flow = SolveOptions(extra={"flow_bound": False})
            result = _verified_result(instance, method, outcome, seconds, no_flow)
            if result.verified:
                _stage_result(outputs, result, result.to_dict())
                saved = outputs.commit()
    finally:
        outputs.discard()
    if saved:
        return f"{_saved_line(saved)} (the best verified schedule so far)"
    return _saved_line(saved)


def cmd_solve(args: argparse.Namespace) -> int:
    from ccplan.contract import SolveOptions
    from ccplan.errors import SolveInterrupted
    from ccplan.pipeline import get_engine
    from ccplan.pipeline.solve import solve

    outputs = _solve_outputs(args)  # bad output paths fail before any work starts
    args.method = _method_name(args.method)  # an unknown method fails before any work starts
    instance = _instance(args, 1 if args.chunks == "auto" else None)
    get_engine(args.method)
    from ccplan import limits

    limits.clear_incumbent()
    _stopping["rescue"] = lambda: _rescue_solve(outputs, instance, args.method)
    extra: dict[str, Any] = {"on_progress": _progress_printer(args.quiet)}
    restore_notes = _show_progress_notes(args.quiet)
    if args.solver:
        extra["solver"] = args.solver
    if args.strategy:
        extra["strategy"] = args.strategy
    if args.cpsat_params:
        extra["cpsat_params"] = args.cpsat_params
    if args.prove:
        extra["prove"] = True
    options = SolveOptions(
        time_limit=_time_left(args.time_limit),
        workers=args.workers,
        seed=args.seed,
        horizon=args.horizon,
        warm_start=not args.no_warm_start,
        log_path=outputs.path("solver log"),
        progress_path=outputs.path("progress"),
        dump_model=outputs.path("model"),
        extra=extra,
    )
    if not args.quiet:
        what = instance.describe() + (" (--chunks auto: C = 1, 2, 4, ...)" if args.chunks == "auto" else "")
        print(f"solving {what} with {args.method} ...", file=sys.stderr, flush=True)
        if args.size is None:
            print(f"note: size {_size_line(args)}", file=sys.stderr, flush=True)
    try:
        try:
            if args.chunks == "auto":
                from ccplan.pipeline.chunks import solve_auto_chunks

                instance, result = solve_auto_chunks(lambda c: _instance(args, c), args.method, options)
            else:
                result = solve(instance, args.method, options)
        except SolveInterrupted as stop:
            _take_interrupt()
            saved: list[tuple[str, Path]] = []
            partial = cast("Result | None", stop.result)
            if partial is not None:
                _stage_result(outputs, partial, partial.to_dict())
                saved = outputs.commit()
            print(f"ccplan: interrupted; {_saved_line(saved)}", file=sys.stderr)
            return EXIT_INTERRUPTED
        data = result.to_dict()
        _stage_result(outputs, result, data)
        written = outputs.commit()
    finally:
        outputs.discard()
        restore_notes()
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        rows = [
            ("instance", data["instance"]),
            ("size", _size_line(args)),
            ("method", data["method"]),
            ("status", f"{data['status']} (slot model: C = {data['chunks']}, "
                       f"{data['switch_model']} switches, {switch_model_of(args, instance.topology)[1]})"),
            ("makespan", f"{_fmt(data['makespan_slots'])} slots = {_fmt(data['makespan_us'])} us"),
            ("lower bound", f"{_fmt(data['lower_bound_slots'])} slots "
                            f"(gap {_fmt(data['gap'], '.1%')}, slot model)"),
            ("physical", f"{_fmt(data['physical_bound_us'])} us (gap {_fmt(data['physical_gap'], '.1%')}; "
                         "any chunking, alpha-beta time)"),
            ("algbw", f"{_fmt(data['algbw_GBps'])} GB/s"),
            ("busbw", f"{_fmt(data.get('busbw_GBps'))} GB/s"),
            ("verified", str(data["verified"])),
            ("sends", _fmt(data["num_sends"])),
            ("seconds", f"{data['solve_seconds']:.3f}"),
        ]
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            print(f"{key:<{width}}  {value}")
        print(f"{'proven':<{width}}  {data['claim']}")
        print(f"{'':<{width}}  (an alpha-beta model of the machine, not a measurement)")
        for what, path in written:
            print(f"{what:<{width}}  -> {path}")
    if result.schedule is None:
        why = result.details.get("reason") or f"status {result.status}"
        print(f"ccplan: error: {args.method} found no schedule ({why})", file=sys.stderr)
        return EXIT_NO_SCHEDULE
    if not result.verified:
        print("ccplan: error: the schedule failed verification (see the report)", file=sys.stderr)
        return EXIT_VIOLATION
    return EXIT_OK


def _add_solve(p: argparse.ArgumentParser) -> None:
    from ccplan.contract import method_names

    _add_instance_args(p)
    g = p.add_argument_group("method")
    g.add_argument(
        "--method", default="heuristic", help=f"engine: {', '.join(method_names())} (default heuristic)"
    )
    g.add_argument(
        "--time-limit",
        type=_positive_float,
        help="seconds for the whole command (start-up counts; the engine gets the rest, at least 1/4)",
    )
    g.add_argument("--workers", type=_positive_int, default=2, help="CP-SAT workers (default 2)")
    g.add_argument("--seed", type=_seed_int, default=0, help="random seed")
    g.add_argument(
        "--horizon",
        type=_positive_int,
        help="slot horizon H for the MILP (default: the heuristic's makespan)",
    )
    g.add_argument(
        "--no-warm-start", action="store_true", help="do not hint the MILP with the heuristic schedule"
    )
    g.add_argument("--solver", help="Pyomo backend for --method milp: cpsat (default) or highs")
    g.add_argument("--strategy", help="MILP search strategy: auto (default), ascending, descending, "
                   "direct or lns (large neighbourhood search)")
    g.add_argument(
        "--cpsat-params", help="extra CP-SAT parameters in text format, e.g. 'linearization_level:2'"
    )
    g.add_argument(
        "--prove",
        action="store_true",
        help="--method milp: have CP-SAT refute a makespan one below the schedule's, even when "
        "the schedule already meets the lower bound",
    )
    g.add_argument(
        "--memory-budget",
        metavar="SIZE",
        default=argparse.SUPPRESS,  # absent: the global --memory-budget (or its default) stands
        help="refuse work, and MILP models (--method milp then returns the heuristic's schedule), "
        "estimated to need more memory than this, e.g. 3GB (same as the global option)",
    )
    g = p.add_argument_group("output")
    g.add_argument("--out", help="write the schedule here (JSON; a name ending in .npz: columnar file)")
    g.add_argument("--report", help="write the result JSON here")
    g.add_argument("--log", help="write the solver's full search log here")
    g.add_argument("--progress", help="write the incumbent/bound trajectory as CSV here")
    g.add_argument("--dump-model", help="write the MILP as .lp or .mps here")
    g.add_argument("--json", action="store_true", help="print the result JSON instead of a table")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
