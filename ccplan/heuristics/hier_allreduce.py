r"""Pipelined hierarchical AllReduce across chassis, method ``"hier-allreduce"``.

For machines of several chassis (:func:`ccplan.instances.clusters.chassis_groups`: the groups
of GPUs that the slowest links separate, e.g. DGX2 x2, NDv2 x2/x4, AMD x2) and switches that
may not reduce. Every chunk of the AllReduce goes through three phases, and chunks follow one
another so that the phases of different chunks overlap (the pipeline):

1. **reduce along the chassis, chained.** The chassis are put on a cycle ``K_1 -> K_2 -> ...
   -> K_g -> K_1`` in which every step has a *route*: a path from a GPU of one chassis to a
   GPU of the next whose inner nodes are switches (a NIC link, or NIC switches). For chunk
   ``k`` the chain starts at chassis ``k mod g``. ``K_1`` reduces its GPUs' contributions to
   the tail (exit GPU) ``x_1`` of a route to ``K_2``, which sends the partial sum across to
   the route's head (entry GPU) ``e_2``. ``K_2`` reduces its own contributions *and* that
   partial sum (``e_2`` sends its own on only after it arrived) to the exit ``x_2`` of a route
   to ``K_3``, and so on; the last chassis ``K_g`` reduces to its entry ``e_g``, which then
   holds the full sum. Every chassis' contributions are added once, inside the chassis; the
   partial sum crosses ``g - 1`` routes.
2. **all-gather in the last chassis**: ``e_g`` sends the full sum down a tree of ``K_g``.
3. **the full sum around the cycle**: a GPU of ``K_g`` that has it sends it on a route to
   ``K_1``, whose entry sends it down ``K_1``'s tree and on to ``K_2``, ..., to ``K_{g-1}``:
   ``g - 1`` more crossings, ``2 (g - 1)`` in all per chunk, the least the ``gossip`` part of
   the physical bound allows (``2 (g - 1) M`` bytes into the chassis), and no hop more inside a
   chassis than its own reduce and all-gather need: the entry that receives the partial sum
   folds it in, the entry that receives the full sum is the root of the chassis' all-gather.

Within a chassis the reduction runs up an in-tree and the all-gather down an out-tree, each a
shortest-path tree by the slots already booked on a link plus its ``l`` (fewest hops among
equals), built anew for every chunk so that the chassis' links share the load. A switch that may reduce
(:attr:`~ccplan.instances.instance.Instance.reducing_switches`) adds its children's partial
sums; one that may not relays them in a *chain*: the first child copies its sum into the
switch, which passes it to the next child (receive-and-reduce), and so on, the last to the
switch's parent, so the switch holds one partial sum of a chunk at a time (the verifier's
rule). On an NVSwitch chassis of ``n`` GPUs the chain adds ``n - 1`` receptions per chunk
and the all-gather ``n - 1`` more: the ``2 (n - 1)`` the ``gossip`` bound counts.

Load balance: routes are taken least-used first (the largest booked occupancy of their links),
so every NIC carries its share and the roots of the chassis' trees rotate; the chain through a
switch starts at the child that has received most so far (that child receives nothing of this
chunk) and goes on to the child whose link from the switch frees first. Each send is booked at
the first slot at which its link has room for its ``l`` slots (``omega``, outages), in chunk
order (index, owner): list scheduling, which pipelines the phases of consecutive chunks. The
way back of chunk ``k``'s full sum (phases 2 and 3) is booked only after the reductions of the
next ``2 N`` chunks (:data:`LOOKAHEAD_PER_GPU`): booked at once, the last chunks' reductions
would find the links taken by earlier chunks' all-gathers and end late, leaving the links idle
while the last full sums cross (on DGX2 x2 at C = 8: 512 slots against 495; the bound of the
GPUs' links from the switch is 480).

Single-port instances are refused (the booking does not track ports); cut-through instances
reach this engine through the pipeline's store-and-forward twin. Every schedule is verified
before it is handed out (:func:`hier_allreduce_engine`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ccplan.contract import Outcome, SolveOptions, register
from ccplan.errors import ValidationError
from ccplan.instances.clusters import chassis_groups
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.limits import Deadline, OutOfTimeError
from ccplan.schedule.core import Schedule, Send

log = logging.getLogger(__name__)

METHOD = "hier-allreduce"

LOOKAHEAD_PER_GPU = 2
"""The full sum of chunk ``k`` is booked after the reductions of the next ``2 N`` chunks (N
GPUs) are (module docstring)."""

MAX_PERMUTED_CHASSIS = 7
"""Up to this many chassis every cyclic order is tried when the natural one lacks a route."""


@dataclass(frozen=True)
class Route:
    """A path from a GPU of one chassis to a GPU of another, inner nodes switches."""

    nodes: tuple[int, ...]
    links: tuple[int, ...]

    @property
    def exit(self) -> int:
        return self.nodes[0]

    @property
    def entry(self) -> int:
        return self.nodes[-1]


class _Book:
    """First-fit booking of sends on the slotted links: a send occupies its link for ``l``
    slots, at most ``omega`` sends at a time (outages are slots of capacity 0). Full slots are
    skipped with a union-find over slot indices, so a search never walks a busy stretch twice.
    """

    def __init__(self, instance: Instance, lookahead: int | None = None) -> None:
        self.instance = instance
        self.occ = [int(x) for x in instance.occupancy]
        self.lat = [int(x) for x in instance.latency]
        self.cap = [int(x) for x in instance.link_capacity]
        self.index = instance.topology.link_index
        self.load: dict[tuple[int, int], int] = defaultdict(int)
        self.skip: list[dict[int, int]] = [{} for _ in instance.topology.links]
        for link, slot in instance.outage_set:
            self.skip[link][slot] = slot + 1
        self.used = [0] * instance.topology.num_links  # booked slots per link
        self.sends: list[Send] = []

    def _next(self, link: int, t: int) -> int:
        skip = self.skip[link]
        path = []
        while t in skip:
            path.append(t)
            t = skip[t]
        for p in path:
            skip[p] = t
        return t

    def earliest(self, link: int, ready: int) -> int:
        """The first slot ``>= ready`` at which ``link`` has room for one send."""
        t = self._next(link, max(0, ready))
        skip = self.skip[link]
        while True:
            for x in range(t + 1, t + self.occ[link]):
                if x in skip:
                    t = self._next(link, x + 1)
                    break
            else:
                return t

    def send(self, chunk: Chunk, src: int, dst: int, ready: int, reduce: bool) -> tuple[int, int]:
        """Book ``src -> dst`` at its first free slot ``>= ready``: (start, arrival)."""
        link = self.index[(src, dst)]
        t = self.earliest(link, ready)
        for x in range(t, t + self.occ[link]):
            self.load[(link, x)] += 1
            if self.load[(link, x)] >= self.cap[link]:
                self.skip[link][x] = x + 1
        self.used[link] += self.occ[link]
        self.sends.append(Send(slot=t, chunk=chunk, src=src, dst=dst, reduce=reduce))
        return t, t + self.lat[link]

    def arrival_if(self, src: int, dst: int, ready: int) -> int:
        """When a send ``src -> dst`` booked now at ``>= ready`` would arrive."""
        link = self.index[(src, dst)]
        return self.earliest(link, ready) + self.lat[link]


def _routes(instance: Instance, groups: Sequence[frozenset[int]]) -> dict[tuple[int, int], list[Route]]:
    """For every ordered pair of chassis, one fewest-hops route from each of the first's GPUs
    to each GPU of the second that it reaches through switches only (module docstring)."""
    topo = instance.topology
    where = {v: i for i, g in enumerate(groups) for v in g if topo.kind[v] == "gpu"}
    out: dict[tuple[int, int], list[Route]] = defaultdict(list)
    for u, a in sorted(where.items()):
        prev: dict[int, tuple[int, int]] = {u: (u, -1)}
        frontier = [u]
        while frontier:
            nxt = []
            for x in frontier:
                for li in topo.out_links[x]:
                    y = topo.links[li].dst
                    if y in prev:
                        continue
                    if topo.kind[y] == "gpu":
                        if where[y] != a:
                            prev[y] = (x, li)  # a GPU of another chassis ends a route
                        continue
                    if y in groups[a] and x != u:
                        continue  # no detour back through the own chassis' switches
                    prev[y] = (x, li)
                    nxt.append(y)
            frontier = nxt
        for v, b in where.items():
            if b == a or v not in prev:
                continue
            nodes, links = [v], []
            while nodes[-1] != u:
                x, li = prev[nodes[-1]]
                nodes.append(x)
                links.append(li)
            out[(a, b)].append(Route(tuple(reversed(nodes)), tuple(reversed(links))))
    return out


def _cycle(count: int, routes: Mapping[tuple[int, int], list[Route]]) -> list[int]:
    """A cyclic order of the chassis with a route for every step (the natural one if it has)."""

    def ok(order: Sequence[int]) -> bool:
        return all(routes.get((order[i], order[(i + 1) % count])) for i in range(count))

    natural = list(range(count))
    if ok(natural):
        return natural
    if count <= MAX_PERMUTED_CHASSIS:
        for rest in itertools.permutations(range(1, count)):
            if ok((0, *rest)):
                return [0, *rest]
    raise ValidationError(f"{METHOD}: no cycle through the {count} chassis with a route for every step")


def _tree(
    instance: Instance, root: int, inside: frozenset[int], towards: bool, cost: Sequence[int]
) -> dict[int, int]:
    """Shortest-path tree of ``root`` over the nodes ``inside`` by the links' ``cost`` (fewest
    hops among equals): ``towards`` gives ``node -> next node towards root`` (an in-tree),
    else ``node -> parent`` of an out-tree. Branches that hold no GPU are pruned."""
    topo = instance.topology
    lat = cost
    best = {root: (0, 0)}
    nxt: dict[int, int] = {}
    heap = [(0, 0, root)]
    adjacency = topo.in_links if towards else topo.out_links
    while heap:
        d, h, a = heapq.heappop(heap)
        if best.get(a) != (d, h):
            continue
        for li in adjacency[a]:
            lk = topo.links[li]
            b = lk.src if towards else lk.dst
            if b not in inside:
                continue
            key = (d + int(lat[li]), h + 1)
            if b not in best or key < best[b]:
                best[b] = key
                nxt[b] = a
                heapq.heappush(heap, (*key, b))
    keep: set[int] = set()
    for x in nxt:
        if topo.kind[x] == "gpu":
            while x in nxt and x not in keep:
                keep.add(x)
                x = nxt[x]
    return {x: p for x, p in nxt.items() if x in keep}


class _Planner:
    """The booking of one schedule (module docstring)."""

    def __init__(self, instance: Instance, lookahead: int | None = None) -> None:
        topo = instance.topology
        if instance.single_port:
            raise ValidationError(f"{METHOD} does not model single-port nodes")
        groups = chassis_groups(topo)
        if len(groups) < 2:
            raise ValidationError(
                f"{METHOD}: {topo.name!r} has no chassis (no slower links between groups of GPUs)"
            )
        self.instance = instance
        self.topo = topo
        self.groups = groups
        self.gpus = [tuple(v for v in sorted(g) if topo.kind[v] == "gpu") for g in groups]
        self.routes = _routes(instance, groups)
        self.cycle = _cycle(len(groups), self.routes)
        self.relay = frozenset(topo.switches) - instance.reducing_switches
        self.book = _Book(instance)
        self.lookahead = LOOKAHEAD_PER_GPU * len(topo.gpus) if lookahead is None else lookahead

    def tree(self, chassis: int, root: int, towards: bool) -> tuple[dict[int, int], list[int]]:
        """The chassis' tree of ``root`` and its nodes from the root outwards: shortest paths
        by the slots already booked on each link plus its own ``l`` (a link used often is
        avoided where another way is as short), so the chassis' links share the load."""
        book = self.book
        cost = [u + o for u, o in zip(book.used, book.occ, strict=True)]
        t = _tree(self.instance, root, self.groups[chassis], towards, cost)
        hops: dict[int, int] = {root: 0}

        def depth(x: int) -> int:
            if x not in hops:
                hops[x] = depth(t[x]) + 1
            return hops[x]

        order = sorted(t, key=lambda x: (depth(x), x))
        missing = set(self.gpus[chassis]) - set(t) - {root}
        if missing:
            raise ValidationError(
                f"{METHOD}: GPU {min(missing)} cannot {'reach' if towards else 'be reached from'} "
                f"GPU {root} inside its chassis"
            )
        return t, order

    def pick(self, a: int, b: int) -> Route:
        """The least used route from chassis ``a`` to ``b`` (booked slots of its links)."""
        used = self.book.used
        return min(
            self.routes[(a, b)],
            key=lambda r: (
                max(used[li] for li in r.links),
                sum(used[li] for li in r.links),
                len(r.links),
                r.nodes,
            ),
        )

    def across(
        self, chunk: Chunk, route: Route, ready: int, sent: dict[int, int], full: dict[int, int] | None = None
    ) -> int:
        """Book ``route`` for a partial sum (relays into switches, reduced at the entry) or,
        with ``full`` (node -> slot it holds the full sum), for a copy of the full sum from
        the last node of the route that holds it already (a switch on two routes must not
        receive it twice); returns the arrival at the entry."""
        nodes = route.nodes
        t = ready
        if full is not None:
            i = max(j for j, v in enumerate(nodes) if v in full)
            nodes, t = nodes[i:], full[nodes[i]]
        for u, v in itertools.pairwise(nodes):
            start, t = self.book.send(chunk, u, v, t, reduce=full is None and v == route.entry)
            sent[u] = max(sent.get(u, -1), start)
            if full is not None:
                full[v] = t
        return t

    def reduce(
        self, chunk: Chunk, k: int, chassis: int, root: int, extra: Mapping[int, int], sent: dict[int, int]
    ) -> int:
        """Book the reduction of the chassis' contributions and of the partial sums ``extra``
        that arrive at given GPUs by given slots to ``root``; returns when root holds it."""
        up, order = self.tree(chassis, root, towards=True)
        arrive: dict[int, int] = defaultdict(int, extra)
        chained: set[int] = set()
        for x in reversed(order):
            if x in chained or x in self.relay:
                continue
            parent = up[x]
            if parent in self.relay:
                chained |= self._chain(chunk, k, up, parent, arrive, sent)
                continue
            start, t = self.book.send(chunk, x, parent, arrive[x], reduce=True)
            sent[x] = max(sent.get(x, -1), start)
            arrive[parent] = max(arrive[parent], t)
        return arrive[root]

    def _chain(
        self,
        chunk: Chunk,
        k: int,
        up: Mapping[int, int],
        switch: int,
        arrive: dict[int, int],
        sent: dict[int, int],
    ) -> set[int]:
        """The children of a switch that may not reduce pass the partial sum from one to the
        next through it (module docstring); the last one's sum goes to the switch's parent."""
        children = [x for x, p in up.items() if p == switch]
        parent = up[switch]
        if parent in self.relay or any(x in self.relay for x in children):
            raise ValidationError(f"{METHOD}: nested switches that may not reduce")
        index = self.book.index
        used = self.book.used

        def received(x: int) -> int:
            return used[index[(switch, x)]]

        n = len(children)
        # the first child receives nothing of this chunk: the one that has received most
        first = min(children, key=lambda x: (arrive[x], -received(x), (x - k) % (n + 1)))
        left = set(children) - {first}
        holder = first
        while True:
            start, at_switch = self.book.send(chunk, holder, switch, arrive[holder], reduce=False)
            sent[holder] = max(sent.get(holder, -1), start)
            if not left:
                break
            nxt = min(
                left,
                key=lambda y: (max(self.book.arrival_if(switch, y, at_switch), arrive[y]), -received(y), y),
            )
            left.discard(nxt)
            start, t = self.book.send(chunk, switch, nxt, at_switch, reduce=True)
            sent[switch] = max(sent.get(switch, -1), start)
            arrive[nxt] = max(arrive[nxt], t)
            holder = nxt
        start, t = self.book.send(chunk, switch, parent, at_switch, reduce=True)
        sent[switch] = max(sent.get(switch, -1), start)
        arrive[parent] = max(arrive[parent], t)
        return set(children)

    def spread(
        self, chunk: Chunk, chassis: int, origin: int, ready: int, first: int | None, sent: Mapping[int, int]
    ) -> dict[int, int]:
        """Book the full sum down the chassis' out-tree of ``origin`` (the way to ``first``
        before the rest); returns when each node holds it."""
        down, order = self.tree(chassis, origin, towards=False)
        lead: set[int] = set()
        x = first
        while x is not None and x in down:
            lead.add(x)
            x = down[x]
        hold = {origin: ready}
        depth = {x: i for i, x in enumerate(order)}
        for x in sorted(order, key=lambda v: (v not in lead, depth[v])):
            if x == origin:
                continue
            link = self.book.index[(down[x], x)]
            # a copy of the full sum lands after the node sent its own partial sum on
            guard = sent.get(x, -1) + 1 - self.book.lat[link]
            _, t = self.book.send(chunk, down[x], x, max(hold[down[x]], guard), reduce=False)
            hold[x] = t
        return hold

    def schedule(self, chunks: Sequence[Chunk], deadline: Deadline) -> Schedule:
        """Book every chunk: its reduction and partial sums (phase 1) ``lookahead`` chunks
        ahead of its full sum's way (phases 2 and 3)."""
        pending: list[Callable[[], None]] = []
        for k, chunk in enumerate(chunks):
            if k % 64 == 0:
                deadline.check()
            pending.append(self._chained(k, chunk))
            if len(pending) > self.lookahead:
                pending.pop(0)()
        for then in pending:
            then()
        return Schedule(tuple(sorted(self.book.sends)), method=METHOD)

    def _chained(self, k: int, chunk: Chunk) -> Callable[[], None]:
        """Phase 1 of chunk ``k`` along the chassis cycle; returns the booking of the rest."""
        state = self._reduce_phase(k, chunk)
        return lambda: self._full_phase(chunk, *state)

    def _reduce_phase(self, k: int, chunk: Chunk) -> tuple[list[int], Route, int, dict[int, int]]:
        """Phase 1 of chunk ``k``: the chassis order, the last route, when its entry holds the
        full sum, and when each node sent its partial sum on."""
        g = len(self.groups)
        order = [self.cycle[(k + i) % g] for i in range(g)]
        sent: dict[int, int] = {}
        extra: dict[int, int] = {}
        routes = [self.pick(order[i], order[i + 1]) for i in range(g - 1)]
        held = 0
        for i, chassis in enumerate(order):
            root = routes[i].exit if i < g - 1 else routes[-1].entry
            held = self.reduce(chunk, k, chassis, root, extra, sent)
            if i < g - 1:
                extra = {routes[i].entry: self.across(chunk, routes[i], held, sent)}
        return order, routes[-1], held, sent

    def _full_phase(
        self, chunk: Chunk, order: list[int], route: Route, held: int, sent: dict[int, int]
    ) -> None:
        """Phases 2 and 3: the full sum down the last chassis, then around the cycle to
        ``K_1 ... K_{g-1}``."""
        g = len(order)
        feed = [order[-1], *order[:-1]]
        origin = route.entry
        full = {origin: held}
        for i, chassis in enumerate(feed):
            nxt = self.pick(chassis, feed[i + 1]) if i < g - 1 else None
            full.update(
                self.spread(chunk, chassis, origin, full[origin], None if nxt is None else nxt.exit, sent)
            )
            if nxt is not None:
                self.across(chunk, nxt, 0, sent, full)
                origin = nxt.entry


