"""Shared checks for numbers and documents that come from users (files and flags).

Every reader of a file (topology and schedule JSON, sweep and class TOML, the columnar
``.npz``) and every numeric flag of the CLI goes through these helpers, so that a bad
value is refused the same way everywhere: a :class:`~ccplan.errors.ValidationError` with
one short line that names the field (or file) and shows the value cut to a bounded length.

Bounds (documented in ``docs/formats.md``):

- :data:`MAX_INDEX` (``2**31 - 1``): node ids, chunk sources and indices, slots, chunk
  counts, workers, horizons and every other count or index;
- :data:`MAX_DIGITS`: the characters of a number's text in a flag, and the digits of an
  integer literal in a JSON document (a longer literal reads as
  :class:`HugeNumber`, which every field check refuses by name);
- :data:`MAX_DEPTH`: the nesting of arrays and objects/tables in a JSON or TOML document,
  checked before any code recurses into it.

This module imports nothing from ccplan but :mod:`ccplan.errors`.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ccplan.errors import ValidationError

MAX_INDEX = 2**31 - 1
"""Largest node id, chunk index, slot or count a file or flag may give."""

MAX_DIGITS = 100
"""Longest number text a flag may give, and the most digits of a JSON integer literal."""

MAX_DEPTH = 64
"""Deepest nesting of arrays and objects (tables) a JSON or TOML document may have."""

VALUE_CHARS = 60
"""A value shown in a message is cut to about this many characters."""

LINE_CHARS = 280
"""An error line of the CLI is cut to this many characters (the field comes first)."""


class HugeNumber(float):
    """An integer literal of more than :data:`MAX_DIGITS` digits, read from a JSON document.

    Its value is ``+inf`` or ``-inf``, so a check for a finite number refuses it and a check
    for an integer (it is no ``int``) too; its ``repr`` names its length instead of the
    thousands of digits, so the message stays one short line.
    """

    digits: int

    def __new__(cls, text: str) -> HugeNumber:
        self = super().__new__(cls, "-inf" if text.startswith("-") else "inf")
        self.digits = len(text.lstrip("-"))
        return self

    def __repr__(self) -> str:
        return f"<a number of {self.digits} digits>"

    __str__ = __repr__


def show(value: Any, limit: int = VALUE_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters (huge integers by their length)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * MAX_DIGITS:
        return f"<a number of about {int(value.bit_length() * math.log10(2)) + 1} digits>"
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        return f"<a {type(value).__name__} nested too deeply to show>"
    return shorten(text, limit)


def shorten(text: str, limit: int = VALUE_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[: max(8, limit - 24)]}... ({len(text)} characters)"


def one_line(message: str, limit: int = LINE_CHARS) -> str:
    """``message`` as one line of at most ``limit`` characters (its start, which names the
    field, is kept)."""
    text = " ".join(str(message).split())
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


# --------------------------------------------------------------------------- numbers
def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_rule(low: int) -> str:
    return {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")


def int_value(value: Any, field: str, *, low: int = 0, high: int = MAX_INDEX) -> int:
    """``value`` as an int in ``[low, high]``; anything else (a bool, a float, a string, a
    huge literal) raises :class:`ValidationError` naming ``field``.

    Integral numpy scalars are accepted (``np.int64(3)``).
    """
    if not _is_int(value):
        if hasattr(value, "dtype") and getattr(value, "shape", None) == () and value.dtype.kind in "iu":
            value = int(value)
        else:
            raise ValidationError(f"{field} must be {_int_rule(low)}, got {show(value)}")
    if value < low:
        raise ValidationError(f"{field} must be {_int_rule(low)}, got {show(value)}")
    if value > high:
        raise ValidationError(f"{field} must be at most {high}, got {show(value)}")
    return int(value)


def float_value(
    value: Any,
    field: str,
    *,
    low: float | None = None,
    high: float | None = None,
    positive: bool = False,
) -> float:
    """``value`` as a finite float (``> 0`` when ``positive``, within ``[low, high]``);
    anything else raises :class:`ValidationError` naming ``field``."""
    rule = "a positive number" if positive else "a number"
    if low is not None:
        rule += f" >= {low:g}"
    if high is not None:
        rule += f" <= {high:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{field} must be {rule}, got {show(value)}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        raise ValidationError(f"{field} must be {rule}, got {show(value)}") from None
    ok = math.isfinite(number) and not (positive and number <= 0)
    ok = ok and (low is None or number >= low) and (high is None or number <= high)
    if not ok:
        raise ValidationError(f"{field} must be {rule}, got {show(value)}")
    return number


def int_text(text: str, field: str, *, low: int = 0, high: int = MAX_INDEX) -> int:
    """Parse a flag's text as an int in ``[low, high]`` (at most :data:`MAX_DIGITS` characters)."""
    raw = str(text).strip()
    if len(raw) > MAX_DIGITS or not re.fullmatch(r"[-+]?[0-9]+", raw):
        raise ValidationError(f"{field} must be {_int_rule(low)} (at most {high}), got {show(text)}")
    return int_value(int(raw), field, low=low, high=high)


def float_text(
    text: str,
    field: str,
    *,
    low: float | None = None,
    high: float | None = None,
    positive: bool = False,
) -> float:
    """Parse a flag's text as a finite float (see :func:`float_value`)."""
    raw = str(text).strip()
    try:
        if len(raw) > MAX_DIGITS:
            raise ValueError(raw)
        number = float(raw)
    except ValueError:
        rule = "a positive number" if positive else "a number"
        raise ValidationError(f"{field} must be {rule}, got {show(text)}") from None
    return float_value(number, field, low=low, high=high, positive=positive)


