"""The ``ccplan`` command line: a thin layer over the library.

Every command is a library call; this module only parses arguments, prints, and maps
:class:`~ccplan.errors.CCPlanError` to one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ccplan.errors import CCPlanError, ValidationError
from ccplan.parsing import MAX_DIGITS, MAX_INDEX, int_text, int_value, one_line, show

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ccplan.pipeline.solve import Result

EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_USAGE = 2

log = logging.getLogger("ccplan.cli")


# --------------------------------------------------------------------------- helpers
def _parse_topo_args(items: Sequence[str]) -> dict[str, Any]:
    # Values stay strings: resolve_topology converts them to each parameter's declared type.
    params: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValidationError(f"--topo-arg {item!r} must look like key=value (e.g. n=8)")
        key, raw = item.split("=", 1)
        params[key.strip()] = raw.strip()
    return params


def _topology(args: argparse.Namespace) -> Any:
    from ccplan.instances.builtin import resolve_topology

    params = _parse_topo_args(args.topo_arg or [])
    if args.chassis is not None:
        params["chassis"] = args.chassis
    return resolve_topology(args.topology, **params)


def _parse_dests(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        return tuple(int_text(x, "--dests entry") for x in text.split(",") if x.strip())
    except ValidationError as exc:
        raise ValidationError(f"--dests must be a comma-separated list of node ids ({exc})") from None


def _chunks_arg(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int_text(text, "--chunks", low=1)
    except ValidationError:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer (at most {MAX_INDEX}) or 'auto', got {show(text)}"
        ) from None


def _instance(args: argparse.Namespace, chunks: int | None = None) -> Any:
    from ccplan.instances import make_collective, make_instance
    from ccplan.instances.catalog import ROOTED

    if args.root is not None and args.collective not in ROOTED:
        rooted = ", ".join(sorted(ROOTED))
        raise ValidationError(
            f"--root {args.root}: {args.collective} has no root (--root applies to {rooted})"
        )
    if args.tau_rule == "explicit" and args.tau_us is None:
        raise ValidationError("--tau-rule explicit needs --tau-us (the slot length in microseconds)")
    if args.tau_us is not None and args.tau_rule != "explicit":
        raise ValidationError("--tau-us applies only with --tau-rule explicit")
    if args.dests is not None and args.collective != "multicast":
        raise ValidationError(
            f"--dests {args.dests}: only multicast takes destinations, not {args.collective}"
        )
    topology = _topology(args)
    count = args.chunks if chunks is None else chunks
    if count == "auto":
        raise ValidationError("--chunks auto is only available for `solve`")
    collective = make_collective(
        args.collective, topology, chunks=count, root=args.root, dests=_parse_dests(args.dests)
    )
    return make_instance(
        topology,
        collective,
        args.size,
        tau_rule=args.tau_rule,
        tau_us=args.tau_us,
        alpha_threshold=args.alpha_threshold,
        single_port=args.single_port,
        switch_model=getattr(args, "switch_model", "store-and-forward"),
        alpha_cap=getattr(args, "alpha_cap", None),
    )


def _arg_type(
    convert: Callable[[str], Any], kind: str, ok: Callable[[Any], bool], rule: str
) -> Callable[[str], Any]:
    """An argparse type: ``convert`` the text, then check ``ok``; argparse names the flag in
    front of the message (``--time-limit: must be a positive number, got '-1'``). Text longer
    than :data:`ccplan.parsing.MAX_DIGITS` characters is refused before it is converted, and
    the value is shown cut short, so the error stays one short line."""

    def parse(text: str) -> Any:
        try:
            if len(text.strip()) > MAX_DIGITS:
                raise ValueError(text)
            value = convert(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"must be {kind}, got {show(text)}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {rule}, got {show(text)}")
        return value

    return parse


_positive_float = _arg_type(float, "a number", lambda v: math.isfinite(v) and v > 0, "a positive number")
_nonneg_float = _arg_type(float, "a number", lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
# counts, ids and slots: at most MAX_INDEX (the bound every file reader applies too)
_NONNEG = f"an integer in 0..{MAX_INDEX}"
_POSITIVE = f"an integer in 1..{MAX_INDEX}"
_SEED = f"an integer in -{MAX_INDEX}..{MAX_INDEX}"
_nonneg_int = _arg_type(int, _NONNEG, lambda v: 0 <= v <= MAX_INDEX, _NONNEG)
_positive_int = _arg_type(int, _POSITIVE, lambda v: 1 <= v <= MAX_INDEX, _POSITIVE)
_seed_int = _arg_type(int, _SEED, lambda v: abs(v) <= MAX_INDEX, _SEED)


def _add_instance_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("instance")
    g.add_argument(
        "--topology", required=True, help="built-in name (see `ccplan topologies`) or a topology JSON file"
    )
    g.add_argument("--chassis", type=_positive_int, help="chassis count for ndv2, dgx2, amd")
    g.add_argument(
        "--topo-arg",
        action="append",
        metavar="KEY=VALUE",
        help="parameter of a built-in topology, e.g. n=8 (repeatable)",
    )
    g.add_argument("--collective", default="allgather", help="allgather (default), broadcast, ...")
    g.add_argument("--root", type=_nonneg_int, help="root GPU of rooted collectives (default: the first GPU)")
    g.add_argument("--dests", help="multicast destinations, comma-separated")
    g.add_argument("--size", default="1MB", help="output buffer size, e.g. 64KB, 1MB, 1GB (decimal) or bytes")
    g.add_argument(
        "--chunks",
        type=_chunks_arg,
        default=1,
        help="chunks per contribution C (default 1); `auto` (solve only): C = 1, 2, 4, ... while faster",
    )
    g.add_argument(
        "--tau-rule",
        default="fastest",
        choices=["fastest", "slowest", "explicit"],
        help="slot length from the fastest link (paper, default), the slowest, or --tau-us",
    )
    g.add_argument("--tau-us", type=_positive_float, help="explicit slot length in microseconds")
    g.add_argument(
        "--alpha-threshold",
        type=_nonneg_float,
        default=0.1,
        help="alpha/tau at or below this counts as 0 slots (default 0.1, as TE-CCL)",
    )
    g.add_argument("--single-port", action="store_true", help="one send and one receive per node per slot")
    g.add_argument(
        "--switch-model",
        default="store-and-forward",
        choices=["store-and-forward", "cut-through"],
        help="switches store and forward (paper, default) or cut through without a buffer (TE-CCL)",
    )
    g.add_argument(
        "--alpha-cap",
        type=_positive_float,
        help="TE-CCL's alpha cap: raise tau to min alpha / CAP when shorter (TE-CCL uses 200)",
    )


def _write_json(path: Path, data: Any) -> None:
    from ccplan.atomic import write_atomic

    write_atomic(path, json.dumps(data, indent=1) + "\n")


def _fmt(value: Any, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, int) and spec == ".4g":
        return str(value)  # slot counts and bounds are exact: never 3.28e+06 for 3280010
    if isinstance(value, float) and spec == ".4g" and 1e4 <= abs(value) < 1e12:
        return f"{value:.0f}"  # 80469 us reads better than 8.047e+04 us
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def _check_writable(*paths: Path | None) -> None:
    from ccplan.atomic import check_target

    for path in paths:
        if path is not None:
            check_target(path, "output")


def _set_status(args: argparse.Namespace, code: int) -> int:
    # Recorded before printing, so a broken pipe (`ccplan verify ... | head -1`) keeps it.
    args._status = code
    return code


def _saved_line(saved: Sequence[tuple[str, Path]]) -> str:
    if not saved:
        return "nothing saved"
    return "saved " + ", ".join(f"{what} -> {path}" for what, path in saved)


# --------------------------------------------------------------------------- commands
def cmd_topologies(args: argparse.Namespace) -> int:
    from ccplan.instances.builtin import catalog

    rows = catalog()
    if args.json:
        print(json.dumps(rows, indent=1))
        return EXIT_OK
    header = f"{'name':<16} {'gpus':>5} {'switches':>8} {'links':>6}  description"
    print(header)
    print("-" * len(header))
    for r in rows:
        counts = f"{r['gpus']:>5} {r['switches']:>8} {r['links']:>6}"
        print(f"{r['name']:<16} {counts}  {r['description']}")
        params = ", ".join(f"{k}={v}" for k, v in dict(r.get("parameters", {})).items())
        if params:
            print(f"{'':<40}parameters: {params}")
    return EXIT_OK


PROGRESS_LOGGERS = ("ccplan.heuristics.layered",)
"""Engines whose long runs note their progress on the log (``layered``: layer and deliveries
done every 10 s); ``solve`` shows these notes on stderr unless ``--quiet``."""


class _ProgressNotes(logging.StreamHandler):  # type: ignore[type-arg]
    """Shows :data:`PROGRESS_LOGGERS`' notes on the current stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("  [progress] %(message)s"))
        self.setLevel(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # the stderr of this call (tests swap it), not of the first
        super().emit(record)


def _show_progress_notes(quiet: bool) -> Callable[[], None]:
    """Attach one :class:`_ProgressNotes` per logger (``main`` may run several times in one
    process), detached again under ``--quiet``; returns what puts the loggers back as they
    were (an in-process caller's own log capture keeps working after the call)."""
    saved = []
    for name in PROGRESS_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate, logger.level))
        for old in [h for h in logger.handlers if isinstance(h, _ProgressNotes)]:
            logger.removeHandler(old)
        if quiet:
            logger.propagate = True
            continue
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.addHandler(_ProgressNotes())
        logger.propagate = False  # once on stderr, not again through the root's handler

    def restore() -> None:
        for logger, propagate, level in saved:
            for old in [h for h in logger.handlers if isinstance(h, _ProgressNotes)]:
                logger.removeHandler(old)
            logger.propagate, logger.level = propagate, level

    return restore


