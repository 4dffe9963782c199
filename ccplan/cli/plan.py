"""``ccplan plan``: the best verified schedule, bound and MSCCL XML per collective and size
(:mod:`ccplan.plan`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ccplan.cli.args import _chunks_arg, _nonneg_int, _positive_float, _positive_int, _topology
from ccplan.cli.output import EXIT_INTERRUPTED, EXIT_OK, _fmt
from ccplan.cli.signals import _take_interrupt
from ccplan.errors import ValidationError


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
