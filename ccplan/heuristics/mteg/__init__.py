"""MTEGCCA: collective scheduling on the multicast time-expanded graph (paper Section 2).

The paper (``000_*.txt``, Section 2) builds the *multicast time-expanded graph* (MTEG) of
Algorithm 1 and schedules a collective as a sequence of multicast (Steiner) trees:

Step 1
    decompose the collective into Broadcast/Multicast tasks (:func:`decompose`);
Step 2
    sort the tasks by data size, largest first (:func:`order_tasks`);
Step 3
    for each task build a Steiner tree in the MTEG with the Takahashi-Matsuyama (TM)
    heuristic, rooted at the source's slot-0 vertex, spanning the task's virtual terminals;
Step 4
    mark the link-slots the tree uses as occupied (:class:`Reservations`);
Step 5
    repeat Steps 3-4 until every task is scheduled.

MTEG of Algorithm 1 and how this module uses it
-----------------------------------------------
Algorithm 1 creates a vertex ``u_t`` for every node ``u`` and slot ``t = 0..H``, a storage
edge ``(u_t, u_{t+1})`` of cost 1, a transmission edge ``(u_t, v_{t+L(u,v)})`` of cost
``L(u,v)`` for every link, and virtual terminal vertices ``U_{s,c}`` (chunk ``c`` of source
``s`` has arrived at ``u``) reached from every ``u_t`` by a cost-0 edge. :func:`build_mteg`
materialises exactly that graph (networkx) for small instances and documentation; the
scheduler does not, because the graph has a structure that makes it unnecessary:

- every edge goes from slot ``t`` to a later slot and costs the slot difference, so a path
  from ``x_{t0}`` to ``u_t`` costs exactly ``t - t0``; a path from the root ``s_0`` to ``u_t``
  costs ``t``, and the shortest path from the root to a terminal is an *earliest-arrival* path;
- removing used edges (Step 4) is "link ``(u,v)`` is busy in slot ``t``"; a transmission
  edge is usable iff the link has capacity ``omega`` left in every slot of its occupancy
  window ``t .. t+l-1`` (the canonical semantics of DESIGN.md, the paper's (7) for ``l = 1``),
  and, with ``single_port``, iff both ports are free in that window;
- the terminal ``U_{s,c}`` at node ``u`` is reached the first time the path enters ``u``:
  the zero-cost virtual edges mean "any slot"; the arrival slot is the slot of the entry vertex.

So the MTEG is kept implicitly as (node, slot) pairs plus a table of occupied link-slots, and
shortest paths are time-dependent Dijkstra searches over (node, slot). A TM tree of one chunk
is kept as, per node ``v`` it spans, the slot interval ``[a(v), b(v)]`` of its tree vertices:
``a(v)`` is the arrival and ``b(v)`` the last slot from which the tree already stores the
chunk at ``v`` (a storage edge run ``v_a .. v_b``); a path leaving ``v`` at slot ``t`` costs
``max(0, t - b(v))`` of extra storage edges before its first transmission edge.

Takahashi-Matsuyama (Step 3.2) on this graph
--------------------------------------------
TM starts from the root and repeatedly joins the terminal closest to the current tree by a
shortest path. Two selection rules are offered (``select``):

``"tree-cost"`` (the paper's rule, default)
    distance = MTEG cost of the cheapest path from *any* tree vertex, i.e. arrival slot
    minus the slot of the tree vertex where it leaves the tree; ties by earliest arrival,
    then node id. Computed per TM iteration by a label-setting search over (node, slot)
    with Pareto labels ``(arrival, origin)`` at relay nodes. The one-hop paths out of the
    trees (seeds) are kept in one heap per task and updated when a path joins, so an
    iteration costs about the changes it makes, not the tree's size (:class:`_TreeCostSearch`).
``"earliest"``
    distance = arrival slot (cost of the path from the root ``s_0``). The earliest-arrival
    shortest-path tree from the current tree is a fixed point of TM's loop (joining one of
    its paths leaves every other path valid and equally early), so one Dijkstra per chunk
    serves all of its terminals; paths are re-validated before they are joined (single-port
    and other chunks' reservations) and recomputed when stale.

A node holds a chunk at most once: a path never enters a node that already holds the chunk
(its tree), and never revisits a node.

Choices the paper leaves open (parameters of :class:`MtegOptions`; defaults = the paper)
-----------------------------------------------------------------------------------------
- ``order``: task order of Step 2 (``"size"``: data size descending, ties by source id);
- ``tree``: ``"task"`` keeps one TM run per Broadcast task covering the virtual terminals of
  all its chunks (the paper); since a transmission edge carries one chunk per slot, the task's
  tree is kept as one sub-tree per chunk and TM picks the closest terminal over all of them.
  ``"chunk"`` runs TM once per chunk (each chunk its own task); ``"all"`` (not in the paper)
  runs one TM over every chunk of the collective, interleaving all trees;
- ``interleave``: with ``tree="chunk"``, order chunk tasks round-robin over sources;
- ``select``: the TM distance (above);
- ``horizon``/``growth``: the initial H and how it grows (below).

Horizon
-------
The paper's MTEG has a fixed horizon ``H``. Here ``H`` starts at the latency lower bound (no
demand can arrive earlier) unless given, and a TM search that finds no terminal within
``H`` extends the MTEG by layers, ``H <- max(ceil(growth * H), needed)``, and searches again.
Trees built before an extension are trees of the extended MTEG too, so nothing is redone.
The user never guesses ``H``; the final ``H`` (the makespan) is reported.

Complexity
----------
Paper (Section 2.4): ``|V_M| = |V| H + C(|V|-1)``, ``|E_M| = |V|(H-1) + |E| H + (|V|-1) C H``,
one TM tree ``O(k n^2)`` with ``k = C(|V|-1)`` terminals and ``n = |V_M|``, i.e.
``O(C |V|^3 (H+C)^2)`` per Broadcast and ``O(C |V|^4 (H+C)^2)`` for AllGather.
This implementation: a ``"tree-cost"`` TM iteration pops the cheapest seed from the task's
heap (re-checking it against the reservations: ``O(log)`` amortised with the union-find "next
free slot" per link) and, only when a relay is cheaper than every terminal seed, runs the
label-setting search through relays. A joined path pushes the seeds of its new nodes and, if
its root now stores the chunk longer, re-pushes the root's seeds whose cost fell. So a tree
of ``k`` terminals costs about ``k`` heap operations per out-link of its nodes, and AllGather
``O(C |V| |E| log |E|)`` plus the relay searches (a few per tree on NDv2, DGX2 and AMD), i.e.
about the schedule's size. The fresh search per iteration it replaces re-seeded from every
tree node (``O(|E|)`` per iteration, ``O(C^2 |V|^2 |E|)`` for AllGather): with the same
schedules, NDv2 x48 takes 5x, NDv2 x128 14x and a 32x32 torus 30x less CPU time
(``docs/scale.md``, "``mteg`` at scale"). Relay searches are still fresh per iteration, which
dominates on leaf-spine.
``"earliest"`` costs one Dijkstra ``O(|E| log |V|)`` per chunk tree plus re-validations,
``O(C |V| |E| log |V|)`` for AllGather. Memory is ``O(|E| H)`` for the occupancy table,
``O(C |V|^2)`` for the trees and four integer lists per send until the schedule is built from
them as columns.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
import time
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccplan.contract import Outcome, SolveOptions, register, run_constructor
from ccplan.errors import CCPlanError, ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_distances, latency_matrix
from ccplan.limits import NEVER, Deadline
from ccplan.schedule.core import Schedule, Send

log = logging.getLogger(__name__)

ORDERS: tuple[str, ...] = ("size", "reverse", "random", "given")
TREES: tuple[str, ...] = ("task", "chunk", "all")
SELECTS: tuple[str, ...] = ("tree-cost", "earliest")
_PROGRESS_EVERY = 10.0  # seconds between progress notes on the log


@dataclass(frozen=True)
class MtegOptions:
    """Parameters of MTEGCCA; the defaults are the paper's choices.

    Parameters
    ----------
    order : {"size", "reverse", "random", "given"}
        Step 2 task order: data size descending with ties by source (paper), its reverse, a
        seeded shuffle, or ``task_order`` as given.
    tree : {"task", "chunk", "all"}
        One TM run per Broadcast task over all its chunks' terminals (paper), one per chunk,
        or one over every chunk of the collective (not in the paper: TM then interleaves
        all trees, joining the globally closest terminal; ``order`` ranks the chunks for ties).
    select : {"tree-cost", "earliest"}
        TM's "closest terminal": MTEG cost from the current tree (paper) or arrival slot.
    interleave : bool
        With ``tree="chunk"``, order chunk tasks by chunk index first (round-robin over
        sources) instead of source first.
    seed : int
        Seed of ``order="random"``.
    task_order : tuple of int, optional
        Permutation of the task indices of :func:`decompose` for ``order="given"``.
    horizon : int, optional
        Initial MTEG horizon H; default the latency lower bound.
    growth : float
        Factor by which H grows when a search finds no terminal within H (> 1).
    """

    order: str = "size"
    tree: str = "task"
    select: str = "tree-cost"
    interleave: bool = False
    seed: int = 0
    task_order: tuple[int, ...] | None = None
    horizon: int | None = None
    growth: float = 2.0

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("order", self.order, ORDERS),
            ("tree", self.tree, TREES),
            ("select", self.select, SELECTS),
        ):
            if value not in allowed:
                raise ValidationError(f"mteg option {name} must be one of {allowed}, got {value!r}")
        if self.order == "given" and self.task_order is None:
            raise ValidationError("mteg option task_order is required with order='given'")
        if self.horizon is not None and (not isinstance(self.horizon, int) or self.horizon < 1):
            raise ValidationError(f"mteg option horizon must be a positive integer, got {self.horizon!r}")
        if not self.growth > 1:
            raise ValidationError(f"mteg option growth must be > 1, got {self.growth!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], seed: int = 0) -> MtegOptions:
        """Build from ``SolveOptions.extra`` (unknown keys are ignored: other engines' keys).

        Values may be strings (from the command line): ``horizon``/``seed`` become int,
        ``growth`` float, ``interleave`` bool, ``task_order`` a comma-separated list.
        """
        kwargs: dict[str, Any] = {"seed": seed}
        try:
            for key in ("order", "tree", "select"):
                if key in data:
                    kwargs[key] = str(data[key])
            for key in ("seed", "horizon"):
                if key in data and data[key] is not None:
                    kwargs[key] = int(data[key])
            if "growth" in data:
                kwargs["growth"] = float(data["growth"])
            if "interleave" in data:
                value = data["interleave"]
                if isinstance(value, str):
                    kwargs["interleave"] = value.lower() in {"1", "true", "yes", "on"}
                else:
                    kwargs["interleave"] = bool(value)
            if "task_order" in data:
                raw = data["task_order"]
                items = raw.split(",") if isinstance(raw, str) else raw
                kwargs["task_order"] = tuple(int(x) for x in items)
        except (TypeError, ValueError) as exc:
            raise ValidationError(f"mteg options: bad value in {dict(data)!r}: {exc}") from None
        return cls(**kwargs)

    def label(self) -> str:
        """Short name of the variant, for reports."""
        parts = [f"order={self.order}", f"tree={self.tree}", f"select={self.select}"]
        if self.interleave:
            parts.append("interleave")
        if self.order == "random":
            parts.append(f"seed={self.seed}")
        return ",".join(parts)


# --------------------------------------------------------------------------- Algorithm 1
def build_mteg(instance: Instance, horizon: int) -> Any:
    """Materialise the MTEG of Algorithm 1 as a ``networkx.DiGraph`` (small instances only).

    Vertices are ``("slot", u, t)`` for ``t = 0..H`` (lines 2-4), and ``("virtual", u, chunk)``
    for every node ``u`` and chunk not held by ``u`` (lines 15-18; the paper indexes them by
    source ``s != u``, i.e. chunks of other nodes). Edges carry ``cost`` and ``kind``: storage
    ``(u_t, u_{t+1})`` cost 1 for ``t <= H-1`` (lines 5-6), transmission
    ``(u_t, v_{t+L})`` cost ``L`` when ``t + L <= H`` (lines 9-11), virtual ``(u_t, U)`` cost 0
    (lines 19-20). The scheduler itself works on the implicit form (module docstring).

    Parameters
    ----------
    instance : Instance
    horizon : int
        H of Algorithm 1 (slots ``0..H``).
    """
    import networkx as nx

    if not isinstance(horizon, int) or horizon < 0:
        raise ValidationError(f"horizon must be a non-negative integer, got {horizon!r}")
    topo = instance.topology
    lat = [int(x) for x in instance.latency]
    g = nx.DiGraph()
    for t in range(horizon + 1):
        for v in topo.node_ids:
            g.add_node(("slot", v, t))
            if t <= horizon - 1:
                g.add_edge(("slot", v, t), ("slot", v, t + 1), cost=1, kind="storage")
        for j, link in enumerate(topo.links):
            if t + lat[j] <= horizon:
                g.add_edge(("slot", link.src, t), ("slot", link.dst, t + lat[j]), cost=lat[j],
                           kind="transmission", link=j)
    holders = instance.collective.holders
    for u in topo.node_ids:
        for chunk in instance.collective.chunk_ids:
            if u in holders[chunk]:
                continue
            terminal = ("virtual", u, chunk)
            g.add_node(terminal)
            for t in range(horizon + 1):
                g.add_edge(("slot", u, t), terminal, cost=0, kind="virtual")
    return g


# --------------------------------------------------------------------------- Step 4 table
class Reservations:
    """Occupied link-slots (and ports): the MTEG edges removed by Step 4.

    Per resource a union-find over slots answers "first slot >= t that is not full" in
    amortised near-constant time; a slot is full when its count reaches the capacity
    ``omega`` (0 for outages). With ``single_port`` the send port of every node and the
    receive port of every node are resources of capacity 1 too.
    """

    def __init__(self, instance: Instance) -> None:
        topo = instance.topology
        self.num_links = topo.num_links
        self.capacity = instance.capacity
        self.single_port = instance.single_port
        self.occ = [int(x) for x in instance.occupancy]
        self.src = [lk.src for lk in topo.links]
        self.dst = [lk.dst for lk in topo.links]
        nodes = topo.node_ids
        self._node_pos = {v: i for i, v in enumerate(nodes)}
        # resource r: links 0..E-1, send ports E.., receive ports E+N..
        total = self.num_links + (2 * len(nodes) if self.single_port else 0)
        self._next: list[dict[int, int]] = [{} for _ in range(total)]
        self._count: list[dict[int, int]] = [{} for _ in range(total)]
        # per-link omega from the one helper (more than one chunk per slot on a link faster
        # than the slot); ports hold one
        self._cap: list[int] = [int(c) for c in instance.link_capacity] + [1] * (total - self.num_links)
        self._zero: list[set[int]] = [set() for _ in range(total)]
        self._full: list[list[int]] = [[] for _ in range(total)]
        for link, slot in sorted(instance.outage_set):
            self._zero[link].add(slot)
            self._next[link][slot] = slot + 1
            self._full[link].append(slot)
        self._res_of_link: list[tuple[int, ...]] = []
        for j in range(self.num_links):
            if self.single_port:
                send_port = self.num_links + self._node_pos[self.src[j]]
                recv_port = self.num_links + len(nodes) + self._node_pos[self.dst[j]]
                self._res_of_link.append((j, send_port, recv_port))
            else:
                self._res_of_link.append((j,))

    def _first_free(self, r: int, t: int) -> int:
        nxt = self._next[r]
        if t not in nxt:
            return t
        root = t
        while root in nxt:
            root = nxt[root]
        while t in nxt and nxt[t] != root:
            nxt[t], t = root, nxt[t]
        return root

    def free_start(self, link: int, t: int) -> int:
        """Earliest slot ``>= t`` at which a send on ``link`` fits its whole occupancy window."""
        res = self._res_of_link[link]
        occ = self.occ[link]
        first_free = self._first_free
        if len(res) == 1:
            # one resource (no single-port): its first non-full slot needs no second pass
            r = res[0]
            full = self._full[r]
            while True:
                t = first_free(r, t)
                if occ == 1:
                    return t
                i = bisect_left(full, t + 1)
                if i < len(full) and full[i] < t + occ:
                    t = full[i] + 1
                    continue
                return t
        while True:
            moved = False
            for r in res:
                f = first_free(r, t)
                if f != t:
                    t = f
                    moved = True
            if moved:
                continue
            if occ == 1:
                return t
            # the next full slot of any resource inside the window rules out every start up to it
            bad = -1
            for r in res:
                full = self._full[r]
                i = bisect_left(full, t + 1)
                if i < len(full) and full[i] < t + occ and full[i] > bad:
                    bad = full[i]
            if bad < 0:
                return t
            t = bad + 1

    def is_free(self, link: int, t: int) -> bool:
        """Whether a send on ``link`` may start in slot ``t``."""
        return self.free_start(link, t) == t

    def reserve(self, link: int, t: int) -> None:
        """Occupy ``link`` (and ports) during ``t .. t+l-1``; the caller checked :meth:`is_free`."""
        for k in range(self.occ[link]):
            slot = t + k
            for r in self._res_of_link[link]:
                cnt = self._count[r].get(slot, 0) + 1
                self._count[r][slot] = cnt
                if cnt >= self._cap[r] and slot not in self._next[r]:
                    self._next[r][slot] = slot + 1
                    insort(self._full[r], slot)

    def release(self, link: int, t: int) -> None:
        """Undo :meth:`reserve` of a send on ``link`` at ``t`` (rip-up in the improvement step)."""
        for k in range(self.occ[link]):
            slot = t + k
            for r in self._res_of_link[link]:
                cnt = self._count[r].get(slot, 0) - 1
                if cnt < 0:
                    raise ValueError(f"release of a free slot {slot} on resource {r}")
                if cnt:
                    self._count[r][slot] = cnt
                else:
                    del self._count[r][slot]
                nxt = self._next[r]
                if slot in nxt and cnt < self._cap[r] and slot not in self._zero[r]:
                    del nxt[slot]
                    full = self._full[r]
                    del full[bisect_left(full, slot)]
                    # pointers that jump over the freed slot start in the full run just before it
                    x = slot - 1
                    while x in nxt:
                        nxt[x] = x + 1
                        x -= 1

    def free_units(self, link: int, t: int) -> int:
        """How many more chunks may start on ``link`` in slot ``t`` (0 when it cannot)."""
        if not self.is_free(link, t):
            return 0
        units = self._cap[link]
        for k in range(self.occ[link]):
            for r in self._res_of_link[link]:
                units = min(units, self._cap[r] - self._count[r].get(t + k, 0))
        return units

    def load(self, link: int, t: int) -> int:
        """Chunks occupying ``link`` in slot ``t``."""
        return self._count[link].get(t, 0)


# --------------------------------------------------------------------------- Step 1, 2
@dataclass(frozen=True)
class Task:
    """One Broadcast/Multicast task of Step 1.

    Parameters
    ----------
    index : int
        Position in :func:`decompose`'s output (used by ``task_order``).
    roots : tuple of int
        Holders at slot 0 (the tree may start from any of them: the root vertex ``s_0``).
    chunks : tuple of Chunk
    targets : tuple of tuple of int
        Per chunk, the nodes that must receive it (wanted and not held).
    """

    index: int
    roots: tuple[int, ...]
    chunks: tuple[Chunk, ...]
    targets: tuple[tuple[int, ...], ...]
    chunk_roots: tuple[tuple[int, ...], ...] | None = None
    """Per chunk holders when they differ between chunks (a merged task, ``tree="all"``)."""

    def roots_of(self, i: int) -> tuple[int, ...]:
        """Holders of the task's ``i``-th chunk at slot 0."""
        return self.roots if self.chunk_roots is None else self.chunk_roots[i]

    @property
    def deliveries(self) -> int:
        """Number of (chunk, node) deliveries."""
        return sum(len(t) for t in self.targets)


def decompose(instance: Instance, per_chunk: bool = False) -> list[Task]:
    """Step 1: the collective as Broadcast/Multicast tasks.

    Chunks with the same set of slot-0 holders form one task (AllGather: one Broadcast per
    source; Broadcast/Multicast: one task; Scatter: one task of the root whose chunks have
    one target each). ``per_chunk`` makes every chunk its own task. Chunks nobody needs are
    dropped.
    """
    coll = instance.collective
    groups: dict[tuple[int, ...], list[tuple[Chunk, tuple[int, ...]]]] = {}
    for chunk in coll.chunk_ids:
        holders = coll.holders[chunk]
        targets = tuple(sorted(v for v in coll.wanted.get(chunk, frozenset()) if v not in holders))
        if not targets:
            continue
        key = tuple(sorted(holders))
        if per_chunk:
            groups[(*key, -1 - len(groups))] = [(chunk, targets)]
        else:
            groups.setdefault(key, []).append((chunk, targets))
    tasks = []
    for i, (key, items) in enumerate(groups.items()):
        roots = tuple(v for v in key if v >= 0)
        tasks.append(Task(i, roots, tuple(c for c, _ in items), tuple(t for _, t in items)))
    return tasks


def merge_tasks(tasks: Sequence[Task]) -> Task:
    """All tasks as one (``tree="all"``), chunks in the given task order."""
    chunks: list[Chunk] = []
    targets: list[tuple[int, ...]] = []
    roots: list[tuple[int, ...]] = []
    for k in tasks:
        for i, c in enumerate(k.chunks):
            chunks.append(c)
            targets.append(k.targets[i])
            roots.append(k.roots_of(i))
    return Task(-1, (), tuple(chunks), tuple(targets), tuple(roots))


def order_tasks(tasks: Sequence[Task], options: MtegOptions) -> list[Task]:
    """Step 2: order the tasks (paper: by data size, largest first).

    Data size is the number of chunks the source sends, then the number of deliveries; ties
    keep the decomposition order (roots ascending), so the result is deterministic.
    """
    if options.order == "given":
        perm = list(options.task_order or ())
        if sorted(perm) != list(range(len(tasks))):
            raise ValidationError(
                f"mteg option task_order must be a permutation of 0..{len(tasks) - 1}, got {perm}"
            )
        return [tasks[i] for i in perm]
    ordered = sorted(tasks, key=lambda k: (-len(k.chunks), -k.deliveries, k.index))
    if options.interleave:
        # round-robin over the chunk index at the source: (s0,c0), (s1,c0), ..., (s0,c1), ...
        # (a stable sort keeps the size order within one chunk index; ordered.index() here
        # made the ordering quadratic: DGX-1 AllGather with C=2000, 16000 tasks, spent about
        # 22 of its 30 s ordering them; now 0.03 s)
        ordered = sorted(ordered, key=lambda k: k.chunks[0][1])
    if options.order == "reverse":
        ordered.reverse()
    elif options.order == "random":
        random.Random(options.seed).shuffle(ordered)
    return ordered


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


@dataclass(frozen=True)
class MtegResult:
    """A schedule built by :func:`mteg_schedule` and how it was built."""

    schedule: Schedule
    makespan: int
    horizon: int
    extensions: int
    searches: int
    seconds: float
    options: MtegOptions
    order: tuple[int, ...] = field(default=())
    late_tasks: tuple[int, ...] = field(default=())
    """Task indices ordered by their latest delivery, latest first (for restarts)."""


def _columns_schedule(builder: _Builder) -> tuple[Schedule, dict[Chunk, int]]:
    """The builder's sends as a column-backed :class:`Schedule` and each chunk's last arrival."""
    source = np.asarray(builder.col_source, dtype=np.int64)
    index = np.asarray(builder.col_index, dtype=np.int64)
    link = np.asarray(builder.col_link, dtype=np.int64)
    slot = np.asarray(builder.col_slot, dtype=np.int64)
    tail = np.asarray(builder.tail, dtype=np.int64)
    head = np.asarray(builder.head, dtype=np.int64)
    schedule = Schedule.from_columns(
        slot=slot, chunk_source=source, chunk_index=index, src=tail[link], dst=head[link], method="mteg"
    )
    finish: dict[Chunk, int] = {}
    if len(slot):
        arrive = slot + np.asarray(builder.lat, dtype=np.int64)[link]
        width = int(index.max()) + 1
        code = source * width + index
        order = np.argsort(code, kind="stable")
        codes, first = np.unique(code[order], return_index=True)
        last = np.maximum.reduceat(arrive[order], first)
        finish = {(int(c) // width, int(c) % width): int(a) for c, a in zip(codes, last, strict=True)}
    return schedule, finish


def mteg_schedule(
    instance: Instance, options: MtegOptions | None = None, deadline: Deadline = NEVER
) -> MtegResult:
    """Run MTEGCCA (Steps 1-5) and return the schedule.

    Parameters
    ----------
    instance : Instance
        A data-movement collective (combining collectives are built from these elsewhere).
    options : MtegOptions, optional
        Defaults are the paper's algorithm.
    deadline : Deadline
        Checked before every Takahashi-Matsuyama search.

    Raises
    ------
    OutOfTimeError
        ``deadline`` passed before the schedule was complete.
    ValidationError
        A combining collective or bad options.
    CCPlanError
        A demand that no path can serve.
    """
    opts = options or MtegOptions()
    if instance.collective.combining:
        raise ValidationError(
            f"mteg schedules data-movement collectives; {instance.collective.kind!r} is combining "
            "(build it from AllGather/Broadcast on the reversed topology)"
        )
    start = time.perf_counter()
    tasks = decompose(instance, per_chunk=opts.tree == "chunk")
    ordered = order_tasks(tasks, opts)
    builder = _Builder(instance, opts, deadline=deadline)
    builder.run([merge_tasks(ordered)] if opts.tree == "all" and ordered else ordered)
    schedule, finish = _columns_schedule(builder)
    makespan = max(finish.values(), default=0)
    task_finish = {k.index: max((finish.get(c, 0) for c in k.chunks), default=0) for k in tasks}
    late = tuple(sorted(task_finish, key=lambda i: (-task_finish[i], i)))
    return MtegResult(
        schedule=schedule,
        makespan=makespan,
        horizon=max(makespan, 1),
        extensions=builder.extensions,
        searches=builder.searches,
        seconds=time.perf_counter() - start,
        options=opts,
        order=tuple(k.index for k in ordered),
        late_tasks=late,
    )


def extend_schedule(
    instance: Instance,
    fixed: Iterable[Send],
    tasks: Sequence[Task],
    options: MtegOptions | None = None,
    reservations: Reservations | None = None,
    partial: Mapping[Chunk, Sequence[Send]] | None = None,
    deadline: Deadline = NEVER,
) -> list[Send]:
    """Route ``tasks`` (Steps 3-4) around the link-slots that ``fixed`` already occupies.

    The rip-up-and-reroute improvement of :mod:`ccplan.heuristics.search` uses this: the
    sends of some chunks are removed and their trees rebuilt in the MTEG whose edges the
    other chunks' sends have taken. ``fixed`` must not contain sends of the tasks' chunks.

    Returns
    -------
    list of Send
        The new sends only.
    """
    opts = options or MtegOptions()
    builder = _Builder(instance, opts, reservations, deadline)
    if reservations is None:
        link_index = instance.topology.link_index
        for send in fixed:
            builder.res.reserve(link_index[(send.src, send.dst)], send.slot)
    builder.run(tasks, partial)
    return builder.sends


@register("mteg")
def mteg_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``mteg``: the faithful MTEGCCA (options from ``options.extra``, see
    :class:`MtegOptions`; ``options.horizon`` is the initial H)."""
    extra = dict(options.extra)
    if options.horizon is not None and "horizon" not in extra:
        extra["horizon"] = options.horizon
    opts = MtegOptions.from_mapping(extra, seed=options.seed)
    result, failed = run_constructor(
        lambda deadline: mteg_schedule(instance, opts, deadline), options.time_limit, opts.label()
    )
    if failed is not None:
        return failed
    return Outcome(
        schedule=result.schedule,
        status="feasible",
        details={
            "variant": opts.label(),
            "horizon": result.horizon,
            "horizon_extensions": result.extensions,
            "searches": result.searches,
            "makespan_slots": result.makespan,
        },
    )
