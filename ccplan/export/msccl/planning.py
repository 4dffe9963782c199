"""Planning: one rank's thread blocks, buffer locations, fused steps and dependencies.

Items 3-6 of the package doc: :class:`_Planner` turns a rank's transfers into thread blocks
(send and receive streams paired), places every chunk in a buffer, fuses receive-and-forward
steps, adds the cross-thread-block dependencies and numbers the steps. It works one rank at
a time and records, per transfer, the two facts the other end decides.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.export.msccl.dialects import MAX_COUNT
from ccplan.export.msccl.layout import BufferLayout, Loc
from ccplan.export.msccl.transfers import _Transfers
from ccplan.instances.collectives import Chunk


@dataclass(eq=False, slots=True)
class _Op:
    """One step before numbering (mutable while the program is assembled)."""

    type: str
    rank: int
    key: tuple[Any, ...]
    chunk: Chunk | None = None
    send_peer: int = -1
    recv_peer: int = -1
    channel: int = 0
    reduce: bool = False
    transfer: int = -1
    src: Loc | None = None
    dst: Loc | None = None
    cnt: int = 1
    tb: int = -1
    pos: int = -1
    step: int = -1
    deps: list[_Op] = field(default_factory=list)
    hasdep: bool = False
    out_transfer: int = -1
    """The transfer a fused receive-and-forward step sends on (-1: none)."""

    def reads(self) -> list[Loc]:
        if self.type in ("s", "rrs", "rrc", "rrcs", "cpy") and self.src is not None:
            return _span(self.src, self.cnt)
        return []

    def writes(self) -> list[Loc]:
        if self.type in ("r", "rcs", "rrc", "rrcs", "cpy") and self.dst is not None:
            return _span(self.dst, self.cnt)
        return []


def _span(loc: Loc, cnt: int) -> list[Loc]:
    if cnt == 1:
        return [loc]
    return [Loc(loc.buf, loc.off + k) for k in range(cnt)]


@dataclass(frozen=True)
class _TB:
    send: int
    recv: int
    chan: int


def _pair_streams(
    sends: set[int], recvs: set[int], forwards: Mapping[tuple[int, int], int]
) -> list[tuple[int, int]]:
    """Pair receive peers with send peers of one rank and channel into thread blocks."""
    free_s, free_r = set(sends), set(recvs)
    pairs: list[tuple[int, int]] = []
    # Most forwarded chunks first: a forwarded chunk in one tb becomes an rcs, no dependency.
    for (w, v), count in sorted(forwards.items(), key=lambda kv: (-kv[1], kv[0])):
        if count > 0 and w in free_r and v in free_s:
            pairs.append((v, w))
            free_r.discard(w)
            free_s.discard(v)
    for p in sorted(free_s & free_r):
        pairs.append((p, p))
    free_s -= {p for p, _ in pairs}
    free_r -= {q for _, q in pairs}
    pairs += [(v, -1) for v in sorted(free_s)] + [(-1, w) for w in sorted(free_r)]
    return pairs


_BUFS = ("i", "o", "s")
_BUF_INDEX = {b: i for i, b in enumerate(_BUFS)}


@dataclass
class _RankPlan:
    """One rank's thread blocks and numbered, fused programs (``programs[b]``)."""

    tbs: list[_TB]
    programs: dict[int, list[_Op]]
    scratch: int
    first_key: dict[int, tuple[Any, ...]]
    """Per thread block, the sort key of its first op (orders the steps-limit message)."""


