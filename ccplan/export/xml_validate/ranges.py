"""A directory of XML files as a runtime sees it: which file serves which call.

RCCL and the MSCCL executor load every regular file of ``MSCCL_ALGO_DIR`` and run, for a call,
the first loaded file whose ``coll``, ``ngpus`` and buffer mode match and whose
``[minBytes, maxBytes]`` holds the call's size (docs/runtime.md). So, per (collective, GPU
count, buffer mode), the files' ranges must tile ``[0, inf)``: a gap sends those sizes to the
library's own algorithm, an overlap leaves the choice to the load order. The protocol does
not enter the selection, so files of different ``proto`` compete like any others.

:func:`read_header` reads the ``<algo>`` attributes of a file without parsing the rest;
:func:`check_ranges` reports gaps and overlaps; :func:`validate_directory` runs both and
:func:`~ccplan.export.xml_validate.validate_xml` on every file.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ccplan.errors import ValidationError
from ccplan.export.msccl.dialects import COLL_TO_KIND, DIALECTS, MAX_BYTES
from ccplan.export.xml_validate.report import XmlReport

LEGACY_DEFAULT_MAX_BYTES = 1 << 27
"""Legacy MSCCL's ``maxBytes`` when the attribute is absent (128 MiB, ``src/graph/topo.cc``)."""

_ALGO = re.compile(r"<algo\b([^>]*)>", re.S)
_ATTR = re.compile(r'([A-Za-z_][\w.-]*)\s*=\s*"([^"]*)"')
_HEAD_CHARS = 1 << 16


@dataclass(frozen=True)
class AlgoHeader:
    """What the runtime's selection reads from one file (bytes inclusive; None = no limit)."""

    path: Path
    kind: str
    ngpus: int
    inplace: bool
    outofplace: bool
    min_bytes: int
    max_bytes: int | None
    proto: str
    nchunksperloop: int

    @property
    def modes(self) -> tuple[str, ...]:
        """The buffer modes the file serves (``in-place``, ``out-of-place``)."""
        return tuple(m for m, on in (("in-place", self.inplace), ("out-of-place", self.outofplace)) if on)

    def span(self) -> str:
        return f"[{self.min_bytes}..{'inf' if self.max_bytes is None else self.max_bytes}]"


def read_header(path: str | Path, dialect: str = "executor") -> AlgoHeader:
    """The selection attributes of ``path``'s ``<algo>`` element, under ``dialect``'s rules.

    Executor/RCCL: ``minBytes <= nBytes <= maxBytes``, ``maxBytes="0"`` no limit; legacy
    MSCCL: ``minBytes`` default 0, ``maxBytes`` default 128 MiB and exclusive
    (``nbytes < maxBytes``), no ``outofplace`` attribute (``inplace="0"`` is taken as
    out-of-place). In both, ``maxBytes >= 1 TiB`` (:data:`MAX_BYTES`, what ccplan writes for
    "no limit" where ``0`` is not understood) counts as no limit.

    Raises
    ------
    ValidationError
        Unreadable file, no ``<algo>`` element, or a selection attribute missing or not an
        integer (the runtime would reject the file).
    """
    if dialect not in DIALECTS:
        raise ValidationError(f"dialect must be one of {tuple(DIALECTS)}, got {dialect!r}")
    p = Path(path)
    try:
        with p.open(encoding="utf-8", errors="replace") as fh:
            head = fh.read(_HEAD_CHARS)
    except OSError as exc:
        raise ValidationError(f"xml file {str(p)!r}: {exc.strerror or exc}") from None
    # Comments may precede <algo> (the runtime's tokenizer skips them).
    match = _ALGO.search(re.sub(r"<!--.*?-->", "", head, flags=re.S))
    if match is None:
        raise ValidationError(f"{p.name}: no <algo ...> element in its first {_HEAD_CHARS} characters")
    attrs: dict[str, str] = dict(_ATTR.findall(match.group(1)))

    def num(key: str, default: int | None = None) -> int:
        raw = attrs.get(key)
        if raw is None:
            if default is None:
                raise ValidationError(f"{p.name}: <algo> lacks attribute {key!r}")
            return default
        try:
            return int(raw)
        except ValueError:
            raise ValidationError(f"{p.name}: <algo> attribute {key}={raw!r} is not an integer") from None

    legacy = dialect == "legacy"
    coll = attrs.get("coll", "")
    kind = COLL_TO_KIND.get(coll) or coll
    inplace = num("inplace") == 1
    outofplace = (not inplace) if legacy else num("outofplace") == 1
    lo = num("minBytes", 0 if legacy else None)
    raw_max = num("maxBytes", LEGACY_DEFAULT_MAX_BYTES if legacy else None)
    # No call reaches 1 TiB: ccplan's "no limit" for legacy, which has none.
    unbounded = raw_max >= MAX_BYTES or (raw_max == 0 and not legacy)
    hi: int | None = None if unbounded else (raw_max - 1 if legacy else raw_max)
    return AlgoHeader(
        path=p,
        kind=kind,
        ngpus=num("ngpus"),
        inplace=inplace,
        outofplace=outofplace,
        min_bytes=lo,
        max_bytes=hi,
        proto=attrs.get("proto", ""),
        nchunksperloop=num("nchunksperloop"),
    )


