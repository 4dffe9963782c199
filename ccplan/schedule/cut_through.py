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

The output is therefore always valid under cut-through. It exploits cut-through where the
semantics allow (a GPU-switch-GPU relay costs one transfer instead of two, and a chunk that
passes a switch is copied to several GPUs in the same slot) but keeps each heuristic's routing
and delivery order; it is not an optimiser, and the exact engine may do better.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

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
        Valid for ``instance.with_switch_model("store-and-forward")``.

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


