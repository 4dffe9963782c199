"""The happens-before graph and the deadlock check.

Its edges: program order, dependencies (:func:`_check_dependencies` checks ``depid``/``deps``
and ``hasdep``) and each send before its matching receive (:func:`_match_connections` pairs
them per connection and checks ``cnt`` and FIFO order). :class:`_Graph` orders the steps a
level at a time; the steps it cannot order lie on or behind a cycle, a deadlock
(:func:`_find_cycle` names one).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from ccplan.export.xml_validate.parsing import _RECVS, _SENDS, _Doc
from ccplan.export.xml_validate.report import XmlError, _Errors


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