def _progress_printer(quiet: bool) -> Callable[[float, float | None, float | None], None]:
    last = [0.0]

    def show(elapsed: float, incumbent: float | None, bound: float | None) -> None:
        if quiet:
            return
        now = time.monotonic()
        if now - last[0] < 0.5:
            return
        last[0] = now
        gap = None
        if incumbent not in (None, 0) and bound is not None:
            gap = (incumbent - bound) / incumbent  # type: ignore[operator]
        print(
            f"  [{elapsed:7.1f}s] incumbent {_fmt(incumbent)}  bound {_fmt(bound)}  gap {_fmt(gap, '.1%')}",
            file=sys.stderr,
            flush=True,
        )

    return show


EXIT_NO_SCHEDULE = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130

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


_clock: dict[str, float] = {"start": time.perf_counter()}


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
    from ccplan.contract import SolveOptions, get_engine
    from ccplan.errors import SolveInterrupted
    from ccplan.pipeline.solve import solve

    outputs = _solve_outputs(args)  # bad output paths fail before any work starts
    instance = _instance(args, 1 if args.chunks == "auto" else None)
    get_engine(args.method)  # an unknown method fails before any work starts
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
            ("method", data["method"]),
            ("status", data["status"]),
            ("makespan", f"{_fmt(data['makespan_slots'])} slots = {_fmt(data['makespan_us'])} us"),
            ("lower bound", f"{_fmt(data['lower_bound_slots'])} slots (gap {_fmt(data['gap'], '.1%')})"),
            ("algbw", f"{_fmt(data['algbw_GBps'])} GB/s"),
            ("busbw", f"{_fmt(data.get('busbw_GBps'))} GB/s"),
            ("verified", str(data["verified"])),
            ("sends", _fmt(data["num_sends"])),
            ("seconds", f"{data['solve_seconds']:.3f}"),
        ]
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            print(f"{key:<{width}}  {value}")
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


