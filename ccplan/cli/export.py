"""``ccplan export``: a schedule as MSCCL XML, JSON, a timeline or pictures.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ccplan.cli.args import _positive_int
from ccplan.cli.output import EXIT_OK
from ccplan.errors import ValidationError


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
