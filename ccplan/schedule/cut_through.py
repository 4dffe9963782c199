"""Cut-through re-timing: any store-and-forward schedule made valid (and faster) for
bufferless, cut-through switches.

Every heuristic of ccplan schedules switches as store-and-forward nodes (DESIGN.md's
default). Under ``switch_model == "cut-through"`` (TE-CCL's switch; docs/model.md) a switch
holds nothing: it forwards a chunk only in the slot in which the chunk arrives, and its hop
into a GPU costs only ``delta``. Instead of teaching each heuristic that rule, this post-pass
takes the heuristic's schedule on the store-and-forward twin of the instance and rebuilds it:

1. every *delivery* (a send into a node that is not a bufferless switch) is traced back
   through the switches it came from to its *route*: ``u -> sw_1 -> ... -> sw_m -> v`` with
   ``u`` not a switch;
2. deliveries are placed in the order of their store-and-forward arrival (so a relay GPU is
   placed before the deliveries it feeds), each at the earliest arrival over two options:

   - *copy*: the chunk already passes ``sw_m`` in some slot ``a`` (placed earlier for another
     delivery) and the hop ``sw_m -> v`` is free in ``a``: one more send, the switch copies;
   - *fresh*: the earliest slot ``t`` at which some node holding the chunk by ``t`` with a link
     into ``sw_1`` (the route's ``u`` or any other) can start the route, every hop being
     free at its slot (``t``, ``t + L_1``, ...) or already present (a send of the chunk on that
     link in that slot is reused, not repeated);

   capacity is ``omega`` over each hop's occupancy window (outages included) and, with
   ``single_port``, one send and one receive per node per slot, as the verifier counts them;
3. the result is checked by the independent verifier.

Combining collectives (partial sums relayed by switches that do not reduce, or reduced by
switches that may) are re-timed by :func:`retime_combining` instead.

The output is therefore always valid under cut-through. It exploits cut-through where the
semantics allow (a GPU-switch-GPU relay costs one transfer instead of two, and a chunk that
passes a switch is copied to several GPUs in the same slot) but keeps each heuristic's routing
and delivery order; it is not an optimiser, and the exact engine may do better.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)


@dataclass
class _Book:
    """Link and port reservations of the schedule being built."""

    instance: Instance

    def __post_init__(self) -> None:
        self.load: dict[tuple[int, int], int] = defaultdict(int)
        self.send_port: set[tuple[int, int]] = set()
        self.recv_port: set[tuple[int, int]] = set()
        self.occ = [int(x) for x in self.instance.occupancy]

    def fits(self, link: int, slot: int) -> bool:
        inst = self.instance
        lk = inst.topology.links[link]
        for q in range(slot, slot + self.occ[link]):
            if self.load[(link, q)] >= inst.omega(link, q):
                return False
            if inst.single_port and ((lk.src, q) in self.send_port or (lk.dst, q) in self.recv_port):
                return False
        return True

    def take(self, link: int, slot: int) -> None:
        lk = self.instance.topology.links[link]
        for q in range(slot, slot + self.occ[link]):
            self.load[(link, q)] += 1
            if self.instance.single_port:
                self.send_port.add((lk.src, q))
                self.recv_port.add((lk.dst, q))


ORDERS: tuple[str, ...] = ("arrival", "start")
"""Placement orders :func:`retime` tries: deliveries by store-and-forward arrival, or by the
slot their route starts in (which favours long routes through switches); the better result
is kept."""


def _routes(
    instance: Instance, twin: Instance, schedule: Schedule, order: str = "arrival"
) -> list[tuple[Chunk, list[int]]]:
    """``(chunk, route link indices)`` of every delivery, in the order they are to be placed
    (:data:`ORDERS`; a relay GPU always comes before the deliveries it feeds)."""
    starts: dict[tuple[Chunk, int], int] = {}
    topo = instance.topology
    bufferless = instance.bufferless
    lat = twin.latency
    holders = instance.collective.holders
    parent: dict[tuple[Chunk, int], int] = {}
    for send in schedule.sends:
        if send.dst in bufferless:
            parent.setdefault((send.chunk, send.dst), topo.link_index[(send.src, send.dst)])
            starts.setdefault((send.chunk, send.dst), send.slot)
    out: list[tuple[int, int, Chunk, list[int]]] = []
    for send in schedule.sends:
        if send.dst in bufferless:
            continue
        link = topo.link_index[(send.src, send.dst)]
        route = [link]
        node = send.src
        while node in bufferless and node not in holders[send.chunk]:
            if len(route) > topo.num_links:
                raise ValidationError(f"{send.describe()}: its route through switches does not end")
            up = parent[(send.chunk, node)]
            route.append(up)
            node = topo.links[up].src
        route.reverse()
        arrival = send.slot + int(lat[link])
        # A route's start slot is that of its first hop, the send into its first switch.
        first = starts[(send.chunk, topo.links[route[0]].dst)] if len(route) > 1 else send.slot
        key = arrival if order == "arrival" else first
        out.append((key, arrival, send.chunk, route))
    out.sort(key=lambda r: (r[0], r[1], r[2]))
    return [(chunk, route) for _key, _arr, chunk, route in out]


def retime(instance: Instance, schedule: Schedule) -> Schedule:
    """Rebuild ``schedule`` (valid on the store-and-forward twin of ``instance``) for
    cut-through switches (module docstring).

    Parameters
    ----------
    instance : Instance
        ``switch_model == "cut-through"`` (any other instance returns ``schedule`` unchanged).
    schedule : Schedule
        Valid for ``instance.with_switch_model("store-and-forward")``. A combining collective's
        schedule goes to :func:`retime_combining`.

    Returns
    -------
    Schedule
        Verified under ``instance``; ``method`` keeps the input's name.

    Raises
    ------
    ValidationError
        When ``schedule`` is not valid on the store-and-forward twin.
    """
    if not instance.bufferless:
        return schedule
    if instance.collective.combining:
        return retime_combining(instance, schedule)
    twin = instance.with_switch_model("store-and-forward")
    report = verify(twin, schedule)
    if not report.ok:
        raise ValidationError(f"cut-through re-timing needs a valid schedule: {report.violations[0]}")
    topo = instance.topology
    lat = [int(x) for x in instance.latency]
    bufferless = instance.bufferless
    holders = instance.collective.holders

    def place_all(order: str) -> Schedule:
        """Place every delivery in ``order`` (module docstring, step 2)."""
        book = _Book(instance)
        sends: set[tuple[Chunk, int, int]] = set()  # (chunk, link, slot)
        held: dict[tuple[Chunk, int], int] = {}  # slot from which a non-switch node holds a chunk
        for chunk, nodes in holders.items():
            for v in nodes:
                held[(chunk, v)] = 0
        passes: dict[tuple[Chunk, int], set[int]] = defaultdict(set)  # chunk at a switch, slots
        feeders = {
            sw: [e for e in topo.in_links[sw] if topo.links[e].src not in bufferless] for sw in bufferless
        }
        # No route needs to start later than this: every hop can wait out all existing sends.
        slack = sum(max(lat[e], 1) + int(instance.occupancy[e]) for e in range(topo.num_links))
        busy = len(schedule.sends) * int(instance.occupancy.max())
        limit = 2 * int(report.makespan_slots or 0) + busy + slack

        def hops(chunk: Chunk, route: list[int], t: int) -> tuple[int, list[tuple[int, int]]]:
            """Arrival slot of ``route`` started at ``t`` and the hops it still needs: a prefix
            that only brings the chunk to a switch it passes in that very slot anyway is dropped
            (a switch receives a chunk at most once per slot)."""
            slot = t
            needed: list[tuple[int, int]] = []
            for e in route:
                needed.append((e, slot))
                slot += lat[e]
                head = topo.links[e].dst
                if head in bufferless and slot in passes[(chunk, head)]:
                    needed = []
            return slot, needed

        def fits(chunk: Chunk, needed: list[tuple[int, int]]) -> bool:
            return all((chunk, e, q) in sends or book.fits(e, q) for e, q in needed)

        def commit(chunk: Chunk, needed: list[tuple[int, int]]) -> None:
            for e, q in needed:
                if (chunk, e, q) not in sends:
                    sends.add((chunk, e, q))
                    book.take(e, q)
                head = topo.links[e].dst
                if head in bufferless:
                    passes[(chunk, head)].add(q + lat[e])
                else:
                    held.setdefault((chunk, head), q + lat[e])

        for chunk, route in _routes(instance, twin, schedule, order):
            last = route[-1]
            v = topo.links[last].dst
            if (chunk, v) in held:
                continue  # already delivered
            best: tuple[int, list[tuple[int, int]]] | None = None  # (arrival, hops)
            sw = topo.links[last].src
            if sw in bufferless and sw not in holders[chunk]:
                # copy: the chunk already passes the last switch in a slot where its hop is free
                for a in sorted(passes[(chunk, sw)]):
                    if fits(chunk, [(last, a)]):
                        best = (a + lat[last], [(last, a)])
                        break
            # fresh: a holder starts the route (any holder feeding its first switch)
            first = route[0]
            head = topo.links[first].dst
            starts = feeders[head] if len(route) > 1 and head in bufferless else [first]
            ready = [
                (e, held[(chunk, topo.links[e].src)]) for e in starts if (chunk, topo.links[e].src) in held
            ]
            if not ready:
                raise ValidationError(
                    f"cut-through re-timing: no holder of chunk {list(chunk)} feeds link {first}"
                )
            rest = sum(lat[e] for e in route[1:])
            quickest = min(lat[e] for e, _ in ready)
            t = min(r for _, r in ready)
            while t <= limit and (best is None or t + quickest + rest < best[0]):
                for e, r in ready:
                    if r <= t:
                        arrive, needed = hops(chunk, [e, *route[1:]], t)
                        if fits(chunk, needed) and (best is None or arrive < best[0]):
                            best = (arrive, needed)
                t += 1
            if best is None:
                raise ValidationError(
                    f"cut-through re-timing found no slot for chunk {list(chunk)} to node {v}"
                )
            commit(chunk, best[1])
        return Schedule(
            tuple(
                Send(slot=t, chunk=chunk, src=topo.links[e].src, dst=topo.links[e].dst)
                for chunk, e, t in sends
            ),
            method=schedule.method,
        )

    best_out: Schedule | None = None
    best_ms: int | None = None
    for order in ORDERS:
        out = place_all(order)
        check = verify(instance, out)
        if not check.ok:
            raise AssertionError(f"cut-through re-timing broke the schedule: {check.violations[0]}")
        if best_ms is None or (check.makespan_slots or 0) < best_ms:
            best_out, best_ms = out, check.makespan_slots
    assert best_out is not None
    log.debug("cut-through re-timing of %s: %s -> %s slots", schedule.method, report.makespan_slots, best_ms)
    return best_out




# --------------------------------------------------------------------------- combining
RETIME_ROUNDS = 40
"""Passes of :func:`retime_combining`'s list scheduling (each raises the start of the units a
pass left before one of their predecessors) before it gives up."""


def _feeding(
    instance: Instance, twin: Instance, sends: list[Send], links: list[int]
) -> list[tuple[int, int]]:
    """``(f, s)`` pairs: send ``f`` into a switch feeds the switch's send ``s`` (the arrivals
    whose partial sums ``s`` carries on the twin: the last copy before ``s`` and the reduces
    after it, or every reduce when no copy came)."""
    into: dict[tuple[int, Chunk], list[tuple[int, int, int]]] = defaultdict(list)
    lat = twin.latency
    bufferless = instance.bufferless
    for i, s in enumerate(sends):
        if s.dst in bufferless:
            into[(s.dst, s.chunk)].append((s.slot + int(lat[links[i]]), int(s.reduce), i))
    for arrivals in into.values():
        arrivals.sort()
    pairs: list[tuple[int, int]] = []
    for i, s in enumerate(sends):
        if s.src not in bufferless:
            continue
        before = [a for a in into[(s.src, s.chunk)] if a[0] <= s.slot]
        fed: list[int] = []
        for _arr, is_reduce, f in reversed(before):
            fed.append(f)
            if not is_reduce:
                break  # a copy replaced whatever the switch held before
        if not fed:
            raise ValidationError(f"{s.describe()}: switch {s.src} sends a chunk it never received")
        pairs.extend((f, i) for f in fed)
    return pairs


def retime_combining(instance: Instance, schedule: Schedule) -> Schedule:
    """The shorter of :func:`_retime_units` with rigid multicasts and with each switch's sends of
    one arrival split by their twin slot (every group fed by its own copy of the GPU's send:
    a multicast needs all its downlinks free in one slot, which a busy phase rarely offers).

    Raises
    ------
    ValidationError
        Neither variant gives a valid schedule (the first reason is given).
    """
    if not instance.bufferless:
        return schedule
    best: tuple[int, Schedule] | None = None
    failure: ValidationError | None = None
    for split in (False, True):
        try:
            out = _retime_units(instance, schedule, split)
        except ValidationError as exc:
            failure = failure or exc
            continue
        ms = verify(instance, out).makespan_slots or 0
        if best is None or ms < best[0]:
            best = (ms, out)
    if best is None:
        assert failure is not None
        raise failure
    return best[1]


def _retime_units(instance: Instance, schedule: Schedule, split: bool) -> Schedule:
    """Rebuild a combining ``schedule`` (valid on the store-and-forward twin of ``instance``)
    for cut-through switches that relay partial sums (docs/model.md, "Cut-through switches").

    Every send out of a switch must leave in the very slot in which what it carries arrives, so
    the sends joined by a switch (an arrival and the switch's sends that carry it; several
    arrivals that a reducing switch combines) form a rigid *unit*, its sends at fixed offsets
    (``L`` of the hop into the switch). At every other node each chunk's events keep the twin's
    order (an arrival before a send stays before it or in its slot; a send before an arrival
    stays strictly before; a reduce before a copy, or two copies, strictly), so every send
    carries the same contributions as on the twin. Units are then placed by list scheduling in
    the twin's order, each at the earliest slot its placed predecessors, ``omega`` (with the
    outages), single-port and the rule "one arrival of a chunk at a switch per slot" allow; a
    unit placed before a predecessor that ended later raises its own earliest slot and the pass
    is repeated (at most :data:`RETIME_ROUNDS` times).

    Raises
    ------
    ValidationError
        ``schedule`` is not valid on the twin, its switch sends cannot be joined into rigid
        units (a multicast whose branches must arrive at different times), or the passes do
        not settle.
    """
    if not instance.bufferless:
        return schedule
    twin = instance.with_switch_model("store-and-forward")
    report = verify(twin, schedule)
    if not report.ok:
        raise ValidationError(f"cut-through re-timing needs a valid schedule: {report.violations[0]}")
    topo = instance.topology
    bufferless = instance.bufferless
    sends = sorted(schedule.sends)
    links = [topo.link_index[(s.src, s.dst)] for s in sends]
    lat = [int(x) for x in instance.latency]
    twin_lat = [int(x) for x in twin.latency]
    pairs = _feeding(instance, twin, sends, links)
    if split:
        # one copy of a GPU's send into a switch per twin slot in which the switch sends it on
        clone: dict[tuple[int, int], int] = {}
        groups: dict[int, set[int]] = defaultdict(set)
        for f, g in pairs:
            groups[f].add(sends[g].slot)
        for f, slots in groups.items():
            if sends[f].src in bufferless or len(slots) < 2:
                continue
            for slot in sorted(slots)[1:]:
                clone[(f, slot)] = len(sends)
                sends.append(sends[f])
                links.append(links[f])
        pairs = [(clone.get((f, sends[g].slot), f), g) for f, g in pairs]

    # 1. units: sends joined through switches, with offsets T(s) = T(f) + L(f)
    adj: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for f, g in pairs:
        adj[f].append((g, lat[links[f]]))
        adj[g].append((f, -lat[links[f]]))
    unit_of = [-1] * len(sends)
    offset = [0] * len(sends)
    units: list[list[int]] = []
    for i in range(len(sends)):
        if unit_of[i] >= 0:
            continue
        unit_of[i] = len(units)
        members = [i]
        stack = [i]
        while stack:
            a = stack.pop()
            for b, d in adj[a]:
                if unit_of[b] < 0:
                    unit_of[b], offset[b] = unit_of[i], offset[a] + d
                    members.append(b)
                    stack.append(b)
                elif offset[b] != offset[a] + d:
                    raise ValidationError(
                        f"{sends[b].describe()}: its inputs through switches cannot arrive together "
                        "under cut-through"
                    )
        low = min(offset[m] for m in members)
        for m in members:
            offset[m] -= low
        units.append(members)

    # 2. precedence at every node that is not a bufferless switch: the twin's order of events
    events: dict[tuple[int, Chunk], list[tuple[int, int, int]]] = defaultdict(list)  # (slot, kind, send)
    for i, s in enumerate(sends):
        if s.dst not in bufferless:
            events[(s.dst, s.chunk)].append((s.slot + twin_lat[links[i]], int(s.reduce), i))
        if s.src not in bufferless:
            events[(s.src, s.chunk)].append((s.slot, 2, i))
    preds: list[list[tuple[int, int]]] = [[] for _ in units]  # (unit before, min distance)

    def at(kind: int, i: int) -> int:
        """Offset in its unit of an event: a send's slot or an arrival's slot."""
        return offset[i] + (lat[links[i]] if kind < 2 else 0)

    for seq in events.values():
        seq.sort()
        for (t1, k1, i1), (t2, k2, i2) in pairwise(seq):
            strict = int(
                (k1 == 2 and k2 < 2) or (k1 == 1 and k2 == 0) or (k1 == 0 and k2 == 0 and t1 < t2)
            )
            u1, u2 = unit_of[i1], unit_of[i2]
            gap = at(k1, i1) - at(k2, i2) + strict
            if u1 == u2:
                if gap > 0:
                    raise ValidationError(
                        f"{sends[i2].describe()}: under cut-through it would overtake "
                        f"{sends[i1].describe()} at node {sends[i2].src if k2 == 2 else sends[i2].dst}"
                    )
                continue
            preds[u2].append((u1, gap))

    # 3. list scheduling in the twin's order, repeated until every precedence holds
    order = sorted(range(len(units)), key=lambda u: min(sends[i].slot for i in units[u]))
    occ = [int(x) for x in instance.occupancy]
    limit = 4 * (int(report.makespan_slots or 0) + 1) + sum(occ[e] + lat[e] for e in links)
    earliest = [0] * len(units)
    start = [0] * len(units)
    for _round in range(RETIME_ROUNDS):
        book = _Book(instance)
        passing: set[tuple[int, Chunk, int]] = set()
        placed = [False] * len(units)
        for u in order:
            t = max([earliest[u]] + [start[p] + w for p, w in preds[u] if placed[p]])
            while True:
                if t > limit:
                    raise ValidationError("cut-through re-timing found no slot for a relay of partial sums")
                hits = {(sends[i].dst, sends[i].chunk, t + offset[i] + lat[links[i]])
                        for i in units[u] if sends[i].dst in bufferless}
                if not (hits & passing) and all(book.fits(links[i], t + offset[i]) for i in units[u]):
                    break
                t += 1
            for i in units[u]:
                book.take(links[i], t + offset[i])
            passing |= hits
            start[u] = t
            placed[u] = True
        late = False
        for u in range(len(units)):
            need = max([start[p] + w for p, w in preds[u]], default=0)
            if start[u] < need:
                earliest[u] = max(earliest[u], need)
                late = True
        if not late:
            break
    else:
        raise ValidationError(
            f"cut-through re-timing of the partial sums did not settle in {RETIME_ROUNDS} passes"
        )
    out = Schedule(
        tuple(
            Send(slot=start[unit_of[i]] + offset[i], chunk=s.chunk, src=s.src, dst=s.dst, reduce=s.reduce)
            for i, s in enumerate(sends)
        ),
        method=schedule.method,
    )
    check = verify(instance, out)
    if not check.ok:
        raise ValidationError(f"cut-through re-timing broke the partial sums: {check.violations[0]}")
    log.debug(
        "cut-through re-timing of %s: %s -> %s slots",
        schedule.method, report.makespan_slots, check.makespan_slots,
    )
    return out
