"""``ccplan plan``: the best verified schedule, bound and MSCCL XML per collective and size
(:mod:`ccplan.plan`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ccplan.cli.args import _arg_type, _chunks_arg, _nonneg_int, _positive_float, _positive_int, _topology
from ccplan.cli.output import EXIT_INTERRUPTED, EXIT_NO_SCHEDULE, EXIT_OK, _fmt, _set_status
from ccplan.cli.signals import _take_interrupt
from ccplan.errors import ValidationError
from ccplan.parsing import MAX_INDEX, one_line


def _csv_list(text: str, option: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items and option != "--baselines":
        raise ValidationError(f"{option} must be a comma-separated list, got {text!r}")
    return items


DEFAULT_SIZES = "1MB,64MB"
"""``--sizes`` when neither it nor ``-b``/``-e`` is given."""


def _sizes(args: argparse.Namespace) -> tuple[str, ...]:
    """``--sizes``, or the geometric series of ``-b``/``-e``/``-f`` as nccl-tests runs it."""
    from ccplan.parsing import size_series

    series = (args.min_bytes, args.max_bytes, args.step_factor)
    if args.sizes is not None:
        if any(x is not None for x in series):
            raise ValidationError("give --sizes or -b/--min-bytes -e/--max-bytes [-f], not both")
        return _csv_list(args.sizes, "--sizes")
    if all(x is None for x in series):
        return _csv_list(DEFAULT_SIZES, "--sizes")
    if args.min_bytes is None or args.max_bytes is None:
        given = "-b/--min-bytes" if args.min_bytes is not None else "-e/--max-bytes"
        if args.min_bytes is None and args.max_bytes is None:
            given = "-f/--step-factor"
        raise ValidationError(
            f"{given} needs both -b/--min-bytes and -e/--max-bytes (e.g. -b 1K -e 1G -f 4)"
        )
    return size_series(args.min_bytes, args.max_bytes, 2 if args.step_factor is None else args.step_factor)


def _no_schedule_line(result: Any) -> str | None:
    """One line naming every (collective, size) without a verified schedule and the first
    reason a cell of it gave, or None when every one has a schedule."""
    failed = [b for b in result.best if "method" not in b]
    if not failed:
        return None
    why = ""
    for b in failed:
        errors = [
            r.get("error") or f"status {r.get('status')}"
            for r in result.rows
            if (r["collective"], r["size"], r["role"]) == (b["collective"], b["size"], "candidate")
        ]
        if errors:
            why = f" (first: {errors[0]})"
            break
    cells = ", ".join(f"{b['collective']}@{b['size']}" for b in failed)
    count = f"{len(failed)} of {len(result.best)}"
    return f"ccplan: error: no verified schedule for {count} cells: {cells}{why}"


def _print_tables(request: Any, result: Any) -> None:
    from ccplan.export.nccl_table import DTYPE, DTYPE_BYTES, table_lines
    from ccplan.pipeline import BUSBW_FACTORS

    n = len(request.topology.gpus)
    print(
        f"# ccplan plan: {request.topology.name}, {n} GPUs; times from the alpha-beta model of the "
        "machine, not measurements"
    )
    print(
        f"# count: elements of {DTYPE} ({DTYPE_BYTES} bytes, assumed), as nccl-tests counts them; "
        "bound: physical lower bound (any chunking); gap = 1 - bound / time"
    )
    if any(b.get("role") == "baseline" for b in result.best):
        print("# method*: a baseline was the fastest verified schedule of that size (it is the one exported)")
    for coll in request.collectives:
        factor = BUSBW_FACTORS.get(coll)
        entries = [b for b in result.best if b["collective"] == coll]
        print("#")
        for line in table_lines(coll, entries, n, 1.0 if factor is None else factor(n)):
            print(line)


def cmd_plan(args: argparse.Namespace) -> int:
    from ccplan.cli.args import _collective_name, _method_name
    from ccplan.errors import SolveInterrupted
    from ccplan.plan import PlanRequest, run_plan

    request = PlanRequest(
        topology=_topology(args),
        collectives=tuple(_collective_name(c) for c in _csv_list(args.collectives, "--collectives")),
        sizes=_sizes(args),
        methods=tuple(_method_name(m) for m in _csv_list(args.methods, "--methods")),
        baselines=tuple(_method_name(b, "baseline") for b in _csv_list(args.baselines, "--baselines")),
        chunks=args.chunks,
        time_limit=args.time_limit,
        workers=args.workers,
        root=args.root,
        switch_reduce=args.switch_reduce,
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
    failed = _no_schedule_line(result)
    # the exit code is decided before printing, so a broken pipe keeps it
    code = _set_status(args, EXIT_OK if failed is None else EXIT_NO_SCHEDULE)
    _print_tables(request, result)
    out = Path(args.out)
    files = len(result.xml_files)
    xml = f"{out / 'xml'} ({files} file{'' if files == 1 else 's'})"
    print(f"# xml -> {xml}; every cell -> {out / 'plan.csv'}")
    print(f"report -> {result.report}")
    if failed is not None:
        print(one_line(failed), file=sys.stderr)
    return code


_STEP = f"an integer in 2..{MAX_INDEX}"
_step_factor = _arg_type(int, _STEP, lambda v: 2 <= v <= MAX_INDEX, _STEP)


def _add_plan(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--topology", required=True, help="built-in name or topology JSON (e.g. from import-topology)"
    )
    p.add_argument("--chassis", type=_positive_int, help="chassis count for ndv2, dgx2, amd")
    p.add_argument("--topo-arg", action="append", metavar="KEY=VALUE", help="built-in parameter (repeatable)")
    p.add_argument(
        "--collectives", default="allgather,allreduce", help="comma-separated (default allgather,allreduce)"
    )
    p.add_argument(
        "--sizes",
        help=f"comma-separated output sizes (default {DEFAULT_SIZES}): 64KB, 1MB (decimal), 128M, 1G "
        "(binary, as nccl-tests) or 1GiB; the files and tables name each as written",
    )
    p.add_argument(
        "-b", "--min-bytes", metavar="SIZE", help="smallest size of a series, as nccl-tests' -b (e.g. 1K)"
    )
    p.add_argument(
        "-e", "--max-bytes", metavar="SIZE", help="largest size of a series, as nccl-tests' -e (e.g. 1G)"
    )
    p.add_argument(
        "-f",
        "--step-factor",
        type=_step_factor,
        metavar="F",
        help="multiply the size by F (an integer >= 2, default 2) from -b up to -e, as nccl-tests' -f",
    )
    p.add_argument(
        "--methods", default="heuristic,milp", help="candidates for the best (default heuristic,milp)"
    )
    p.add_argument("--baselines", default="ring,tree", help="reported beside the best ('' for none)")
    # the same argument types as `solve`: the same values are refused with the same line
    p.add_argument(
        "--chunks",
        type=_chunks_arg,
        default="auto",
        help="chunks per contribution C, or `auto` (default): per cell, C = 1, 2, 4, ... until the "
        "slot model comes within 1%% of the physical bound or the cell's time is up",
    )
    p.add_argument("--root", type=_nonneg_int, help="root GPU of rooted collectives")
    p.add_argument(
        "--switch-reduce",
        action="store_true",
        help="switches add partial sums themselves (NVLS / SHARP-class hardware); off, they only relay",
    )
    p.add_argument("--time-limit", type=_positive_float, default=10.0, help="seconds per cell (default 10)")
    p.add_argument("--workers", type=_positive_int, default=1, help="CP-SAT workers per cell (default 1)")
    p.add_argument("--out", required=True, help="output directory (report.md, xml/, schedules/, img/)")
    p.add_argument("--dask", metavar="ADDRESS", help="run the cells on a Dask distributed scheduler")
    p.add_argument("--processes", type=_positive_int, default=1, help="local worker processes (default 1)")
    p.add_argument("--no-plots", action="store_true", help="skip the pictures")
    p.add_argument("--quiet", action="store_true", help="no per-cell progress lines")
