"""``ccplan plot-progress``: plot a solver progress CSV.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ccplan.cli.output import EXIT_OK


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


def _add_plot_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("csv", help="progress CSV written by `ccplan solve --progress`")
    p.add_argument("--out", required=True, help="image file (.png or .svg)")
