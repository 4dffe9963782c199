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

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    Loc,
    alias,
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


@dataclass
class _Step:
    gpu: int
    tb: int
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    node: int = -1


@dataclass
class _Tb:
    gpu: int
    id: int
    send: int
    recv: int
    chan: int
    steps: list[_Step]
    incomplete: bool = False
    """A step of this block was unreadable (reported once); later steps' positions are unknown."""


class _Errors:
    def __init__(self) -> None:
        self.items: list[XmlError] = []

    def add(
        self, kind: str, message: str, gpu: int | None = None, tb: int | None = None, step: int | None = None
    ) -> None:
        self.items.append(XmlError(kind, message, gpu, tb, step))


def _int(el: ET.Element, key: str, errs: _Errors, where: dict[str, int | None]) -> int | None:
    raw = el.get(key)
    if raw is None:
        errs.add("attribute", f"<{el.tag}> lacks attribute {key!r}", **where)
        return None
    try:
        return int(raw)
    except ValueError:
        errs.add("attribute", f"<{el.tag}> attribute {key}={raw!r} is not an integer", **where)
        return None


def validate_xml(
    text_or_path: str | Path,
    *,
    expect: Instance | None = None,
    dialect: str = "executor",
    max_tbs: int = DEFAULT_MAX_TBS,
) -> XmlReport:
    """Check an MSCCL algorithm XML (see the module doc for the list of checks).

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
    if isinstance(text_or_path, Path) or not str(text_or_path).lstrip().startswith("<"):
        try:
            text = Path(text_or_path).read_text()
        except OSError as exc:
            raise ValidationError(f"xml file {str(text_or_path)!r}: {exc.strerror or exc}") from None
    else:
        text = str(text_or_path)
    errs = _Errors()
    stats: dict[str, Any] = {}

    if text.lstrip().startswith("<?xml"):
        errs.add("format", "an <?xml ...?> prolog is not understood by the executor's tokenizer")
    for match in re.finditer(r"<[A-Za-z][^>]*>", text):
        if "\n" in match.group(0):
            line = text.count("\n", 0, match.start()) + 1
            errs.add(
                "format",
                f"element at line {line} spans several lines; the executor's tokenizer "
                "needs each element's attributes on one line",
            )
            break
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        errs.add("parse", f"not well-formed XML: {exc}")
        return XmlReport(False, tuple(errs.items), stats)
    if root.tag != "algo":
        errs.add("parse", f"root element is <{root.tag}>, expected <algo>")
        return XmlReport(False, tuple(errs.items), stats)

    # ------------------------------------------------------------------ <algo>
    for key in dia.required_attrs:
        if key not in root.attrib:
            errs.add("attribute", f"<algo> lacks attribute {key!r} required by the {dia.name} runtime")
    none: dict[str, int | None] = {}
    ngpus = _int(root, "ngpus", errs, none) or 0
    nchannels = _int(root, "nchannels", errs, none) or 0
    k_total = _int(root, "nchunksperloop", errs, none) or 0
    coll = root.get("coll", "")
    proto = root.get("proto", "")
    inplace = root.get("inplace", "0") == "1"
    if root.get("inplace", "0") == "1" and root.get("outofplace", "0") == "1":
        errs.add("attribute", "inplace and outofplace are both 1; the buffer aliasing differs between them")
    if proto not in PROTOCOLS:
        errs.add("attribute", f"proto={proto!r} is not one of {PROTOCOLS}")
    if coll not in dia.accepted_colls:
        errs.add(
            "attribute",
            f"coll={coll!r} is not accepted by the {dia.name} runtime "
            f"({', '.join(sorted(dia.accepted_colls))})",
        )
    if not 1 <= nchannels <= MAX_CHANNELS:
        errs.add("channel", f"nchannels={nchannels} must be in 1..{MAX_CHANNELS}")
    if ngpus < 1 or k_total < 1:
        errs.add("attribute", f"ngpus={ngpus} and nchunksperloop={k_total} must be positive")
        return XmlReport(False, tuple(errs.items), stats)
    stats.update(ngpus=ngpus, nchannels=nchannels, nchunksperloop=k_total, coll=coll, inplace=inplace)

    # ------------------------------------------------------------------ <gpu>/<tb>/<step>
    sizes: dict[int, dict[str, int]] = {}
    tbs: dict[int, list[_Tb]] = {}
    for g_el in root:
        if g_el.tag != "gpu":
            errs.add("parse", f"<algo> child <{g_el.tag}> is not <gpu>")
            continue
        gid = _int(g_el, "id", errs, none)
        if gid is None:
            continue
        if not 0 <= gid < ngpus or gid in tbs:
            errs.add("attribute", f"gpu id {gid} is out of range 0..{ngpus - 1} or repeated", gpu=gid)
            continue
        where_g: dict[str, int | None] = {"gpu": gid}
        sizes[gid] = {b: _int(g_el, f"{b}_chunks", errs, where_g) or 0 for b in ("i", "o", "s")}
        blocks: list[_Tb] = []
        for t_el in g_el:
            tid = _int(t_el, "id", errs, where_g)
            if t_el.tag != "tb" or tid is None:
                continue
            where_t: dict[str, int | None] = {"gpu": gid, "tb": tid}
            send = _int(t_el, "send", errs, where_t)
            recv = _int(t_el, "recv", errs, where_t)
            chan = _int(t_el, "chan", errs, where_t)
            steps: list[_Step] = []
            incomplete = False
            for s_el in t_el:
                if s_el.tag != "step":
                    continue
                where_s: dict[str, int | None] = {"gpu": gid, "tb": tid, "step": len(steps)}
                missing = [a for a in _STEP_ATTRS if a not in s_el.attrib]
                if missing:
                    errs.add("attribute", f"step lacks attribute(s) {missing}", **where_s)
                    incomplete = True
                    continue
                vals = {
                    a: _int(s_el, a, errs, where_s)
                    for a in ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep")
                }
                num = {k: v for k, v in vals.items() if v is not None}
                if len(num) != len(vals):
                    incomplete = True
                    continue
                steps.append(
                    _Step(
                        gid,
                        tid,
                        num["s"],
                        s_el.get("type", ""),
                        s_el.get("srcbuf", ""),
                        num["srcoff"],
                        s_el.get("dstbuf", ""),
                        num["dstoff"],
                        num["cnt"],
                        num["depid"],
                        num["deps"],
                        num["hasdep"],
                    )
                )
            blocks.append(
                _Tb(
                    gid,
                    tid,
                    -1 if send is None else send,
                    -1 if recv is None else recv,
                    0 if chan is None else chan,
                    steps,
                    incomplete,
                )
            )
        tbs[gid] = blocks
    for g in range(ngpus):
        if g not in tbs:
            errs.add("attribute", f'no <gpu id="{g}"> element', gpu=g)
            tbs[g] = []
            sizes[g] = {"i": 0, "o": 0, "s": 0}
    max_steps = dia.max_steps
    _check_structure(tbs, sizes, ngpus, nchannels, max_steps, max_tbs, dia.max_tb_id, errs)
    stats.update(
        tbs_max=max((len(b) for b in tbs.values()), default=0),
        steps_max=max((len(t.steps) for b in tbs.values() for t in b), default=0),
        steps_total=sum(len(t.steps) for b in tbs.values() for t in b),
        nops=sum(1 for b in tbs.values() for t in b for s in t.steps if s.type == "nop"),
    )
    structural = bool(errs.items)
    if any(t.incomplete for blocks in tbs.values() for t in blocks):
        # Matching sends to receives and ordering them needs every step: with one unreadable,
        # each later check would report a consequence of the same missing attribute.
        return XmlReport(False, tuple(errs.items), stats)

    # ------------------------------------------------------------------ graph
    tb_map = {(g, t.id): t for g, blocks in tbs.items() for t in blocks}
    steps_all: list[_Step] = [s for blocks in tbs.values() for t in blocks for s in t.steps]
    for i, st in enumerate(steps_all):
        st.node = i
    edges: dict[int, set[int]] = defaultdict(set)
    for t in tb_map.values():
        for a, b in zip(t.steps, t.steps[1:], strict=False):
            edges[a.node].add(b.node)
    for st in steps_all:
        if st.depid < 0:
            continue
        target_tb = tb_map.get((st.gpu, st.depid))
        if target_tb is None or not 0 <= st.deps < len(target_tb.steps):
            errs.add(
                "dependency",
                f"depid={st.depid} deps={st.deps} names no step of this GPU",
                st.gpu,
                st.tb,
                st.s,
            )
            continue
        target = target_tb.steps[st.deps]
        if target.tb == st.tb and target.s >= st.s:
            errs.add("dependency", f"depends on its own later step {st.deps}", st.gpu, st.tb, st.s)
        if target.hasdep != 1:
            errs.add(
                "hasdep",
                f'depends on tb {st.depid} step {st.deps}, which has hasdep="0" '
                "(no flag is published, the wait never ends)",
                st.gpu,
                st.tb,
                st.s,
            )
        edges[target.node].add(st.node)
    pairs = _match_connections(tb_map, ngpus, nchannels, errs)
    for snd, rcv in pairs:
        edges[snd.node].add(rcv.node)
    stats["transfers"] = len(pairs)

    order, cyclic = _toposort(len(steps_all), edges)
    if cyclic:
        cycle = _find_cycle(cyclic, edges)
        names = [f"GPU {steps_all[v].gpu} tb {steps_all[v].tb} step {steps_all[v].s}" for v in cycle]
        gpus_in = sorted({steps_all[v].gpu for v in cycle})
        first = steps_all[cycle[0]]
        span = (
            "across GPUs " + ", ".join(map(str, gpus_in)) if len(gpus_in) > 1 else f"within GPU {gpus_in[0]}"
        )
        errs.add(
            "cycle",
            f"happens-before cycle {span} (deadlock): "
            + " -> ".join(names[:12])
            + (" ..." if len(names) > 12 else ""),
            first.gpu,
            first.tb,
            first.s,
        )
        return XmlReport(False, tuple(errs.items), stats)
    depth = [0] * len(steps_all)
    preds: dict[int, list[int]] = defaultdict(list)
    for u, vs in edges.items():
        for v in vs:
            preds[v].append(u)
    for v in order:
        depth[v] = 1 + max((depth[u] for u in preds[v]), default=0)
    stats["critical_path"] = max(depth, default=0)
    if structural or any(e.kind in ("unmatched", "dependency") for e in errs.items):
        return XmlReport(False, tuple(errs.items), stats)

    # ------------------------------------------------------------------ races and simulation
    kind = COLL_TO_KIND.get(coll)
    _check_races(steps_all, order, preds, ngpus, k_total, kind or "", inplace, errs)
    try:
        layout, factor = _expected_layout(expect, kind, coll, ngpus, k_total, inplace, tbs)
    except ValidationError as exc:
        errs.add("postcondition", f"cannot derive the expected result: {exc}")
        return XmlReport(False, tuple(errs.items), stats)
    _simulate(steps_all, order, pairs, layout, factor, kind or "", inplace, ngpus, k_total, errs)
    return XmlReport(not errs.items, tuple(errs.items), stats)


# ====================================================================== structure
def _check_structure(
    tbs: dict[int, list[_Tb]],
    sizes: dict[int, dict[str, int]],
    ngpus: int,
    nchannels: int,
    max_steps: int,
    max_tbs: int,
    max_tb_id: int,
    errs: _Errors,
) -> None:
    for g, blocks in sorted(tbs.items()):
        ids = sorted(t.id for t in blocks)
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
        for t in blocks:
            for role, peer in (("send", t.send), ("recv", t.recv)):
                if peer == -1:
                    continue
                if not 0 <= peer < ngpus or peer == g:
                    errs.add("peer", f"{role}={peer} is not another GPU", g, t.id)
                    continue
                if (role, peer, t.chan) in conn:
                    errs.add(
                        "connection",
                        f"thread blocks {conn[(role, peer, t.chan)]} and {t.id} both "
                        f"{role} peer {peer} on channel {t.chan}",
                        g,
                        t.id,
                    )
                conn[(role, peer, t.chan)] = t.id
                per_chan[(role, t.chan)] += 1
            if not 0 <= t.chan < nchannels:
                errs.add("channel", f"chan={t.chan} is outside 0..{nchannels - 1}", g, t.id)
            if len(t.steps) > max_steps:
                errs.add("steps", f"{len(t.steps)} steps exceed MSCCL_MAX_NUM_STEPS = {max_steps}", g, t.id)
            for index, st in enumerate(t.steps):
                # After an unreadable step the document position is unknown: checking s=
                # against it would only repeat the one error already reported.
                _check_step(st, st.s if t.incomplete else index, t, sizes[g], errs)
        for (role, ch), count in per_chan.items():
            if count > MAX_TBS_PER_CHANNEL:
                errs.add(
                    "tb-count", f"{count} {role} thread blocks on channel {ch} (max {MAX_TBS_PER_CHANNEL})", g
                )


def _check_step(st: _Step, index: int, t: _Tb, size: Mapping[str, int], errs: _Errors) -> None:
    where = (st.gpu, st.tb, st.s)
    if st.s != index:
        errs.add(
            "step-index",
            f"s={st.s} but it is step {index} of the thread block in document order",
            st.gpu,
            st.tb,
            index,
        )
    if st.type not in STEP_TYPES:
        errs.add("attribute", f"type={st.type!r} is not a step type", *where)
        return
    if st.type == "nop":
        if st.depid < 0:
            errs.add("nop-without-depid", "a nop must carry a dependency (depid >= 0)", *where)
        return
    if not 0 <= st.cnt < MAX_COUNT:
        errs.add("cnt", f"cnt={st.cnt} must be in 0..{MAX_COUNT - 1}", *where)
    if st.type in _SENDS and t.send < 0:
        errs.add("peer", f"a {st.type} step sends but the thread block has send=-1", *where)
    if st.type in _RECVS and t.recv < 0:
        errs.add("peer", f"a {st.type} step receives but the thread block has recv=-1", *where)
    used = []
    if st.type in _READS_SRC:
        used.append(("src", st.srcbuf, st.srcoff))
    if st.type in _WRITES_DST or st.type == "re":
        used.append(("dst", st.dstbuf, st.dstoff))
    for side, buf, off in used:
        if buf not in ("i", "o", "s"):
            errs.add("attribute", f"{side}buf={buf!r} is not i, o or s", *where)
            continue
        if off < 0 or off + st.cnt > size[buf] or off + st.cnt - 1 > MAX_OFFSET:
            errs.add(
                "offset",
                f"{side} {buf}[{off}..{off + st.cnt - 1}] is outside the buffer ({buf}_chunks={size[buf]})",
                *where,
            )


def _match_connections(
    tb_map: Mapping[tuple[int, int], _Tb], ngpus: int, nchannels: int, errs: _Errors
) -> list[tuple[_Step, _Step]]:
    """Pair the k-th send with the k-th receive on every (sender, receiver, channel)."""
    sends: dict[tuple[int, int, int], list[_Step]] = defaultdict(list)
    recvs: dict[tuple[int, int, int], list[_Step]] = defaultdict(list)
    for (g, _), t in sorted(tb_map.items()):
        for st in t.steps:
            if st.type in _SENDS and t.send >= 0:
                sends[(g, t.send, t.chan)].append(st)
            if st.type in _RECVS and t.recv >= 0:
                recvs[(t.recv, g, t.chan)].append(st)
    pairs: list[tuple[_Step, _Step]] = []
    for conn in sorted(set(sends) | set(recvs)):
        ss, rr = sends.get(conn, []), recvs.get(conn, [])
        u, v, ch = conn
        if len(ss) != len(rr):
            extra = ss[len(rr)] if len(ss) > len(rr) else rr[len(ss)]
            errs.add(
                "unmatched",
                f"connection GPU {u} -> GPU {v} channel {ch}: {len(ss)} sends but {len(rr)} receives",
                extra.gpu,
                extra.tb,
                extra.s,
            )
        for k, (a, b) in enumerate(zip(ss, rr, strict=False)):
            pairs.append((a, b))
            if a.cnt != b.cnt:
                errs.add(
                    "order",
                    f"connection GPU {u} -> GPU {v} channel {ch}: send #{k} (tb {a.tb} step {a.s}) "
                    f"moves cnt={a.cnt}, its matching receive moves cnt={b.cnt}",
                    b.gpu,
                    b.tb,
                    b.s,
                )
                continue
            # The runtime ignores the remote half of a step, but a consistent writer fills it in:
            # an 's' names where the peer stores, an 'r' names where the peer read.
            sent = (
                (a.srcbuf, a.srcoff) if a.type == "s" else ((a.dstbuf, a.dstoff) if a.type != "rrs" else None)
            )
            landed = (b.dstbuf, b.dstoff) if b.type != "rrs" else None
            mismatch = None
            if a.type == "s" and a.dstoff >= 0 and landed is not None and (a.dstbuf, a.dstoff) != landed:
                mismatch = (
                    f"send #{k} (tb {a.tb} step {a.s}) says it lands in {a.dstbuf}[{a.dstoff}], the "
                    f"receive stores into {landed[0]}[{landed[1]}]"
                )
            elif b.type == "r" and b.srcoff >= 0 and sent is not None and (b.srcbuf, b.srcoff) != sent:
                mismatch = (
                    f"receive #{k} expects {b.srcbuf}[{b.srcoff}] but send #{k} (tb {a.tb} step {a.s}) "
                    f"sends {sent[0]}[{sent[1]}]"
                )
            if mismatch:
                errs.add(
                    "order",
                    f"connection GPU {u} -> GPU {v} channel {ch}: FIFO order differs: {mismatch}",
                    b.gpu,
                    b.tb,
                    b.s,
                )
    return pairs


def _toposort(n: int, edges: Mapping[int, set[int]]) -> tuple[list[int], set[int]]:
    indeg = [0] * n
    for vs in edges.values():
        for v in vs:
            indeg[v] += 1
    stack = [v for v in range(n) if indeg[v] == 0]
    order = []
    while stack:
        u = stack.pop()
        order.append(u)
        for v in edges.get(u, ()):
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    return order, {v for v in range(n) if indeg[v] > 0}


def _find_cycle(remaining: set[int], edges: Mapping[int, set[int]]) -> list[int]:
    """A cycle among the nodes Kahn's algorithm could not order."""
    start = min(remaining)
    seen: dict[int, int] = {}
    path: list[int] = []
    u = start
    while u not in seen:
        seen[u] = len(path)
        path.append(u)
        u = min(v for v in edges.get(u, ()) if v in remaining)
    return [*path[seen[u] :], u]


