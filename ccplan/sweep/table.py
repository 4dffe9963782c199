"""The result table: its columns, the append-only CSV file durable row by row and locked
against a second sweep (:class:`ResultTable`), reading it back (:func:`load_results`) and
its Parquet copy.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from ccplan.errors import CCPlanError, ValidationError
from ccplan.sweep.cells import _canonical

log = logging.getLogger("ccplan.sweep")


TIMING_COLUMNS: tuple[str, ...] = (
    "solve_seconds",
    "cell_seconds",
    "host",
    "host_cores",
    "load1",
    "pid",
    "started",
    "finished",
)
"""Columns that legitimately differ between two runs of the same cell."""

COLUMNS: tuple[str, ...] = (
    "key",
    "sweep",
    "topology",
    "topology_name",
    "topology_params",
    "collective",
    "root",
    "size",
    "size_bytes",
    "chunks",
    "method_label",
    "method",
    "time_limit",
    "workers",
    "warm_start",
    "seed",
    "tau_rule",
    "alpha_threshold",
    "alpha_cap_ratio",
    "gpus",
    "nodes",
    "links",
    "chunk_bytes",
    "status",
    "makespan_slots",
    "lower_bound_slots",
    "gap",
    "tau_us",
    "makespan_us",
    "algbw_GBps",
    "busbw_GBps",
    "switch_model",
    "physical_bound_us",
    "physical_gap",
    "physical_binding",
    "claim",
    "verified",
    "num_sends",
    "lower_bound_us",
    "cut_bound_slots",
    "cut_bound_us",
    "bound_us_continuous",
    "bounds",
    "sim_us",
    "sim_algbw_GBps",
    "details",
    "error",
    *TIMING_COLUMNS,
)
"""Columns of the result table, in file order."""

_INT_COLUMNS = frozenset(
    {
        "chunks",
        "workers",
        "seed",
        "gpus",
        "nodes",
        "links",
        "makespan_slots",
        "lower_bound_slots",
        "num_sends",
        "host_cores",
        "pid",
        "root",
    }
)
_FLOAT_COLUMNS = frozenset(
    {
        "size_bytes",
        "time_limit",
        "alpha_threshold",
        "alpha_cap_ratio",
        "chunk_bytes",
        "gap",
        "tau_us",
        "makespan_us",
        "algbw_GBps",
        "busbw_GBps",
        "physical_bound_us",
        "physical_gap",
        "lower_bound_us",
        "cut_bound_slots",
        "cut_bound_us",
        "bound_us_continuous",
        "sim_us",
        "sim_algbw_GBps",
        "solve_seconds",
        "cell_seconds",
        "load1",
    }
)
_BOOL_COLUMNS = frozenset({"warm_start", "verified"})
_JSON_COLUMNS = frozenset({"topology_params", "bounds", "details"})


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    text = value if isinstance(value, str) else _canonical(value)
    # One physical line per row is what makes a torn last row detectable.
    return text.replace("\r", " ").replace("\n", " | ")


class ResultTable:
    """An append-only CSV table, durable row by row.

    Parameters
    ----------
    path : Path
    columns : sequence of str
    """

    def __init__(self, path: Path, columns: Sequence[str] = COLUMNS) -> None:
        self.path = Path(path)
        self.columns = tuple(columns)
        self._fh: TextIO | None = None
        self._lock_fd: int | None = None

    @property
    def lock_path(self) -> Path:
        """The lock file beside the table (``<table>.lock``), present while a sweep writes it."""
        return self.path.with_name(self.path.name + ".lock")

    def _lock(self) -> None:
        """Take the table for this process, or refuse: two sweeps on one table would both
        compute and write every cell the other has not finished.

        An exclusive POSIX lock (``lockf``) on ``<table>.lock``: released by the kernel when
        the process ends, however it ends, and not inherited by the worker processes (a
        ``flock`` would be, and a killed sweep's dying workers would hold it). The file holds
        the owner's pid for the message and is removed on :meth:`close`. A lock file removed
        by its owner between our open and our lock is detected (another inode at the path)
        and opened again.
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no locking
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                owner = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise ValidationError(
                    f"results table {str(self.path)!r} is being written by another sweep (pid {owner}); "
                    "wait for it to finish (then rerun to resume) or write to another file (--out)"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def open(self) -> set[str]:
        """Lock the table (:meth:`_lock`), open it for appending (repairing a torn last
        line) and return the keys already present."""
        self._lock()
        try:
            return self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> set[str]:
        keys: set[str] = set()
        if self.path.exists() and self.path.stat().st_size > 0:
            raw = self.path.read_bytes()
            if not raw.endswith(b"\n"):
                cut = raw.rfind(b"\n") + 1
                log.warning("%s: dropping a partially written last row (%d bytes)", self.path, len(raw) - cut)
                with self.path.open("r+b") as fh:
                    fh.truncate(cut)
                    fh.flush()
                    os.fsync(fh.fileno())
                raw = raw[:cut]
            text = raw.decode()
            reader = csv.reader(io.StringIO(text))
            header = next(reader, None)
            records = list(reader)
            if header is not None and tuple(header) != self.columns:
                if not set(header) <= set(self.columns) or "key" not in header:
                    raise ValidationError(
                        f"table {str(self.path)!r} has columns this version of ccplan does not write "
                        f"({', '.join(sorted(set(header) - set(self.columns))) or 'no key'}); "
                        "write to a new file (--out)"
                    )
                records = self._upgrade(header, records)
            for rec in records:
                if len(rec) == len(self.columns):
                    keys.add(rec[0])
                elif rec:
                    log.warning("%s: ignoring a malformed row (%d fields)", self.path, len(rec))
            if header is None:
                self.path.write_text("")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", newline="")
        if self._fh.tell() == 0:
            self._write([str(c) for c in self.columns])
        return keys

    def _upgrade(self, header: list[str], records: list[list[str]]) -> list[list[str]]:
        """Rewrite a table of an older column set (a subset of ours) with empty new columns."""
        log.warning(
            "%s: adding columns %s to an older table",
            self.path,
            ", ".join(c for c in self.columns if c not in header),
        )
        index = {c: i for i, c in enumerate(header)}
        out = [
            [rec[index[c]] if c in index else "" for c in self.columns]
            for rec in records
            if len(rec) == len(header)
        ]
        tmp = self.path.with_name(self.path.name + ".upgrade")
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(self.columns)
            writer.writerows(out)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(self.path)
        return out

    def _write(self, values: Sequence[str]) -> None:
        assert self._fh is not None
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(values)
        self._fh.write(buf.getvalue())
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def append(self, row: Mapping[str, Any]) -> None:
        """Write one row (missing columns empty) and make it durable."""
        self._write([_cell_text(row.get(c)) for c in self.columns])

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._lock_fd is not None:
            # removed while still locked, so a sweep that opened it meanwhile sees the change
            with contextlib.suppress(OSError):
                self.lock_path.unlink()
            os.close(self._lock_fd)
            self._lock_fd = None


def _parse_value(column: str, text: str) -> Any:
    if text == "":
        return None
    try:
        if column in _INT_COLUMNS:
            return int(float(text))
        if column in _FLOAT_COLUMNS:
            return float(text)
    except ValueError:
        return text
    if column in _BOOL_COLUMNS:
        return text.lower() == "true"
    if column in _JSON_COLUMNS:
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    return text


def load_results(paths: str | Path | Iterable[str | Path]) -> list[dict[str, Any]]:
    """Read one or more result tables into typed dicts (numbers, booleans, JSON decoded).

    A missing file is skipped with a warning, so plotting scripts work on partial results.
    A torn last line (a sweep killed mid-write) is ignored.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows: list[dict[str, Any]] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            log.warning("result table %s does not exist (yet)", path)
            continue
        text = path.read_text()
        if text and not text.endswith("\n"):
            text = text[: text.rfind("\n") + 1]
        reader = csv.DictReader(io.StringIO(text))
        for rec in reader:
            if None in rec or any(v is None for v in rec.values()):
                continue
            rows.append({k: _parse_value(k, v) for k, v in rec.items()})
    return rows


def write_parquet(csv_path: str | Path, parquet_path: str | Path | None = None) -> Path:
    """Copy a result table to Parquet (needs ``pyarrow``; CSV stays the primary format)."""
    try:
        import pyarrow as pa  # noqa: F401
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        raise CCPlanError("Parquet output needs the 'pyarrow' package: pip install pyarrow") from None
    src = Path(csv_path)
    dst = Path(parquet_path) if parquet_path is not None else src.with_suffix(".parquet")
    pq.write_table(pacsv.read_csv(src), dst)
    return dst
