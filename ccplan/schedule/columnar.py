"""Columnar schedule file (``.npz``) for big schedules.

A JSON schedule spends about 50 bytes per send on keys and digits (a million sends: ~50 MB,
and parsing it builds a dict per send). The columnar file keeps the same content as numpy
columns in a compressed ``.npz`` archive:

- ``slot``, ``chunk_source``, ``chunk_index``, ``src``, ``dst``: integers, one entry per
  send, in the schedule's chronological order; written in the narrowest unsigned type that
  holds the column (``uint16`` for node ids and slots below 65,536), read as any integer type
  (a 64x64 torus AllGather: 10 bytes per send to compress instead of 41);
- ``reduce``: bool, one entry per send;
- ``header``: a 0-d unicode array holding JSON ``{"format": "ccplan-schedule-columnar/1",
  "method": ..., "instance": {...}}`` (the instance exactly as in the JSON file).

:func:`ccplan.schedule.save_schedule` and :func:`~ccplan.schedule.load_schedule` pick this
format for a path ending in ``.npz`` (so ``ccplan solve --out run.npz`` writes it and
``ccplan verify run.npz`` reads it); every other path stays JSON. Loading checks what the JSON
loader checks: known format, the columns present with equal lengths, integer values >= 0,
``reduce`` only for combining collectives; arrays are read without pickle.
"""

from __future__ import annotations

import contextlib
import json
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance
from ccplan.parsing import MAX_INDEX, loads_json, shorten, show
from ccplan.schedule.core import Schedule

COLUMNAR_FORMAT = "ccplan-schedule-columnar/1"
COLUMNS: tuple[str, ...] = ("slot", "chunk_source", "chunk_index", "src", "dst")


def is_columnar(path: str | Path) -> bool:
    """Whether ``path`` names a columnar schedule file (suffix ``.npz``)."""
    return Path(path).suffix.lower() == ".npz"


def schedule_columns(schedule: Schedule) -> dict[str, np.ndarray]:
    """The schedule's sends as numpy columns (see the module docstring).

    A schedule built from columns hands over the ones it keeps (no Send objects are made).
    """
    return dict(schedule.columns())


def save_columnar(path: str | Path, instance: Instance, schedule: Schedule) -> None:
    """Write the columnar file atomically (a temporary file renamed into place)."""
    from ccplan.atomic import staging_path

    target = Path(path)
    if target.is_dir():
        raise ValidationError(f"cannot write {str(target)!r}: it is a directory")
    header = {"format": COLUMNAR_FORMAT, "method": schedule.method, "instance": instance.to_dict()}
    tmp = staging_path(target)
    try:
        with tmp.open("wb") as fh:
            arrays: dict[str, Any] = {"header": np.array(json.dumps(header))}
            for name, col in schedule_columns(schedule).items():
                # values are >= 0 (Schedule checks them): the narrowest unsigned type holds them
                narrow = np.min_scalar_type(int(col.max())) if len(col) and name in COLUMNS else col.dtype
                arrays[name] = col.astype(narrow, copy=False)
            np.savez_compressed(fh, **arrays)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _column(data: Any, name: str, where: str) -> np.ndarray:
    if name not in data.files:
        raise ValidationError(f"{where}: column {name!r} is missing")
    try:
        return np.asarray(data[name])
    except (ValueError, EOFError, OSError, zipfile.BadZipFile, zlib.error) as exc:
        # an object array (refused without pickle), a truncated or corrupt member
        raise ValidationError(f"{where}: column {name!r} is unreadable ({shorten(str(exc))})") from None


def check_columns(cols: dict[str, np.ndarray], where: str) -> None:
    """Refuse columns of the wrong shape or kind before anything measures or indexes them:
    every column one-dimensional (a 0-d or 2-d array is no column), the send columns of an
    integer type, ``reduce`` boolean, all of one length.

    Raises
    ------
    ValidationError
        Naming the file and the first bad column.
    """
    for name, col in cols.items():
        if col.ndim != 1:
            raise ValidationError(
                f"{where}: column {name!r} must be one-dimensional, got shape {tuple(col.shape)}"
            )
        wanted = np.bool_ if name == "reduce" else np.integer
        if not np.issubdtype(col.dtype, wanted):
            kind = "booleans" if name == "reduce" else "integers"
            raise ValidationError(f"{where}: column {name!r} must hold {kind}, got {col.dtype}")
        if name != "reduce" and len(col) and col.max() > MAX_INDEX:
            i = int(np.argmax(col > MAX_INDEX))
            raise ValidationError(
                f"{where}: {name}[{i}] must be at most {MAX_INDEX}, got {show(int(col[i]))}"
            )
    lengths = {name: len(col) for name, col in cols.items()}
    if len(set(lengths.values())) > 1:
        n = lengths.get("slot", 0)
        name = next(k for k, v in lengths.items() if v != n)
        raise ValidationError(f"{where}: column {name!r} must be one-dimensional with {n} entries")


