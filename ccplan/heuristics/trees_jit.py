"""Compiled full-table placement of the ``trees`` engine (:func:`~ccplan.heuristics.trees.
schedule_trees`) for instances without outages or single-port constraints.

The rule is the one of the Python placement: chunk after chunk in the placement order, each
link of the chunk's tree in tree order, the send at the first slot at or after the one at
which the sender holds the chunk that is a multiple of the link's occupancy ``l`` and where
fewer than ``omega`` sends occupy the link. Sends on a link then always start on multiples of
its ``l`` and occupy ``l`` slots, so a link is a row of *blocks* of ``l`` slots, each holding at
most ``omega`` sends; a union-find over the blocks gives the first one with room in amortised
near-constant time (as :class:`~ccplan.heuristics.mteg.Reservations` does over slots). Same
sends at the same slots as the Python placement, about a hundred times faster: AMD x2
AllGather at C = 1,024 (1.1 million sends) in under a second instead of half a minute.

Numba compiles the kernel on its first call in a process and caches the machine code beside
this file (``cache=True``) for later processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numba import njit


def _njit(func: Callable[..., Any]) -> Any:
    """``njit(cache=True, nogil=True)``, or without the on-disk cache when numba finds no
    writable place for it: the function is then compiled once per process."""
    try:
        return njit(cache=True, nogil=True)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True)(func)


@_njit
def place_chunks(
    tree_of: np.ndarray,
    step_ptr: np.ndarray,
    step_link: np.ndarray,
    step_tail: np.ndarray,
    occ: np.ndarray,
    lat: np.ndarray,
    omega: np.ndarray,
    horizon: int,
    out_slot: np.ndarray,
) -> int:
    """Place chunk ``c`` (in order) on tree ``tree_of[c]``, whose steps are
    ``step_ptr[t] .. step_ptr[t+1]-1`` (link and position of its tail's hold time; the root
    holds position 0, the head of step ``j`` position ``j + 1``); write each send's slot to
    ``out_slot`` in that order. Returns the number of sends, or -1 when a send would start at
    ``horizon`` or later."""
    links = occ.shape[0]
    base = np.zeros(links + 1, dtype=np.int64)
    for e in range(links):
        base[e + 1] = base[e] + horizon // occ[e] + 2
    count = np.zeros(base[links], dtype=np.int32)
    nxt = np.empty(base[links], dtype=np.int64)
    for e in range(links):
        for b in range(base[e + 1] - base[e]):
            nxt[base[e] + b] = b
    longest = 1
    for t in range(step_ptr.shape[0] - 1):
        longest = max(longest, step_ptr[t + 1] - step_ptr[t] + 1)
    hold = np.zeros(longest, dtype=np.int64)
    pos = 0
    for c in range(tree_of.shape[0]):
        tr = tree_of[c]
        first = step_ptr[tr]
        for j in range(first, step_ptr[tr + 1]):
            e = step_link[j]
            step = occ[e]
            row = base[e]
            blk = (hold[step_tail[j]] + step - 1) // step
            last = base[e + 1] - base[e] - 1
            if blk >= last:
                return -1
            root = blk
            while nxt[row + root] != root:
                root = nxt[row + root]
            while nxt[row + blk] != root:  # path compression
                following = nxt[row + blk]
                nxt[row + blk] = root
                blk = following
            if root >= last:
                return -1
            count[row + root] += 1
            if count[row + root] >= omega[e]:
                nxt[row + root] = root + 1
            t = root * step
            hold[j - first + 1] = t + lat[e]
            out_slot[pos] = t
            pos += 1
    return pos


@_njit
def pruned_trees(
    dist: np.ndarray,
    pred: np.ndarray,
    roots: np.ndarray,
    terminals: np.ndarray,
    link_of: np.ndarray,
    latency: np.ndarray,
    out_links: np.ndarray,
    out_ptr: np.ndarray,
    out_depth: np.ndarray,
) -> None:
    """The shortest-path trees of :func:`~ccplan.heuristics.trees_shallow._spts`, one per row
    of ``dist`` / ``pred`` (Dijkstra from ``roots[i]``): the links ``link_of[pred[v], v]`` of
    the nodes on paths to ``terminals``, by distance, ties by hop count, into
    ``out_links[out_ptr[i]:out_ptr[i+1]]``; ``out_depth[i]`` the tree's latency depth (the
    largest sum of ``latency`` from the root to a node)."""
    n = dist.shape[1]
    keep = np.zeros(n, dtype=np.bool_)
    hops = np.zeros(n, dtype=np.int64)
    lat_at = np.zeros(n, dtype=np.float64)
    chain = np.zeros(n, dtype=np.int64)
    pos = 0
    out_ptr[0] = 0
    for i in range(roots.shape[0]):
        root = roots[i]
        row = pred[i]
        keep[:] = False
        keep[root] = True
        for k in range(terminals.shape[0]):
            v = terminals[k]
            while not keep[v]:
                keep[v] = True
                v = row[v]
        hops[:] = -1
        hops[root] = 0
        lat_at[root] = 0.0
        deepest = 0.0
        for v0 in range(n):
            if not keep[v0] or hops[v0] >= 0:
                continue
            m = 0
            v = v0
            while hops[v] < 0:
                chain[m] = v
                m += 1
                v = row[v]
            for k in range(m - 1, -1, -1):
                u = chain[k]
                hops[u] = hops[v] + 1
                lat_at[u] = lat_at[v] + latency[link_of[v, u]]
                if lat_at[u] > deepest:
                    deepest = lat_at[u]
                v = u
        by_hops = np.argsort(hops, kind="mergesort")
        order = by_hops[np.argsort(dist[i][by_hops], kind="mergesort")]
        for k in range(n):
            v = order[k]
            if keep[v] and v != root:
                out_links[pos] = link_of[row[v], v]
                pos += 1
        out_ptr[i + 1] = pos
        out_depth[i] = deepest


@_njit
def _less(key: np.ndarray, ids: np.ndarray, a: int, b: int) -> bool:
    """Heap order of entries ``a`` and ``b``: by key, ties by send id (deterministic)."""
    return key[a] < key[b] or (key[a] == key[b] and ids[a] < ids[b])


@_njit
def _swap(key: np.ndarray, ids: np.ndarray, a: int, b: int) -> None:
    key[a], key[b] = key[b], key[a]
    ids[a], ids[b] = ids[b], ids[a]


@_njit
def _sift_up(key: np.ndarray, ids: np.ndarray, lo: int, i: int) -> None:
    while i > 0:
        parent = (i - 1) // 2
        if not _less(key, ids, lo + i, lo + parent):
            break
        _swap(key, ids, lo + i, lo + parent)
        i = parent


@_njit
def _sift_down(key: np.ndarray, ids: np.ndarray, lo: int, n: int) -> None:
    i = 0
    while 2 * i + 1 < n:
        best = 2 * i + 1
        if best + 1 < n and _less(key, ids, lo + best + 1, lo + best):
            best += 1
        if not _less(key, ids, lo + best, lo + i):
            break
        _swap(key, ids, lo + best, lo + i)
        i = best


@_njit
def place_by_priority(
    tree_of: np.ndarray,
    release: np.ndarray,
    step_ptr: np.ndarray,
    step_link: np.ndarray,
    step_tail: np.ndarray,
    step_left: np.ndarray,
    occ: np.ndarray,
    lat: np.ndarray,
    omega: np.ndarray,
    horizon: int,
    out_slot: np.ndarray,
    into_relay: np.ndarray,
    from_relay: np.ndarray,
) -> int:
    """List scheduling of the same sends as :func:`place_chunks` with a priority per link.

    Slot by slot, every link whose block starts (``t % occ == 0``) takes up to ``omega`` of the
    sends ready at its tail (the chunk held there) with the least key ``release[c] -
    step_left[j]``: the chunk's nominal release (its index over its root's rate) less the
    latency still ahead of the send (its own ``L`` plus the deepest path below its head in
    the tree). Among chunks released together, the one with the longest way left crosses a
    shared link first, so the last sends of the schedule are the short ones (a chunk's last
    hop to a neighbour) rather than the first hop of a long chain, which is what a pipelined
    tree schedule pays as its fill. Writes each send's slot to ``out_slot`` (chunk after
    chunk, tree order) and returns the number of sends, or -1 when one would start at
    ``horizon`` or later.

    ``into_relay`` / ``from_relay`` (per link: the position of its head / tail when that is a
    switch that only relays, else -1; all -1 where there is none; the arc trees of
    :mod:`~ccplan.heuristics.trees_reduce`) keep such a switch to one partial sum of a chunk
    at a time: a send into it waits (stays in its link's heap) while the switch holds the
    chunk from another arc, from that arc's send in to its send out. The stays then never
    overlap: the next arrival comes at least a slot after the last departure started."""
    links = occ.shape[0]
    chunks = tree_of.shape[0]
    nodes = 1
    relays = False
    for e in range(links):
        nodes = max(nodes, into_relay[e] + 1, from_relay[e] + 1)
        relays = relays or into_relay[e] >= 0 or from_relay[e] >= 0
    holds = np.zeros((chunks if relays else 1, nodes), dtype=np.bool_)
    first_send = np.zeros(chunks + 1, dtype=np.int64)
    for c in range(chunks):
        tr = tree_of[c]
        first_send[c + 1] = first_send[c] + step_ptr[tr + 1] - step_ptr[tr]
    total = first_send[chunks]
    # children of each tree step: the steps whose tail is the step's head (position j + 1)
    n_steps = step_ptr[step_ptr.shape[0] - 1]
    child_ptr = np.zeros(n_steps + 1, dtype=np.int64)
    child = np.empty(n_steps, dtype=np.int64)
    for t in range(step_ptr.shape[0] - 1):
        for j in range(step_ptr[t], step_ptr[t + 1]):
            tail = step_tail[j]
            if tail > 0:
                child_ptr[step_ptr[t] + tail] += 1
    for j in range(n_steps):
        child_ptr[j + 1] += child_ptr[j]
    fill = child_ptr[:-1].copy()
    for t in range(step_ptr.shape[0] - 1):
        for j in range(step_ptr[t], step_ptr[t + 1]):
            tail = step_tail[j]
            if tail > 0:
                parent = step_ptr[t] + tail - 1
                child[fill[parent]] = j
                fill[parent] += 1
    # per-link heaps, sized by the sends each link carries
    per_link = np.zeros(links + 1, dtype=np.int64)
    for c in range(chunks):
        tr = tree_of[c]
        for j in range(step_ptr[tr], step_ptr[tr + 1]):
            per_link[step_link[j] + 1] += 1
    for e in range(links):
        per_link[e + 1] += per_link[e]
    size = np.zeros(links, dtype=np.int64)
    hkey = np.empty(total, dtype=np.float64)
    hid = np.empty(total, dtype=np.int64)
    # sends that become ready at a later slot: a list per slot (calendar)
    head = np.full(horizon + 1, -1, dtype=np.int64)
    nxt = np.full(total, -1, dtype=np.int64)
    send_chunk = np.empty(total, dtype=np.int64)
    for c in range(chunks):
        tr = tree_of[c]
        for j in range(step_ptr[tr], step_ptr[tr + 1]):
            s = first_send[c] + j - step_ptr[tr]
            send_chunk[s] = c
            if step_tail[j] == 0:
                nxt[s] = head[0]
                head[0] = s
    skip_id = np.empty(total if relays else 0, dtype=np.int64)
    skip_key = np.empty(total if relays else 0, dtype=np.float64)
    placed = 0
    for t in range(horizon):
        s = head[t]
        while s >= 0:
            c = send_chunk[s]
            j = step_ptr[tree_of[c]] + s - first_send[c]
            e = step_link[j]
            lo = per_link[e]
            hkey[lo + size[e]] = release[c] - step_left[j]
            hid[lo + size[e]] = s
            size[e] += 1
            _sift_up(hkey, hid, lo, size[e] - 1)
            s = nxt[s]
        for e in range(links):
            if size[e] == 0 or t % occ[e] != 0:
                continue
            lo = per_link[e]
            took = 0
            skipped = 0
            while took < omega[e] and size[e] > 0:
                s = hid[lo]
                key = hkey[lo]
                size[e] -= 1
                if size[e] > 0:
                    hkey[lo] = hkey[lo + size[e]]
                    hid[lo] = hid[lo + size[e]]
                    _sift_down(hkey, hid, lo, size[e])
                c = send_chunk[s]
                if relays:
                    if into_relay[e] >= 0 and holds[c, into_relay[e]]:
                        skip_id[skipped] = s  # the switch holds this chunk from another arc
                        skip_key[skipped] = key
                        skipped += 1
                        continue
                    if into_relay[e] >= 0:
                        holds[c, into_relay[e]] = True
                    if from_relay[e] >= 0:
                        holds[c, from_relay[e]] = False
                took += 1
                out_slot[s] = t
                placed += 1
                base = step_ptr[tree_of[c]]
                j = base + s - first_send[c]
                ready = max(t + lat[e], t + 1)  # a zero-latency hop waits a slot: still valid
                if ready >= horizon:
                    return -1
                for k in range(child_ptr[j], child_ptr[j + 1]):
                    s2 = first_send[c] + child[k] - base
                    nxt[s2] = head[ready]
                    head[ready] = s2
            for i in range(skipped):  # back into the heap, for the next block
                hkey[lo + size[e]] = skip_key[i]
                hid[lo + size[e]] = skip_id[i]
                size[e] += 1
                _sift_up(hkey, hid, lo, size[e] - 1)
        if placed == total:
            return placed
    return -1 if placed < total else placed


@_njit
def steps_left(
    step_ptr: np.ndarray, step_link: np.ndarray, step_tail: np.ndarray, lat: np.ndarray
) -> np.ndarray:
    """Per tree step: its link's ``L`` plus the deepest latency path below its head (the
    ``step_left`` of :func:`place_by_priority`)."""
    n_steps = step_ptr[step_ptr.shape[0] - 1]
    left = np.zeros(n_steps, dtype=np.float64)
    below = np.zeros(n_steps, dtype=np.float64)
    for t in range(step_ptr.shape[0] - 1):
        base = step_ptr[t]
        for j in range(step_ptr[t + 1] - 1, base - 1, -1):
            left[j] = lat[step_link[j]] + below[j]
            tail = step_tail[j]
            if tail > 0 and left[j] > below[base + tail - 1]:
                below[base + tail - 1] = left[j]
    return left


@_njit
def grow_arc_tree(
    w: np.ndarray,
    pred: np.ndarray,
    terms: np.ndarray,
    n: int,
    link_of: np.ndarray,
    lat: np.ndarray,
    pi: np.ndarray,
    root: int,
    mu: float,
    parent: np.ndarray,
) -> tuple[float, float]:
    """The arc tree grown on the terminals from terminal index ``root``
    (:mod:`~ccplan.heuristics.trees_reduce_shallow`, its rule): ``parent`` (per
    terminal index, -1 at the root and where unreached) is written; returns its latency
    depth and its price ``sum_e pi_e load_e`` (every arc charged on each link of its path),
    depth ``inf`` when some terminal cannot be reached. ``w`` and ``pred`` are
    :meth:`~ccplan.heuristics.trees_pack._Paths.matrix`'s, ``link_of[a, b]`` the link from
    node ``a`` to split node ``b`` (-1 where none)."""
    n_t = len(terms)
    inside = np.zeros(n_t, dtype=np.bool_)
    depth = np.zeros(n_t)
    key = np.empty(n_t)
    for v in range(n_t):
        key[v] = w[root, v]
        parent[v] = root
    inside[root] = True
    parent[root] = -1
    deepest = 0.0
    priced = 0.0
    nodes = np.empty(2 * n + 1, dtype=np.int64)
    for _ in range(n_t - 1):
        v = -1
        best = np.inf
        for x in range(n_t):
            if not inside[x] and key[x] < best:
                best = key[x]
                v = x
        if v < 0:
            for x in range(n_t):
                if not inside[x]:
                    parent[x] = -1
            return np.inf, priced
        u = parent[v]
        # the path u -> v through relays, from Dijkstra row u's predecessors
        k = 0
        nodes[0] = n + terms[v]
        while nodes[k] != terms[u]:
            nodes[k + 1] = pred[u, nodes[k]]
            k += 1
        cur = terms[u]
        arc_lat = 0.0
        for h in range(k - 1, -1, -1):
            b = nodes[h]
            e = link_of[cur, b]
            arc_lat += lat[e]
            priced += pi[e]
            cur = b - n if b >= n else b
        depth[v] = depth[u] + arc_lat
        if depth[v] > deepest:
            deepest = depth[v]
        inside[v] = True
        for x in range(n_t):
            if not inside[x]:
                through = w[v, x] + mu * depth[v]
                if through < key[x]:
                    key[x] = through
                    parent[x] = v
    return deepest, priced