# --------------------------------------------------------------------------- documents
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def decode_text(data: bytes, where: str, kind: str = "text") -> str:
    """Bytes of a text file as text: UTF-8, or UTF-8/16/32 after a byte order mark (which is
    dropped). Undecodable bytes raise :class:`ValidationError` naming ``where``."""
    encoding = "utf-8"
    for bom, name in _BOMS:
        if data.startswith(bom):
            encoding = name
            break
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        label = encoding.replace("-sig", "").upper()
        raise ValidationError(f"{where}: invalid {kind} (not {label} text, byte {exc.start})") from None


def read_text(path: str | Path, where: str, kind: str = "text") -> str:
    """Read a text file (see :func:`decode_text`); I/O problems raise :class:`ValidationError`."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(f"{where}: {exc.strerror or exc}") from None
    return decode_text(data, where, kind)


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in JSON text, outside strings (no recursion)."""
    import numpy as np

    bare = _JSON_STRING.sub("", text) if '"' in text else text
    codes = np.frombuffer(bare.encode("utf-8", "replace"), dtype=np.uint8)
    opens = (codes == ord("[")) | (codes == ord("{"))
    if not opens.any():
        return 0
    step = opens.astype(np.int64) - ((codes == ord("]")) | (codes == ord("}")))
    return int(np.cumsum(step).max())


def _huge_int(text: str) -> int | float:
    # the digit count is bounded before int() sees it (Python refuses 4,300 digits with a
    # ValueError that names no field)
    return int(text) if len(text) <= MAX_DIGITS else HugeNumber(text)


def loads_json(text: str, where: str) -> Any:
    """Parse JSON text; syntax errors, nesting deeper than :data:`MAX_DEPTH` and huge numbers
    are handled as the module docstring says, errors name ``where``."""
    if text.startswith("\ufeff"):
        text = text[1:]
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise ValidationError(f"{where}: invalid JSON (nested {depth} deep, at most {MAX_DEPTH})")
    try:
        return json.loads(text, parse_int=_huge_int)
    except json.JSONDecodeError as exc:
        raise ValidationError(
            f"{where}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ValidationError(f"{where}: invalid JSON (nested too deeply)") from None


def load_json_file(path: str | Path, what: str) -> Any:
    """Read and parse a JSON file; every problem is one :class:`ValidationError` naming it."""
    where = f"{what} file {shorten(str(path), 120)!r}"
    return loads_json(read_text(path, where, "JSON"), where)


def check_depth(document: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Refuse a parsed document nested deeper than ``limit`` (an iterative walk)."""
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth + 1 > limit:
            raise ValidationError(f"{where}: nested more than {limit} deep")
        stack.extend((child, depth + 1) for child in children)


def loads_toml(text: str, where: str) -> dict[str, Any]:
    """Parse TOML text; syntax errors, runaway nesting and numbers of thousands of digits are
    one :class:`ValidationError` naming ``where``."""
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10 needs the tomli backport
        import tomli as tomllib  # type: ignore[no-redef]
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"{where}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ValidationError(f"{where}: invalid TOML (nested more than {MAX_DEPTH} deep)") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise ValidationError(f"{where}: invalid TOML (a number is too long: {shorten(str(exc))})") from None
    check_depth(data, where)
    return data


def load_toml_file(path: str | Path, what: str) -> dict[str, Any]:
    """Read and parse a TOML file (see :func:`loads_toml`)."""
    where = f"{what} {shorten(str(path), 120)!r}"
    return loads_toml(read_text(path, where, "TOML"), where)


_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
}


def parse_size(text: str | int | float) -> float:
    """Parse a data size: bytes as a number, or ``"1KB"``, ``"64MB"``, ``"1GB"``.

    Units are decimal as in TE-CCL (1KB = 1000 bytes); ``KiB``/``MiB``/``GiB`` are binary.

    Raises
    ------
    ValidationError
        Unparseable text or a size that is not positive.
    """
    if isinstance(text, bool):
        raise ValidationError(f"size must be a number of bytes or like '1MB', got {show(text)}")
    if isinstance(text, (int, float)):
        try:
            value = float(text)
        except OverflowError:  # an int beyond the float range
            value = math.inf
    elif not isinstance(text, str):
        raise ValidationError(f"size must be a number of bytes or like '1MB', got {show(text)}")
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
        if not match or match.group(2).upper() not in _SIZE_UNITS:
            raise ValidationError(
                f"size {show(text)} is not understood (use bytes or a unit: B, KB, MB, GB, KiB, MiB, GiB)"
            )
        value = float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
    if not math.isfinite(value) or value <= 0:
        raise ValidationError(f"size must be positive, got {show(text)}")
    if value < 1:
        raise ValidationError(f"size must be at least one byte, got {show(text)} ({value:g} bytes)")
    return value


def format_size(num_bytes: float) -> str:
    """Inverse of :func:`parse_size` for round decimal sizes (``1e9 -> '1GB'``)."""
    for unit in ("TB", "GB", "MB", "KB"):
        factor = _SIZE_UNITS[unit]
        if num_bytes >= factor and abs(num_bytes / factor - round(num_bytes / factor)) < 1e-9:
            return f"{round(num_bytes / factor)}{unit}"
    return f"{num_bytes:g}B"
