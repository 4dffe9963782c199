"""Data races: two accesses to one buffer slot, one of them a write, must be ordered.

:class:`_Canon` numbers buffer slots with the in-place aliases applied (the simulation uses
it too); :func:`_check_races` decides the pairs that matter with per-GPU vector clocks and,
where those do not order them, a search of the happens-before graph.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping

import numpy as np

from ccplan.export.msccl.layout import Loc
from ccplan.export.xml_validate.graph import _Graph
from ccplan.export.xml_validate.parsing import _BUF_CODES, _READS_SRC, _WRITES_DST, _Doc
from ccplan.export.xml_validate.report import _Errors


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