def cmd_verify(args: argparse.Namespace) -> int:
    from ccplan.schedule import load_schedule, verify
    from ccplan.schedule.verify import estimate_verify

    # the budget of the verifier that will run (a .npz file: the column verifier's)
    instance, schedule = load_schedule(args.schedule, check_budget=False)
    estimate_verify(instance, schedule, f"verify {str(args.schedule)!r}").check()
    report = verify(instance, schedule)
    _set_status(args, EXIT_OK if report.ok else EXIT_VIOLATION)
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(f"instance  {instance.describe()}")
        print(f"sends     {report.num_sends}")
        if report.ok:
            print(f"OK        makespan {report.makespan_slots} slots = {_fmt(report.makespan_us)} us")
        else:
            print(f"FAILED    {len(report.violations)} violation(s)")
            for v in report.violations[: args.max_violations]:
                print(f"  {v}")
            if len(report.violations) > args.max_violations:
                print(f"  ... {len(report.violations) - args.max_violations} more")
    return EXIT_OK if report.ok else EXIT_VIOLATION


def cmd_bounds(args: argparse.Namespace) -> int:
    from ccplan.bounds import compute_bounds
    from ccplan.pipeline.estimate import estimate_solve

    instance = _instance(args)
    estimate_solve(instance).check()
    res = None
    if not args.no_upper:
        from ccplan.contract import SolveOptions
        from ccplan.pipeline.solve import solve

        extra = {"flow_bound": False} if args.no_flow else {}
        options = SolveOptions(time_limit=args.time_limit, seed=0, extra=extra)
        res = solve(instance, args.upper_method, options)
    # With a verified upper bound, the flow-over-time LP bound where the gap is open (its LPs
    # were solved by `solve` on this instance and are not solved again).
    upper = res.makespan_slots if res is not None and res.verified else None
    bounds = compute_bounds(instance, upper=upper, flow=False if args.no_flow else "auto")
    data: dict[str, Any] = {"instance": instance.describe(), "tau_us": instance.tau_us, **bounds.to_dict()}
    if res is not None:
        data["upper_bound_method"] = args.upper_method
        data["upper_bound_slots"] = res.makespan_slots
        data["upper_bound_us"] = res.makespan_us
        data["upper_bound_verified"] = res.verified
        if res.schedule is not None and res.makespan_slots:
            # against the best bound here (the flow bound may have risen past solve's)
            best_lower = max(bounds.best_slots, res.lower_bound_slots)
            data["upper_bound_gap"] = (res.makespan_slots - best_lower) / res.makespan_slots
    if args.json:
        print(json.dumps(data, indent=1))
        return EXIT_OK
    print(f"instance  {data['instance']}")
    print(f"tau       {instance.tau_us:.6g} us")
    for key, value in data.items():
        if key in ("instance", "tau_us"):
            continue
        print(f"{key:<22} {_fmt(value)}")
    best = bounds.best_slots
    print(
        f"=> makespan >= {best} slots = {_fmt(instance.slots_to_us(best))} us; "
        f"algbw <= {_fmt(instance.algbw_GBps(instance.slots_to_us(best)))} GB/s (slotted)"
    )
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from ccplan.atomic import OutputSet
    from ccplan.schedule import load_schedule, save_schedule

    outputs = OutputSet({"out": Path(args.out)})
    instance, schedule = load_schedule(args.schedule)
    staged = outputs.path("out")
    assert staged is not None
    fmt = args.format
    note = ""
    try:
        if fmt == "json":
            save_schedule(staged, instance, schedule)
        elif fmt == "timeline":
            from ccplan.export.schedule_json import write_timeline

            write_timeline(staged, instance, schedule)
        elif fmt == "msccl-xml":
            from ccplan.export.msccl import write_msccl_export

            # streamed to the staged file: the XML of a big schedule is never one string
            choice = write_msccl_export(
                staged,
                instance,
                schedule,
                dialect=args.dialect,
                proto=args.proto,
                channels=args.channels,
                instances=args.instances,
                inplace=False if args.out_of_place else (True if args.in_place else None),
                switches=args.switches,
            )
            note = f" ({choice.channels} channel(s), {'in' if choice.inplace else 'out-of'}-place)"
        elif fmt in ("gantt", "utilization"):
            from ccplan.export import plots

            getattr(plots, fmt)(instance, schedule, staged)
        else:  # argparse restricts choices; kept for mypy's exhaustiveness
            raise ValidationError(f"unknown export format {fmt!r}")
        written = outputs.commit()
    finally:
        outputs.discard()
    for _what, path in written:
        print(f"wrote {path}{note}")
    return EXIT_OK


