"""Step 3 with the paper's tree-cost distance: the chunk sub-trees (:class:`_ChunkTree`), the
search labels and the incremental Takahashi-Matsuyama search (:class:`_TreeCostSearch`) that
the builder runs over the trees of one task."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccplan.instances.collectives import Chunk

if TYPE_CHECKING:
    from ccplan.heuristics.mteg.builder import _Builder

# --------------------------------------------------------------------------- Step 3
@dataclass
class _ChunkTree:
    """The sub-tree of one chunk: arrival ``a`` and last tree slot ``b`` per node.

    ``arrival`` keeps the order in which nodes joined (roots first): the tree-cost search
    breaks its last ties by that order.
    """

    chunk: Chunk
    arrival: dict[int, int]
    last: dict[int, int]
    remaining: set[int]


@dataclass
class _Label:
    """A search label: the path reaches ``node`` at ``arrival`` with MTEG cost ``cost``."""

    cost: int
    arrival: int
    node: int
    ci: int
    link: int
    send: int
    parent: _Label | None
    root: int  # tree node the path leaves from


# A seed: the one-hop path on tree link ``link`` (tail in tree ``ci``, head outside) at its
# first free send slot ``send >= a(tail)``, cost ``L + max(0, send - b(tail))``. Heap order
# (cost, arrival, head, ci, join position of the tail, position of the link among the tail's
# out-links) is the order in which a fresh search would pop them (its push sequence number is
# exactly (ci, join position, link position) for seeds).
_Seed = tuple[int, int, int, int, int, int, int, int]  # cost, arrival, head, ci, pos, jpos, link, send


class _TreeCostSearch:
    """Takahashi-Matsuyama with the paper's tree-cost distance over the trees of one task.

    Every TM iteration asks for the unreached terminal closest (MTEG cost) to the current
    trees. A fresh search per iteration (the first implementation) re-seeds from every tree
    node's out-links, so a tree of ``n`` nodes costs ``n`` times its frontier. Here the seeds
    (one per tree link to a node outside the tree) live in one heap for the whole task, and
    between iterations only what changed is touched:

    - a joined path adds its new nodes' seeds;
    - the path's root may store the chunk longer (``b`` grows), which lowers the cost of its
      seeds that send after the old ``b``: those are pushed again with the new cost;
    - reservations (this task's or, with single-port, a port shared with other links) can
      only move a seed's first free slot later, i.e. raise its key: a seed is re-checked
      against :class:`Reservations` when it reaches the top of the heap (lazy deletion), and
      a seed whose head joined a tree is dropped there.

    So the heap holds every valid seed with a key no larger than its true key, and popping
    it in order gives the seeds in exactly the order a fresh search would; relays (nodes
    that do not want the chunk) are expanded per search as before, their labels in a
    per-search heap that loses ties to the seeds, as their later push did in the fresh
    search. The schedules are the fresh search's, send for send.
    """

    def __init__(self, builder: _Builder, trees: list[_ChunkTree]) -> None:
        self.bd = builder
        self.trees = trees
        self.heap: list[_Seed] = []
        # per tree: link -> send slot of its live seed (an entry with another slot is stale)
        self.seed_send: list[dict[int, int]] = [{} for _ in trees]
        # per tree: node -> join position (the fresh search's frontier order)
        self.pos: list[dict[int, int]] = [{v: i for i, v in enumerate(t.arrival)} for t in trees]
        for ci, tree in enumerate(trees):
            if tree.remaining:
                for v in tree.arrival:
                    self._seed(ci, v)

    def _seed(self, ci: int, v: int) -> None:
        """Push the seeds of tree node ``v`` (one per out-link to a node outside the tree)."""
        bd = self.bd
        tree = self.trees[ci]
        arrival = tree.arrival
        a = arrival[v]
        b = tree.last[v]
        p = self.pos[ci][v]
        seeds = self.seed_send[ci]
        free_start = bd.res.free_start
        lat = bd.lat
        head = bd.head
        jpos = bd.jpos
        heap = self.heap
        for j in bd.out[v]:
            y = head[j]
            if y in arrival:
                continue
            t = free_start(j, a)
            seeds[j] = t
            L = lat[j]
            heapq.heappush(heap, (L + (t - b if t > b else 0), t + L, y, ci, p, jpos[j], j, t))

    def _reseed_root(self, ci: int, v: int, b_old: int) -> None:
        """``b(v)`` grew from ``b_old``: re-push the seeds of ``v`` whose cost fell."""
        bd = self.bd
        tree = self.trees[ci]
        arrival = tree.arrival
        b = tree.last[v]
        p = self.pos[ci][v]
        seeds = self.seed_send[ci]
        lat = bd.lat
        head = bd.head
        jpos = bd.jpos
        heap = self.heap
        for j in bd.out[v]:
            y = head[j]
            if y in arrival:
                continue
            t = seeds[j]
            if t > b_old:  # sends up to b_old cost L before and after
                L = lat[j]
                heapq.heappush(heap, (L + (t - b if t > b else 0), t + L, y, ci, p, jpos[j], j, t))

    def join(self, ci: int, hops: list[tuple[int, int]]) -> None:
        """Add the path ``hops`` to tree ``ci`` (Step 4) and update the seeds."""
        bd = self.bd
        tree = self.trees[ci]
        root = bd.tail[hops[0][0]]
        b_old = tree.last[root]
        bd._join(tree, hops)
        pos = self.pos[ci]
        new = [bd.head[j] for j, _ in hops]
        for v in new:
            pos[v] = len(pos)
        if not tree.remaining:
            return
        if tree.last[root] > b_old:
            self._reseed_root(ci, root, b_old)
        for v in new:
            self._seed(ci, v)

    def search(self, horizon: int | None) -> tuple[int, list[tuple[int, int]]] | None:
        """Closest unreached terminal by MTEG cost from the current trees (one TM iteration).

        Returns ``(tree index, hops)`` of its path, ``hops`` as ``(link, send slot)`` from a
        tree node, or None when no terminal is reachable within ``horizon``.
        """
        bd = self.bd
        bd.deadline.check()  # one search per path added: fine-grained enough for --time-limit
        bd.searches += 1
        limit = horizon if horizon is not None else math.inf
        heap = self.heap
        trees = self.trees
        aside: list[_Seed] = []  # valid seeds beyond the horizon, back to the heap at the end
        # the common case: the cheapest valid seed is a terminal, and nothing (no relay label)
        # can be cheaper than it
        while (e := self._valid_top()) is not None:
            _cost, arr, y, ci, _p, _jp, j, t = e
            tree = trees[ci]
            if arr > limit:
                aside.append(heapq.heappop(heap))
                continue
            if y in tree.remaining:
                # the seed stays: a probe beyond the horizon joins nothing (otherwise its
                # head joins the tree and the next search drops it)
                for x in aside:
                    heapq.heappush(heap, x)
                return ci, [(j, t)]
            return self._search_relays(aside, limit)
        for x in aside:
            heapq.heappush(heap, x)
        return None

    def _valid_top(self) -> _Seed | None:
        """The cheapest seed still valid, left on top of the heap: seeds of a reached head, a
        finished tree, a superseded slot or a cost pushed again lower are dropped; a seed whose
        slot was reserved since gets its next free slot and a new key."""
        bd = self.bd
        heap = self.heap
        trees = self.trees
        seeds = self.seed_send
        lat = bd.lat
        tail = bd.tail
        free_start = bd.res.free_start
        while heap:
            e = heap[0]
            cost, _arr, y, ci, p, jp, j, t = e
            tree = trees[ci]
            if y in tree.arrival or not tree.remaining or seeds[ci].get(j) != t:
                heapq.heappop(heap)
                continue
            v = tail[j]
            b = tree.last[v]
            L = lat[j]
            if cost != L + (t - b if t > b else 0):  # pushed again with a lower cost
                heapq.heappop(heap)
                continue
            t2 = free_start(j, tree.arrival[v])
            if t2 != t:  # reserved since: a later slot, a larger key
                seeds[ci][j] = t2
                heapq.heapreplace(heap, (L + (t2 - b if t2 > b else 0), t2 + L, y, ci, p, jp, j, t2))
                continue
            return e
        return None

    def _search_relays(self, taken: list[_Seed], limit: float) -> tuple[int, list[tuple[int, int]]] | None:
        """:meth:`search` once a relay (a node outside the tree that does not want the chunk)
        is the cheapest label: the fresh search's label-setting loop, seeds merged in from the
        heap, relay labels in a heap of their own."""
        bd = self.bd
        res = bd.res
        free_start = res.free_start
        lat = bd.lat
        head = bd.head
        tail = bd.tail
        out = bd.out
        trees = self.trees
        heap = self.heap
        rheap: list[tuple[int, int, int, int, int, _Label, int]] = []
        seq = 0
        popped: dict[tuple[int, int], list[tuple[int, int]]] = {}

        def next_seed() -> _Seed | None:
            while (e := self._valid_top()) is not None:
                arr = e[1]
                heapq.heappop(heap)
                taken.append(e)
                if arr > limit:
                    continue
                return e
            return None

        def done() -> None:
            for e in taken:
                heapq.heappush(heap, e)

        seed = next_seed()
        while True:
            if seed is not None and (not rheap or seed[:4] <= rheap[0][:4]):
                cost, arr, y, ci, _, _, j, t = seed
                seed = next_seed()
                tree = trees[ci]
                if y in tree.remaining:
                    done()
                    return ci, [(j, t)]
                v = tail[j]
                lab = _Label(cost, arr, y, ci, j, t, None, v)
                gen = 1
            elif rheap:
                cost, arr, y, ci, _, lab, gen = heapq.heappop(rheap)
                tree = trees[ci]
            else:
                done()
                return None
            if gen:
                # next free send slot of the same tree edge (only slots inside [a, b] cost L)
                j, v = lab.link, lab.root
                b = tree.last[v]
                if lab.send < b:
                    t2 = free_start(j, lab.send + 1)
                    arr2 = t2 + lat[j]
                    if arr2 <= limit:
                        cost2 = lat[j] + (t2 - b if t2 > b else 0)
                        nxt = _Label(cost2, arr2, y, ci, j, t2, None, v)
                        heapq.heappush(rheap, (cost2, arr2, y, ci, seq, nxt, 1 if t2 < b else 0))
                        seq += 1
            if y in tree.remaining:
                done()
                hops = []
                q: _Label | None = lab
                while q is not None:
                    hops.append((q.link, q.send))
                    q = q.parent
                hops.reverse()
                return ci, hops
            origin = arr - cost
            seen = popped.setdefault((ci, y), [])
            if any(a2 <= arr and o2 >= origin for a2, o2 in seen):
                continue
            seen.append((arr, origin))
            on_path = {y}
            q = lab.parent
            while q is not None:
                on_path.add(q.node)
                q = q.parent
            for j in out[y]:
                z = head[j]
                if z in tree.arrival or z in on_path:
                    continue
                t = free_start(j, arr)
                arr2 = t + lat[j]
                if arr2 > limit:
                    continue
                cost2 = cost + (t - arr) + lat[j]
                nxt = _Label(cost2, arr2, z, ci, j, t, lab, lab.root)
                heapq.heappush(rheap, (cost2, arr2, z, ci, seq, nxt, 0))
                seq += 1

