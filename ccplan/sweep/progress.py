"""The sweep's summary while it runs: a progress bar with counts, failures and ETA on stderr.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO


class Progress:
    """A one-line progress bar with ETA on stderr (a line per cell when stderr is not a tty)."""

    def __init__(self, total: int, skipped: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total = total
        self.skipped = skipped
        self.done = 0
        self.failed = 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.start = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        if enabled and skipped:
            self.stream.write(f"sweep: {skipped} of {total + skipped} cells already in the table, skipped\n")
            self.stream.flush()

    @staticmethod
    def _hms(seconds: float) -> str:
        s = round(seconds)
        return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"

    def update(self, row: Mapping[str, Any]) -> None:
        self.done += 1
        if row.get("status") == "error":
            self.failed += 1
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        width = 24
        filled = int(width * self.done / max(1, self.total))
        bar = "#" * filled + "." * (width - filled)
        last = f"{row.get('topology')} {row.get('size')} {row.get('method_label')}: {row.get('status')}"
        fail = f" ({self.failed} failed)" if self.failed else ""
        line = (
            f"[{bar}] {self.done}/{self.total}{fail} {100 * self.done / max(1, self.total):3.0f}% "
            f"elapsed {self._hms(elapsed)} ETA {self._hms(eta)}  {last}"
        )
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
