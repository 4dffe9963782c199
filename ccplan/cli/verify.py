"""``ccplan verify``: check a schedule file with the independent verifier.
"""

from __future__ import annotations

import argparse
import json

from ccplan.cli.args import _nonneg_int
from ccplan.cli.output import EXIT_OK, EXIT_VIOLATION, _fmt, _set_status


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


def _add_verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    p.add_argument("--max-violations", type=_nonneg_int, default=20, help="violations to print (default 20)")