def check_ranges(headers: Iterable[AlgoHeader]) -> list[str]:
    """One line per gap, overlap or empty range, per (collective, ngpus, buffer mode).

    Only groups that have files are checked: a buffer mode no file serves (e.g. in-place
    AllToAll, which the exporter refuses) runs the library's own algorithm for every size,
    which is not a conflict between files.
    """
    groups: dict[tuple[str, int, str], list[AlgoHeader]] = defaultdict(list)
    problems: list[str] = []
    for h in headers:
        if h.max_bytes is not None and h.max_bytes < h.min_bytes:
            problems.append(
                f"empty range: {h.path.name} {h.kind} ngpus={h.ngpus}: minBytes={h.min_bytes} is above "
                f"its upper limit {h.max_bytes}; the runtime never selects it"
            )
            continue
        for mode in h.modes:
            groups[(h.kind, h.ngpus, mode)].append(h)
    for (kind, ngpus, mode), files in sorted(groups.items()):
        where = f"{kind} ngpus={ngpus} {mode}"
        files.sort(key=lambda h: (h.min_bytes, _upper(h), h.path.name))
        end: int | None = -1  # last byte count served so far; None once unbounded
        last: AlgoHeader | None = None
        for h in files:
            if end is None:
                assert last is not None
                problems.append(_overlap(where, last, h, h.min_bytes, h.max_bytes))
                continue
            if h.min_bytes > end + 1:
                after = f"after {last.path.name} maxBytes={end}" if last is not None else "from 0"
                problems.append(
                    f"range gap: {where}: no file serves {end + 1}..{h.min_bytes - 1} bytes "
                    f"({after}, before {h.path.name} minBytes={h.min_bytes})"
                )
            elif h.min_bytes <= end:
                assert last is not None
                top = end if h.max_bytes is None else min(end, h.max_bytes)
                problems.append(_overlap(where, last, h, h.min_bytes, top))
            if h.max_bytes is None or h.max_bytes > end:
                end, last = h.max_bytes, h
        if end is not None:
            assert last is not None
            problems.append(
                f"range gap: {where}: no file serves {end + 1}..inf bytes "
                f"(after {last.path.name} maxBytes={end})"
            )
    return problems


def _upper(h: AlgoHeader) -> float:
    return float("inf") if h.max_bytes is None else float(h.max_bytes)


def _overlap(where: str, a: AlgoHeader, b: AlgoHeader, lo: int, hi: int | None) -> str:
    return (
        f"range overlap: {where}: {a.path.name} {a.span()} and {b.path.name} {b.span()} both serve "
        f"{lo}..{'inf' if hi is None else hi} bytes; the runtime runs whichever it loaded first"
    )


@dataclass
class DirectoryReport:
    """Outcome of :func:`validate_directory`."""

    files: dict[str, XmlReport] = field(default_factory=dict)
    """Per XML file name, its :func:`validate_xml` report."""
    not_xml: list[str] = field(default_factory=list)
    """Regular files that are not ``*.xml`` (the runtime would try to parse them)."""
    unreadable: list[str] = field(default_factory=list)
    """One line per file whose selection attributes could not be read."""
    ranges: list[str] = field(default_factory=list)
    """One line per gap or overlap (:func:`check_ranges`)."""
    headers: list[AlgoHeader] = field(default_factory=list)
    """The selection attributes of every readable XML file."""

    @property
    def ok(self) -> bool:
        return (
            all(r.ok for r in self.files.values())
            and not self.not_xml
            and not self.unreadable
            and not self.ranges
        )


def validate_directory(directory: str | Path, *, dialect: str = "executor") -> DirectoryReport:
    """Validate every ``*.xml`` file of ``directory`` and the ranges they tile.

    Subdirectories are skipped, as the runtimes skip them (they load regular files and
    symlinks only). Any other regular file is reported: RCCL and the executor parse every
    regular file as an algorithm and fail to load the directory on one that is not.

    Raises
    ------
    ValidationError
        ``directory`` is not a directory.
    """
    from ccplan.export.xml_validate.validate import validate_xml

    d = Path(directory)
    if not d.is_dir():
        raise ValidationError(f"{str(d)!r} is not a directory")
    report = DirectoryReport()
    headers: list[AlgoHeader] = []
    for p in sorted(d.iterdir()):
        if p.is_dir():
            continue
        if p.suffix != ".xml":
            report.not_xml.append(p.name)
            continue
        report.files[p.name] = validate_xml(p, dialect=dialect)
        try:
            headers.append(read_header(p, dialect))
        except ValidationError as exc:
            report.unreadable.append(str(exc))
    report.ranges = check_ranges(headers)
    report.headers = headers
    return report
