"""Steps 3-5 of MTEGCCA for one instance and one option set (:class:`_Builder`): the TM runs
per task under either distance, joining paths into the trees, reserving their link-slots
and extending the horizon; and the latency lower bound the horizon starts from
(:func:`latency_bound`)."""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ccplan.errors import CCPlanError
from ccplan.heuristics.mteg.graph import Reservations
from ccplan.heuristics.mteg.options import MtegOptions
from ccplan.heuristics.mteg.tasks import Task
from ccplan.heuristics.mteg.treecost import _ChunkTree, _TreeCostSearch
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_distances, latency_matrix
from ccplan.limits import NEVER, Deadline
from ccplan.schedule.core import Send

log = logging.getLogger(__name__)

_PROGRESS_EVERY = 10.0  # seconds between progress notes on the log


class _Builder:
    """Steps 3-5 for one instance and one option set."""

    def __init__(
        self,
        instance: Instance,
        options: MtegOptions,
        res: Reservations | None = None,
        deadline: Deadline = NEVER,
    ) -> None:
        self.instance = instance
        self.deadline = deadline
        self.options = options
        topo = instance.topology
        self.res = res if res is not None else Reservations(instance)
        self.lat = [int(x) for x in instance.latency]
        self.head = [lk.dst for lk in topo.links]
        self.tail = [lk.src for lk in topo.links]
        self.out = {v: tuple(sorted(ls, key=lambda j: self.head[j])) for v, ls in topo.out_links.items()}
        self.jpos = [0] * topo.num_links
        for ls in self.out.values():
            for i, j in enumerate(ls):
                self.jpos[j] = i
        # the sends as columns (chunk source, chunk index, link, slot), in the order made
        self.col_source: list[int] = []
        self.col_index: list[int] = []
        self.col_link: list[int] = []
        self.col_slot: list[int] = []
        self.horizon = options.horizon if options.horizon is not None else max(1, latency_bound(instance))
        self.extensions = 0
        self.searches = 0
        self._started = time.perf_counter()
        self._next_note = self._started + _PROGRESS_EVERY
        self._tasks_done = self._tasks_total = 0

    @property
    def sends(self) -> list[Send]:
        """The sends made so far, in the order made."""
        return [
            Send(slot=t, chunk=(s, c), src=self.tail[j], dst=self.head[j])
            for s, c, j, t in zip(self.col_source, self.col_index, self.col_link, self.col_slot, strict=True)
        ]

    # ------------------------------------------------------------------ common
    def _progress(self) -> None:
        """A note on the log every ``_PROGRESS_EVERY`` seconds: long runs (thousands of GPUs)
        say how far they are (the CLI shows it with ``-v``)."""
        now = time.perf_counter()
        if now >= self._next_note:
            self._next_note = now + _PROGRESS_EVERY
            log.info(
                "mteg: task %d of %d, %d sends, %d searches, %.0f s",
                self._tasks_done,
                self._tasks_total,
                len(self.col_slot),
                self.searches,
                now - self._started,
            )

    def _extend(self, needed: int | None) -> None:
        new = max(math.ceil(self.horizon * self.options.growth), self.horizon + 1)
        if needed is not None:
            new = max(new, needed)
        log.debug("MTEG horizon %d -> %d", self.horizon, new)
        self.horizon = new
        self.extensions += 1

    def _join(self, tree: _ChunkTree, hops: list[tuple[int, int]]) -> None:
        """Add a path (hops ``(link, send slot)`` from a tree node) to ``tree``; Step 4."""
        source, index = tree.chunk
        for j, t in hops:
            u, v = self.tail[j], self.head[j]
            self.res.reserve(j, t)
            self.col_source.append(source)
            self.col_index.append(index)
            self.col_link.append(j)
            self.col_slot.append(t)
            if t > tree.last[u]:
                tree.last[u] = t
            arr = t + self.lat[j]
            tree.arrival[v] = arr
            tree.last[v] = arr
            tree.remaining.discard(v)

    def run(self, tasks: Sequence[Task], partial: Mapping[Chunk, Sequence[Send]] | None = None) -> None:
        """Steps 3-5 for ``tasks`` in order; ``partial`` holds sends already in a chunk's tree."""
        link_index = self.instance.topology.link_index
        self._tasks_total = len(tasks)
        for k, task in enumerate(tasks):
            self._tasks_done = k
            self._progress()
            trees = []
            for i, (chunk, targets) in enumerate(zip(task.chunks, task.targets, strict=True)):
                start = dict.fromkeys(task.roots_of(i), 0)
                tree = _ChunkTree(chunk, start, dict(start), set(targets))
                for snd in sorted((partial or {}).get(chunk, ())):
                    arr = snd.slot + self.lat[link_index[(snd.src, snd.dst)]]
                    tree.arrival[snd.dst] = arr
                    tree.last[snd.dst] = max(tree.last.get(snd.dst, arr), arr)
                    tree.last[snd.src] = max(tree.last[snd.src], snd.slot)
                    tree.remaining.discard(snd.dst)
                trees.append(tree)
            if self.options.select == "earliest":
                self._task_earliest(trees)
            else:
                self._task_tree_cost(trees)

    # ------------------------------------------------------------------ tree-cost TM
    def _task_tree_cost(self, trees: list[_ChunkTree]) -> None:
        tm = _TreeCostSearch(self, trees)
        open_trees = sum(1 for t in trees if t.remaining)
        while open_trees:
            if not self.searches & 4095:
                self._progress()
            found = tm.search(self.horizon)
            if found is None:
                probe = tm.search(None)
                if probe is None:
                    self._unreachable(trees)
                    return
                _, hops = probe
                j, t = hops[-1]
                self._extend(t + self.lat[j])
                continue
            ci, hops = found
            tm.join(ci, hops)
            if not trees[ci].remaining:
                open_trees -= 1

    # ------------------------------------------------------------------ earliest-arrival TM
    def _spt(self, tree: _ChunkTree, horizon: int | None) -> dict[int, tuple[int, int, int]]:
        """Earliest-arrival shortest-path tree from ``tree``: node -> (arrival, link, send)."""
        self.deadline.check()
        self.searches += 1
        res = self.res
        lat = self.lat
        head = self.head
        limit = horizon if horizon is not None else math.inf
        best: dict[int, tuple[int, int, int]] = {}
        heap = [(a, v) for v, a in tree.arrival.items()]
        heapq.heapify(heap)
        done: set[int] = set()
        arrival = tree.arrival
        while heap:
            arr, x = heapq.heappop(heap)
            if x in done:
                continue
            done.add(x)
            for j in self.out[x]:
                y = head[j]
                if y in arrival or y in done:
                    continue
                t = res.free_start(j, arr)
                a2 = t + lat[j]
                if a2 > limit:
                    continue
                old = best.get(y)
                if old is None or a2 < old[0]:
                    best[y] = (a2, j, t)
                    heapq.heappush(heap, (a2, y))
        return best

    def _path(self, tree: _ChunkTree, best: dict[int, tuple[int, int, int]], y: int) -> list[tuple[int, int]]:
        hops = []
        while y not in tree.arrival:
            _, j, t = best[y]
            hops.append((j, t))
            y = self.tail[j]
        hops.reverse()
        return hops

    def _task_earliest(self, trees: list[_ChunkTree]) -> None:
        """TM with earliest-arrival selection over all chunks of ``trees`` (lazy heap).

        Heap entries are (arrival, node, chunk position, SPT version). An entry is joined when
        its SPT is current and its path is still free; otherwise that chunk's SPT is rebuilt
        (reservations only grow, so a still-free path is still earliest).
        """
        spts: dict[int, dict[int, tuple[int, int, int]]] = {}
        version = [0] * len(trees)
        heap: list[tuple[int, int, int, int]] = []

        def rebuild(ci: int) -> None:
            version[ci] += 1
            spt = self._spt(trees[ci], self.horizon)
            spts[ci] = spt
            for y in trees[ci].remaining:
                if y in spt:
                    heapq.heappush(heap, (spt[y][0], y, ci, version[ci]))

        for ci, tree in enumerate(trees):
            if tree.remaining:
                rebuild(ci)
        while True:
            if not heap:
                pending = [ci for ci, t in enumerate(trees) if t.remaining]
                if not pending:
                    return
                probe = [self._spt(trees[ci], None) for ci in pending]
                needed = [
                    p[y][0]
                    for ci, p in zip(pending, probe, strict=True)
                    for y in trees[ci].remaining
                    if y in p
                ]
                if not needed:
                    self._unreachable([trees[ci] for ci in pending])
                self._extend(min(needed))
                for ci in pending:
                    rebuild(ci)
                continue
            _, y, ci, ver = heapq.heappop(heap)
            tree = trees[ci]
            if ver != version[ci] or y not in tree.remaining:
                continue
            hops = self._path(tree, spts[ci], y)
            if all(self.res.is_free(j, t) for j, t in hops):
                self._join(tree, hops)
            else:
                rebuild(ci)  # stale: another path took one of its link-slots or ports

    def _unreachable(self, trees: Iterable[_ChunkTree]) -> None:
        for tree in trees:
            if tree.remaining:
                node = min(tree.remaining)
                raise CCPlanError(
                    f"chunk {list(tree.chunk)} cannot reach node {node}: no path in the topology "
                    f"{self.instance.topology.name!r} from its holders"
                )