class _Planner:
    """Builds the program of one rank at a time (package doc, items 1-7).

    Everything a rank's steps depend on is its own transfers and buffer layout, except two
    facts about each transfer that its other end decides: where the receiver stores it (a
    sender's ``dstbuf/dstoff``) and what the sender sends (a receiver's ``srcbuf/srcoff``).
    :meth:`link` records both for every transfer in a first pass over the ranks, so the
    second pass (rendering) needs one rank's objects at a time.
    """

    def __init__(self, layout: BufferLayout, tr: _Transfers, channels: int, instances: int) -> None:
        self.layout = layout
        self.tr = tr
        self.channels = channels
        self.instances = instances
        self.chunks = layout.chunk_order
        self.chunk_idx = {c: k for k, c in enumerate(layout.chunk_order)}
        self.sorted_chunks = sorted(layout.chunk_order)
        n = layout.ngpus
        self.out_of = _group(tr.src, n)
        self.in_of = _group(tr.dst, n)
        t = len(tr)
        # (buffer index, offset) per transfer; buffer -1 is "none" (a reduce-and-forward)
        self.sent = np.full((t, 2), -1, dtype=np.int64)
        self.landed = np.full((t, 2), -1, dtype=np.int64)
        self.copies_before = 0

    def plan(self, r: int, copy_seq: int) -> _RankPlan:
        """The program of rank ``r``; ``copy_seq`` numbers its copies after all transfers."""
        layout, tr, channels = self.layout, self.tr, self.channels
        n = layout.ngpus
        ntr = len(tr)
        ops: list[_Op] = []
        seq: dict[int, int] = {}
        out_ids, in_ids = self.out_of[r], self.in_of[r]
        for t, k, dst, key in zip(
            out_ids.tolist(),
            tr.k[out_ids].tolist(),
            tr.dst[out_ids].tolist(),
            tr.send_key[out_ids].tolist(),
            strict=True,
        ):
            op = _Op(
                "s", r, (key, 1, 0, k, dst), self.chunks[k], send_peer=dst, channel=k % channels, transfer=t
            )
            seq[id(op)] = 2 * t
            ops.append(op)
        for t, k, src, key, red in zip(
            in_ids.tolist(),
            tr.k[in_ids].tolist(),
            tr.src[in_ids].tolist(),
            tr.recv_key[in_ids].tolist(),
            tr.reduce[in_ids].tolist(),
            strict=True,
        ):
            op = _Op(
                "r",
                r,
                # Same-slot arrivals: copies before reductions, as the combining verifier applies them.
                (key, 0, int(red), k, src),
                self.chunks[k],
                recv_peer=src,
                channel=k % channels,
                reduce=red and layout.combining,
                transfer=t,
            )
            seq[id(op)] = 2 * t + 1
            ops.append(op)
        rops = sorted(ops, key=lambda o: (o.key, seq[id(o)]))

        # ----------------------------------------------------------- thread blocks
        recv_by_chunk: dict[tuple[int, Chunk], int] = {}
        for op in rops:
            if op.type == "r":
                recv_by_chunk[(op.channel, op.chunk)] = op.recv_peer  # type: ignore[index]
        blocks: list[_TB] = []
        for ch in range(channels):
            sends = {o.send_peer for o in rops if o.type == "s" and o.channel == ch}
            recvs = {o.recv_peer for o in rops if o.type == "r" and o.channel == ch}
            forwards: dict[tuple[int, int], int] = defaultdict(int)
            for o in rops:
                if o.type == "s" and o.channel == ch and (ch, o.chunk) in recv_by_chunk:
                    forwards[(recv_by_chunk[(ch, o.chunk)], o.send_peer)] += 1  # type: ignore[index]
            blocks += [_TB(s, w, ch) for s, w in _pair_streams(sends, recvs, forwards)]
        big = n + 1
        blocks.sort(key=lambda x: (x.send if x.send >= 0 else big, x.recv if x.recv >= 0 else big, x.chan))
        index: dict[tuple[str, int, int], int] = {}
        for b_id, blk in enumerate(blocks):
            if blk.send >= 0:
                index[("s", blk.send, blk.chan)] = b_id
            if blk.recv >= 0:
                index[("r", blk.recv, blk.chan)] = b_id
        for op in rops:
            peer = op.send_peer if op.type == "s" else op.recv_peer
            op.tb = index[(op.type, peer, op.channel)]

        # ----------------------------------------------------------- buffer locations
        scratch: dict[Chunk, Loc] = {}
        cur: dict[Chunk, Loc] = {}
        home, dest = layout.home, layout.dest
        for chunk in self.chunks:
            loc = home.get((r, chunk))
            if loc is not None:
                cur[chunk] = loc
        for op in rops:
            assert op.chunk is not None
            if op.type == "s":
                if op.chunk not in cur:
                    raise ValidationError(
                        f"schedule: GPU {layout.gpus[r]} sends chunk {list(op.chunk)} it never holds"
                    )
                op.src = cur[op.chunk]
                continue
            target = dest.get((r, op.chunk))
            if target is None:
                target = scratch.get(op.chunk)
                if target is None:
                    target = scratch[op.chunk] = Loc("s", len(scratch))
            if op.reduce and op.chunk in cur:
                op.type, op.src, op.dst = "rrc", cur[op.chunk], target
            else:
                op.dst = target
            cur[op.chunk] = target
        # Results that are not where the postcondition wants them: copy (own shard of an
        # out-of-place AllGather, a combined value that ended in the input buffer, ...).
        copies: list[_Op] = []
        for chunk in self.sorted_chunks:
            want = dest.get((r, chunk))
            if want is None or chunk not in cur or cur[chunk] == want:
                continue
            held = cur[chunk] == home.get((r, chunk))
            k = self.chunk_idx[chunk]
            key = (-1, -1, 0, k, 0) if held else (float("inf"), 2, 0, k, 0)
            op = _Op("cpy", r, key, chunk, src=cur[chunk], dst=want)
            seq[id(op)] = 2 * ntr + copy_seq + len(copies)
            copies.append(op)
        copy_tb = -1
        if copies:
            copy_tb = len(blocks)
            blocks.append(_TB(-1, -1, 0))
            for op in copies:
                op.tb = copy_tb
        all_ops = sorted(rops + copies, key=lambda o: (o.key, seq[id(o)]))

        # ----------------------------------------------------------- programs and fusion
        programs: dict[int, list[_Op]] = defaultdict(list)
        first_key: dict[int, tuple[Any, ...]] = {}
        for op in all_ops:
            if op.tb not in programs:
                first_key[op.tb] = (op.key, seq[id(op)])
            programs[op.tb].append(op)
        writes_at: dict[Loc, list[tuple[Any, ...]]] = defaultdict(list)
        reads_after: dict[Loc, list[tuple[Any, ...]]] = defaultdict(list)
        for op in all_ops:
            for loc in op.writes():
                writes_at[loc].append(op.key)
            for loc in op.reads():
                reads_after[loc].append(op.key)
        for b, prog in list(programs.items()):
            fused: list[_Op] = []
            i = 0
            while i < len(prog):
                op = prog[i]
                nxt = prog[i + 1] if i + 1 < len(prog) else None
                if (
                    nxt is not None
                    and op.type in ("r", "rrc")
                    and nxt.type == "s"
                    and nxt.chunk == op.chunk
                    and nxt.src == op.dst
                    and _no_write_between(writes_at, op, nxt)
                ):
                    _fuse(op, nxt, reads_after)
                    fused.append(op)
                    i += 2
                    continue
                fused.append(op)
                i += 1
            if self.instances == 1 and b == copy_tb:
                fused = _merge_copies(fused)
            programs[b] = fused
            for pos, op in enumerate(fused):
                op.pos = pos

        # ----------------------------------------------------------- dependencies
        ordered = sorted((op for prog in programs.values() for op in prog), key=lambda o: (o.key, seq[id(o)]))
        last_writer: dict[Loc, _Op] = {}
        readers: dict[Loc, list[_Op]] = defaultdict(list)
        for op in ordered:
            need: list[_Op] = []
            for loc in op.reads():
                if loc in last_writer:
                    need.append(last_writer[loc])
            for loc in op.writes():
                if loc in last_writer:
                    need.append(last_writer[loc])
                need += readers[loc]
            latest: dict[int, _Op] = {}
            for d in need:
                if d.tb != op.tb and (d.tb not in latest or d.pos > latest[d.tb].pos):
                    latest[d.tb] = d
            op.deps = [latest[b] for b in sorted(latest)]
            for d in op.deps:
                d.hasdep = True
            for loc in op.reads():
                readers[loc].append(op)
            for loc in op.writes():
                last_writer[loc] = op
                readers[loc] = []

        # ----------------------------------------------------------- numbering
        for prog in programs.values():
            s = 0
            for op in prog:
                s += max(0, len(op.deps) - 1)
                op.step = s
                s += 1
        return _RankPlan(blocks, dict(programs), len(scratch), first_key)

    def link(self, plan: _RankPlan) -> None:
        """Record what each transfer of this rank sends and where each it receives lands."""
        for prog in plan.programs.values():
            for op in prog:
                if op.type == "s":
                    self.sent[op.transfer] = _loc_pair(op.src)
                elif op.type != "cpy":
                    self.landed[op.transfer] = _loc_pair(op.dst)
                    if op.out_transfer >= 0:
                        # a fused receive-and-forward sends what it stores (nothing for rrs)
                        self.sent[op.out_transfer] = _loc_pair(op.dst)

    def loc(self, table: np.ndarray, t: int) -> Loc | None:
        buf, off = (int(x) for x in table[t])
        return None if buf < 0 else Loc(_BUFS[buf], off)


