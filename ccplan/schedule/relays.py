"""Reductions through switches that cannot reduce: partial sums relayed, not added, in a switch.

A reduction schedule built as a tree (every node sends its partial sum of a chunk once, after
the partial sums it folds in arrived; the time reversal of an AllGather is one) lets a switch
add the partial sums it receives and send one sum on. A switch outside the instance's
:attr:`~ccplan.instances.instance.Instance.reducing_switches` cannot (the verifier's
``switch-reduce`` rule): it holds one partial sum of a chunk at a time and copies it on.

:func:`unfold_switch_sums` rewrites such a tree: every partial sum that entered a switch
becomes a *relay*, a chain of copies through the switch (and any further switches that cannot
reduce) to the node the sum went to, which reduces it (a GPU, or a switch that may reduce).
The chains are then placed by :func:`place_relays`: in a given order, each at the earliest
slots at which its sender's inputs have arrived, every hop's link has room for ``l`` slots
(``omega``, outages) and, single-port, both ends are free, and no switch on it holds another
partial sum of the chunk meanwhile (a switch buffer holds one: the relay's stay ``[arrival,
forward]`` at a switch is disjoint from every other's). The result carries each contribution
along the tree's path once, so it is counted once; it verifies whenever the tree's causality
holds (docs/collectives.md, "Switches that cannot reduce").

The cost is traffic on the link out of the switch: ``k`` partial sums instead of one. On one
NVSwitch box that is what a ReduceScatter needs anyway (the switch-to-owner link then carries
``N - 1`` partials, the per-GPU bound ``(N - 1)/N x M / B``).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.limits import Deadline
from ccplan.schedule.core import Schedule, Send


def relaying_switches(instance: Instance) -> frozenset[int]:
    """The switches that hold a partial sum without adding to it (all but the reducing ones)."""
    return frozenset(instance.topology.switches) - instance.reducing_switches


@dataclass(frozen=True)
class Relay:
    """A partial sum's way from the node that summed it to the node that reduces it.

    Attributes
    ----------
    hops : tuple of Send
        The sends in path order, with their original slots; every hop but the last ends at
        a switch that relays.
    """

    hops: tuple[Send, ...]

    @property
    def chunk(self) -> Chunk:
        return self.hops[0].chunk

    @property
    def src(self) -> int:
        return self.hops[0].src

    @property
    def dst(self) -> int:
        return self.hops[-1].dst


def _index(schedule: Schedule) -> dict[tuple[Chunk, int], list[Send]]:
    out: dict[tuple[Chunk, int], list[Send]] = defaultdict(list)
    for s in schedule.sends:
        out[(s.chunk, s.src)].append(s)
    return out


def tree_relays(
    instance: Instance, schedule: Schedule, chain: bool = False
) -> tuple[list[Relay], dict[Relay, list[Relay]]] | None:
    """The relays of a tree-form reduction and each relay's inputs (the relays that end at its
    sender: in a tree a node sends its partial sum once, after all of them).

    ``chain=False`` (star): every send into a relaying switch continues along the switch's one
    send of that chunk, so the node after the switch receives every partial sum that entered
    it. ``chain=True``: the partial sums that GPUs (or reducing switches) send into a relaying
    switch go from one such sender to the next instead, in the order of their slots, each
    adding its own (a ring through the switch), and only the last continues along the switch's
    send; the link out of the switch then carries one partial sum per sender, not all of them
    to one node. Hops into a relaying switch become copies, the last hop a receive-and-reduce.

    None when a node sends a chunk more than once or a relaying switch sends a chunk other
    than once (not a tree).
    """
    relay = relaying_switches(instance)
    topo = instance.topology
    lat = instance.latency
    out_of = _index(schedule)
    if any(len(sends) > 1 for sends in out_of.values()):
        return None
    feeders: dict[tuple[Chunk, int], list[Send]] = defaultdict(list)
    for s in schedule.sends:
        if s.dst in relay and s.src not in relay:
            feeders[(s.chunk, s.dst)].append(s)
    following: dict[Send, int] = {}
    if chain:
        for group in feeders.values():
            group.sort(key=lambda x: (x.slot, x.src))
            for a, b in pairwise(group):
                if topo.has_link(a.dst, b.src):
                    following[a] = b.src
    relays: list[Relay] = []
    for s in schedule.sends:
        if s.src in relay:
            continue
        hops = [s]
        seen = {s.src}
        while hops[-1].dst in relay:
            v = hops[-1].dst
            if len(hops) == 1 and s in following:
                arrive = s.slot + int(lat[topo.link_index[(s.src, v)]])
                hops.append(Send(arrive, s.chunk, v, following[s], reduce=True))
                break
            nxt = out_of.get((s.chunk, v), [])
            if len(nxt) != 1 or nxt[0].dst in seen:
                return None
            seen.add(v)
            hops.append(nxt[0])
        flagged = [
            Send(h.slot, h.chunk, h.src, h.dst, reduce=(k == len(hops) - 1) and h.reduce)
            for k, h in enumerate(hops)
        ]
        relays.append(Relay(tuple(flagged)))
    used = {(h.chunk, h.src) for r in relays for h in r.hops[1:]}
    if any(s.src in relay and (s.chunk, s.src) not in used for s in schedule.sends):
        return None
    ending: dict[tuple[Chunk, int], list[Relay]] = defaultdict(list)
    for r in relays:
        ending[(r.chunk, r.dst)].append(r)
    return relays, {r: ending[(r.chunk, r.src)] for r in relays}


def chained_relays(instance: Instance, schedule: Schedule) -> list[Relay] | None:
    """The relays of a schedule already in relay form: a relaying switch forwards the partial
    sum that arrived last (arrivals land before the sends of their slot). None when a switch
    forwards one arrival twice or drops one (not relay form)."""
    relay = relaying_switches(instance)
    if not relay:
        return [Relay((s,)) for s in schedule.sends]
    topo = instance.topology
    lat = instance.latency
    arrivals: dict[tuple[Chunk, int], list[tuple[int, Send]]] = defaultdict(list)
    for s in schedule.sends:
        if s.dst in relay:
            arrivals[(s.chunk, s.dst)].append((s.slot + int(lat[topo.link_index[(s.src, s.dst)]]), s))
    nxt: dict[Send, Send] = {}
    for s in schedule.sends:
        if s.src not in relay:
            continue
        before = [a for a in arrivals.get((s.chunk, s.src), []) if a[0] <= s.slot]
        if not before:
            return None
        last = max(before, key=lambda a: a[0])
        if sum(1 for a in before if a[0] == last[0]) > 1 or last[1] in nxt:
            return None
        nxt[last[1]] = s
    relays = []
    for s in schedule.sends:
        if s.src in relay:
            continue
        hops = [s]
        while hops[-1].dst in relay:
            if hops[-1] not in nxt or len(hops) > len(schedule.sends):
                return None
            hops.append(nxt[hops[-1]])
        relays.append(Relay(tuple(hops)))
    if sum(len(r.hops) for r in relays) != len(schedule.sends):
        return None
    return relays


class LinkBook:
    """Booked link slots: ``omega`` with outages and, single-port, the ports (earliest fit)."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.occ = [int(x) for x in instance.occupancy]
        self.load: dict[tuple[int, int], int] = defaultdict(int)
        self.sport: set[tuple[int, int]] = set()
        self.rport: set[tuple[int, int]] = set()

    def _fits(self, link: int, src: int, dst: int, t: int) -> bool:
        inst = self.instance
        for x in range(t, t + self.occ[link]):
            if self.load[(link, x)] >= inst.omega(link, x):
                return False
            if inst.single_port and ((src, x) in self.sport or (dst, x) in self.rport):
                return False
        return True

    def earliest(self, link: int, src: int, dst: int, t: int) -> int:
        while not self._fits(link, src, dst, t):
            t += 1
        return t

    def book(self, link: int, src: int, dst: int, t: int) -> None:
        for x in range(t, t + self.occ[link]):
            self.load[(link, x)] += 1
            if self.instance.single_port:
                self.sport.add((src, x))
                self.rport.add((dst, x))