# ====================================================================== races
def _canonical(kind: str, inplace: bool, ngpus: int, k_total: int, gpu: int, buf: str, off: int) -> Loc:
    return alias(kind, inplace, ngpus, k_total, gpu, Loc(buf, off))


def _accesses(st: _Step) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    reads: list[tuple[str, int]] = []
    writes: list[tuple[str, int]] = []
    if st.type in _READS_SRC:
        reads += [(st.srcbuf, st.srcoff + k) for k in range(st.cnt)]
    if st.type == "re":
        reads += [(st.dstbuf, st.dstoff + k) for k in range(st.cnt)]
    if st.type in _WRITES_DST:
        writes += [(st.dstbuf, st.dstoff + k) for k in range(st.cnt)]
    return reads, writes


def _check_races(
    steps: list[_Step],
    order: list[int],
    preds: Mapping[int, list[int]],
    ngpus: int,
    k_total: int,
    kind: str,
    inplace: bool,
    errs: _Errors,
) -> None:
    """Two accesses to one slot, one a write, must be ordered by happens-before."""
    ancestors = [0] * len(steps)
    for v in order:
        acc = 0
        for u in preds.get(v, ()):
            acc |= ancestors[u] | (1 << u)
        ancestors[v] = acc
    slots: dict[tuple[int, Loc], list[tuple[int, bool]]] = defaultdict(list)
    for st in steps:
        reads, writes = _accesses(st)
        for buf, off in reads:
            slots[(st.gpu, _canonical(kind, inplace, ngpus, k_total, st.gpu, buf, off))].append(
                (st.node, False)
            )
        for buf, off in writes:
            slots[(st.gpu, _canonical(kind, inplace, ngpus, k_total, st.gpu, buf, off))].append(
                (st.node, True)
            )
    reported = 0
    for (gpu, loc), uses in slots.items():
        for i, (a, wa) in enumerate(uses):
            for b, wb in uses[i + 1 :]:
                if a == b or not (wa or wb):
                    continue
                if (ancestors[b] >> a) & 1 or (ancestors[a] >> b) & 1:
                    continue
                sa, sb = steps[a], steps[b]
                errs.add(
                    "race",
                    f"{loc.buf}[{loc.off}] is accessed by tb {sa.tb} step {sa.s} and tb {sb.tb} "
                    f"step {sb.s} (at least one writes) with no dependency ordering them",
                    gpu,
                    sb.tb,
                    sb.s,
                )
                reported += 1
                if reported >= 20:
                    return


