"""Exit codes and what the commands share to print and write: number formatting, the JSON
writer, the output checks, the status kept for a broken pipe and the "saved ..." line.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccplan.parsing import plain_number

EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_USAGE = 2
EXIT_NO_SCHEDULE = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130


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
    if isinstance(value, float) and spec == ".4g":
        return plain_number(value)  # 80469 us reads better than 8.047e+04 us (never an exponent)
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