def _header_instance(data: Any, where: str) -> tuple[Instance, str]:
    raw = _column(data, "header", where)
    if raw.ndim != 0 or raw.dtype.kind != "U":
        raise ValidationError(
            f"{where}: header must be a 0-d unicode array, got {raw.dtype} of shape {tuple(raw.shape)}"
        )
    header = loads_json(str(raw), f"{where}: header")
    if not isinstance(header, dict) or header.get("format") != COLUMNAR_FORMAT:
        got = header.get("format") if isinstance(header, dict) else header
        raise ValidationError(f"{where}: header.format must be {COLUMNAR_FORMAT!r}, got {got!r}")
    method = header.get("method", "")
    if not isinstance(method, str):
        raise ValidationError(f"{where}: header.method must be a string, got {method!r}")
    if "instance" not in header:
        raise ValidationError(f"{where}: header.instance is missing")
    return Instance.from_dict(header["instance"]), method


def _open(path: str | Path, where: str) -> Any:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValidationError(f"{where}: not a readable .npz archive ({shorten(str(exc))})") from None


def load_columnar_instance(path: str | Path) -> Instance:
    """Only the instance of a columnar file: the header is read, the send columns are not.

    For a reader that needs the instance alone (``ccplan validate-xml --expect run.npz``), so
    a million sends are not decompressed and turned into objects for nothing.

    Raises
    ------
    ValidationError
        As :func:`load_columnar`, for the archive and its header.
    """
    where = f"schedule file {str(path)!r}"
    with _open(path, where) as data:
        return _header_instance(data, where)[0]


def _declared_length(data: Any, where: str) -> int:
    """The number of sends the archive's columns declare, read from their ``.npy`` headers
    without decompressing any data: a few megabytes of zeros can declare a billion sends.

    Raises
    ------
    ValidationError
        A column missing, not one-dimensional, or of another length than ``slot``.
    """
    lengths: dict[str, int] = {}
    for name in (*COLUMNS, "reduce"):
        if name not in data.files:
            raise ValidationError(f"{where}: column {name!r} is missing")
        try:
            with data.zip.open(f"{name}.npy") as fh:
                version = np.lib.format.read_magic(fh)
                if version == (1, 0):
                    shape, _order, _dtype = np.lib.format.read_array_header_1_0(fh)
                else:
                    shape, _order, _dtype = np.lib.format.read_array_header_2_0(fh)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise ValidationError(f"{where}: column {name!r} is not a readable array ({exc})") from None
        if len(shape) != 1:
            raise ValidationError(f"{where}: column {name!r} must be one-dimensional, got shape {shape}")
        lengths[name] = int(shape[0])
    n = lengths["slot"]
    for name, length in lengths.items():
        if length != n:
            raise ValidationError(f"{where}: column {name!r} must be one-dimensional with {n} entries")
    return n


def load_columnar(path: str | Path) -> tuple[Instance, Schedule]:
    """Read a file written by :func:`save_columnar` into ``(instance, schedule)``.

    The number of sends is read from the columns' headers first and checked against the
    memory budget (:func:`ccplan.schedule.estimate.estimate_columnar_load`) before any column is
    decompressed.

    Raises
    ------
    ValidationError
        Not a readable archive, unknown format, a missing or malformed column (named), a
        negative value or a ``reduce`` send in a data-movement collective.
    ResourceLimitError
        The declared sends would not fit the memory budget.
    """
    from ccplan.schedule.estimate import estimate_columnar_load

    where = f"schedule file {str(path)!r}"
    with _open(path, where) as data:
        declared = _declared_length(data, where)
        estimate_columnar_load(declared, where).check()
        instance, method = _header_instance(data, where)
        cols = {name: _column(data, name, where) for name in (*COLUMNS, "reduce")}
    check_columns(cols, where)
    n = len(cols["slot"])
    for name, col in cols.items():
        if col.ndim != 1 or len(col) != n:
            raise ValidationError(f"{where}: column {name!r} must be one-dimensional with {n} entries")
    for name in COLUMNS:
        col = cols[name]
        if not np.issubdtype(col.dtype, np.integer):
            raise ValidationError(f"{where}: column {name!r} must hold integers, got {col.dtype}")
        bad = np.flatnonzero(col < 0)
        if len(bad):
            raise ValidationError(f"{where}: {name}[{int(bad[0])}] must be >= 0, got {int(col[bad[0]])}")
    red = cols["reduce"]
    if red.dtype != np.bool_:
        raise ValidationError(f"{where}: column 'reduce' must hold booleans, got {red.dtype}")
    if red.any() and not instance.collective.combining:
        i = int(np.flatnonzero(red)[0])
        raise ValidationError(
            f"{where}: reduce[{i}] is true but {instance.collective.kind} is not a combining collective"
        )
    # the rows are checked above; from_columns sorts them (a file need not be in order) and
    # keeps them as columns, so no Send object is made unless a reader asks for .sends
    columns = {name: cols[name] for name in COLUMNS}
    return instance, Schedule.from_columns(**columns, reduce=red, method=method)
