"""The ``ccplan`` command line: a thin layer over the library.

Every command is a library call; this module only parses arguments, prints, and maps
:class:`~ccplan.errors.CCPlanError` to one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccplan.errors import CCPlanError, ValidationError

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
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValidationError(f"--dests must be a comma-separated list of node ids, got {text!r}") from None


def _instance(args: argparse.Namespace) -> Any:
    from ccplan.instances import make_collective, make_instance

    topology = _topology(args)
    collective = make_collective(
        args.collective, topology, chunks=args.chunks, root=args.root, dests=_parse_dests(args.dests)
    )
    return make_instance(
        topology,
        collective,
        args.size,
        tau_rule=args.tau_rule,
        tau_us=args.tau_us,
        alpha_threshold=args.alpha_threshold,
        single_port=args.single_port,
    )


def _add_instance_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("instance")
    g.add_argument(
        "--topology", required=True, help="built-in name (see `ccplan topologies`) or a topology JSON file"
    )
    g.add_argument("--chassis", type=int, help="chassis count for ndv2, dgx2, amd")
    g.add_argument(
        "--topo-arg",
        action="append",
        metavar="KEY=VALUE",
        help="parameter of a built-in topology, e.g. n=8 (repeatable)",
    )
    g.add_argument("--collective", default="allgather", help="allgather (default), broadcast, ...")
    g.add_argument("--root", type=int, help="root GPU of rooted collectives (default: the first GPU)")
    g.add_argument("--dests", help="multicast destinations, comma-separated")
    g.add_argument("--size", default="1MB", help="output buffer size, e.g. 64KB, 1MB, 1GB (decimal) or bytes")
    g.add_argument("--chunks", type=int, default=1, help="chunks per contribution C (default 1)")
    g.add_argument(
        "--tau-rule",
        default="fastest",
        choices=["fastest", "slowest", "explicit"],
        help="slot length from the fastest link (paper, default), the slowest, or --tau-us",
    )
    g.add_argument("--tau-us", type=float, help="explicit slot length in microseconds")
    g.add_argument(
        "--alpha-threshold",
        type=float,
        default=0.1,
        help="alpha/tau at or below this counts as 0 slots (default 0.1, as TE-CCL)",
    )
    g.add_argument("--single-port", action="store_true", help="one send and one receive per node per slot")


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def _fmt(value: Any, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def _check_writable(*paths: Path | None) -> None:
    for path in paths:
        if path is not None and not path.parent.exists():
            raise ValidationError(
                f"cannot write {str(path)!r}: directory {str(path.parent)!r} does not exist"
            )


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


def _memory_budget(text: str) -> float:
    from ccplan.instances.instance import parse_size

    try:
        value = parse_size(text)
    except (ValueError, CCPlanError):
        value = -1.0
    if not value > 0:
        raise ValidationError(f"--memory-budget must be a positive size such as 3GB, got {text!r}")
    return value


def cmd_solve(args: argparse.Namespace) -> int:
    from ccplan.methods import SolveOptions, get_engine, solve
    from ccplan.schedule import save_schedule

    out = Path(args.out) if args.out else None
    report_path = Path(args.report) if args.report else None
    log_path = Path(args.log) if args.log else None
    progress_path = Path(args.progress) if args.progress else None
    dump = Path(args.dump_model) if args.dump_model else None
    _check_writable(out, report_path, log_path, progress_path, dump)
    instance = _instance(args)
    get_engine(args.method)  # an unknown method fails before any work starts
    extra: dict[str, Any] = {"on_progress": _progress_printer(args.quiet)}
    if args.solver:
        extra["solver"] = args.solver
    if args.strategy:
        extra["strategy"] = args.strategy
    if args.cpsat_params:
        extra["cpsat_params"] = args.cpsat_params
    if args.memory_budget:
        extra["memory_budget"] = _memory_budget(args.memory_budget)
    if args.prove:
        extra["prove"] = True
    options = SolveOptions(
        time_limit=args.time_limit,
        workers=args.workers,
        seed=args.seed,
        horizon=args.horizon,
        warm_start=not args.no_warm_start,
        log_path=log_path,
        progress_path=progress_path,
        dump_model=dump,
        extra=extra,
    )
    if not args.quiet:
        print(f"solving {instance.describe()} with {args.method} ...", file=sys.stderr, flush=True)
    result = solve(instance, args.method, options)
    data = result.to_dict(instance)
    if result.schedule is not None and out is not None:
        save_schedule(out, instance, result.schedule)
    if report_path is not None:
        _write_json(report_path, data)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        rows = [
            ("instance", data["instance"]),
            ("method", data["method"]),
            ("status", data["status"]),
            ("makespan", f"{_fmt(data['makespan_slots'])} slots = {_fmt(data['makespan_us'])} us"),
            ("lower bound", f"{data['lower_bound_slots']} slots (gap {_fmt(data['gap'], '.1%')})"),
            ("algbw", f"{_fmt(data['algbw_GBps'])} GB/s"),
            ("verified", str(data["verified"])),
            ("sends", _fmt(data["num_sends"])),
            ("seconds", f"{data['solve_seconds']:.3f}"),
        ]
        width = max(len(k) for k, _ in rows)
        for key, value in rows:
            print(f"{key:<{width}}  {value}")
        for written, what in (
            (out, "schedule"),
            (report_path, "report"),
            (log_path, "solver log"),
            (progress_path, "progress"),
            (dump, "model"),
        ):
            if written is not None and written.exists():
                print(f"{what:<{width}}  -> {written}")
    if result.schedule is not None and not result.verified:
        print("ccplan: error: the schedule failed verification (see the report)", file=sys.stderr)
        return EXIT_VIOLATION
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from ccplan.schedule import load_schedule, verify

    instance, schedule = load_schedule(args.schedule)
    report = verify(instance, schedule)
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

    instance = _instance(args)
    bounds = compute_bounds(instance)
    data: dict[str, Any] = {"instance": instance.describe(), "tau_us": instance.tau_us, **bounds.to_dict()}
    if not args.no_upper:
        from ccplan.methods import SolveOptions, solve

        res = solve(instance, args.upper_method, SolveOptions(time_limit=args.time_limit, seed=0))
        data["upper_bound_method"] = args.upper_method
        data["upper_bound_slots"] = res.makespan_slots
        data["upper_bound_us"] = res.makespan_us
        data["upper_bound_verified"] = res.verified
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
    from ccplan.schedule import load_schedule, save_schedule

    instance, schedule = load_schedule(args.schedule)
    out = Path(args.out)
    _check_writable(out)
    fmt = args.format
    if fmt == "json":
        save_schedule(out, instance, schedule)
    elif fmt == "timeline":
        from ccplan.export.schedule_json import write_timeline

        write_timeline(out, instance, schedule)
    elif fmt == "msccl-xml":
        from ccplan.export.msccl import to_msccl_xml

        text = to_msccl_xml(
            instance,
            schedule,
            dialect=args.dialect,
            proto=args.proto,
            channels=args.channels,
            instances=args.instances,
            inplace=not args.out_of_place,
        )
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(out)
    elif fmt in ("gantt", "utilization"):
        from ccplan.export import plots

        getattr(plots, fmt)(instance, schedule, out)
    else:  # argparse restricts choices; kept for mypy's exhaustiveness
        raise ValidationError(f"unknown export format {fmt!r}")
    print(f"wrote {out}")
    return EXIT_OK


def cmd_validate_xml(args: argparse.Namespace) -> int:
    from ccplan.export.xml_validate import validate_xml

    expect = None
    if args.expect:
        from ccplan.schedule import load_schedule

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
    from ccplan.export.plots import plot_progress

    out = Path(args.out)
    _check_writable(out)
    plot_progress(Path(args.csv), out)
    print(f"wrote {out}")
    return EXIT_OK


def cmd_simulate(args: argparse.Namespace) -> int:
    from ccplan.schedule import load_schedule
    from ccplan.schedule.simulate import simulate

    instance, schedule = load_schedule(args.schedule)
    sim = simulate(instance, schedule, reduce_cost_us_per_byte=args.reduce_cost)
    print(f"instance    {instance.describe()}")
    print(f"completion  {sim.completion_us:.6g} us (alpha-beta, continuous time)")
    print(f"algbw       {_fmt(sim.algbw_GBps)} GB/s")
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    from ccplan.sweep import run_sweep

    path = run_sweep(
        args.config, out=args.out, dask_address=args.dask, progress=not args.quiet, processes=args.processes
    )
    print(f"results -> {path}")
    return EXIT_OK


def cmd_methods(args: argparse.Namespace) -> int:
    from ccplan.methods import method_names

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
    from ccplan.methods import method_names

    _add_instance_args(p)
    g = p.add_argument_group("method")
    g.add_argument(
        "--method", default="heuristic", help=f"engine: {', '.join(method_names())} (default heuristic)"
    )
    g.add_argument("--time-limit", type=float, help="seconds for the engine")
    g.add_argument("--workers", type=int, default=2, help="CP-SAT workers (default 2)")
    g.add_argument("--seed", type=int, default=0, help="random seed")
    g.add_argument(
        "--horizon", type=int, help="slot horizon H for the MILP (default: the heuristic's makespan)"
    )
    g.add_argument(
        "--no-warm-start", action="store_true", help="do not hint the MILP with the heuristic schedule"
    )
    g.add_argument("--solver", help="Pyomo backend for --method milp: cpsat (default) or highs")
    g.add_argument("--strategy", help="MILP search strategy: auto (default), ascending, descending or direct")
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
        help="largest MILP model (estimated peak memory) --method milp builds, e.g. 3GB (default)",
    )
    g = p.add_argument_group("output")
    g.add_argument("--out", help="write the schedule JSON here")
    g.add_argument("--report", help="write the result JSON here")
    g.add_argument("--log", help="write the solver's full search log here")
    g.add_argument("--progress", help="write the incumbent/bound trajectory as CSV here")
    g.add_argument("--dump-model", help="write the MILP as .lp or .mps here")
    g.add_argument("--json", action="store_true", help="print the result JSON instead of a table")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--max-violations", type=int, default=20, help="violations to print (default 20)")


def _add_bounds(p: argparse.ArgumentParser) -> None:
    _add_instance_args(p)
    p.add_argument("--no-upper", action="store_true", help="skip the heuristic upper bound")
    p.add_argument(
        "--upper-method", default="heuristic", help="method giving the upper bound (default heuristic)"
    )
    p.add_argument("--time-limit", type=float, help="seconds for the upper-bound heuristic")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _add_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument(
        "--format", required=True, choices=["msccl-xml", "json", "timeline", "gantt", "utilization"]
    )
    p.add_argument("--out", required=True, help="output file (.xml, .json, .png, .svg)")
    p.add_argument("--dialect", default="executor", choices=["executor", "legacy"], help="MSCCL XML dialect")
    p.add_argument("--proto", default="Simple", choices=["Simple", "LL", "LL128"], help="MSCCL protocol")
    p.add_argument("--channels", type=int, default=1, help="MSCCL channels")
    p.add_argument("--instances", type=int, default=1, help="MSCCL instances")
    p.add_argument("--out-of-place", action="store_true", help="out-of-place buffers (default in-place)")
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
    p.add_argument("--reduce-cost", type=float, default=0.0, help="reduce cost in us per byte (default 0)")


def _add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="sweep configuration (TOML), e.g. sweeps/smoke.toml")
    p.add_argument("--out", help="result table (CSV); default: the config's run.out")
    p.add_argument("--dask", metavar="ADDRESS", help="run the cells on a Dask distributed scheduler")
    p.add_argument("--processes", type=int, help="local worker processes (default 2)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


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
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, exit 2, no usage dump
        self.exit(EXIT_USAGE, f"ccplan: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per entry of :data:`COMMANDS`."""
    from ccplan import __version__

    parser = _Parser(prog="ccplan", description="Topology-aware schedules for collective communication.")
    parser.add_argument("--version", action="version", version=f"ccplan {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, command in COMMANDS.items():
        p = sub.add_parser(name, help=command.help, description=command.help)
        command.add(p)
        p.set_defaults(_run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ccplan`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args._run(args))
    except CCPlanError as exc:
        print(f"ccplan: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ccplan: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into e.g. `head`: stop quietly, as Unix tools do.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
