"""The :class:`Placer`: earliest-fit placement of logical transfers on the slotted links.

Every baseline algorithm of :mod:`ccplan.heuristics.baselines` (and the trees of
:mod:`ccplan.heuristics.multitree`) is a logical pattern placed hop by hop by this class:
shortest paths, the earliest slot with free capacity over the whole occupancy window
(``omega``, outages, single-port), copies of finished chunks and partial sums of combining
collectives (relay rules in the package docstring), and the replay that turns the placed hops
into copies and receive-and-reduce sends. It also owns the running engine's deadline, checked
once per hop.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from itertools import pairwise
from typing import Any

from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology
from ccplan.limits import NEVER, Deadline
from ccplan.schedule.core import Schedule, Send

_DEADLINE: ContextVar[Deadline] = ContextVar("ccplan_baseline_deadline", default=NEVER)
"""The running baseline engine's deadline (set by its registered engine, read per hop)."""

_DETAILS: ContextVar[dict[str, Any] | None] = ContextVar("ccplan_baseline_details", default=None)
"""The running baseline engine's details (set by its registered engine; a builder adds what it
chose, e.g. the ring channels)."""

HOP_KINDS: tuple[str, ...] = ("full", "partial", "exchange")


# ====================================================================== the placer
class Placer:
    """Earliest-fit placement of transfers on the slotted links of an instance.

    Parameters
    ----------
    instance : Instance
        Its occupancy, latency, capacity (``omega`` with outages) and ``single_port`` are
        respected by every hop placed.
    """

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.topo: Topology = instance.topology
        self.occ = [int(x) for x in instance.occupancy]
        self.lat = [int(x) for x in instance.latency]
        self.load: list[dict[int, int]] = [defaultdict(int) for _ in self.topo.links]
        self._skip: list[dict[int, int]] = [{} for _ in self.topo.links]
        self.sport: dict[int, set[int]] = defaultdict(set)
        self.rport: dict[int, set[int]] = defaultdict(set)
        self.hops: list[tuple[int, Chunk, int, int, int, str]] = []
        """Placed hops ``(slot, chunk, src, dst, link, kind)``, kind in :data:`HOP_KINDS`."""
        self.hold: dict[tuple[Chunk, int], int] = {}
        """(chunk, node) -> slot from which the node holds the finished chunk."""
        self.busy: dict[tuple[Chunk, int], list[tuple[int, int]]] = defaultdict(list)
        # combining collectives: the slot from which a switch holds the finished chunk (kept
        # apart from hold, so no route takes a switch as a holder unless it starts there)
        self.switch_full: dict[tuple[Chunk, int], int] = {}
        """(chunk, switch) -> [arrival, forward] intervals of partial sums in transit."""
        self._paths: dict[tuple[int, int, bool], list[int] | None] = {}
        self._sink_paths: dict[tuple[int, int, int | None], list[int] | None] = {}
        coll = instance.collective
        if not coll.combining:
            for c, nodes in coll.holders.items():
                for v in nodes:
                    self.hold[(c, v)] = 0
        else:
            for c, nodes in coll.holders.items():
                if len(nodes) == 1:
                    self.hold[(c, next(iter(nodes)))] = 0

    # ----------------------------------------------------------------- resources
    def _full(self, link: int, s: int) -> bool:
        return self.load[link].get(s, 0) >= self.instance.omega(link, s)

    def _next_open(self, link: int, s: int) -> int:
        """First slot ``>= s`` with spare capacity on ``link`` (path-compressed skip list)."""
        skip = self._skip[link]
        trail = []
        while self._full(link, s):
            trail.append(s)
            s = skip.get(s, s + 1)
        for x in trail:
            skip[x] = s
        return s

    def _blocked(self, link: int, t: int, src: int, dst: int) -> int:
        """-1 if ``link`` can take a chunk in slots ``t .. t+l-1``, else a blocked slot."""
        for s in range(t, t + self.occ[link]):
            if self._full(link, s):
                return s
            if self.instance.single_port and (s in self.sport[src] or s in self.rport[dst]):
                return s
        return -1

    def earliest(self, link: int, t0: int) -> int:
        """First slot ``t >= t0`` at which ``link`` can take one more chunk for ``l`` slots."""
        src, dst = self.topo.links[link].key
        t = self._next_open(link, max(0, t0))
        while True:
            s = self._blocked(link, t, src, dst)
            if s < 0:
                return t
            # Every window containing a blocked slot fails: restart after it.
            t = self._next_open(link, s + 1)

    def _book(self, link: int, t: int, chunk: Chunk, kind: str) -> int:
        _DEADLINE.get().check()  # once per hop placed: the engine's --time-limit
        src, dst = self.topo.links[link].key
        for s in range(t, t + self.occ[link]):
            self.load[link][s] += 1
            if self.instance.single_port:
                self.sport[src].add(s)
                self.rport[dst].add(s)
        self.hops.append((t, chunk, src, dst, link, kind))
        return t + self.lat[link]

    # ----------------------------------------------------------------- paths
    def _dijkstra(self, u: int, v: int, relay: Callable[[int], bool]) -> list[int] | None:
        dist = {u: 0}
        prev: dict[int, int] = {}
        heap = [(0, u)]
        while heap:
            d, a = heapq.heappop(heap)
            if a == v:
                path = [v]
                while path[-1] != u:
                    path.append(prev[path[-1]])
                return path[::-1]
            if d > dist.get(a, math.inf) or (a != u and not relay(a)):
                continue
            for li in self.topo.out_links[a]:
                b = self.topo.links[li].dst
                nd = d + self.lat[li]
                if nd < dist.get(b, math.inf):
                    dist[b] = nd
                    prev[b] = a
                    heapq.heappush(heap, (nd, b))
        return None

    def path(self, u: int, v: int, *, switches_only: bool = False) -> list[int] | None:
        """Shortest path ``u -> v`` (weights ``L``); relays are any node, or switches only."""
        key = (u, v, switches_only)
        if key not in self._paths:
            kind = self.topo.kind
            def relay(a: int) -> bool:
                return not switches_only or kind[a] == "switch"

            self._paths[key] = self._dijkstra(u, v, relay)
        return self._paths[key]

    def _link(self, a: int, b: int) -> int:
        return self.topo.link_index[(a, b)]

    # ----------------------------------------------------------------- transfers
    def copy(self, chunk: Chunk, u: int, v: int, ready: int = 0, path: Sequence[int] | None = None) -> int:
        """Move the finished ``chunk`` from ``u`` to ``v``; returns the slot ``v`` holds it from.

        ``path`` forces the route (default: a shortest path). Nodes on the path that already
        hold the chunk are not sent it again.
        """
        if (chunk, v) in self.hold:
            return self.hold[(chunk, v)]
        held = self.hold.get((chunk, u), self.switch_full.get((chunk, u)))
        if held is None:
            raise ValidationError(f"internal: node {u} does not hold chunk {list(chunk)} for a copy")
        if path is None:
            path = self.path(u, v)
        if path is None:
            raise ValidationError(f"topology {self.topo.name!r} has no path {u}->{v}")
        t = max(ready, held)
        if self.instance.collective.combining:
            return self._copy_past_partials(chunk, path, t)
        for a, b in pairwise(path):
            if (chunk, b) in self.hold:
                t = max(t, self.hold[(chunk, b)])
                continue
            link = self._link(a, b)
            arrival = self._book(link, self.earliest(link, t), chunk, "full")
            self.hold[(chunk, b)] = arrival
            t = arrival
        return t

    def _copy_past_partials(self, chunk: Chunk, path: Sequence[int], t: int) -> int:
        """:meth:`copy` of a combining collective's finished ``chunk``. A switch keeps one
        buffer per chunk, so the copy must not pass a switch while a partial sum of the chunk
        rests there (the copy would overwrite it and the partial sum's contributions would be
        lost), nor may a partial sum come while the copy rests there: the copy waits like
        :meth:`reduce_to` and its intervals at switches join :attr:`busy`. A switch is never
        taken as a holder of the finished chunk (a partial sum may pass it later); a GPU on
        the path that holds it sends it on."""
        kind = self.topo.kind
        at_gpus = [i for i, a in enumerate(path[:-1]) if kind[a] != "switch" and (chunk, a) in self.hold]
        # no GPU on the path holds it: the route starts at a switch that does (a tree edge out
        # of a switch, multitree's broadcast phase)
        path = path[max(at_gpus):] if at_gpus else path
        t0 = max(t, self.hold.get((chunk, path[0]), self.switch_full.get((chunk, path[0]), t)))
        while True:
            plan = self._plan(path, t0)
            intervals = self._intervals(chunk, path, plan)
            wait = self._switch_clash(chunk, intervals)
            if wait == 0:
                break
            t0 = plan[0][1] + wait
        for sw, arrive, leave in intervals:
            self.busy[(chunk, sw)].append((arrive, leave))
        arrival = t0
        for (link, s), b in zip(plan, path[1:], strict=True):
            arrival = self._book(link, s, chunk, "full")
            if kind[b] != "switch":
                self.hold[(chunk, b)] = arrival
            else:
                self.switch_full.setdefault((chunk, b), arrival)
        return arrival

    def _partial_path(self, chunk: Chunk, u: int, v: int, sink: int | None, exchange: bool) -> list[int]:
        kind = self.topo.kind
        if exchange:
            path = self.path(u, v, switches_only=True)
        else:
            # Any relay but the sink: content resting at the sink would be moved away again.
            key = (u, v, sink)
            if key not in self._sink_paths:
                self._sink_paths[key] = self._dijkstra(u, v, lambda a: a != sink)
            path = self._sink_paths[key]
            if path is None:
                # Every route passes the sink (a line, say): let the partial sum pass through it;
                # the verifier decides whether the flow still converges.
                path = self.path(u, v)
        if path is None:
            need = "direct links or switches only" if exchange else f"relays other than {sink}"
            raise ValidationError(
                f"no route for a partial sum of chunk {list(chunk)} from {u} to {v} through {need} "
                f"on topology {self.topo.name!r}"
            )
        del kind
        return path

    def _plan(self, path: Sequence[int], t0: int) -> list[tuple[int, int]]:
        plan = []
        t = t0
        for a, b in pairwise(path):
            link = self._link(a, b)
            s = self.earliest(link, t)
            plan.append((link, s))
            t = s + self.lat[link]
        return plan

    def _intervals(
        self, chunk: Chunk, path: Sequence[int], plan: Sequence[tuple[int, int]]
    ) -> list[tuple[int, int, int]]:
        """``(switch, arrival, forward)`` of a planned partial sum at every switch on the path."""
        out = []
        for k in range(1, len(path) - 1):
            if self.topo.kind[path[k]] == "switch":
                arrive = plan[k - 1][1] + self.lat[plan[k - 1][0]]
                out.append((path[k], arrive, plan[k][1]))
        return out

    def _switch_clash(self, chunk: Chunk, planned: Iterable[tuple[int, int, int]],
                      extra: Iterable[tuple[int, int, int]] = ()) -> int:
        """0 when no switch would hold two partial sums of ``chunk`` at once (which would make
        it reduce in the network); else the slots to wait."""
        wait = 0
        others = list(extra)
        for sw, arrive, leave in planned:
            intervals = list(self.busy[(chunk, sw)]) + [(lo, hi) for x, lo, hi in others if x == sw]
            for lo, hi in intervals:
                if not (arrive > hi or leave < lo):
                    wait = max(wait, hi + 1 - arrive)
        return wait

    def _place_partial(
        self, chunk: Chunk, path: Sequence[int], plan: Sequence[tuple[int, int]], kind: str
    ) -> int:
        for sw, arrive, leave in self._intervals(chunk, path, plan):
            self.busy[(chunk, sw)].append((arrive, leave))
        arrival = 0
        for k, (link, s) in enumerate(plan):
            # Only the origin of an exchange keeps its buffer; relays pass the sum on.
            arrival = self._book(link, s, chunk, kind if k == 0 else "partial")
        return arrival

    def reduce_to(
        self,
        chunk: Chunk,
        u: int,
        v: int,
        ready: int = 0,
        sink: int | None = None,
        switches_only: bool = False,
        path: Sequence[int] | None = None,
    ) -> int:
        """Move ``u``'s partial sum of ``chunk`` to ``v``, which reduces it into its own.

        ``ready`` is the slot from which ``u``'s partial sum is complete; ``sink`` is the node
        where the chunk's reduction ends (never used as a relay); ``switches_only`` forbids GPU
        relays; ``path`` forces the route. Returns the arrival slot.
        """
        if path is None:
            path = self._partial_path(chunk, u, v, sink, exchange=switches_only)
        t0 = ready
        while True:
            plan = self._plan(path, t0)
            wait = self._switch_clash(chunk, self._intervals(chunk, path, plan))
            if wait == 0:
                return self._place_partial(chunk, path, plan, "partial")
            t0 = plan[0][1] + wait

    def exchange(self, chunk: Chunk, u: int, v: int, ready_u: int, ready_v: int) -> tuple[int, int]:
        """Simultaneous exchange of partial sums between ``u`` and ``v`` (both reduce, both keep).

        Each side must read its buffer before the other's partial sum lands, so both first
        hops are placed before both arrivals; relays may only be switches. Returns the arrival
        slots at ``v`` and at ``u``.
        """
        pu = self._partial_path(chunk, u, v, None, exchange=True)
        pv = self._partial_path(chunk, v, u, None, exchange=True)
        t0 = max(ready_u, ready_v)
        for _ in range(100_000):
            plan_u = self._plan(pu, max(t0, ready_u))
            iu = self._intervals(chunk, pu, plan_u)
            if self._switch_clash(chunk, iu):
                t0 += 1
                continue
            first_u = plan_u[0][1]
            arr_v = plan_u[-1][1] + self.lat[plan_u[-1][0]]
            # v must read its buffer before u's partial sum lands: first_v < arr_v. Through a
            # shared switch the two transits are serialised (one buffer per chunk).
            tv = max(t0, ready_v)
            while tv < arr_v:
                plan_v = self._plan(pv, tv)
                first_v = plan_v[0][1]
                if first_v >= arr_v:
                    break
                arr_u = plan_v[-1][1] + self.lat[plan_v[-1][0]]
                iv = self._intervals(chunk, pv, plan_v)
                wait = self._switch_clash(chunk, iv, iu)
                if wait == 0 and first_u < arr_u:
                    self._place_partial(chunk, pu, plan_u, "exchange")
                    self._place_partial(chunk, pv, plan_v, "exchange")
                    return arr_v, arr_u
                tv = max(tv + 1, first_v + max(wait, 1) if wait else tv + 1)
            t0 += 1
        raise ValidationError(
            f"internal: no slot found for the exchange of chunk {list(chunk)} between {u} and {v}"
        )

    def mark_full(self, chunk: Chunk, node: int, slot: int) -> None:
        """Record that ``node`` holds the finished reduction of ``chunk`` from ``slot``."""
        self.hold[(chunk, node)] = slot

    def schedule(self, method: str) -> Schedule:
        """Replay the placed hops and turn them into sends (see :meth:`replay`)."""
        return Schedule(tuple(self.replay()), method=method)

    def replay(self) -> list[Send]:
        """Decide copy or receive-and-reduce for every hop, dropping hops that carry nothing.

        Partial sums *move*: a "partial" hop carries its sender's live buffer and leaves it dead
        (an "exchange" hop leaves it live); a hop into a live buffer reduces, into a dead or
        empty one it is a copy. A partial hop from a dead or empty buffer would carry data that
        already moved on, so it is dropped (with it, the rest of that transfer). A relay may
        therefore merge its own partial sum into a passing one; every flow of a chunk leads to
        its sink, so each contribution still arrives there exactly once. "full" hops copy the
        finished reduction. A hop that brings the finished sum to a node that had it already
        (a partial sum routed through its sink) is dropped: nodes keep what they received.
        The result is the same replay :mod:`ccplan.schedule.combining` performs, which checks
        it.
        """
        coll = self.instance.collective
        if not coll.combining:
            return [Send(slot=t, chunk=c, src=a, dst=b) for t, c, a, b, _, _ in self.hops]
        members = {c: sorted(h) for c, h in coll.holders.items()}
        bit = {c: {v: 1 << i for i, v in enumerate(m)} for c, m in members.items()}
        full = {c: (1 << len(m)) - 1 for c, m in members.items()}
        state: dict[tuple[int, Chunk], int] = {}
        live: dict[tuple[int, Chunk], bool] = {}
        for c, m in members.items():
            for v in m:
                state[(v, c)] = bit[c][v]
                live[(v, c)] = True
        by_slot: dict[int, list[tuple[int, Chunk, int, int, int, str]]] = defaultdict(list)
        for hop in self.hops:
            by_slot[hop[0]].append(hop)
        pending: dict[int, list[tuple[tuple[int, Chunk, int, int, int, str], int]]] = defaultdict(list)
        out: list[Send] = []

        def land(items: list[tuple[tuple[int, Chunk, int, int, int, str], int]]) -> None:
            for hop, payload in sorted(items, key=lambda x: (x[0][5] != "full", x[0][:4])):
                t, c, a, b, _, kind = hop
                key = (b, c)
                if kind == "full":
                    if state.get(key, 0) != payload:
                        # A node that already ends up with the finished sum (the flow passed
                        # through it) is not sent it again.
                        state[key] = payload
                        live[key] = False
                        out.append(Send(slot=t, chunk=c, src=a, dst=b, reduce=False))
                elif payload == full[c] and state.get(key, 0) == full[c]:
                    # The finished sum coming back to a node that had it (a partial sum routed
                    # through its sink when every route passes there): in the verifier a node
                    # keeps what it received, so the send would be a duplicate receive. The
                    # node takes the sum up again for the hops that carry it on.
                    live[key] = True
                elif live.get(key, False) and state.get(key, 0):
                    state[key] |= payload
                    out.append(Send(slot=t, chunk=c, src=a, dst=b, reduce=True))
                else:
                    state[key] = payload
                    live[key] = True
                    out.append(Send(slot=t, chunk=c, src=a, dst=b, reduce=False))

        for t in sorted(set(by_slot) | set(pending)):
            for s in sorted(x for x in pending if x <= t):
                land(pending.pop(s))
            moved: set[tuple[int, Chunk]] = set()
            for hop in sorted(by_slot.get(t, ()), key=lambda h: h[1:4]):
                _, c, a, _, link, kind = hop
                key = (a, c)
                payload = state.get(key, 0)
                if kind == "full":
                    pending[t + self.lat[link]].append((hop, payload))
                    continue
                if not payload or key in moved or (kind == "partial" and not live.get(key, False)):
                    continue
                if kind == "partial":
                    moved.add(key)
                pending[t + self.lat[link]].append((hop, payload))
            for key in moved:
                live[key] = False
        for s in sorted(pending):
            land(pending.pop(s))
        return out