def cmd_validate_xml(args: argparse.Namespace) -> int:
    from ccplan.export.xml_validate import validate_xml

    expect = None
    if args.expect:
        from ccplan.schedule import load_schedule
        from ccplan.schedule.columnar import is_columnar, load_columnar_instance

        # only the instance is needed: a columnar file's sends are not read
        if is_columnar(args.expect):
            expect = load_columnar_instance(args.expect)
        else:
            expect, _ = load_schedule(args.expect)
    report = validate_xml(Path(args.xml), expect=expect, dialect=args.dialect)
    if report.ok:
        print(f"OK  {args.xml}")
        for key, value in dict(getattr(report, "stats", {}) or {}).items():
            print(f"  {key}: {value}")
        return EXIT_OK
    print(f"FAILED  {args.xml}: {len(report.errors)} error(s)")
    for err in report.errors:
        print(f"  {err}")
    return EXIT_VIOLATION


def cmd_plot_progress(args: argparse.Namespace) -> int:
    from ccplan.atomic import OutputSet
    from ccplan.export.plots import plot_progress

    outputs = OutputSet({"out": Path(args.out)})
    staged = outputs.path("out")
    assert staged is not None
    try:
        plot_progress(Path(args.csv), staged)
        written = outputs.commit()
    finally:
        outputs.discard()
    for _what, path in written:
        print(f"wrote {path}")
    return EXIT_OK


