"""An independent checker for MSCCL algorithm XML files.

It parses the XML back (ours or anyone's) and checks, per ``reference/msccl_and_peers.md``
sections 1.2, 1.3 item 6 and 5:

- the ``<algo>`` attributes a runtime requires, the ``coll`` spelling, ``proto``;
- structure limits: contiguous thread block ids, thread blocks per GPU (co-residency), steps
  per thread block (``MSCCL_MAX_NUM_STEPS``), ``s`` numbered 0, 1, ... in document order,
  ``0 <= cnt < 72``, offsets inside the declared buffers and ``int16``, channels, peers, at most
  one thread block per (peer, channel, direction);
- dependencies: ``depid``/``deps`` name an existing step, its target has ``hasdep="1"``, a
  ``nop`` always carries a ``depid``;
- connections: per (sender, receiver, channel) the sends and the receives match in number,
  ``cnt`` and order (the redundant remote offsets the exporter writes must agree);
- deadlock freedom: the **global** happens-before graph (program order, dependencies, each
  send before its matching receive, across all GPUs) is acyclic;
- data races: two accesses to one buffer slot, one of them a write, are ordered;
- a buffer simulation that checks the postcondition: which chunk (or which sum of
  contributions) ends where, against ``expect`` when given, else against the collective the
  XML names.

Sends are taken to be buffered (a send completes without waiting for its receive), which is how
NCCL connections behave for the protocol slices a step moves.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.export.msccl import (
    COLL_TO_KIND,
    DEFAULT_MAX_TBS,
    DIALECTS,
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_DEP_TB,
    MAX_OFFSET,
    MAX_TBS_PER_CHANNEL,
    PROTOCOLS,
    BufferLayout,
    Dialect,
    Loc,
    buffer_layout,
)
from ccplan.instances.collectives import Chunk, Collective
from ccplan.instances.instance import Instance

ERROR_KINDS: tuple[str, ...] = (
    "parse",
    "format",
    "attribute",
    "tb-ids",
    "tb-count",
    "steps",
    "step-index",
    "cnt",
    "offset",
    "peer",
    "channel",
    "connection",
    "dependency",
    "hasdep",
    "nop-without-depid",
    "unmatched",
    "order",
    "cycle",
    "race",
    "double-count",
    "postcondition",
)
"""Every kind of :class:`XmlError`."""

STEP_TYPES: frozenset[str] = frozenset({"s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"})
_SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
_RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
_READS_SRC = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})
_WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})
_STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")


@dataclass(frozen=True)
class XmlError:
    """One problem, located as precisely as possible (rank, thread block, step)."""

    kind: str
    message: str
    gpu: int | None = None
    tb: int | None = None
    step: int | None = None

    def __str__(self) -> str:
        where = []
        if self.gpu is not None:
            where.append(f"GPU {self.gpu}")
        if self.tb is not None:
            where.append(f"tb {self.tb}")
        if self.step is not None:
            where.append(f"step {self.step}")
        prefix = f"[{', '.join(where)}] " if where else ""
        return f"{self.kind}: {prefix}{self.message}"


@dataclass(frozen=True)
class XmlReport:
    """Outcome of :func:`validate_xml`.

    Attributes
    ----------
    ok : bool
        No error.
    errors : tuple of XmlError
    stats : mapping
        ``ngpus, nchannels, nchunksperloop, coll, tbs_max, steps_max, steps_total, nops,
        transfers, critical_path`` (longest happens-before chain, in steps) when computed.
    """

    ok: bool
    errors: tuple[XmlError, ...]
    stats: Mapping[str, Any] = field(default_factory=dict)

    def kinds(self) -> set[str]:
        """The set of error kinds reported."""
        return {e.kind for e in self.errors}


_BUF_CODES = {"i": 0, "o": 1, "s": 2}
_CHUNK = 16 * 1024
_INT64 = (-(2**63), 2**63 - 1)


class _Errors:
    def __init__(self) -> None:
        self.items: list[XmlError] = []

    def add(
        self, kind: str, message: str, gpu: int | None = None, tb: int | None = None, step: int | None = None
    ) -> None:
        self.items.append(XmlError(kind, message, gpu, tb, step))


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


def validate_xml(
    text_or_path: str | Path,
    *,
    expect: Instance | None = None,
    dialect: str = "executor",
    max_tbs: int = DEFAULT_MAX_TBS,
) -> XmlReport:
    """Check an MSCCL algorithm XML (see the module doc for the list of checks).

    The document is read as a stream (``iterparse``, every ``<tb>`` cleared once read): the
    memory is the per-step columns and the happens-before graph in numpy arrays, plus the
    buffer contents of the simulation, not the document or an object per step.

    Parameters
    ----------
    text_or_path : str or Path
        XML text (starts with ``<``) or a file path.
    expect : Instance, optional
        Check the postcondition of this instance (buffer layout as :func:`to_msccl_xml`
        writes it, ranks = ``expect.topology.gpus``); otherwise the collective named by
        ``coll`` with the standard MSCCL layout.
    dialect : {"executor", "legacy"}
        Which runtime's limits apply (steps per thread block, required attributes).
    max_tbs : int
        Thread blocks per GPU that can be co-resident (SM count).

    Returns
    -------
    XmlReport
    """
    if dialect not in DIALECTS:
        raise ValidationError(f"dialect must be one of {tuple(DIALECTS)}, got {dialect!r}")
    dia = DIALECTS[dialect]
    source, close = _open_source(text_or_path)
    try:
        return _validate(source, expect, dia, max_tbs)
    finally:
        if close:
            source.close()


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


def _validate(source: IO[str], expect: Instance | None, dia: Dialect, max_tbs: int) -> XmlReport:
    scanner = _Scanner(source)
    errs = _Errors()
    stats: dict[str, Any] = {}
    body = _Errors()
    status, header, doc, sizes, _ = _parse(scanner, dia, body)
    # The format notes come first, whatever the parse found after them.
    if scanner.prolog:
        errs.add("format", "an <?xml ...?> prolog is not understood by the executor's tokenizer")
    if scanner.multiline is not None:
        errs.add(
            "format",
            f"element at line {scanner.multiline} spans several lines; the executor's tokenizer "
            "needs each element's attributes on one line",
        )
    errs.items += body.items
    if status != "ok":
        return XmlReport(False, tuple(errs.items), stats)
    assert header is not None
    ngpus, nchannels, k_total, coll, inplace = (
        header.ngpus,
        header.nchannels,
        header.k_total,
        header.coll,
        header.inplace,
    )
    stats.update(ngpus=ngpus, nchannels=nchannels, nchunksperloop=k_total, coll=coll, inplace=inplace)
    for g in range(ngpus):
        if g not in sizes:
            errs.add("attribute", f'no <gpu id="{g}"> element', gpu=g)
            sizes[g] = {"i": 0, "o": 0, "s": 0}
    col = doc.finish()
    n = len(col["s"])
    _check_structure(doc, col, sizes, ngpus, nchannels, dia.max_steps, max_tbs, dia.max_tb_id, errs)
    per_tb = Counter(doc.tb_gpu)
    nop = doc.code.get("nop", -1)
    stats.update(
        tbs_max=max((per_tb.get(g, 0) for g in range(ngpus)), default=0),
        steps_max=max(doc.tb_count, default=0),
        steps_total=n,
        nops=int(np.count_nonzero(col["type"] == nop)),
    )
    structural = bool(errs.items)
    if any(doc.tb_incomplete):
        # Matching sends to receives and ordering them needs every step: with one unreadable,
        # each later check would report a consequence of the same missing attribute.
        return XmlReport(False, tuple(errs.items), stats)

    # ------------------------------------------------------------------ graph
    # (gpu, tb id) -> record; a repeated id keeps the last block, as a dict would.
    tb_map: dict[tuple[int, int], int] = {}
    for index, key in enumerate(zip(doc.tb_gpu, doc.tb_id, strict=True)):
        tb_map[key] = index
    winner = np.zeros(len(doc.tb_id), dtype=bool)
    winner[list(tb_map.values())] = True
    rec = col["rec"]
    same_next = (rec[1:] == rec[:-1]) & winner[rec[:-1]] if n else np.zeros(0, bool)
    prog_src = np.flatnonzero(same_next)
    edge_src = [prog_src]
    edge_dst = [prog_src + 1]
    dep_src, dep_dst = _check_dependencies(doc, col, tb_map, errs)
    edge_src.append(dep_src)
    edge_dst.append(dep_dst)
    snd, rcv = _match_connections(doc, col, tb_map, errs)
    edge_src.append(snd)
    edge_dst.append(rcv)
    stats["transfers"] = len(snd)
    graph = _Graph(n, np.concatenate(edge_src), np.concatenate(edge_dst))
    level, cyclic = graph.levels()
    if len(cyclic):
        cycle = _find_cycle(cyclic, graph)
        names = [f"GPU {col['gpu'][v]} tb {col['tb'][v]} step {col['s'][v]}" for v in cycle]
        gpus_in = sorted({int(col["gpu"][v]) for v in cycle})
        first = cycle[0]
        span = (
            "across GPUs " + ", ".join(map(str, gpus_in)) if len(gpus_in) > 1 else f"within GPU {gpus_in[0]}"
        )
        errs.add(
            "cycle",
            f"happens-before cycle {span} (deadlock): "
            + " -> ".join(names[:12])
            + (" ..." if len(names) > 12 else ""),
            int(col["gpu"][first]),
            int(col["tb"][first]),
            int(col["s"][first]),
        )
        return XmlReport(False, tuple(errs.items), stats)
    stats["critical_path"] = int(level.max()) + 1 if n else 0
    if structural or any(e.kind in ("unmatched", "dependency") for e in errs.items):
        return XmlReport(False, tuple(errs.items), stats)

    # ------------------------------------------------------------------ races and simulation
    kind = COLL_TO_KIND.get(coll)
    order = np.lexsort((np.arange(n), level))
    max_size = max((v for sz in sizes.values() for v in sz.values()), default=0)
    canon = _Canon(kind or "", inplace, ngpus, k_total, doc, max_size)
    _check_races(doc, col, graph, level, canon, errs)
    try:
        layout, factor = _expected_layout(
            expect,
            kind,
            coll,
            ngpus,
            k_total,
            inplace,
            lambda receives: _quiet_ranks(doc, col, ngpus, receives),
        )
    except ValidationError as exc:
        errs.add("postcondition", f"cannot derive the expected result: {exc}")
        return XmlReport(False, tuple(errs.items), stats)
    _simulate(doc, col, order, snd, rcv, layout, factor, canon, errs)
    return XmlReport(not errs.items, tuple(errs.items), stats)


# ====================================================================== structure
def _check_structure(
    doc: _Doc,
    col: Mapping[str, np.ndarray],
    sizes: dict[int, dict[str, int]],
    ngpus: int,
    nchannels: int,
    max_steps: int,
    max_tbs: int,
    max_tb_id: int,
    errs: _Errors,
) -> None:
    blocks_of: dict[int, list[int]] = defaultdict(list)
    for r, g in enumerate(doc.tb_gpu):
        blocks_of[g].append(r)
    bad_steps = _step_problems(doc, col, sizes)
    for g in sorted(sizes):
        blocks = blocks_of.get(g, [])
        ids = sorted(doc.tb_id[r] for r in blocks)
        if ids != list(range(len(ids))):
            missing = sorted(set(range(max(ids, default=-1) + 1)) - set(ids))
            detail = f"thread block {missing[0]} is missing" if missing else "repeated thread block id"
            errs.add("tb-ids", f"thread block ids {ids} are not 0..{len(ids) - 1}: {detail}", g)
        limit = min(max_tbs, max_tb_id, MAX_DEP_TB + 1)
        if len(blocks) > limit:
            errs.add(
                "tb-count",
                f"{len(blocks)} thread blocks, at most {limit} can be co-resident (SM count, int8 depid)",
                g,
            )
        conn: dict[tuple[str, int, int], int] = {}
        per_chan: dict[tuple[str, int], int] = defaultdict(int)
        for r in blocks:
            tid, chan = doc.tb_id[r], doc.tb_chan[r]
            for role, peer in (("send", doc.tb_send[r]), ("recv", doc.tb_recv[r])):
                if peer == -1:
                    continue
                if not 0 <= peer < ngpus or peer == g:
                    errs.add("peer", f"{role}={peer} is not another GPU", g, tid)
                    continue
                if (role, peer, chan) in conn:
                    errs.add(
                        "connection",
                        f"thread blocks {conn[(role, peer, chan)]} and {tid} both "
                        f"{role} peer {peer} on channel {chan}",
                        g,
                        tid,
                    )
                conn[(role, peer, chan)] = tid
                per_chan[(role, chan)] += 1
            if not 0 <= chan < nchannels:
                errs.add("channel", f"chan={chan} is outside 0..{nchannels - 1}", g, tid)
            if doc.tb_count[r] > max_steps:
                errs.add("steps", f"{doc.tb_count[r]} steps exceed MSCCL_MAX_NUM_STEPS = {max_steps}", g, tid)
            first = doc.tb_first[r]
            for node in bad_steps.get(r, ()):
                _check_step(doc, col, node, node - first, r, sizes[g], errs)
        for (role, ch), count in per_chan.items():
            if count > MAX_TBS_PER_CHANNEL:
                errs.add(
                    "tb-count", f"{count} {role} thread blocks on channel {ch} (max {MAX_TBS_PER_CHANNEL})", g
                )


def _step_problems(
    doc: _Doc, col: Mapping[str, np.ndarray], sizes: Mapping[int, Mapping[str, int]]
) -> dict[int, list[int]]:
    """Steps that may fail a check of :func:`_check_step` (a superset), grouped by block.

    Vectorised so that a valid million-step file costs a few array passes; the exact
    messages come from :func:`_check_step` on the few steps flagged here.
    """
    n = len(col["s"])
    if not n:
        return {}
    rec = col["rec"]
    first = np.asarray(doc.tb_first, dtype=np.int64)
    incomplete = np.asarray(doc.tb_incomplete, dtype=bool)
    index = np.arange(n) - first[rec]
    flagged = (col["s"] != index) & ~incomplete[rec]
    typ = col["type"]
    known = np.isin(typ, doc.codes(STEP_TYPES))
    nop = np.isin(typ, doc.codes({"nop"}))
    flagged |= ~known | nop & (col["depid"] < 0)
    active = known & ~nop
    cnt = col["cnt"]
    flagged |= active & ((cnt < 0) | (cnt >= MAX_COUNT))
    send_peer = np.asarray(doc.tb_send, dtype=np.int64)[rec]
    recv_peer = np.asarray(doc.tb_recv, dtype=np.int64)[rec]
    flagged |= active & np.isin(typ, doc.codes(_SENDS)) & (send_peer < 0)
    flagged |= active & np.isin(typ, doc.codes(_RECVS)) & (recv_peer < 0)
    gpu = col["gpu"]
    gmax = max(sizes) + 1
    limit = np.zeros((gmax, 3), dtype=np.int64)
    for g, sz in sizes.items():
        limit[g] = (sz["i"], sz["o"], sz["s"])
    bufmap = np.full(len(doc.names) + 1, -1, dtype=np.int64)
    for name, code in _BUF_CODES.items():
        if name in doc.code:
            bufmap[doc.code[name]] = code
    for use, buf_col, off_col in (
        (np.isin(typ, doc.codes(_READS_SRC)), "srcbuf", "srcoff"),
        (np.isin(typ, doc.codes(_WRITES_DST | {"re"})), "dstbuf", "dstoff"),
    ):
        b = bufmap[col[buf_col]]
        off = col[off_col]
        size = np.where(b >= 0, limit[gpu, np.maximum(b, 0)], 0)
        bad = (b < 0) | (off < 0) | (off + cnt > size) | (off + cnt - 1 > MAX_OFFSET)
        flagged |= active & use & bad
    out: dict[int, list[int]] = defaultdict(list)
    for node in np.flatnonzero(flagged).tolist():
        out[int(rec[node])].append(node)
    return out


def _check_step(
    doc: _Doc,
    col: Mapping[str, np.ndarray],
    node: int,
    pos: int,
    r: int,
    size: Mapping[str, int],
    errs: _Errors,
) -> None:
    g, tid, s = int(col["gpu"][node]), int(col["tb"][node]), int(col["s"][node])
    # After an unreadable step the document position is unknown: checking s= against it
    # would only repeat the one error already reported.
    index = s if doc.tb_incomplete[r] else pos
    where = (g, tid, s)
    typ = doc.names[col["type"][node]]
    cnt = int(col["cnt"][node])
    if s != index:
        errs.add(
            "step-index", f"s={s} but it is step {index} of the thread block in document order", g, tid, index
        )
    if typ not in STEP_TYPES:
        errs.add("attribute", f"type={typ!r} is not a step type", *where)
        return
    if typ == "nop":
        if col["depid"][node] < 0:
            errs.add("nop-without-depid", "a nop must carry a dependency (depid >= 0)", *where)
        return
    if not 0 <= cnt < MAX_COUNT:
        errs.add("cnt", f"cnt={cnt} must be in 0..{MAX_COUNT - 1}", *where)
    if typ in _SENDS and doc.tb_send[r] < 0:
        errs.add("peer", f"a {typ} step sends but the thread block has send=-1", *where)
    if typ in _RECVS and doc.tb_recv[r] < 0:
        errs.add("peer", f"a {typ} step receives but the thread block has recv=-1", *where)
    used = []
    if typ in _READS_SRC:
        used.append(("src", doc.names[col["srcbuf"][node]], int(col["srcoff"][node])))
    if typ in _WRITES_DST or typ == "re":
        used.append(("dst", doc.names[col["dstbuf"][node]], int(col["dstoff"][node])))
    for side, buf, off in used:
        if buf not in ("i", "o", "s"):
            errs.add("attribute", f"{side}buf={buf!r} is not i, o or s", *where)
            continue
        if off < 0 or off + cnt > size[buf] or off + cnt - 1 > MAX_OFFSET:
            errs.add(
                "offset",
                f"{side} {buf}[{off}..{off + cnt - 1}] is outside the buffer ({buf}_chunks={size[buf]})",
                *where,
            )


# ====================================================================== dependencies
def _check_dependencies(
    doc: _Doc, col: Mapping[str, np.ndarray], tb_map: Mapping[tuple[int, int], int], errs: _Errors
) -> tuple[np.ndarray, np.ndarray]:
    """``depid``/``deps`` name a step whose flag is published; the edges target -> step."""
    n = len(col["s"])
    nodes = np.flatnonzero(col["depid"] >= 0) if n else np.zeros(0, np.int64)
    if not len(nodes):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.asarray([*doc.tb_first, 0], dtype=np.int64)
    count = np.asarray([*doc.tb_count, 0], dtype=np.int64)
    none = len(doc.tb_first)
    keys = col["gpu"][nodes].tolist()
    depids = col["depid"][nodes].tolist()
    target_rec = np.fromiter(
        (tb_map.get((g, d), none) for g, d in zip(keys, depids, strict=True)),
        dtype=np.int64,
        count=len(nodes),
    )
    deps = col["deps"][nodes]
    valid = (target_rec != none) & (deps >= 0) & (deps < count[target_rec])
    target = np.where(valid, first[target_rec] + np.where(valid, deps, 0), -1)
    safe = np.maximum(target, 0)
    own_later = valid & (col["tb"][safe] == col["tb"][nodes]) & (col["s"][safe] >= col["s"][nodes])
    no_flag = valid & (col["hasdep"][safe] != 1)
    for i in np.flatnonzero(~valid | own_later | no_flag).tolist():
        v = int(nodes[i])
        g, tid, s = int(col["gpu"][v]), int(col["tb"][v]), int(col["s"][v])
        depid, dstep = int(col["depid"][v]), int(col["deps"][v])
        if not valid[i]:
            errs.add("dependency", f"depid={depid} deps={dstep} names no step of this GPU", g, tid, s)
            continue
        if own_later[i]:
            errs.add("dependency", f"depends on its own later step {dstep}", g, tid, s)
        if no_flag[i]:
            errs.add(
                "hasdep",
                f'depends on tb {depid} step {dstep}, which has hasdep="0" '
                "(no flag is published, the wait never ends)",
                g,
                tid,
                s,
            )
    return target[valid], nodes[valid]


# ====================================================================== connections
def _match_connections(
    doc: _Doc, col: Mapping[str, np.ndarray], tb_map: Mapping[tuple[int, int], int], errs: _Errors
) -> tuple[np.ndarray, np.ndarray]:
    """Pair the k-th send with the k-th receive on every (sender, receiver, channel)."""
    n = len(col["s"])
    empty = np.zeros(0, np.int64)
    if not n:
        return empty, empty
    rec = col["rec"]
    nrec = len(doc.tb_id)
    winner = np.zeros(nrec, dtype=bool)
    winner[list(tb_map.values())] = True
    tb_send = np.asarray(doc.tb_send, dtype=np.int64)
    tb_recv = np.asarray(doc.tb_recv, dtype=np.int64)
    tb_chan = np.asarray(doc.tb_chan, dtype=np.int64)
    gpu = col["gpu"]
    live = winner[rec]
    s_nodes = np.flatnonzero(live & np.isin(col["type"], doc.codes(_SENDS)) & (tb_send[rec] >= 0))
    r_nodes = np.flatnonzero(live & np.isin(col["type"], doc.codes(_RECVS)) & (tb_recv[rec] >= 0))
    # Connection (u, v, ch); within it, blocks by (gpu, tb id), steps in program order.
    s_conn = np.stack([gpu[s_nodes], tb_send[rec[s_nodes]], tb_chan[rec[s_nodes]]], axis=1)
    r_conn = np.stack([tb_recv[rec[r_nodes]], gpu[r_nodes], tb_chan[rec[r_nodes]]], axis=1)
    s_nodes = s_nodes[
        np.lexsort((s_nodes, col["tb"][s_nodes], gpu[s_nodes], s_conn[:, 2], s_conn[:, 1], s_conn[:, 0]))
    ]
    r_nodes = r_nodes[
        np.lexsort((r_nodes, col["tb"][r_nodes], gpu[r_nodes], r_conn[:, 2], r_conn[:, 1], r_conn[:, 0]))
    ]
    s_conn = np.stack([gpu[s_nodes], tb_send[rec[s_nodes]], tb_chan[rec[s_nodes]]], axis=1)
    r_conn = np.stack([tb_recv[rec[r_nodes]], gpu[r_nodes], tb_chan[rec[r_nodes]]], axis=1)
    conns, inverse = np.unique(np.concatenate([s_conn, r_conn]), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    s_id, r_id = inverse[: len(s_nodes)], inverse[len(s_nodes) :]
    ns = np.bincount(s_id, minlength=len(conns))
    nr = np.bincount(r_id, minlength=len(conns))
    s_start = np.concatenate([[0], np.cumsum(ns)])
    r_start = np.concatenate([[0], np.cumsum(nr)])
    # k-th send of a connection <-> k-th receive
    s_k = np.arange(len(s_nodes)) - s_start[s_id]
    keep = s_k < nr[s_id]
    a = s_nodes[keep]
    b = r_nodes[r_start[s_id[keep]] + s_k[keep]]
    pair_conn = s_id[keep]
    pair_k = s_k[keep]

    names = doc.names
    code = doc.code
    c_s, c_r, c_rrs = code.get("s", -1), code.get("r", -1), code.get("rrs", -1)
    ta, tb_ = col["type"][a], col["type"][b]
    cnt_bad = col["cnt"][a] != col["cnt"][b]
    a_s, b_r, a_rrs, b_rrs = ta == c_s, tb_ == c_r, ta == c_rrs, tb_ == c_rrs
    m1 = (
        a_s
        & (col["dstoff"][a] >= 0)
        & ~b_rrs
        & ((col["dstbuf"][a] != col["dstbuf"][b]) | (col["dstoff"][a] != col["dstoff"][b]))
    )
    sent_buf = np.where(a_s, col["srcbuf"][a], col["dstbuf"][a])
    sent_off = np.where(a_s, col["srcoff"][a], col["dstoff"][a])
    m2 = (
        ~m1
        & b_r
        & (col["srcoff"][b] >= 0)
        & ~(~a_s & a_rrs)
        & ((col["srcbuf"][b] != sent_buf) | (col["srcoff"][b] != sent_off))
    )
    events: list[tuple[int, int, XmlError]] = []
    for ci in np.flatnonzero(ns != nr).tolist():
        u, v, ch = (int(x) for x in conns[ci])
        more_sends = ns[ci] > nr[ci]
        extra = int(s_nodes[s_start[ci] + nr[ci]]) if more_sends else int(r_nodes[r_start[ci] + ns[ci]])
        events.append(
            (
                ci,
                -1,
                XmlError(
                    "unmatched",
                    f"connection GPU {u} -> GPU {v} channel {ch}: {ns[ci]} sends but {nr[ci]} receives",
                    int(gpu[extra]),
                    int(col["tb"][extra]),
                    int(col["s"][extra]),
                ),
            )
        )

    def at(node: int, field_: str) -> int:
        return int(col[field_][node])

    for i in np.flatnonzero(cnt_bad | m1 | m2).tolist():
        ai, bi, k, ci = int(a[i]), int(b[i]), int(pair_k[i]), int(pair_conn[i])
        u, v, ch = (int(x) for x in conns[ci])
        where = (int(gpu[bi]), at(bi, "tb"), at(bi, "s"))
        if cnt_bad[i]:
            msg = (
                f"connection GPU {u} -> GPU {v} channel {ch}: send #{k} "
                f"(tb {at(ai, 'tb')} step {at(ai, 's')}) moves cnt={at(ai, 'cnt')}, "
                f"its matching receive moves cnt={at(bi, 'cnt')}"
            )
        elif m1[i]:
            msg = (
                f"connection GPU {u} -> GPU {v} channel {ch}: FIFO order differs: "
                f"send #{k} (tb {at(ai, 'tb')} step {at(ai, 's')}) says it lands in "
                f"{names[at(ai, 'dstbuf')]}[{at(ai, 'dstoff')}], the "
                f"receive stores into {names[at(bi, 'dstbuf')]}[{at(bi, 'dstoff')}]"
            )
        else:
            msg = (
                f"connection GPU {u} -> GPU {v} channel {ch}: FIFO order differs: "
                f"receive #{k} expects {names[at(bi, 'srcbuf')]}[{at(bi, 'srcoff')}] but send #{k} "
                f"(tb {at(ai, 'tb')} step {at(ai, 's')}) sends {names[int(sent_buf[i])]}[{int(sent_off[i])}]"
            )
        events.append((ci, k, XmlError("order", msg, *where)))
    events.sort(key=lambda e: (e[0], e[1]))
    errs.items += [e[2] for e in events]
    return a, b


# ====================================================================== graph
class _Graph:
    """The happens-before graph in CSR form (edges deduplicated)."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray) -> None:
        self.n = n
        key = np.unique(src.astype(np.int64) * max(n, 1) + dst)
        self.src = key // max(n, 1)
        self.dst = key % max(n, 1)
        self.indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.src, minlength=n), out=self.indptr[1:])

    def succ(self, u: int) -> np.ndarray:
        return self.dst[self.indptr[u] : self.indptr[u + 1]]

    def levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Kahn's algorithm a level at a time.

        A node's level is the length of the longest path ending at it, so the levels order
        the nodes topologically and their count is the critical path. Returns the levels
        (-1 for nodes never released) and the nodes on or behind a cycle.
        """
        n = self.n
        level = np.full(n, -1, dtype=np.int64)
        indeg = np.bincount(self.dst, minlength=n)
        frontier = np.flatnonzero(indeg == 0)
        lev = 0
        while len(frontier):
            level[frontier] = lev
            starts = self.indptr[frontier]
            lengths = self.indptr[frontier + 1] - starts
            total = int(lengths.sum())
            if not total:
                break
            offs = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total)
            targets, counts = np.unique(self.dst[offs], return_counts=True)
            indeg[targets] -= counts
            frontier = targets[indeg[targets] == 0]
            lev += 1
        return level, np.flatnonzero(level < 0)

    def reaches(self, a: int, b: int, level: np.ndarray) -> bool:
        """Whether a path leads from ``a`` to ``b`` (levels rise along every edge)."""
        if a == b:
            return True
        top = level[b]
        if level[a] >= top:
            return False
        seen = {a}
        stack = [a]
        while stack:
            u = stack.pop()
            for v in self.succ(u).tolist():
                if v == b:
                    return True
                if v not in seen and level[v] < top:
                    seen.add(v)
                    stack.append(v)
        return False


def _find_cycle(remaining: np.ndarray, graph: _Graph) -> list[int]:
    """A cycle among the nodes Kahn's algorithm could not order.

    Nodes behind a cycle are left over too; those that cannot reach one are pruned first,
    so the walk from the smallest node along the smallest successor always closes a cycle.
    """
    rest = set(remaining.tolist())
    succ = {u: [v for v in graph.succ(u).tolist() if v in rest] for u in rest}
    pred: dict[int, list[int]] = defaultdict(list)
    for u, vs in succ.items():
        for v in vs:
            pred[v].append(u)
    outdeg = {u: len(vs) for u, vs in succ.items()}
    dead = [u for u, d in outdeg.items() if d == 0]
    while dead:
        u = dead.pop()
        rest.discard(u)
        for p in pred[u]:
            outdeg[p] -= 1
            if outdeg[p] == 0:
                dead.append(p)
    start = min(rest)
    seen: dict[int, int] = {}
    path: list[int] = []
    u = start
    while u not in seen:
        seen[u] = len(path)
        path.append(u)
        u = min(v for v in succ[u] if v in rest)
    return [*path[seen[u] :], u]


# ====================================================================== races
class _Canon:
    """Buffer slots as integer keys, with the in-place aliases of :func:`alias` applied.

    ``alias`` is affine in the offset within a buffer, so a step's ``cnt`` slots are the keys
    ``key .. key + cnt - 1``.
    """

    def __init__(self, kind: str, inplace: bool, ngpus: int, k_total: int, doc: _Doc, max_size: int) -> None:
        self.kind, self.inplace, self.ngpus, self.k_total = kind, inplace, ngpus, k_total
        self.per = k_total // max(1, ngpus)
        self.stride = 2 * k_total + max_size + 1
        self.size = ngpus * 3 * self.stride
        self.bufmap = np.zeros(len(doc.names) + 1, dtype=np.int64)
        for name, code in _BUF_CODES.items():
            if name in doc.code:
                self.bufmap[doc.code[name]] = code

    def keys(self, gpu: np.ndarray, bufcode: np.ndarray, off: np.ndarray) -> np.ndarray:
        """Keys of interned buffer names (vectorised)."""
        return self.keys_of(gpu, self.bufmap[bufcode], off)

    def keys_of(self, gpu: np.ndarray, buf: np.ndarray, off: np.ndarray) -> np.ndarray:
        """Keys of buffer indices 0 (i), 1 (o), 2 (s) (vectorised)."""
        buf = buf.copy()
        off = off.copy()
        if self.inplace:
            if self.kind == "allgather":
                m = buf == 0
                buf[m], off[m] = 1, gpu[m] * self.per + off[m]
            elif self.kind == "reducescatter":
                m = buf == 1
                buf[m], off[m] = 0, gpu[m] * self.per + off[m]
            else:
                buf[buf == 0] = 1
        return (gpu * 3 + buf) * self.stride + off

    def loc(self, key: int) -> Loc:
        """The canonical buffer slot of ``key`` (for messages)."""
        rest = key % (3 * self.stride)
        return Loc("ios"[rest // self.stride], rest % self.stride)


def _accesses(
    doc: _Doc, col: Mapping[str, np.ndarray], canon: _Canon
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (node, slot key, is write), in the order the steps list them: per step its
    source reads, a ``re``'s destination reads, then its destination writes."""
    typ, cnt, gpu = col["type"], col["cnt"], col["gpu"]
    parts = []
    src_key = canon.keys(gpu, col["srcbuf"], col["srcoff"])
    dst_key = canon.keys(gpu, col["dstbuf"], col["dstoff"])
    segments: tuple[tuple[frozenset[str], np.ndarray, bool], ...] = (
        (_READS_SRC, src_key, False),
        (frozenset({"re"}), dst_key, False),
        (_WRITES_DST, dst_key, True),
    )
    for seg, (names, base, writes) in enumerate(segments):
        nodes = np.flatnonzero(np.isin(typ, doc.codes(names)) & (cnt > 0))
        reps = cnt[nodes]
        total = int(reps.sum())
        node_rep = np.repeat(nodes, reps)
        k = np.arange(total) - np.repeat(np.cumsum(reps) - reps, reps)
        parts.append((node_rep, base[node_rep] + k, np.full(total, writes), np.full(total, seg), k))
    node = np.concatenate([p[0] for p in parts])
    key = np.concatenate([p[1] for p in parts])
    write = np.concatenate([p[2] for p in parts])
    segment = np.concatenate([p[3] for p in parts])
    within = np.concatenate([p[4] for p in parts])
    order = np.lexsort((within, segment, node))
    return node[order], key[order], write[order]


