"""``ccplan sweep``: run or resume a grid of solves (:mod:`ccplan.sweep`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ccplan.cli.args import _positive_int
from ccplan.cli.output import EXIT_INTERRUPTED, EXIT_OK
from ccplan.cli.signals import _stopping, _take_interrupt


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


def _add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="sweep configuration (TOML), e.g. sweeps/smoke.toml")
    p.add_argument("--out", help="result table (CSV); default: the config's run.out")
    p.add_argument("--dask", metavar="ADDRESS", help="run the cells on a Dask distributed scheduler")
    p.add_argument("--processes", type=_positive_int, help="local worker processes (default 2)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