def cmd_simulate(args: argparse.Namespace) -> int:
    from ccplan.schedule import load_schedule
    from ccplan.schedule.simulate import simulate

    instance, schedule = load_schedule(args.schedule)
    sim = simulate(instance, schedule, reduce_cost_us_per_byte=args.reduce_cost)
    print(f"instance    {instance.describe()}")
    print(f"completion  {sim.completion_us:.6g} us (alpha-beta, continuous time)")
    if sim.slotted_us is not None:
        print(f"slotted     {sim.slotted_us:.6g} us (makespan * tau; rounding {sim.rounding_us:+.6g} us)")
    print(f"algbw       {_fmt(sim.algbw_GBps)} GB/s")
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    from ccplan.sweep import SweepConfig, resolve_out, run_sweep

    config = SweepConfig.from_toml(args.config)
    where = resolve_out(config, args.out, Path(args.config))
    rows = [0]

    def count(_row: Any) -> None:
        rows[0] += 1

    def saved_rows() -> str:
        # every counted row is on disk (on_row runs after the table's fsync)
        return f"saved {rows[0]} new row(s) -> {where} (rerun to resume)" if rows[0] else "no new row saved"

    _stopping["rescue"] = saved_rows  # what the watcher says if a cell does not stop in time
    try:
        path = run_sweep(
            config,
            out=where,
            dask_address=args.dask,
            progress=not args.quiet,
            processes=args.processes,
            on_row=count,
        )
    except KeyboardInterrupt:
        _take_interrupt()
        print(f"\nccplan: interrupted; {saved_rows()}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"results -> {path}")
    return EXIT_OK


def _class_defaults(args: argparse.Namespace) -> Any:
    from ccplan.instances.importers import ClassDefaults, load_overrides, parse_assignments

    base = load_overrides(args.class_file) if args.class_file else ClassDefaults()
    return base.with_overrides(
        parse_assignments(args.class_bw or [], "--class-bw"),
        parse_assignments(args.class_alpha or [], "--class-alpha"),
    )


def _network(args: argparse.Namespace) -> Any:
    from ccplan.instances.importers import Network

    return Network(
        nodes=int_value(args.nodes, "--nodes", low=1),
        nics_per_node=int_value(args.nics_per_node, "--nics-per-node", low=1),
        bandwidth_GBps=args.nic_bw,
        alpha_us=args.nic_alpha,
        fabric=args.fabric,
    )


class _NoteCollector(logging.Handler):
    """Print each importer warning as one ``note:`` line on stderr and remember its text."""

    def __init__(self, seen: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.seen = seen

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        self.seen.append(text)
        print(f"note: {text}", file=sys.stderr)


def cmd_import_topology(args: argparse.Namespace) -> int:
    from ccplan.instances.importers import import_topology

    defaults = _class_defaults(args)
    if args.show_defaults:
        print(json.dumps(defaults.to_dict(), indent=1))
        return EXIT_OK
    if not args.file or not args.out:
        raise ValidationError("import-topology needs FILE and --out (or --show-defaults)")
    out = Path(args.out)
    _check_writable(out)
    if args.pcie_gen is not None:
        from ccplan.instances.importers import ClassDefaults

        # Two sources for one number would leave the user guessing which one won.
        given = [c for c in ("PIX", "PXB", "PHB", "NODE") if defaults.bw(c) != ClassDefaults().bw(c)]
        if given:
            raise ValidationError(
                f"--pcie-gen {args.pcie_gen} and a {given[0]} bandwidth from --class-bw/--class-file "
                "both set the PCIe rate; give one"
            )
    # The importers log the assumptions they make; each is one "note:" line on stderr.
    assumed: list[str] = []
    handler = _NoteCollector(assumed)
    importer_log = logging.getLogger("ccplan.instances.importers")
    importer_log.addHandler(handler)
    propagate, importer_log.propagate = importer_log.propagate, False
    try:
        topo = import_topology(
            args.file,
            args.format,
            defaults=defaults,
            pcie=args.pcie,
            pcie_gen=args.pcie_gen,
            nvswitch=args.nvswitch,
            network=_network(args),
            name=args.name,
        )
    finally:
        importer_log.removeHandler(handler)
        importer_log.propagate = propagate
    _write_json(out, topo.to_dict())
    bws = sorted(set(topo.bandwidth.tolist()))
    print(f"{topo.name}: {len(topo.gpus)} GPUs, {len(topo.switches)} switches, {topo.num_links} links")
    print(f"bandwidths (GB/s): {', '.join(f'{b:g}' for b in bws)}")
    for note in filter(None, topo.description.split("; ")):
        if note not in assumed:
            print(f"note: {note}")
    print(f"wrote {out}")
    return EXIT_OK


def _csv_list(text: str, option: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items and option != "--baselines":
        raise ValidationError(f"{option} must be a comma-separated list, got {text!r}")
    return items


def cmd_plan(args: argparse.Namespace) -> int:
    from ccplan.errors import SolveInterrupted
    from ccplan.plan import PlanRequest, run_plan

    request = PlanRequest(
        topology=_topology(args),
        collectives=_csv_list(args.collectives, "--collectives"),
        sizes=_csv_list(args.sizes, "--sizes"),
        methods=_csv_list(args.methods, "--methods"),
        baselines=_csv_list(args.baselines, "--baselines"),
        chunks=args.chunks,
        time_limit=args.time_limit,
        workers=args.workers,
        root=args.root,
    )

    def show(row: Any) -> None:
        if not args.quiet:
            status = row.get("status")
            print(f"  {row['key']}: {status} {_fmt(row.get('makespan_us'))} us", file=sys.stderr, flush=True)

    try:
        result = run_plan(
            request,
            args.out,
            dask_address=args.dask,
            processes=args.processes,
            plots=not args.no_plots,
            on_row=show,
        )
    except SolveInterrupted as exc:
        # The finished cells' report is on disk; say where, exit like any Ctrl-C.
        _take_interrupt()
        print(f"ccplan: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"{'collective':<14} {'size':>8} {'method':<10} {'time us':>10} {'bound us':>10} {'gap':>6}  xml")
    for b in result.best:
        if "method" not in b:
            print(f"{b['collective']:<14} {b['size']:>8} {'-':<10} {b.get('error', '')}")
            continue
        xml = str(Path(args.out) / b["xml"]) if b["xml"] else "not exportable (see report)"
        print(
            f"{b['collective']:<14} {b['size']:>8} {b['method']:<10} {_fmt(b['makespan_us']):>10} "
            f"{_fmt(b['lower_bound_us']):>10} {_fmt(b['gap'], '.1%'):>6}  {xml}"
        )
    print(f"report -> {result.report}")
    return EXIT_OK


def cmd_methods(args: argparse.Namespace) -> int:
    from ccplan.contract import method_names

    for name in method_names():
        print(name)
    return EXIT_OK


# --------------------------------------------------------------------------- parser
@dataclass(frozen=True)
class Command:
    """A sub-command: how to add its arguments and what to run."""

    help: str
    add: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def _add_topologies(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


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


def _add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--max-violations", type=_nonneg_int, default=20, help="violations to print (default 20)")


def _add_bounds(p: argparse.ArgumentParser) -> None:
    _add_instance_args(p)
    p.add_argument("--no-upper", action="store_true", help="skip the heuristic upper bound")
    p.add_argument(
        "--upper-method", default="heuristic", help="method giving the upper bound (default heuristic)"
    )
    p.add_argument("--time-limit", type=_positive_float, help="seconds for the upper-bound heuristic")
    p.add_argument(
        "--no-flow",
        action="store_true",
        help="skip the flow-over-time LP bound (flow_slots), which otherwise runs when the upper "
        "bound is above the others, on small store-and-forward data-movement instances",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument(
        "--format", required=True, choices=["msccl-xml", "json", "timeline", "gantt", "utilization"]
    )
    p.add_argument("--out", required=True, help="output file (.xml, .json, .png, .svg)")
    p.add_argument("--dialect", default="executor", choices=["executor", "legacy"], help="MSCCL XML dialect")
    p.add_argument("--proto", default="Simple", choices=["Simple", "LL", "LL128"], help="MSCCL protocol")
    p.add_argument(
        "--channels",
        type=_positive_int,
        help="MSCCL channels (default: the fewest whose thread blocks fit the dialect's step limit)",
    )
    p.add_argument("--instances", type=_positive_int, default=1, help="MSCCL instances")
    place = p.add_mutually_exclusive_group()
    place.add_argument(
        "--out-of-place", action="store_true", help="out-of-place buffers (default: in-place where possible)"
    )
    place.add_argument("--in-place", action="store_true", help="in-place buffers only (fail if impossible)")
    p.add_argument(
        "--switches",
        default="collapse",
        choices=["collapse", "refuse"],
        help="MSCCL has no switches: collapse GPU->switch->GPU relays into one transfer (default) or refuse",
    )


def _add_validate_xml(p: argparse.ArgumentParser) -> None:
    p.add_argument("xml", help="MSCCL XML file")
    p.add_argument(
        "--dialect", default="executor", choices=["executor", "legacy"], help="runtime limits to check"
    )
    p.add_argument("--expect", help="schedule JSON whose instance gives the postcondition to check")


def _add_plot_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("csv", help="progress CSV written by `ccplan solve --progress`")
    p.add_argument("--out", required=True, help="image file (.png or .svg)")


def _add_simulate(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument(
        "--reduce-cost", type=_nonneg_float, default=0.0, help="reduce cost in us per byte (default 0)"
    )


def _add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="sweep configuration (TOML), e.g. sweeps/smoke.toml")
    p.add_argument("--out", help="result table (CSV); default: the config's run.out")
    p.add_argument("--dask", metavar="ADDRESS", help="run the cells on a Dask distributed scheduler")
    p.add_argument("--processes", type=_positive_int, help="local worker processes (default 2)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_import_topology(p: argparse.ArgumentParser) -> None:
    from ccplan.instances.importers import IMPORTERS
    from ccplan.instances.importers.classes import PCIE_GEN_GBPS
    from ccplan.instances.importers.machine import FABRICS, PCIE_POLICIES

    p.add_argument("file", nargs="?", help="nvidia-smi topo -m output, NCCL XML dump, rocm-smi --showtopo")
    p.add_argument("--format", default="auto", choices=["auto", *IMPORTERS], help="input format")
    p.add_argument("--out", help="topology JSON to write")
    p.add_argument("--name", help="topology name (default from the input)")
    g = p.add_argument_group("link classes (defaults: docs/import.md)")
    g.add_argument("--class-bw", action="append", metavar="CLASS=GBPS", help="e.g. NV=20, SYS=6 (repeatable)")
    g.add_argument("--class-alpha", action="append", metavar="CLASS=US", help="e.g. PIX=1.5 (repeatable)")
    g.add_argument("--class-file", help="JSON/TOML with bandwidth_GBps and alpha_us tables")
    g.add_argument("--show-defaults", action="store_true", help="print the class table and exit")
    g.add_argument("--pcie", default="auto", choices=PCIE_POLICIES, help="keep the PCIe tree")
    g.add_argument(
        "--pcie-gen",
        type=int,
        choices=sorted(PCIE_GEN_GBPS),
        help="PCIe generation of every PCIe link (default: the NCCL dump's link_speed, else Gen4)",
    )
    g.add_argument("--nvswitch", default="auto", choices=["auto", "yes", "no"], help="NV# via an NVSwitch")
    g = p.add_argument_group("several machines")
    g.add_argument("--nodes", type=int, default=1, help="copies of the machine (default 1)")
    g.add_argument("--nics-per-node", type=int, default=1, help="NICs per machine (default 1)")
    g.add_argument("--nic-bw", type=_positive_float, help="GB/s per NIC (default: file, else class NET)")
    g.add_argument("--nic-alpha", type=_nonneg_float, help="alpha per NIC hop in us (default: class NET)")
    g.add_argument("--fabric", default="switch", choices=FABRICS, help="one switch or one switch per rail")


def _add_plan(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--topology", required=True, help="built-in name or topology JSON (e.g. from import-topology)"
    )
    p.add_argument("--chassis", type=_positive_int, help="chassis count for ndv2, dgx2, amd")
    p.add_argument("--topo-arg", action="append", metavar="KEY=VALUE", help="built-in parameter (repeatable)")
    p.add_argument(
        "--collectives", default="allgather,allreduce", help="comma-separated (default allgather,allreduce)"
    )
    p.add_argument("--sizes", default="1MB,64MB", help="comma-separated output sizes (default 1MB,64MB)")
    p.add_argument(
        "--methods", default="heuristic,milp", help="candidates for the best (default heuristic,milp)"
    )
    p.add_argument("--baselines", default="ring,tree", help="reported beside the best ('' for none)")
    # the same argument types as `solve`: the same values are refused with the same line
    p.add_argument("--chunks", type=_positive_int, default=1, help="chunks per contribution C (default 1)")
    p.add_argument("--root", type=_nonneg_int, help="root GPU of rooted collectives")
    p.add_argument("--time-limit", type=_positive_float, default=10.0, help="seconds per cell (default 10)")
    p.add_argument("--workers", type=_positive_int, default=1, help="CP-SAT workers per cell (default 1)")
    p.add_argument("--out", required=True, help="output directory (report.md, xml/, schedules/, img/)")
    p.add_argument("--dask", metavar="ADDRESS", help="run the cells on a Dask distributed scheduler")
    p.add_argument("--processes", type=_positive_int, default=1, help="local worker processes (default 1)")
    p.add_argument("--no-plots", action="store_true", help="skip the pictures")
    p.add_argument("--quiet", action="store_true", help="no per-cell progress lines")


def _add_nothing(p: argparse.ArgumentParser) -> None:
    return None


COMMANDS: dict[str, Command] = {
    "topologies": Command("list the built-in topologies", _add_topologies, cmd_topologies),
    "methods": Command("list the registered methods", _add_nothing, cmd_methods),
    "solve": Command("compute a schedule", _add_solve, cmd_solve),
    "verify": Command("check a schedule independently (exit 1 on violation)", _add_verify, cmd_verify),
    "bounds": Command("lower bounds (and the heuristic upper bound)", _add_bounds, cmd_bounds),
    "simulate": Command("replay a schedule in continuous alpha-beta time", _add_simulate, cmd_simulate),
    "export": Command("export a schedule (MSCCL XML, JSON, pictures)", _add_export, cmd_export),
    "validate-xml": Command("check an MSCCL XML file (exit 1 on error)", _add_validate_xml, cmd_validate_xml),
    "plot-progress": Command("plot a solver progress CSV", _add_plot_progress, cmd_plot_progress),
    "sweep": Command(
        "run or resume a grid of solves (resumable; --dask for a cluster)", _add_sweep, cmd_sweep
    ),
    "import-topology": Command(
        "topology JSON from nvidia-smi topo -m, an NCCL XML dump or rocm-smi --showtopo",
        _add_import_topology,
        cmd_import_topology,
    ),
    "plan": Command(
        "best verified schedule, bound, MSCCL XML and a report per collective and size",
        _add_plan,
        cmd_plan,
    ),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2, no usage dump
        line = one_line(f"ccplan: error: {one_line(message, 200)} (see `{self.prog} --help`)")
        self.exit(EXIT_USAGE, line + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per entry of :data:`COMMANDS`."""
    from ccplan import __version__

    parser = _Parser(prog="ccplan", description="Topology-aware schedules for collective communication.")
    parser.add_argument("--version", action="version", version=f"ccplan {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument(
        "--memory-budget",
        metavar="SIZE",
        help="refuse work estimated to need more memory than this (default 4GB, or $CCPLAN_MEMORY_BUDGET)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        command.add(p)
        p.set_defaults(_run=command.run)
    return parser


STOP_GRACE_SECONDS = 15.0
"""After Ctrl-C/SIGTERM, how long an engine stuck in native code may take to return before
the process ends anyway (exit 130, nothing saved)."""

_stopping: dict[str, Any] = {"handled": False, "generation": 0, "rescue": None}
"""``handled``: the command took the interrupt path; ``generation`` changes when a ``main()``
call ends, so a watcher of an earlier call never ends a later one; ``rescue``: set by a
command, called by the watcher before it ends a process whose engine did not stop in time,
returns what was saved (``solve``: writes the best verified schedule; ``sweep``: the rows)."""

_STOP_LOCK = threading.Lock()
"""Held by whoever ends the command after an interrupt: the command's own interrupt path or
the watcher's rescue, never both."""


def _take_interrupt() -> None:
    """The command takes the interrupt path (the watcher then leaves it alone); waits while
    the watcher is already saving, which ends the process."""
    with _STOP_LOCK:
        _stopping["handled"] = True


def _watch_signals() -> Callable[[], None]:
    """Notice Ctrl-C/SIGTERM at once, even while the main thread is inside native code.

    Python runs its signal handlers only when the main thread returns to the interpreter; a
    solver in C++ may not for the rest of its time limit. The C-level handler also writes the
    signal number to a wakeup pipe, which a helper thread reads: it asks registered engines to
    stop (:func:`ccplan.limits.on_stop`) and, if the command has not taken the interrupt path
    within :data:`STOP_GRACE_SECONDS`, ends the process with the one promised line.
    Returns the function that undoes the setup.
    """
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # pragma: no cover - not the main interpreter
        os.close(read_fd)
        os.close(write_fd)
        return lambda: None
    wanted = {int(signal.SIGINT), int(signal.SIGTERM)}
    generation = _stopping["generation"]

    def current() -> bool:
        return _stopping["generation"] == generation and not _stopping["handled"]

    def grace() -> None:
        from ccplan import limits

        limits.request_stop()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline:
            if not current():
                return
            time.sleep(0.1)
        with _STOP_LOCK:  # the command cannot take the interrupt path meanwhile
            if not current():
                return
            _stopping["handled"] = True
            text = "nothing saved"
            rescue = _stopping.get("rescue")
            if callable(rescue):
                try:
                    text = str(rescue())
                except Exception:  # the promised line all the same
                    log.debug("saving on interrupt failed", exc_info=True)
            late = f"the engine did not stop within {STOP_GRACE_SECONDS:g} s"
            os.write(2, f"ccplan: interrupted; {text} ({late})\n".encode())
            os._exit(EXIT_INTERRUPTED)

    def watch() -> None:
        # Keep draining the pipe until undo() closes its write end, so that later signals
        # never find it full or closed.
        started = False
        try:
            while True:
                data = os.read(read_fd, 64)
                if not data:
                    return
                if wanted & set(data) and not started:
                    started = True
                    threading.Thread(target=grace, name="ccplan-stop-grace", daemon=True).start()
        except OSError:
            return
        finally:
            os.close(read_fd)  # only this thread reads it, so only it closes it

    threading.Thread(target=watch, name="ccplan-signal-watch", daemon=True).start()

    def undo() -> None:
        _stopping["generation"] += 1
        signal.set_wakeup_fd(old_fd)
        os.close(write_fd)  # the watcher's read returns b"" and it ends

    return undo


def _bad_input(exc: BaseException) -> str | None:
    """What an exception says about the input, when its class can only come from a bad input
    file (a parser's error, a truncated archive, a runaway nesting or number), else None.

    The last-resort guard of :func:`main`: every reader refuses bad input by name with a
    :class:`~ccplan.errors.ValidationError` first; this keeps one it missed at exit 2.
    """
    import json
    import xml.parsers.expat
    import zipfile
    import zlib
    from xml.etree.ElementTree import ParseError

    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    text = show(str(exc), 120)
    if isinstance(exc, RecursionError):
        return "an input is nested too deeply to read"
    if isinstance(exc, UnicodeDecodeError):
        return f"an input file is not UTF-8 text ({text})"
    syntax = (json.JSONDecodeError, tomllib.TOMLDecodeError, ParseError, xml.parsers.expat.ExpatError)
    if isinstance(exc, syntax):
        return f"an input file is not well-formed ({type(exc).__name__}: {text})"
    if isinstance(exc, (zipfile.BadZipFile, zlib.error, EOFError)):
        return f"an input file is truncated or corrupt ({type(exc).__name__}: {text})"
    if isinstance(exc, OverflowError) or (
        isinstance(exc, ValueError) and "integer string conversion" in str(exc)
    ):
        return f"a number in the input is out of range ({type(exc).__name__}: {text})"
    return None


def _safe_streams() -> None:
    """Let stdout and stderr write any text: under an ASCII locale a topology name with
    non-ASCII letters is printed with backslash escapes instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = str(getattr(stream, "encoding", "") or "").lower().replace("-", "").replace("_", "")
        if reconfigure is not None and encoding not in ("utf8", "utf16", "utf32"):
            with contextlib.suppress(ValueError, OSError):  # a detached or closed stream
                reconfigure(errors="backslashreplace")


def threading_main() -> bool:
    """Whether this runs in the main thread (only it may install signal handlers)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ccplan`` console script; returns the exit code.

    Exit codes: 0 success, 1 a schedule or XML file fails its check, 2 bad input or work
    refused by the memory budget (one line on stderr), 3 no schedule found (infeasible
    horizon, time limit), 4 an internal error (one line; ``-v`` shows the traceback),
    130 interrupted (one line saying what was saved).
    """
    _clock["start"] = time.perf_counter()
    _safe_streams()
    import signal

    def _terminate(signum: int, frame: Any) -> None:
        # SIGTERM (a job scheduler, `kill`) takes the Ctrl-C path: save what there is, exit 130.
        raise KeyboardInterrupt

    # First of all: a SIGTERM during the imports below (a second on a busy machine) must
    # take the same path as one during the work, not end the process without a word.
    old_term = signal.signal(signal.SIGTERM, _terminate) if threading_main() else None

    def early(code: int) -> int:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        return code

    try:
        parser = build_parser()  # imports the method registry (numpy, scipy, ...)
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (one line already printed), --help, --version
        return early(exc.code if isinstance(exc.code, int) else EXIT_USAGE)
    except KeyboardInterrupt:
        print("ccplan: interrupted; nothing saved", file=sys.stderr)
        return early(EXIT_INTERRUPTED)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return early(EXIT_USAGE)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    _stopping["handled"] = False
    _stopping["rescue"] = None
    unwatch = _watch_signals()
    if not args.verbose:
        # Pyomo logs its own account of an interrupted or failed solve; ours is the one line.
        logging.getLogger("pyomo").setLevel(logging.CRITICAL)
    try:
        from ccplan import limits

        if args.memory_budget is not None:
            limits.set_memory_budget(limits.parse_budget(args.memory_budget, "--memory-budget"))
        code = int(args._run(args))
        sys.stdout.flush()  # a broken pipe shows here, inside the handlers below
        return code
    except CCPlanError as exc:
        print(one_line(f"ccplan: error: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _take_interrupt()
        # outside the command's own interrupt path (e.g. while the schedule was verified):
        # what the command set up to save (solve: the engine's best verified schedule)
        text = "nothing saved"
        rescue = _stopping.get("rescue")
        if callable(rescue):
            try:
                text = str(rescue())
            except Exception:
                log.debug("saving on interrupt failed", exc_info=True)
        print(f"ccplan: interrupted; {text}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly, as Unix tools do, keeping the status
        # the command had decided on before it printed.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(getattr(args, "_status", EXIT_OK))
    except OSError as exc:  # the file system refused (a full disk, a permission): one line
        where = f"{str(exc.filename)!r}: " if exc.filename else ""
        print(one_line(f"ccplan: error: {where}{exc.strerror or exc}"), file=sys.stderr)
        return EXIT_USAGE
    except MemoryError:
        print(
            "ccplan: error: out of memory (the work exceeded what the machine or the process limit "
            "allows, and the up-front estimate did not catch it; lower --chunks or the topology size)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except Exception as exc:  # a bug: one line by default, the traceback with -v
        if args.verbose:
            log.exception("internal error")
        why = _bad_input(exc)
        if why is not None:
            # a reader let through an input it should have refused by name: still bad input
            print(one_line(f"ccplan: error: {args.command}: {why}"), file=sys.stderr)
            return EXIT_USAGE
        text = str(exc).splitlines()[0] if str(exc) else ""
        print(
            one_line(
                f"ccplan: internal error: {type(exc).__name__}: {text[:200]} "
                "(rerun with -v for the traceback)"
            ),
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    finally:
        from ccplan import limits as _limits

        _limits.set_memory_budget(None)
        _stopping["rescue"] = None
        unwatch()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


if __name__ == "__main__":
    raise SystemExit(main())
