"""``ccplan validate-xml``: check an MSCCL XML file, or a directory of them."""

from __future__ import annotations

import argparse
from pathlib import Path

from ccplan.cli.output import EXIT_OK, EXIT_VIOLATION


def cmd_validate_xml(args: argparse.Namespace) -> int:
    from ccplan.export.xml_validate import validate_xml

    if Path(args.xml).is_dir():
        return _validate_dir(args)
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


def _validate_dir(args: argparse.Namespace) -> int:
    """Every ``*.xml`` file, then the size ranges per (collective, ngpus, buffer mode)."""
    from ccplan.errors import ValidationError
    from ccplan.export.xml_validate import validate_directory

    if args.expect:
        raise ValidationError("--expect: checks one file against one schedule; give a file, not a directory")
    report = validate_directory(args.xml, dialect=args.dialect)
    spans = {h.path.name: h for h in report.headers}
    for name, file_report in report.files.items():
        h = spans.get(name)
        what = "" if h is None else f"  {h.kind} {'+'.join(h.modes)} bytes {h.span()} proto={h.proto}"
        if file_report.ok:
            print(f"OK  {name}{what}")
        else:
            print(f"FAILED  {name}: {len(file_report.errors)} error(s)")
            for err in file_report.errors:
                print(f"  {err}")
    for name in report.not_xml:
        print(
            f"FAILED  {name}: not an XML file; RCCL and the MSCCL executor parse every regular file "
            "of MSCCL_ALGO_DIR as an algorithm, move it out"
        )
    for line in report.unreadable:
        print(f"FAILED  {line}")
    for line in report.ranges:
        print(line)
    groups = len({(h.kind, h.ngpus, m) for h in report.headers for m in h.modes})
    if report.ok:
        print(f"OK  {args.xml}: {len(report.files)} file(s); ranges tile [0, inf) in {groups} group(s)")
        return EXIT_OK
    bad = sum(not r.ok for r in report.files.values()) + len(report.not_xml) + len(report.unreadable)
    print(f"FAILED  {args.xml}: {bad} file problem(s), {len(report.ranges)} range problem(s)")
    return EXIT_VIOLATION


def _add_validate_xml(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "xml",
        help="MSCCL XML file, or a directory (every *.xml in it, and their size ranges: per "
        "collective, GPU count and buffer mode they must tile [0, inf) without gap or overlap)",
    )
    p.add_argument(
        "--dialect", default="executor", choices=["executor", "legacy"], help="runtime limits to check"
    )
    p.add_argument("--expect", help="schedule JSON whose instance gives the postcondition to check")