def _check_races(
    doc: _Doc,
    col: Mapping[str, np.ndarray],
    graph: _Graph,
    level: np.ndarray,
    canon: _Canon,
    errs: _Errors,
) -> None:
    """Two accesses to one slot, one a write, must be ordered by happens-before.

    Taken slot by slot in a topological order, it suffices that every access is ordered
    after the slot's previous write and every read before the slot's next write: the writes
    then form a chain and each other conflicting pair is ordered through it (the argument of
    FastTrack's epochs). Those pairs are decided with per-GPU vector clocks over the GPU's
    own edges (program order, dependencies), and with a search of the whole graph when the
    clocks do not order them (an order through other GPUs). Only slots that fail get the
    all-pairs listing, whose messages are those of the quadratic check.
    """
    node, key, write = _accesses(doc, col, canon)
    if not len(node):
        return
    m = len(node)
    srt = np.lexsort((write, node, level[node], key))
    k_s, n_s, w_s = key[srt], node[srt], write[srt]
    idx = np.arange(m)
    new = np.ones(m, dtype=bool)
    new[1:] = k_s[1:] != k_s[:-1]
    gstart = np.maximum.accumulate(np.where(new, idx, 0))
    gend = np.empty(m, dtype=np.int64)
    ends = np.append(np.flatnonzero(new)[1:], m)
    gend[:] = np.repeat(ends, np.diff(np.append(np.flatnonzero(new), m)))
    prev_w = np.maximum.accumulate(np.where(w_s, idx, -1))
    prev_w = np.concatenate([[-1], prev_w[:-1]])
    ok1 = prev_w >= gstart
    nxt = np.minimum.accumulate(np.where(w_s, idx, m)[::-1])[::-1]
    nxt = np.append(nxt[1:], m)
    ok2 = ~w_s & (nxt < gend)
    a = np.concatenate([n_s[prev_w[ok1]], n_s[ok2]])
    b = np.concatenate([n_s[ok1], n_s[nxt[ok2]]])
    slot = np.concatenate([k_s[ok1], k_s[ok2]])
    keep = a != b
    a, b, slot = a[keep], b[keep], slot[keep]
    ordered = _ordered_locally(doc, col, level, a, b)
    racy: set[int] = set()
    for i in np.flatnonzero(~ordered).tolist():
        s = int(slot[i])
        if s not in racy and not graph.reaches(int(a[i]), int(b[i]), level):
            racy.add(s)
    if not racy:
        return
    # The quadratic check's listing, on the failing slots only: slots in order of first
    # access, pairs in access order.
    in_racy = np.isin(key, np.fromiter(racy, dtype=np.int64))
    pos = np.flatnonzero(in_racy)
    first: dict[int, int] = {}
    uses: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for p in pos.tolist():
        kk = int(key[p])
        first.setdefault(kk, p)
        uses[kk].append((int(node[p]), bool(write[p])))
    reported = 0
    for kk in sorted(racy, key=lambda x: first[x]):
        gpu = int(col["gpu"][uses[kk][0][0]])
        loc = canon.loc(kk)
        lst = uses[kk]
        for i, (x, wx) in enumerate(lst):
            for y, wy in lst[i + 1 :]:
                if x == y or not (wx or wy):
                    continue
                if graph.reaches(x, y, level) or graph.reaches(y, x, level):
                    continue
                errs.add(
                    "race",
                    f"{loc.buf}[{loc.off}] is accessed by tb {col['tb'][x]} step {col['s'][x]} and tb "
                    f"{col['tb'][y]} step {col['s'][y]} (at least one writes) "
                    "with no dependency ordering them",
                    gpu,
                    int(col["tb"][y]),
                    int(col["s"][y]),
                )
                reported += 1
                if reported >= 20:
                    return