def place_relays(
    instance: Instance,
    relays: Sequence[Relay],
    method: str = "",
    inputs: Mapping[Relay, Sequence[Relay]] | None = None,
    deadline: Deadline | None = None,
) -> Schedule:
    """Place ``relays`` (module docstring): among those whose inputs are placed, the first in
    the order given, until all are; past ``deadline`` it raises
    :class:`~ccplan.limits.OutOfTimeError` (the slot-by-slot search grows fast with C).

    A relay starts after its ``inputs`` arrived; by default they are the relays of its chunk
    that ended at its sender no later than its own first hop, in their original slots. Each
    hop starts at the earliest slot at which its link and ports are free and the previous hop
    has arrived; the whole relay waits when a switch on it would hold two partial sums of the
    chunk at once.
    """
    topo = instance.topology
    lat = [int(x) for x in instance.latency]
    links = LinkBook(instance)

    def link_of(s: Send) -> int:
        return topo.link_index[(s.src, s.dst)]

    if inputs is None:
        ending: dict[tuple[Chunk, int], list[Relay]] = defaultdict(list)
        for r in relays:
            ending[(r.chunk, r.dst)].append(r)
        inputs = {
            r: [
                d
                for d in ending[(r.chunk, r.src)]
                if d.hops[-1].slot + lat[link_of(d.hops[-1])] <= r.hops[0].slot
            ]
            for r in relays
        }
    waiting = {r: len(inputs[r]) for r in relays}
    feeds: dict[Relay, list[Relay]] = defaultdict(list)
    for r in relays:
        for d in inputs[r]:
            feeds[d].append(r)
    order = {r: i for i, r in enumerate(relays)}
    ready = [(order[r], r) for r in relays if not waiting[r]]
    heapq.heapify(ready)
    arrived: dict[Relay, int] = {}
    busy: dict[tuple[Chunk, int], list[tuple[int, int]]] = defaultdict(list)
    out: list[Send] = []
    placed = 0
    while ready:
        _, r = heapq.heappop(ready)
        placed += 1
        if deadline is not None and placed % 256 == 0:
            deadline.check()
        t0 = max((arrived[d] for d in inputs[r]), default=0)
        while True:
            plan: list[int] = []
            t = t0
            for h in r.hops:
                s = links.earliest(link_of(h), h.src, h.dst, t)
                plan.append(s)
                t = s + lat[link_of(h)]
            wait = 0
            stays = []
            for k in range(1, len(r.hops)):
                stay = (plan[k - 1] + lat[link_of(r.hops[k - 1])], plan[k])
                stays.append((r.hops[k].src, stay))
                for lo, hi in busy[(r.chunk, r.hops[k].src)]:
                    if not (stay[0] > hi or stay[1] < lo):
                        wait = max(wait, hi + 1 - stay[0])
            if wait == 0:
                break
            t0 = plan[0] + wait
        for node, stay in stays:
            busy[(r.chunk, node)].append(stay)
        for h, s in zip(r.hops, plan, strict=True):
            links.book(link_of(h), h.src, h.dst, s)
            out.append(Send(slot=s, chunk=h.chunk, src=h.src, dst=h.dst, reduce=h.reduce))
        arrived[r] = t
        for f in feeds[r]:
            waiting[f] -= 1
            if not waiting[f]:
                heapq.heappush(ready, (order[f], f))
    if len(arrived) != len(relays):
        raise ValidationError("internal: relays wait for each other in a cycle")
    return Schedule(tuple(sorted(out)), method=method)


def unfold_switch_sums(
    instance: Instance, schedule: Schedule, chain: bool = False, deadline: Deadline | None = None
) -> Schedule | None:
    """The tree-form reduction ``schedule`` with every sum in a switch that cannot reduce
    turned into relays (star or ``chain``, :func:`tree_relays`), placed in the order of their
    first hops' slots (module docstring).

    Returns ``schedule`` itself when no relaying switch receives anything, and None when the
    schedule is not a tree.
    """
    relay = relaying_switches(instance)
    if not any(s.dst in relay for s in schedule.sends):
        return schedule
    found = tree_relays(instance, schedule, chain)
    if found is None:
        return None
    relays, inputs = found
    relays.sort(key=lambda r: (r.hops[0].slot, r.chunk, r.src, r.dst))
    return place_relays(instance, relays, method=schedule.method, inputs=inputs, deadline=deadline)
