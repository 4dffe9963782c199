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
from collections.abc import Mapping, Sequence
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
    # nccl-tests' -b/-e letters: binary (its parsesize reads K, M, G as 2**10, 2**20, 2**30)
    "K": 2**10,
    "M": 2**20,
    "G": 2**30,
    "T": 2**40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}

_SIZE_HELP = (
    "use bytes or a unit: K, M, G, T (binary, as nccl-tests), KiB ... TiB (binary), KB ... TB (decimal)"
)


def parse_size(text: str | int | float) -> float:
    """Parse a data size: bytes as a number, or a number and a unit (``"64MB"``, ``"128M"``).

    ``KB``, ``MB``, ``GB``, ``TB`` are decimal as in TE-CCL (1KB = 1000 bytes); ``KiB`` ...
    ``TiB`` are binary, and so are the bare letters ``K``, ``M``, ``G``, ``T``, which is how
    nccl-tests reads its ``-b``/``-e`` (``1M`` = 1048576 bytes). Units are case-insensitive.

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
            raise ValidationError(f"size {show(text)} is not understood ({_SIZE_HELP})")
        value = float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
    if not math.isfinite(value) or value <= 0:
        raise ValidationError(f"size must be positive, got {show(text)}")
    if value < 1:
        raise ValidationError(
            f"size must be at least one byte, got {show(text)} ({plain_number(value)} bytes)"
        )
    return value


def format_size(num_bytes: float) -> str:
    """A size as short text that :func:`parse_size` reads back to the same number, never in
    exponent form: a whole number of decimal units (``1e9 -> '1GB'``), else of binary units
    (``2**30 -> '1GiB'``), else bytes (``1536 -> '1536B'``)."""
    for unit in ("TB", "GB", "MB", "KB", "TiB", "GiB", "MiB", "KiB"):
        factor = _SIZE_UNITS[unit.upper()]
        if num_bytes >= factor and float(num_bytes) % factor == 0:
            return f"{int(num_bytes) // factor}{unit}"
    if float(num_bytes).is_integer():
        return f"{int(num_bytes)}B"
    return f"{plain_number(num_bytes, 12)}B"


MAX_SIZES = 64
"""Most sizes one ``-b``/``-e``/``-f`` series may give (each is a row of cells to solve)."""

_LABEL_UNITS = {
    "nccl": (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)),
    "binary": (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)),
    "decimal": (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3)),
}


def _size_style(*texts: str) -> str:
    """The unit family the user wrote (the first text with a unit decides): ``nccl`` for a
    bare K/M/G/T or plain bytes, ``binary`` for KiB ..., ``decimal`` for KB ..."""
    for text in texts:
        unit = re.sub(r"[^A-Za-z]", "", text).upper()
        if unit in ("", "B"):
            continue
        if unit.endswith("IB"):
            return "binary"
        return "decimal" if unit.endswith("B") else "nccl"
    return "nccl"


def _size_label(num_bytes: int, style: str) -> str:
    for unit, factor in _LABEL_UNITS[style]:
        if num_bytes % factor == 0:
            return f"{num_bytes // factor}{unit}"
    return str(num_bytes) if style == "nccl" else f"{num_bytes}B"


def size_series(low: str, high: str, factor: int, *, limit: int = MAX_SIZES) -> tuple[str, ...]:
    """The sizes nccl-tests' ``-b low -e high -f factor`` runs: ``low``, ``low * factor``, ...
    up to and including ``high``, as labels in the units the user wrote (``low`` and, when the
    series reaches it, ``high`` exactly as given; ``-b 1K -e 1G -f 4`` gives 1K, 4K, 16K, ...,
    256M, 1G).

    Raises
    ------
    ValidationError
        A bad size, ``low`` above ``high``, sizes that are no whole number of bytes, a
        factor below 2, or more than ``limit`` sizes.
    """
    lo, hi = parse_size(low), parse_size(high)
    for flag, text, value in (("-b/--min-bytes", low, lo), ("-e/--max-bytes", high, hi)):
        if not value.is_integer():
            raise ValidationError(f"{flag} must be a whole number of bytes, got {show(text)}")
    if lo > hi:
        raise ValidationError(f"-b/--min-bytes {show(low)} is larger than -e/--max-bytes {show(high)}")
    step = int_value(factor, "-f/--step-factor", low=2)
    sizes: list[int] = []
    size = int(lo)
    while size <= hi:
        sizes.append(size)
        if len(sizes) > limit:
            count = len(sizes) + int(math.log(hi / size, step) + 1e-9)
            raise ValidationError(
                f"-b {low} -e {high} -f {step} gives {count} sizes, more than {limit}: "
                "raise -f or narrow -b/-e"
            )
        size *= step
    style = _size_style(low, high)
    labels = [_size_label(s, style) for s in sizes]
    labels[0] = low.strip()
    if sizes[-1] == hi and len(sizes) > 1:
        labels[-1] = high.strip()
    return tuple(labels)


def plain_number(value: float, digits: int = 4) -> str:
    """``value`` in fixed notation with about ``digits`` significant digits and never in
    exponent form (``15000.0 -> '15000'``, ``0.000123 -> '0.000123'``, ``2.5 -> '2.5'``).

    Whole parts are kept in full (``1234567.8 -> '1234568'``); below ``1e-15`` reads ``0``.
    """
    number = float(value)
    if not math.isfinite(number):
        return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")
    if number == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(number)))
    decimals = min(15, max(0, digits - 1 - magnitude))
    text = f"{number:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _squash(text: str) -> str:
    return re.sub(r"[\s_\-]", "", text).lower()


def choose(value: str, choices: Sequence[str], what: str, *, listing: str | None = None) -> str:
    """The entry of ``choices`` that ``value`` names: itself, or the one entry it spells up to
    case, ``-``, ``_`` and spaces (``AllReduce``, ``all_reduce`` -> ``allreduce``).

    Raises
    ------
    ValidationError
        No entry (or more than one) matches: one line naming ``what`` and ``value``, with
        "did you mean" and the close entries (:func:`difflib.get_close_matches`), then
        ``listing`` (default: every choice).
    """
    import difflib

    if value in choices:
        return value
    key = _squash(str(value))
    same = [c for c in choices if _squash(c) == key]
    if len(same) == 1:
        return same[0]
    if not same:
        squashed = {_squash(c): c for c in choices}
        same = [squashed[k] for k in difflib.get_close_matches(key, list(squashed), n=3, cutoff=0.6)]
    hint = f"; did you mean {' or '.join(repr(c) for c in same)}?" if same else ""
    listing = listing if listing is not None else f"choose from {', '.join(choices)}"
    raise ValidationError(f"{what} {show(value)} is unknown{hint} ({listing})")