def _ordered_locally(
    doc: _Doc, col: Mapping[str, np.ndarray], level: np.ndarray, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """Whether ``a[i]`` happens before ``b[i]`` through edges within their GPU.

    Vector clocks: ``vc[v, t]`` is the last position in thread block t (of v's GPU) that
    reaches v, computed a level at a time for a batch of GPUs (so the clocks of only a
    bounded number of steps exist at once). False means "not by this GPU alone".
    """
    result = np.zeros(len(a), dtype=bool)
    n = len(col["s"])
    if not len(a):
        return result
    gpu, tb, pos, rec = col["gpu"], col["tb"], col["s"], col["rec"]
    prev = np.full(n, -1, dtype=np.int64)
    same = np.flatnonzero(rec[1:] == rec[:-1]) + 1
    prev[same] = same - 1
    dep = np.full(n, -1, dtype=np.int64)
    dnodes = np.flatnonzero(col["depid"] >= 0)
    if len(dnodes):
        first = np.asarray(doc.tb_first, dtype=np.int64)
        # no structural or dependency errors here: every (gpu, depid) names one block
        rec_of = {(g, t): r for r, (g, t) in enumerate(zip(doc.tb_gpu, doc.tb_id, strict=True))}
        target = np.fromiter(
            (
                rec_of[(g, t)]
                for g, t in zip(gpu[dnodes].tolist(), col["depid"][dnodes].tolist(), strict=True)
            ),
            dtype=np.int64,
            count=len(dnodes),
        )
        dep[dnodes] = first[target] + col["deps"][dnodes]
    ntb = Counter(doc.tb_gpu)
    budget = 1 << 23
    pair_gpu = gpu[b]
    by_gpu = np.argsort(gpu, kind="stable")
    gpu_sorted = gpu[by_gpu]
    gpus = sorted(ntb)
    start = 0
    while start < len(gpus):
        width = max(ntb[gpus[start]], 1)
        stop = start
        rows = 0
        while stop < len(gpus):
            w = max(width, ntb[gpus[stop]])
            cnt = int(
                np.searchsorted(gpu_sorted, gpus[stop], side="right")
                - np.searchsorted(gpu_sorted, gpus[stop])
            )
            if stop > start and (rows + cnt) * w > budget:
                break
            width, rows = w, rows + cnt
            stop += 1
        lo, hi = gpus[start], gpus[stop - 1]
        sel = by_gpu[np.searchsorted(gpu_sorted, lo) : np.searchsorted(gpu_sorted, hi, side="right")]
        local = np.full(n + 1, len(sel), dtype=np.int64)  # sentinel row: no clock
        local[sel] = np.arange(len(sel))
        vc = np.full((len(sel) + 1, width), -1, dtype=np.int16)
        prow = local[np.where(prev[sel] >= 0, prev[sel], n)]
        drow = local[np.where(dep[sel] >= 0, dep[sel], n)]
        lv = level[sel]
        srt = np.argsort(lv, kind="stable")
        cuts = np.flatnonzero(np.diff(lv[srt])) + 1
        for group in np.split(srt, cuts):
            vc[group] = np.maximum(vc[prow[group]], vc[drow[group]])
            vc[group, tb[sel[group]]] = pos[sel[group]]
        mask = (pair_gpu >= lo) & (pair_gpu <= hi)
        pa, pb = a[mask], b[mask]
        result[mask] = vc[local[pb], tb[pa]] >= pos[pa]
        start = stop
    return result


# ====================================================================== simulation
def _quiet_ranks(doc: _Doc, col: Mapping[str, np.ndarray], ngpus: int, receives: bool) -> list[int]:
    """Ranks none of whose steps receive (``receives``) or send."""
    roles = doc.codes(_RECVS if receives else _SENDS)
    busy = set(np.unique(col["gpu"][np.isin(col["type"], roles)]).tolist())
    return [g for g in range(ngpus) if g not in busy]


def _infer_root(quiet_ranks: Callable[[bool], list[int]], receives: bool) -> int:
    """Broadcast: the one rank that never receives; Reduce: the one that never sends."""
    quiet = quiet_ranks(receives)
    if len(quiet) != 1:
        raise ValidationError(f"cannot infer the root: ranks {quiet} all qualify; pass expect=Instance")
    return quiet[0]


def _synthetic(
    kind: str | None, coll: str, n: int, k_total: int, quiet_ranks: Callable[[bool], list[int]]
) -> Collective:
    """The collective an XML names, on ranks 0..n-1, with ccplan's chunk naming."""
    gpus = tuple(range(n))
    if kind is None:
        raise ValidationError(f"coll={coll!r} has no known postcondition")
    per = k_total // n
    if kind in ("allgather", "alltoall", "reducescatter") and k_total % n:
        raise ValidationError(f"nchunksperloop={k_total} is not a multiple of ngpus={n}")

    def freeze(table: Mapping[Chunk, Any]) -> tuple[tuple[Chunk, tuple[int, ...]], ...]:
        return tuple(sorted((c, tuple(sorted(v))) for c, v in table.items()))

    pre: dict[Chunk, Sequence[int]]
    post: dict[Chunk, Sequence[int]]
    root: int | None
    if kind == "allgather":
        pre = {(s, j): [s] for s in gpus for j in range(per)}
        post = {(s, j): gpus for s in gpus for j in range(per)}
        return Collective("allgather", per, freeze(pre), freeze(post), pieces=k_total)
    if kind == "alltoall":
        c = per
        pre = {(s, k): [s] for s in gpus for k in range(n * c)}
        post = {(s, k): sorted({s, k // c}) for s in gpus for k in range(n * c)}
        return Collective("alltoall", c, freeze(pre), freeze(post), pieces=n * c)
    if kind == "broadcast":
        root = _infer_root(quiet_ranks, receives=True)
        pre = {(root, j): [root] for j in range(k_total)}
        post = {(root, j): gpus for j in range(k_total)}
        return Collective("broadcast", k_total, freeze(pre), freeze(post), pieces=k_total, root=root)
    if kind == "reducescatter":
        pre = {(d, j): gpus for d in gpus for j in range(per)}
        post = {(d, j): [d] for d in gpus for j in range(per)}
        return Collective("reducescatter", per, freeze(pre), freeze(post), pieces=k_total, combining=True)
    if kind in ("allreduce", "reduce"):
        root = _infer_root(quiet_ranks, receives=False) if kind == "reduce" else None
        pre = {(0, k): gpus for k in range(k_total)}
        post = {(0, k): (gpus if root is None else [root]) for k in range(k_total)}
        return Collective(kind, k_total, freeze(pre), freeze(post), pieces=k_total, root=root, combining=True)
    raise ValidationError(f"coll={coll!r} has no known postcondition")


def _expected_layout(
    expect: Instance | None,
    kind: str | None,
    coll: str,
    ngpus: int,
    k_total: int,
    inplace: bool,
    quiet_ranks: Callable[[bool], list[int]],
) -> tuple[BufferLayout, int]:
    if expect is not None:
        if len(expect.topology.gpus) != ngpus:
            raise ValidationError(f"ngpus={ngpus} but the instance has {len(expect.topology.gpus)} GPUs")
        layout = buffer_layout(expect.collective, expect.topology.gpus, inplace)
        if kind is not None and kind != layout.kind:
            raise ValidationError(
                f"coll={coll!r} but the instance's collective is {expect.collective.kind!r}"
            )
    else:
        layout = buffer_layout(
            _synthetic(kind, coll, ngpus, k_total, quiet_ranks), tuple(range(ngpus)), inplace
        )
    if k_total % layout.nchunks:
        raise ValidationError(
            f"nchunksperloop={k_total} is not a multiple of the collective's {layout.nchunks}"
        )
    return layout, k_total // layout.nchunks


Value = frozenset[Any]


def _simulate(
    doc: _Doc,
    col: Mapping[str, np.ndarray],
    order: np.ndarray,
    snd: np.ndarray,
    rcv: np.ndarray,
    layout: BufferLayout,
    factor: int,
    canon: _Canon,
    errs: _Errors,
) -> None:
    """Run the steps in a happens-before order on symbolic buffers and check the postcondition.

    A value is a frozenset of tokens: ``(chunk, piece)`` for data movement,
    ``(chunk, piece, contributor)`` for combining collectives (a reduction is a disjoint union).
    ``piece`` indexes the ``factor = nchunksperloop / K`` replicas of ``instances``. Values
    are interned and the buffers are arrays of value ids (``-1``: nothing), so the state is
    a few bytes per buffer slot.
    """
    values: list[Value] = []
    ids: dict[Value, int] = {}

    def vid(v: Value) -> int:
        i = ids.get(v)
        if i is None:
            i = ids[v] = len(values)
            values.append(v)
        return i

    mem = array("i", [-1]) * canon.size
    writer = array("i", [-1]) * canon.size
    n = len(col["s"])
    for (rank, chunk), loc in layout.home.items():
        for p in range(factor):
            token = (chunk, p, rank) if layout.combining else (chunk, p)
            mem[_key(canon, rank, loc, factor, p)] = vid(frozenset({token}))
    sender = array("q", [-1]) * n
    for x, y in zip(snd.tolist(), rcv.tolist(), strict=True):
        sender[y] = x
    wire: dict[int, list[int]] = {}
    names = doc.names
    gpu_c, tb_c, s_c = col["gpu"], col["tb"], col["s"]

    def combine(node: int, x_ids: list[int], y_ids: list[int]) -> list[int]:
        out: list[int] = []
        for xi, yi in zip(x_ids, y_ids, strict=False):
            if xi < 0 or yi < 0:
                out.append(-1)
                continue
            x, y = values[xi], values[yi]
            if x & y:
                errs.add(
                    "double-count",
                    f"reduction adds a contribution twice: {sorted(map(str, x & y))[:3]}",
                    int(gpu_c[node]),
                    int(tb_c[node]),
                    int(s_c[node]),
                )
            out.append(vid(x | y))
        return out

    block = 1 << 16
    for lo in range(0, n, block):
        nodes = order[lo : lo + block]
        types = [names[c] for c in col["type"][nodes].tolist()]
        cnts = col["cnt"][nodes].tolist()
        src_keys = canon.keys(gpu_c[nodes], col["srcbuf"][nodes], col["srcoff"][nodes]).tolist()
        dst_keys = canon.keys(gpu_c[nodes], col["dstbuf"][nodes], col["dstoff"][nodes]).tolist()
        for node, t, cnt, sk, dk in zip(nodes.tolist(), types, cnts, src_keys, dst_keys, strict=True):
            incoming: list[int] = []
            if t in _RECVS:
                frm = sender[node]
                incoming = wire.pop(frm, [-1] * cnt) if frm >= 0 else [-1] * cnt
            out: list[int] | None = None
            if t == "s":
                out = [mem[sk + k] for k in range(cnt)]
            elif t == "r" or t == "rcs":
                for k, v in enumerate(incoming):
                    mem[dk + k] = v
                    writer[dk + k] = node
                if t == "rcs":
                    out = incoming
            elif t in ("rrs", "rrc", "rrcs"):
                reduced = combine(node, incoming, [mem[sk + k] for k in range(cnt)])
                if t != "rrs":
                    for k, v in enumerate(reduced):
                        mem[dk + k] = v
                        writer[dk + k] = node
                if t != "rrc":
                    out = reduced
            elif t == "cpy":
                got = [mem[sk + k] for k in range(cnt)]
                for k, v in enumerate(got):
                    mem[dk + k] = v
                    writer[dk + k] = node
            elif t == "re":
                reduced = combine(node, [mem[dk + k] for k in range(cnt)], [mem[sk + k] for k in range(cnt)])
                for k, v in enumerate(reduced):
                    mem[dk + k] = v
                    writer[dk + k] = node
            if out is not None:
                wire[node] = out

    reported = 0
    holders_of: dict[Chunk, list[int]] = defaultdict(list)
    if layout.combining:
        for h, c in layout.home:
            holders_of[c].append(h)
    for (rank, chunk), loc in sorted(layout.dest.items()):
        for p in range(factor):
            want: frozenset[Any]
            if layout.combining:
                want = frozenset((chunk, p, h) for h in holders_of[chunk])
            else:
                want = frozenset({(chunk, p)})
            key = _key(canon, rank, loc, factor, p)
            gi = mem[key]
            held: Value | None = values[gi] if gi >= 0 else None
            if held == want:
                continue
            last = writer[key]
            where = "never written" if last < 0 else f"last written by tb {tb_c[last]} step {s_c[last]}"
            if held is None:
                found = "nothing"
            elif layout.combining:
                found = f"{len(held)} of {len(want)} contributions"
            else:
                found = "chunk " + ", ".join(str(list(tok[0])) for tok in sorted(held, key=str))
            where_loc = canon.loc(key)
            errs.add(
                "postcondition",
                f"{where_loc.buf}[{where_loc.off}] must hold chunk {list(chunk)}"
                f"{f' piece {p}' if factor > 1 else ''} but holds {found} ({where})",
                rank,
                None if last < 0 else int(tb_c[last]),
                None if last < 0 else int(s_c[last]),
            )
            reported += 1
            if reported >= 20:
                return


def _key(canon: _Canon, rank: int, loc: Loc, factor: int, p: int) -> int:
    one = np.array([rank], dtype=np.int64)
    return int(canon.keys_of(one, np.array([_BUF_CODES[loc.buf]]), np.array([loc.off * factor + p]))[0])
