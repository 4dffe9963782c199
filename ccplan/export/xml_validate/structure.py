"""Structure and runtime limits: thread block ids and counts, peers, channels, steps.

Per GPU and thread block: contiguous ids, co-residency, at most one thread block per (peer,
channel, direction), ``MSCCL_MAX_NUM_STEPS``; per step: ``s`` in document order, the step
type, ``cnt``, the peers a send or receive needs and offsets inside the declared buffers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from ccplan.export.msccl.dialects import MAX_COUNT, MAX_DEP_TB, MAX_OFFSET, MAX_TBS_PER_CHANNEL
from ccplan.export.xml_validate.parsing import (
    _BUF_CODES,
    _READS_SRC,
    _RECVS,
    _SENDS,
    _WRITES_DST,
    STEP_TYPES,
    _Doc,
)
from ccplan.export.xml_validate.report import _Errors


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
