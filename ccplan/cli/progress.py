"""Progress printing of ``solve``: the engine's incumbent/bound lines and the progress notes of
long-running engines (:data:`PROGRESS_LOGGERS`) on stderr.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable

from ccplan.cli.output import _fmt

PROGRESS_LOGGERS = ("ccplan.heuristics.layered",)
"""Engines whose long runs note their progress on the log (``layered``: layer and deliveries
done every 10 s); ``solve`` shows these notes on stderr unless ``--quiet``."""


class _ProgressNotes(logging.StreamHandler):  # type: ignore[type-arg]
    """Shows :data:`PROGRESS_LOGGERS`' notes on the current stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("  [progress] %(message)s"))
        self.setLevel(logging.INFO)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr  # the stderr of this call (tests swap it), not of the first
        super().emit(record)


def _show_progress_notes(quiet: bool) -> Callable[[], None]:
    """Attach one :class:`_ProgressNotes` per logger (``main`` may run several times in one
    process), detached again under ``--quiet``; returns what puts the loggers back as they
    were (an in-process caller's own log capture keeps working after the call)."""
    saved = []
    for name in PROGRESS_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate, logger.level))
        for old in [h for h in logger.handlers if isinstance(h, _ProgressNotes)]:
            logger.removeHandler(old)
        if quiet:
            logger.propagate = True
            continue
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.addHandler(_ProgressNotes())
        logger.propagate = False  # once on stderr, not again through the root's handler

    def restore() -> None:
        for logger, propagate, level in saved:
            for old in [h for h in logger.handlers if isinstance(h, _ProgressNotes)]:
                logger.removeHandler(old)
            logger.propagate, logger.level = propagate, level

    return restore


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