# ====================================================================== simulation
def _infer_root(tbs: Mapping[int, list[_Tb]], receives: bool) -> int:
    """Broadcast: the one rank that never receives; Reduce: the one that never sends."""
    roles = _RECVS if receives else _SENDS
    quiet = [
        g for g, blocks in sorted(tbs.items()) if not any(s.type in roles for t in blocks for s in t.steps)
    ]
    if len(quiet) != 1:
        raise ValidationError(f"cannot infer the root: ranks {quiet} all qualify; pass expect=Instance")
    return quiet[0]


def _synthetic(kind: str | None, coll: str, n: int, k_total: int, tbs: Mapping[int, list[_Tb]]) -> Collective:
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
        root = _infer_root(tbs, receives=True)
        pre = {(root, j): [root] for j in range(k_total)}
        post = {(root, j): gpus for j in range(k_total)}
        return Collective("broadcast", k_total, freeze(pre), freeze(post), pieces=k_total, root=root)
    if kind == "reducescatter":
        pre = {(d, j): gpus for d in gpus for j in range(per)}
        post = {(d, j): [d] for d in gpus for j in range(per)}
        return Collective("reducescatter", per, freeze(pre), freeze(post), pieces=k_total, combining=True)
    if kind in ("allreduce", "reduce"):
        root = _infer_root(tbs, receives=False) if kind == "reduce" else None
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
    tbs: Mapping[int, list[_Tb]],
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
        layout = buffer_layout(_synthetic(kind, coll, ngpus, k_total, tbs), tuple(range(ngpus)), inplace)
    if k_total % layout.nchunks:
        raise ValidationError(
            f"nchunksperloop={k_total} is not a multiple of the collective's {layout.nchunks}"
        )
    return layout, k_total // layout.nchunks


