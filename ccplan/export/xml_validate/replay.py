"""Buffer replay: run the steps on symbolic buffers and check the postcondition.

:func:`_expected_layout` derives where every chunk must end (from ``expect`` or, without it,
from the collective the XML names: :func:`_synthetic`); :func:`_simulate` runs the steps in a
happens-before order and compares.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ccplan.errors import ValidationError
from ccplan.export.msccl.layout import BufferLayout, Loc, buffer_layout
from ccplan.export.xml_validate.parsing import _BUF_CODES, _RECVS, _SENDS, _Doc
from ccplan.export.xml_validate.races import _Canon
from ccplan.export.xml_validate.report import _Errors
from ccplan.instances.collectives import Chunk, Collective
from ccplan.instances.instance import Instance


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
