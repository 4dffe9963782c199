"""Parsing: the XML read as a stream into per-step integer columns.

:class:`_Scanner` feeds ``iterparse`` and notes the executor's line-format problems on the
way (a prolog, an element over several lines); :func:`_read_algo` checks the ``<algo>``
attributes; :func:`_parse` streams ``<gpu>``/``<tb>``/``<step>`` into a :class:`_Doc`
(int64 columns, every ``<tb>`` cleared once read). The step-type vocabulary the later checks
share is here too.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import IO

import numpy as np

from ccplan.errors import ValidationError
from ccplan.export.msccl.dialects import MAX_CHANNELS, PROTOCOLS, Dialect
from ccplan.export.xml_validate.report import XmlError, _Errors

STEP_TYPES: frozenset[str] = frozenset({"s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"})
_SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
_RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
_READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
_WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})
_STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")


_BUF_CODES = {"i": 0, "o": 1, "s": 2}
_CHUNK = 16 * 1024
_INT64 = (-(2**63), 2**63 - 1)


def _int(
    tag: str, attrib: Mapping[str, str], key: str, errs: _Errors, where: Mapping[str, int | None]
) -> int | None:
    raw = attrib.get(key)
    if raw is None:
        errs.add("attribute", f"<{tag}> lacks attribute {key!r}", **where)
        return None
    try:
        value = int(raw)
    except ValueError:
        errs.add("attribute", f"<{tag}> attribute {key}={raw!r} is not an integer", **where)
        return None
    if not _INT64[0] <= value <= _INT64[1]:
        # Steps are kept in int64 columns; no runtime field comes near this.
        errs.add("attribute", f"<{tag}> attribute {key}={raw!r} is out of range", **where)
        return None
    return value


class _Scanner:
    """A text source for ``iterparse`` that checks the executor's line format on the way.

    The executor's tokenizer needs no ``<?xml?>`` prolog and every element on one line. The
    first element that spans lines is the leftmost ``<`` + letter followed by a newline
    before its ``>`` (provided some ``>`` follows at all): exactly the first match containing
    a newline of ``<[A-Za-z][^>]*>`` over the whole text, found here chunk by chunk.
    """

    _OPEN = re.compile(r"<[A-Za-z][^>\n]*\n")

    def __init__(self, source: IO[str]) -> None:
        self.source = source
        self.lead = ""
        self.prolog: bool | None = None
        self.carry = ""
        self.lines_before = 0
        self.candidate: int | None = None
        self.multiline: int | None = None

    def read(self, size: int = -1) -> str:
        data = self.source.read(size)
        if self.prolog is None:
            self.lead = (self.lead + data).lstrip()
            if len(self.lead) >= 5 or not data:
                self.prolog = self.lead.startswith("<?xml")
                self.lead = ""
        if self.multiline is None:
            self._scan(data)
        return data

    def _scan(self, data: str) -> None:
        if self.candidate is not None:
            if ">" in data:
                self.multiline = self.candidate
            return
        text = self.carry + data
        match = self._OPEN.search(text)
        if match is not None:
            self.candidate = self.lines_before + text.count("\n", 0, match.start()) + 1
            if ">" in text[match.end() :]:
                self.multiline = self.candidate
            return
        cut = text.rfind("\n") + 1
        # An unfinished line may hold the start of a tag: keep it for the next chunk.
        self.lines_before += text.count("\n", 0, cut)
        self.carry = text[cut:]


class _Doc:
    """Steps as int64 columns (document order) and thread blocks as small lists.

    The per-step state a check needs is a handful of integers, so a million steps take tens
    of megabytes rather than a Python object each.
    """

    COLS = (
        "gpu",
        "tb",
        "s",
        "type",
        "srcbuf",
        "srcoff",
        "dstbuf",
        "dstoff",
        "cnt",
        "depid",
        "deps",
        "hasdep",
        "rec",
    )

    def __init__(self) -> None:
        self.cols: dict[str, array[int]] = {c: array("q") for c in self.COLS}
        self.names: list[str] = []
        self.code: dict[str, int] = {}
        # thread block records, document order
        self.tb_gpu: list[int] = []
        self.tb_id: list[int] = []
        self.tb_send: list[int] = []
        self.tb_recv: list[int] = []
        self.tb_chan: list[int] = []
        self.tb_first: list[int] = []
        self.tb_count: list[int] = []
        self.tb_incomplete: list[bool] = []
        self.tb_errors: list[list[XmlError]] = []

    def intern(self, name: str) -> int:
        code = self.code.get(name)
        if code is None:
            code = self.code[name] = len(self.names)
            self.names.append(name)
        return code

    def codes(self, names: frozenset[str] | set[str]) -> np.ndarray:
        return np.array([self.code[n] for n in names if n in self.code], dtype=np.int64)

    def finish(self) -> dict[str, np.ndarray]:
        out = {
            c: np.frombuffer(self.cols[c], dtype=np.int64) if len(self.cols[c]) else np.zeros(0, np.int64)
            for c in self.COLS
        }
        return out


def _open_source(text_or_path: str | Path) -> tuple[IO[str], bool]:
    if isinstance(text_or_path, Path) or not str(text_or_path).lstrip().startswith("<"):
        try:
            return Path(text_or_path).open(), True
        except OSError as exc:
            raise ValidationError(f"xml file {str(text_or_path)!r}: {exc.strerror or exc}") from None
    return io.StringIO(str(text_or_path)), False


class _Header:
    ngpus = 0
    nchannels = 0
    k_total = 0
    coll = ""
    inplace = False


def _read_algo(attrib: Mapping[str, str], dia: Dialect, errs: _Errors) -> tuple[_Header, bool]:
    """The ``<algo>`` checks; False when the counts make the rest meaningless."""
    h = _Header()
    for key in dia.required_attrs:
        if key not in attrib:
            errs.add("attribute", f"<algo> lacks attribute {key!r} required by the {dia.name} runtime")
    none: dict[str, int | None] = {}
    h.ngpus = _int("algo", attrib, "ngpus", errs, none) or 0
    h.nchannels = _int("algo", attrib, "nchannels", errs, none) or 0
    h.k_total = _int("algo", attrib, "nchunksperloop", errs, none) or 0
    h.coll = attrib.get("coll", "")
    proto = attrib.get("proto", "")
    h.inplace = attrib.get("inplace", "0") == "1"
    if attrib.get("inplace", "0") == "1" and attrib.get("outofplace", "0") == "1":
        errs.add("attribute", "inplace and outofplace are both 1; the buffer aliasing differs between them")
    if proto not in PROTOCOLS:
        errs.add("attribute", f"proto={proto!r} is not one of {PROTOCOLS}")
    if h.coll not in dia.accepted_colls:
        errs.add(
            "attribute",
            f"coll={h.coll!r} is not accepted by the {dia.name} runtime "
            f"({', '.join(sorted(dia.accepted_colls))})",
        )
    if not 1 <= h.nchannels <= MAX_CHANNELS:
        errs.add("channel", f"nchannels={h.nchannels} must be in 1..{MAX_CHANNELS}")
    if h.ngpus < 1 or h.k_total < 1:
        errs.add("attribute", f"ngpus={h.ngpus} and nchunksperloop={h.k_total} must be positive")
        return h, False
    return h, True


_STEP_INTS = ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")


def _parse(
    scanner: _Scanner, dia: Dialect, errs: _Errors
) -> tuple[str, _Header | None, _Doc, dict[int, dict[str, int]], list[int]]:
    """Stream the document into a :class:`_Doc`.

    Returns ``(status, header, doc, sizes, gpu_order)``; status is ``"ok"``, ``"parse"`` (not
    well-formed: ``errs`` holds only the parse error), ``"root"`` (wrong root element) or
    ``"counts"`` (``ngpus``/``nchunksperloop`` unusable).
    """
    doc = _Doc()
    cols = doc.cols
    sizes: dict[int, dict[str, int]] = {}
    gpu_order: list[int] = []
    content = _Errors()
    header: _Header | None = None
    status = "ok"
    depth = 0
    root: ET.Element | None = None
    gpu_ok = False
    gid = -1
    tb_ok = False
    tid = -1
    steps_in_tb = 0
    incomplete = False
    try:
        for event, el in ET.iterparse(scanner, events=("start", "end")):
            if event == "end":
                depth -= 1
                if status != "ok":
                    el.clear()
                    continue
                if depth == 2 and tb_ok and el.tag == "tb":
                    doc.tb_count.append(steps_in_tb)
                    doc.tb_incomplete.append(incomplete)
                    tb_ok = False
                if depth == 2 or depth == 1:
                    el.clear()  # the steps are in the columns: free the elements
                if depth == 1 and root is not None:
                    del root[:]
                continue
            depth += 1
            if depth == 1:
                root = el
                if el.tag != "algo":
                    content.add("parse", f"root element is <{el.tag}>, expected <algo>")
                    status = "root"
                    continue
                header, usable = _read_algo(el.attrib, dia, content)
                if not usable:
                    status = "counts"
                continue
            if status != "ok":
                continue
            assert header is not None
            if depth == 2:
                gpu_ok = False
                if el.tag != "gpu":
                    content.add("parse", f"<algo> child <{el.tag}> is not <gpu>")
                    continue
                g = _int("gpu", el.attrib, "id", content, {})
                if g is None:
                    continue
                if not 0 <= g < header.ngpus or g in sizes:
                    content.add(
                        "attribute", f"gpu id {g} is out of range 0..{header.ngpus - 1} or repeated", gpu=g
                    )
                    continue
                gid, gpu_ok = g, True
                where_g: dict[str, int | None] = {"gpu": gid}
                sizes[gid] = {
                    b: _int("gpu", el.attrib, f"{b}_chunks", content, where_g) or 0 for b in ("i", "o", "s")
                }
                gpu_order.append(gid)
            elif depth == 3 and gpu_ok:
                tb_ok = False
                where_g = {"gpu": gid}
                t = _int(el.tag, el.attrib, "id", content, where_g)
                if el.tag != "tb" or t is None:
                    continue
                tid, tb_ok = t, True
                where_t: dict[str, int | None] = {"gpu": gid, "tb": tid}
                send = _int("tb", el.attrib, "send", content, where_t)
                recv = _int("tb", el.attrib, "recv", content, where_t)
                chan = _int("tb", el.attrib, "chan", content, where_t)
                doc.tb_gpu.append(gid)
                doc.tb_id.append(tid)
                doc.tb_send.append(-1 if send is None else send)
                doc.tb_recv.append(-1 if recv is None else recv)
                doc.tb_chan.append(0 if chan is None else chan)
                doc.tb_first.append(len(cols["s"]))
                doc.tb_errors.append([])
                steps_in_tb = 0
                incomplete = False
            elif depth == 4 and tb_ok and el.tag == "step":
                attrib = el.attrib
                where_s: dict[str, int | None] = {"gpu": gid, "tb": tid, "step": steps_in_tb}
                missing = [a for a in _STEP_ATTRS if a not in attrib]
                if missing:
                    content.add("attribute", f"step lacks attribute(s) {missing}", **where_s)
                    incomplete = True
                    continue
                vals = [_int("step", attrib, a, content, where_s) for a in _STEP_INTS]
                if any(v is None for v in vals):
                    incomplete = True
                    continue
                cols["gpu"].append(gid)
                cols["tb"].append(tid)
                cols["rec"].append(len(doc.tb_id) - 1)
                cols["type"].append(doc.intern(attrib["type"]))
                cols["srcbuf"].append(doc.intern(attrib["srcbuf"]))
                cols["dstbuf"].append(doc.intern(attrib["dstbuf"]))
                for name, v in zip(_STEP_INTS, vals, strict=True):
                    cols[name].append(v)  # type: ignore[arg-type]
                steps_in_tb += 1
    except ET.ParseError as exc:
        errs.add("parse", f"not well-formed XML: {exc}")
        while scanner.read(_CHUNK):
            pass  # the line-format notes cover the whole text
        return "parse", header, doc, sizes, gpu_order
    errs.items += content.items
    return status, header, doc, sizes, gpu_order
