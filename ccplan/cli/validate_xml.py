"""``ccplan validate-xml``: check an MSCCL XML file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ccplan.cli.output import EXIT_OK, EXIT_VIOLATION


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


def _add_validate_xml(p: argparse.ArgumentParser) -> None:
    p.add_argument("xml", help="MSCCL XML file")
    p.add_argument(
        "--dialect", default="executor", choices=["executor", "legacy"], help="runtime limits to check"
    )
    p.add_argument("--expect", help="schedule JSON whose instance gives the postcondition to check")