Value = frozenset[Any]


def _simulate(
    steps: list[_Step],
    order: list[int],
    pairs: list[tuple[_Step, _Step]],
    layout: BufferLayout,
    factor: int,
    kind: str,
    inplace: bool,
    ngpus: int,
    k_total: int,
    errs: _Errors,
) -> None:
    """Run the steps in a happens-before order on symbolic buffers and check the postcondition.

    A value is a frozenset of tokens: ``(chunk, piece)`` for data movement,
    ``(chunk, piece, contributor)`` for combining collectives (a reduction is a disjoint union).
    ``piece`` indexes the ``factor = nchunksperloop / K`` replicas of ``instances``.
    """
    mem: dict[tuple[int, Loc], Value] = {}
    writer: dict[tuple[int, Loc], _Step] = {}

    def canon(g: int, buf: str, off: int) -> Loc:
        return _canonical(kind, inplace, ngpus, k_total, g, buf, off)

    for (rank, chunk), loc in layout.home.items():
        for p in range(factor):
            token = (chunk, p, rank) if layout.combining else (chunk, p)
            mem[(rank, canon(rank, loc.buf, loc.off * factor + p))] = frozenset({token})
    match = {id(b): a for a, b in pairs}
    wire: dict[int, list[Value | None]] = {}

    def read(st: _Step, buf: str, off: int) -> list[Value | None]:
        return [mem.get((st.gpu, canon(st.gpu, buf, off + k))) for k in range(st.cnt)]

    def write(st: _Step, buf: str, off: int, vals: list[Value | None]) -> None:
        for k, v in enumerate(vals):
            key = (st.gpu, canon(st.gpu, buf, off + k))
            if v is None:
                mem.pop(key, None)
            else:
                mem[key] = v
            writer[key] = st

    def combine(st: _Step, a: list[Value | None], b: list[Value | None]) -> list[Value | None]:
        out: list[Value | None] = []
        for x, y in zip(a, b, strict=False):
            if x is None or y is None:
                out.append(None)
                continue
            if x & y:
                errs.add(
                    "double-count",
                    f"reduction adds a contribution twice: {sorted(map(str, x & y))[:3]}",
                    st.gpu,
                    st.tb,
                    st.s,
                )
            out.append(x | y)
        return out

    for node in order:
        st = steps[node]
        t = st.type
        incoming: list[Value | None] = []
        if t in _RECVS:
            sender = match.get(id(st))
            incoming = wire.get(id(sender), [None] * st.cnt) if sender is not None else [None] * st.cnt
        out: list[Value | None] | None = None
        if t == "s":
            out = read(st, st.srcbuf, st.srcoff)
        elif t == "r":
            write(st, st.dstbuf, st.dstoff, incoming)
        elif t == "rcs":
            write(st, st.dstbuf, st.dstoff, incoming)
            out = incoming
        elif t in ("rrs", "rrc", "rrcs"):
            reduced = combine(st, incoming, read(st, st.srcbuf, st.srcoff))
            if t != "rrs":
                write(st, st.dstbuf, st.dstoff, reduced)
            if t != "rrc":
                out = reduced
        elif t == "cpy":
            write(st, st.dstbuf, st.dstoff, read(st, st.srcbuf, st.srcoff))
        elif t == "re":
            write(
                st,
                st.dstbuf,
                st.dstoff,
                combine(st, read(st, st.dstbuf, st.dstoff), read(st, st.srcbuf, st.srcoff)),
            )
        if out is not None:
            wire[id(st)] = out

    reported = 0
    for (rank, chunk), loc in sorted(layout.dest.items()):
        holders = layout.home.keys()
        for p in range(factor):
            want: frozenset[Any]
            if layout.combining:
                want = frozenset((chunk, p, h) for (h, c) in holders if c == chunk)
            else:
                want = frozenset({(chunk, p)})
            key = (rank, canon(rank, loc.buf, loc.off * factor + p))
            got = mem.get(key)
            if got == want:
                continue
            last = writer.get(key)
            where = "never written" if last is None else f"last written by tb {last.tb} step {last.s}"
            if got is None:
                found = "nothing"
            elif layout.combining:
                found = f"{len(got)} of {len(want)} contributions"
            else:
                found = "chunk " + ", ".join(str(list(tok[0])) for tok in sorted(got, key=str))
            errs.add(
                "postcondition",
                f"{key[1].buf}[{key[1].off}] must hold chunk {list(chunk)}"
                f"{f' piece {p}' if factor > 1 else ''} but holds {found} ({where})",
                rank,
                None if last is None else last.tb,
                None if last is None else last.s,
            )
            reported += 1
            if reported >= 20:
                return