def _loc_pair(loc: Loc | None) -> tuple[int, int]:
    return (-1, -1) if loc is None else (_BUF_INDEX[loc.buf], loc.off)


def _group(values: np.ndarray, n: int) -> list[np.ndarray]:
    """Indices of ``values`` equal to 0, 1, ..., n-1 (each in increasing order)."""
    order = np.argsort(values, kind="stable")
    bounds = np.searchsorted(values[order], np.arange(n + 1))
    return [order[bounds[r] : bounds[r + 1]] for r in range(n)]


def _no_write_between(writes_at: Mapping[Loc, list[tuple[Any, ...]]], recv: _Op, send: _Op) -> bool:
    """Fusing moves the send back to the receive; no other op may change the value meanwhile."""
    assert send.src is not None
    return all(not recv.key < key < send.key for key in writes_at.get(send.src, []))


def _fuse(recv: _Op, send: _Op, reads_after: Mapping[Loc, list[Any]]) -> None:
    """Turn ``recv`` into a receive-and-forward step carrying ``send`` (``rcs``/``rrcs``/``rrs``)."""
    assert recv.chunk is not None and recv.dst is not None
    recv.send_peer = send.send_peer
    recv.out_transfer = send.transfer
    if recv.type == "r":
        recv.type = "rcs"
        return
    only_reader = all(k == send.key for k in reads_after.get(recv.dst, []))
    if recv.dst.buf == "s" and only_reader:
        # The partial sum is only forwarded: reduce and send without storing it.
        recv.type, recv.dst = "rrs", None
    else:
        recv.type = "rrcs"


def _merge_copies(prog: list[_Op]) -> list[_Op]:
    """Merge runs of copies between contiguous locations into one ``cpy`` with ``cnt > 1``."""
    out: list[_Op] = []
    for op in prog:
        prev = out[-1] if out else None
        if (
            prev is not None
            and op.type == prev.type == "cpy"
            and not op.deps
            and not prev.hasdep
            and not op.hasdep
            and prev.src is not None
            and prev.dst is not None
            and op.src is not None
            and op.dst is not None
            and op.src == Loc(prev.src.buf, prev.src.off + prev.cnt)
            and op.dst == Loc(prev.dst.buf, prev.dst.off + prev.cnt)
            and prev.cnt + 1 < MAX_COUNT
        ):
            prev.cnt += 1
            continue
        out.append(op)
    return out