def latency_bound(instance: Instance) -> int:
    """Latency lower bound in slots: max over demands of the smallest sum of ``L`` on a path
    from a holder (Dijkstra; 0 when nothing must move). Unreachable demands are skipped.

    Demands are grouped by their chunk's holders; with more than a few groups (AllGather: one
    per GPU) the distances come from one all-pairs matrix (scipy's compiled Dijkstra, exact
    on these integer sums) instead of a Python Dijkstra per group.
    """
    topo = instance.topology
    lat = [int(x) for x in instance.latency]
    coll = instance.collective
    holders = coll.holders
    groups: dict[tuple[int, ...], set[int]] = {}
    for chunk, nodes in coll.wanted.items():
        held = holders.get(chunk, frozenset())
        need = nodes - held
        if need:
            groups.setdefault(tuple(sorted(held)), set()).update(need)
    best = 0
    if len(groups) > 8:
        pos = topo.node_index
        dist = latency_matrix(topo, lat)
        for roots, targets in groups.items():
            if not roots:
                continue
            near = dist[[pos[r] for r in roots]].min(axis=0)[[pos[v] for v in targets]]
            near = near[np.isfinite(near)]
            if len(near):
                best = max(best, int(near.max()))
        return best
    for roots, targets in groups.items():
        reach = latency_distances(topo, lat, roots)
        best = max([best, *(int(reach[v]) for v in targets if v in reach)])
    return best