def hier_allreduce_schedule(
    instance: Instance, deadline: Deadline | None = None, lookahead: int | None = None
) -> Schedule:
    """The pipelined hierarchical AllReduce of ``instance`` (module docstring), unverified.

    Raises
    ------
    ValidationError
        Not an AllReduce, single-port, fewer than two chassis, no cycle of routes through
        them, a GPU its chassis' links do not join to the root, or nested relaying switches.
    OutOfTimeError
        ``deadline`` passed.
    """
    if instance.collective.kind != "allreduce":
        raise ValidationError(f"method {METHOD!r} schedules allreduce only, not {instance.collective.kind!r}")
    planner = _Planner(instance, lookahead)
    chunks = sorted(instance.collective.chunk_ids, key=lambda c: (c[1], c[0]))
    return planner.schedule(chunks, deadline or Deadline.after(None))


@register(METHOD)
def hier_allreduce_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Registered engine ``hier-allreduce`` (AllReduce on machines of several chassis).

    Raises :class:`ValidationError` where the construction does not apply (see
    :func:`hier_allreduce_schedule`) or its schedule does not verify (a machine whose
    chassis its rules do not fit; the ``heuristic`` AllReduce then keeps its others)."""
    from ccplan.schedule.verify import verify

    start = time.perf_counter()
    try:
        schedule = hier_allreduce_schedule(instance, Deadline.after(options.time_limit))
    except OutOfTimeError:
        reason = f"time limit of {options.time_limit:g} s reached"
        return Outcome(schedule=None, status="unknown", details={"variant": METHOD, "reason": reason})
    report = verify(instance, schedule)
    if not report.ok:
        raise ValidationError(
            f"{METHOD} does not apply to {instance.topology.name!r}: {report.violations[0]}"
        )
    details: dict[str, Any] = {
        "variant": METHOD,
        "seconds": time.perf_counter() - start,
        "chassis": len(chassis_groups(instance.topology)),
    }
    return Outcome(schedule=schedule, status="feasible", details=details)
