r"""The classic collective algorithms users compare against, as slotted schedules.

Each algorithm is a *logical* pattern (who sends what to whom, in which order) from
``001_*.txt`` (binomial broadcast/reduce), ``003_*.txt`` (ring, tree, recursive
halving-doubling, hierarchical) and NCCL (double binary tree). It is mapped onto the physical
topology by :class:`Placer`:

- a logical transfer ``u -> v`` follows a shortest path (link weight ``L``); intermediate nodes
  may be switches, and GPUs as well where the canonical semantics allow it (see below);
- each hop is placed at the earliest slot at which the sender holds the data and the link has
  free capacity over its whole occupancy window (``omega``, outages, single-port), so logical
  steps overlap as far as the links allow and links shared by several logical transfers are
  shared honestly;
- data-movement hops are copies; the partial sums of the combining phases (ReduceScatter,
  Reduce, the first half of AllReduce) are copies into relays and a receive-and-reduce
  (``Send.reduce``) at the logical receiver.

Relays. A node holds one buffer per chunk (canonical semantics). A finished chunk can be
relayed by any node (it keeps a copy; a GPU that later needs it does not receive it twice).
A *partial sum* may only be relayed by a switch or by a GPU that has already passed on its own
partial sum of that chunk (its buffer is dead, :mod:`ccplan.schedule.combining`), and two
partial sums of the same chunk never overlap in one relay. When no such route exists the
algorithm raises :class:`~ccplan.errors.ValidationError` naming the pair.

Closed-form alpha-beta costs (Hockney model, ``003_*.txt`` and
``reference/msccl_and_peers.md`` section 4.1) are given next to each algorithm; ``alpha`` is
the per-message latency (µs), ``beta`` the time per byte (µs/B), ``size`` the TE-CCL buffer
size (bytes) and ``n`` the number of GPUs.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from itertools import pairwise

from ccplan.contract import Outcome, SolveOptions, register
from ccplan.errors import ValidationError
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology
from ccplan.limits import NEVER, Deadline, OutOfTimeError
from ccplan.schedule.core import Schedule, Send

_DEADLINE: ContextVar[Deadline] = ContextVar("ccplan_baseline_deadline", default=NEVER)
"""The running baseline engine's deadline (set by its registered engine, read per hop)."""

log = logging.getLogger(__name__)

_RING_SEARCH_BUDGET = 50_000

HOP_KINDS: tuple[str, ...] = ("full", "partial", "exchange")


# ====================================================================== closed-form costs
def ring_allgather_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Ring AllGather: ``(n-1)`` steps, each one message of ``size/n`` bytes per link.

    ``T = (n-1) (alpha + size/n * beta)`` (``003_*.txt``, ring row halved; msccl_and_peers §4.1).
    """
    return (n - 1) * (alpha + size / n * beta)


def ring_reducescatter_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Ring ReduceScatter: the time-reverse of ring AllGather, same cost (reduction free)."""
    return ring_allgather_cost(n, size, alpha, beta)


def ring_allreduce_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Ring AllReduce = ReduceScatter + AllGather: ``2(n-1)(alpha + size/n * beta)``
    (``003_*.txt``: ``2(N-1) alpha + 2 M (N-1)/N beta``)."""
    return 2 * ring_allgather_cost(n, size, alpha, beta)


def chain_broadcast_cost(n: int, size: float, alpha: float, beta: float, pieces: int = 1) -> float:
    """Pipelined chain broadcast in ``k = pieces``: ``(n-2+k)(alpha + size/k * beta)``."""
    if n <= 1:
        return 0.0
    return (n - 2 + pieces) * (alpha + size / pieces * beta)


def binomial_broadcast_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Binomial-tree broadcast, one port per node: ``ceil(log2 n)`` rounds of one full message,
    ``T = ceil(log2 n) (alpha + size * beta)`` (``001_*.txt``, Broadcast)."""
    return _ceil_log2(n) * (alpha + size * beta)


def binomial_reduce_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Binomial-tree reduce: the mirror of the broadcast, same cost (``001_*.txt``, Reduce)."""
    return binomial_broadcast_cost(n, size, alpha, beta)


def tree_allreduce_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Reduce then broadcast on a binomial tree, unpipelined: ``2 ceil(log2 n)(alpha + size beta)``
    (``001_*.txt``, AllReduce; ``003_*.txt`` gives the pipelined ``2 log N alpha + 2 M beta``)."""
    return 2 * binomial_broadcast_cost(n, size, alpha, beta)


def double_binary_tree_allreduce_cost(
    n: int, size: float, alpha: float, beta: float, pieces: int = 1
) -> float:
    """Double binary tree AllReduce (NCCL), each tree carrying ``size/2`` in ``pieces`` pieces.

    A binary tree of depth ``d = floor(log2 n)`` pipelines ``k`` pieces up in ``d + k - 1``
    message times when an interior node receives from its two children on different links;
    the broadcast back down is the same. With each tree carrying half the data and the two trees
    on disjoint interior nodes: ``T ~= 2 (d + k - 1)(alpha + size/(2k) beta)``, which tends to
    ``2 log2 n alpha + size beta`` per tree-direction pair for large ``k`` (``reference`` §4.1).
    """
    if n <= 1:
        return 0.0
    d = max(1, math.floor(math.log2(n)))
    return 2 * (d + pieces - 1) * (alpha + size / (2 * pieces) * beta)


def recursive_doubling_allgather_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Recursive doubling AllGather.

    ``n = 2^m``: round ``k`` exchanges ``2^k`` blocks of ``size/n``, so
    ``T = m alpha + (n-1)/n size beta`` (Thakur et al.; ``001_*.txt`` AllGather, hypercube).
    Otherwise the ``r = n - 2^m`` extra GPUs first hand their block to a partner
    (``alpha + size/n beta``), the ``2^m`` core GPUs double with up to two blocks per original
    core GPU (round ``k`` at most ``2^(k+1)`` blocks), and the partners hand back what the
    extras lack (``alpha + (n-1)/n size beta``); the value returned is then this upper bound.
    """
    if n <= 1:
        return 0.0
    m = math.floor(math.log2(n))
    core = 1 << m
    if core == n:
        return m * alpha + (n - 1) / n * size * beta
    rounds = sum(alpha + (2 << k) * size / n * beta for k in range(m))
    return (alpha + size / n * beta) + rounds + (alpha + (n - 1) / n * size * beta)


def recursive_halving_doubling_allreduce_cost(n: int, size: float, alpha: float, beta: float) -> float:
    """Rabenseifner AllReduce: recursive halving ReduceScatter + recursive doubling AllGather.

    Power of two: ``2 log2 n alpha + 2 (n-1)/n size beta`` (``003_*.txt`` lists
    ``log N alpha + 2 M beta``; the standard count has one message per round in each half).
    Otherwise the ``r = n - 2^m`` extra GPUs first send their whole vector to a partner and get
    the result back at the end: add ``2 (alpha + size beta)`` and use ``2^m`` in the formula.
    """
    if n <= 1:
        return 0.0
    m = math.floor(math.log2(n))
    core = 1 << m
    t = 2 * m * alpha + 2 * (core - 1) / core * size * beta
    if core != n:
        t += 2 * (alpha + size * beta)
    return t


def hierarchical_allreduce_cost(
    groups: int, per_group: int, size: float, alpha_intra: float, beta_intra: float,
    alpha_inter: float, beta_inter: float,
) -> float:
    """2D hierarchical AllReduce: intra ring ReduceScatter, inter ring AllReduce of ``1/g`` of the
    buffer on every rail, intra ring AllGather:
    ``2 (g-1)(a_i + size/g b_i) + 2 (G-1)(a_o + size/(g G) b_o)`` (``003_*.txt``, layered)."""
    g, big = per_group, groups
    return 2 * (g - 1) * (alpha_intra + size / g * beta_intra) + 2 * (big - 1) * (
        alpha_inter + size / (g * big) * beta_inter
    )


def _ceil_log2(n: int) -> int:
    return 0 if n <= 1 else math.ceil(math.log2(n) - 1e-12)


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
        finished reduction. The result is the same replay :mod:`ccplan.schedule.combining`
        performs, which checks it.
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
        del full
        return out


# ====================================================================== orders and groups
def _gpu_graph(topo: Topology) -> dict[int, dict[int, float]]:
    """GPU -> {GPU: bottleneck GB/s} for direct links and routes through switches only."""
    adj: dict[int, dict[int, float]] = {g: {} for g in topo.gpus}
    for g in topo.gpus:
        stack = [(g, math.inf)]
        seen = {g}
        while stack:
            a, bw = stack.pop()
            for li in topo.out_links[a]:
                link = topo.links[li]
                b, nbw = link.dst, min(bw, link.bandwidth_GBps)
                if b in seen:
                    continue
                if topo.kind[b] == "gpu":
                    adj[g][b] = max(adj[g].get(b, 0.0), nbw)
                else:
                    seen.add(b)
                    stack.append((b, nbw))
    return adj


def ring_order(topo: Topology, gpus: Sequence[int] | None = None) -> list[int]:
    """A directed Hamiltonian cycle over ``gpus`` using direct links or switch-only routes.

    Depth-first search with Warnsdorff's rule (fewest onward choices first, then the widest
    link), bounded to a fixed number of expansions; falls back to id order (then logical
    neighbours are routed over shortest paths).
    """
    members = list(gpus if gpus is not None else topo.gpus)
    if len(members) <= 2:
        return members
    allowed = set(members)
    full = _gpu_graph(topo)
    adj = {g: {h: bw for h, bw in full[g].items() if h in allowed} for g in members}
    start = members[0]
    budget = [_RING_SEARCH_BUDGET]
    path = [start]
    used = {start}

    def onward(h: int) -> int:
        return sum(1 for x in adj[h] if x not in used)

    # An explicit stack of candidate iterators, one per node on the path, not recursion:
    # a ring over thousands of GPUs is as deep as it is long.
    frames: list[Iterator[int]] = []

    def enter() -> bool | None:
        """True: the path closes a ring; False: dead end (or budget spent); None: expanded."""
        if len(path) == len(members):
            return start in adj[path[-1]]
        budget[0] -= 1
        if budget[0] < 0:
            return False
        cur = path[-1]
        cands = [h for h in adj[cur] if h not in used]
        cands.sort(key=lambda h: (onward(h), -adj[cur][h], h))
        frames.append(iter(cands))
        return None

    found = enter()
    while found is None and frames:
        h = next(frames[-1], None)
        if h is None:  # every choice after path[-1] failed: step back
            frames.pop()
            if frames:
                used.discard(path.pop())
            continue
        path.append(h)
        used.add(h)
        step = enter()
        if step is True:
            found = True
        elif step is False:
            path.pop()
            used.discard(h)
    if found:
        return path
    log.info("no Hamiltonian ring found on %s; using id order with routed hops", topo.name)
    return members


def infer_groups(topo: Topology) -> list[list[int]]:
    """Chassis-like GPU groups: components left after removing the slowest link class.

    Accepted only when it gives at least two groups of equal size >= 2; otherwise one group.
    Pass ``options.extra["groups"]`` to override.
    """
    bws = sorted({lk.bandwidth_GBps for lk in topo.links})
    if len(bws) < 2:
        return [list(topo.gpus)]
    slow = bws[0]
    parent = {n: n for n in topo.node_ids}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for lk in topo.links:
        if lk.bandwidth_GBps > slow:
            parent[find(lk.src)] = find(lk.dst)
    comps: dict[int, list[int]] = defaultdict(list)
    for g in topo.gpus:
        comps[find(g)].append(g)
    groups = sorted(comps.values(), key=lambda g: g[0])
    sizes = {len(g) for g in groups}
    if len(groups) >= 2 and len(sizes) == 1 and min(sizes) >= 2:
        return groups
    return [list(topo.gpus)]


def _groups_from(instance: Instance, options: SolveOptions) -> list[list[int]]:
    raw = options.extra.get("groups") if options.extra else None
    if raw is None:
        return infer_groups(instance.topology)
    gpus = set(instance.topology.gpus)
    groups = [[int(g) for g in grp] for grp in raw]
    flat = [g for grp in groups for g in grp]
    if sorted(flat) != sorted(gpus):
        raise ValidationError(f"extra.groups must partition the GPUs {sorted(gpus)}, got {raw!r}")
    if len({len(g) for g in groups}) != 1:
        raise ValidationError(f"extra.groups must have equal sizes, got sizes {[len(g) for g in groups]}")
    return groups


# ====================================================================== chunk helpers
def _chunks_of(instance: Instance) -> dict[int, list[Chunk]]:
    """Chunk label (source / owner) -> its chunks, sorted."""
    out: dict[int, list[Chunk]] = defaultdict(list)
    for c in instance.collective.chunk_ids:
        out[c[0]].append(c)
    return out


# ====================================================================== ring
def _ring_rs(
    p: Placer,
    ring: Sequence[int],
    owned: Mapping[int, Sequence[Chunk]],
    ready: dict[tuple[Chunk, int], int] | None = None,
    mark: bool = True,
) -> dict[tuple[Chunk, int], int]:
    """Ring ReduceScatter: the chunks owned by ``ring[q]`` start at ``ring[q+1]`` and are
    reduced along the ring, ending at the owner after ``n-1`` hops.

    ``ready[(chunk, node)]`` is the slot from which the node's partial sum is complete (0 for
    the precondition); it is updated in place and returned. ``mark`` records the owners as
    holding the finished reduction.
    """
    n = len(ring)
    pos = {g: i for i, g in enumerate(ring)}
    if ready is None:
        ready = defaultdict(int)
    for step in range(n - 1):
        for owner, chunks in owned.items():
            q = pos[owner]
            a, b = ring[(q + 1 + step) % n], ring[(q + 2 + step) % n]
            for c in chunks:
                arr = p.reduce_to(c, a, b, ready.get((c, a), 0), sink=owner)
                ready[(c, b)] = max(ready.get((c, b), 0), arr)
    if mark:
        for owner, chunks in owned.items():
            for c in chunks:
                p.mark_full(c, owner, ready.get((c, owner), 0))
    return ready


def _ring_ag(p: Placer, ring: Sequence[int], sources: Mapping[int, Sequence[Chunk]]) -> None:
    """Ring AllGather: the chunks of ``ring[q]`` travel ``q -> q+1 -> ...`` for ``n-1`` hops."""
    n = len(ring)
    pos = {g: i for i, g in enumerate(ring)}
    for step in range(n - 1):
        for src, chunks in sources.items():
            q = pos[src]
            a, b = ring[(q + step) % n], ring[(q + step + 1) % n]
            for c in chunks:
                p.copy(c, a, b)


def _rotate(order: Sequence[int], first: int) -> list[int]:
    k = list(order).index(first)
    return list(order[k:]) + list(order[:k])


def ring_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Ring (chain for rooted collectives) on a Hamiltonian cycle of the topology.

    AllGather / ReduceScatter: ``n-1`` steps; AllReduce: ReduceScatter then AllGather,
    ``2(n-1)`` steps; Broadcast / Reduce: pipelined chain from / to the root.
    """
    coll = instance.collective
    ring = options.extra.get("ring") if options.extra else None
    order = [int(g) for g in ring] if ring is not None else ring_order(instance.topology)
    p = Placer(instance)
    kind = coll.kind
    by_label = _chunks_of(instance)
    if kind == "allgather":
        _ring_ag(p, order, by_label)
    elif kind == "reducescatter":
        _ring_rs(p, order, by_label)
    elif kind == "allreduce":
        _ring_rs(p, order, by_label)
        _ring_ag(p, order, by_label)
    elif kind == "broadcast":
        assert coll.root is not None
        chain = _rotate(order, coll.root)
        for c in by_label[coll.root]:
            for a, b in pairwise(chain):
                p.copy(c, a, b)
    elif kind == "reduce":
        assert coll.root is not None
        chain = _rotate(order, coll.root)
        chain = chain[1:] + chain[:1]
        ready: dict[tuple[Chunk, int], int] = defaultdict(int)
        for c in by_label[coll.root]:
            for a, b in pairwise(chain):
                ready[(c, b)] = max(ready[(c, b)], p.reduce_to(c, a, b, ready[(c, a)], sink=coll.root))
    else:
        _unsupported("ring", kind)
    return p.schedule("ring")


# ====================================================================== binomial tree
def _ranks(instance: Instance, root: int | None) -> list[int]:
    gpus = list(instance.topology.gpus)
    return _rotate(gpus, root) if root is not None else gpus


def _binomial_bcast(p: Placer, ranks: Sequence[int], chunks: Sequence[Chunk]) -> None:
    n = len(ranks)
    mask = 1
    while mask < n:
        for r in range(mask):
            if r + mask < n:
                for c in chunks:
                    p.copy(c, ranks[r], ranks[r + mask])
        mask <<= 1


def _binomial_reduce(p: Placer, ranks: Sequence[int], chunks: Sequence[Chunk]) -> int:
    """Children ``r + 2^k`` (``2^k > r``) reduce into ``r``; ranks in decreasing order are a
    topological order (every child has a larger rank than its parent)."""
    n = len(ranks)
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for r in range(n - 1, 0, -1):
        parent = r - (1 << (r.bit_length() - 1))
        for c in chunks:
            arr = p.reduce_to(c, ranks[r], ranks[parent], ready[(c, r)], sink=ranks[0])
            ready[(c, parent)] = max(ready[(c, parent)], arr)
    finish = 0
    for c in chunks:
        p.mark_full(c, ranks[0], ready[(c, 0)])
        finish = max(finish, ready[(c, 0)])
    return finish


def tree_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Binomial tree (``001_*.txt``): broadcast, reduce, AllReduce = reduce + broadcast.

    Ranks are the GPUs in id order rotated so the root is rank 0 (AllReduce: the first GPU).
    """
    coll = instance.collective
    p = Placer(instance)
    chunks = list(coll.chunk_ids)
    if coll.kind == "broadcast":
        _binomial_bcast(p, _ranks(instance, coll.root), chunks)
    elif coll.kind == "reduce":
        _binomial_reduce(p, _ranks(instance, coll.root), chunks)
    elif coll.kind == "allreduce":
        ranks = _ranks(instance, None)
        _binomial_reduce(p, ranks, chunks)
        _binomial_bcast(p, ranks, chunks)
    else:
        _unsupported("tree", coll.kind)
    return p.schedule("tree")


# ====================================================================== double binary tree
def _inorder_parent(pos: int, n: int) -> int | None:
    """Parent of position ``pos`` (1-based) in the in-order binary tree on ``1..n``.

    The height of ``pos`` is its number of trailing zeros; the parent is ``pos +- lowbit`` (the
    one with the next bit set), repeated while it falls beyond ``n``; the root is the largest
    power of two ``<= n``.
    """
    root = 1 << (n.bit_length() - 1)
    if pos == root:
        return None
    p = pos
    while True:
        b = p & -p
        p = p - b if (p // (2 * b)) % 2 == 1 else p + b
        if p <= n:
            return p


def double_binary_trees(n: int) -> tuple[dict[int, int | None], dict[int, int | None]]:
    """Parent maps (rank -> parent rank) of NCCL's two complementary binary trees.

    Tree 1 puts rank ``r`` at position ``r+1``; tree 2 shifts every rank by one position, so the
    leaves of one tree (odd positions) are interior nodes of the other.
    """
    t1: dict[int, int | None] = {}
    t2: dict[int, int | None] = {}
    for pos in range(1, n + 1):
        par = _inorder_parent(pos, n)
        t1[pos - 1] = None if par is None else par - 1
        t2[pos % n] = None if par is None else par % n
    return t1, t2


def _tree_allreduce(
    p: Placer, gpus: Sequence[int], parent: Mapping[int, int | None], chunks: Sequence[Chunk]
) -> None:
    depth: dict[int, int] = {}

    def d(r: int) -> int:
        if r not in depth:
            par = parent[r]
            depth[r] = 0 if par is None else d(par) + 1
        return depth[r]

    order = sorted(parent, key=lambda r: (-d(r), r))
    root = next(r for r in parent if parent[r] is None)
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for r in order:
        par = parent[r]
        if par is None:
            continue
        for c in chunks:
            arr = p.reduce_to(c, gpus[r], gpus[par], ready[(c, r)], sink=gpus[root])
            ready[(c, par)] = max(ready[(c, par)], arr)
    for c in chunks:
        p.mark_full(c, gpus[root], ready[(c, root)])
    for r in reversed(order):
        par = parent[r]
        if par is not None:
            for c in chunks:
                p.copy(c, gpus[par], gpus[r])


def double_binary_tree_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """NCCL's double binary tree AllReduce: half the chunks on each tree, reduce up then
    broadcast down, pipelined by chunk."""
    coll = instance.collective
    if coll.kind != "allreduce":
        _unsupported("double-binary-tree", coll.kind)
    gpus = list(instance.topology.gpus)
    p = Placer(instance)
    chunks = list(coll.chunk_ids)
    half = (len(chunks) + 1) // 2
    t1, t2 = double_binary_trees(len(gpus))
    _tree_allreduce(p, gpus, t1, chunks[:half])
    if chunks[half:]:
        _tree_allreduce(p, gpus, t2, chunks[half:])
    return p.schedule("double-binary-tree")


# ====================================================================== recursive doubling / halving
def _fold(n: int) -> tuple[int, dict[int, int]]:
    """Largest power of two ``2^m <= n`` and the partner (a core rank) of every extra rank."""
    core = 1 << (n.bit_length() - 1)
    return core, {e: e - core for e in range(core, n)}


def _rd_exchange(p: Placer, gpus: Sequence[int], have: dict[int, set[Chunk]], core: int) -> None:
    """Recursive doubling among core ranks ``0..core-1``: at mask ``2^k`` rank ``q`` sends its
    peer ``q ^ 2^k`` every chunk the peer lacks; ``have`` is updated in place."""
    mask = 1
    while mask < core:
        new = {q: set(have[q]) for q in range(core)}
        for q in range(core):
            peer = q ^ mask
            for c in sorted(have[q] - have[peer]):
                p.copy(c, gpus[q], gpus[peer])
            new[peer] |= have[q]
        have.update(new)
        mask <<= 1


def _rd_allgather(p: Placer, gpus: Sequence[int], have: dict[int, set[Chunk]]) -> None:
    """Recursive doubling over the core ranks with folding of the extra ranks."""
    n = len(gpus)
    core, partner = _fold(n)
    for e, q in partner.items():
        for c in sorted(have[e]):
            p.copy(c, gpus[e], gpus[q])
        have[q] |= have[e]
    _rd_exchange(p, gpus, have, core)
    for e, q in partner.items():
        for c in sorted(have[q] - have[e]):
            p.copy(c, gpus[q], gpus[e])


def _rh_reducescatter(p: Placer, gpus: Sequence[int], target: Mapping[Chunk, int]) -> dict[Chunk, int]:
    """Recursive halving: at mask ``2^k`` (from ``core/2`` down) rank ``q`` sends the partial sums
    of the chunks whose target core rank differs from ``q`` in that bit to ``q ^ 2^k``.

    ``target`` maps every chunk to the core rank that ends with it. Returns finish slots.
    """
    n = len(gpus)
    core, partner = _fold(n)
    chunks = sorted(target)
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for e, q in partner.items():
        for c in chunks:
            arr = p.reduce_to(c, gpus[e], gpus[q], 0, sink=gpus[target[c]])
            ready[(c, q)] = max(ready[(c, q)], arr)
    block = {q: list(chunks) for q in range(core)}
    mask = core >> 1
    while mask:
        for q in range(core):
            peer = q ^ mask
            keep: list[Chunk] = []
            give: list[Chunk] = []
            for c in block[q]:
                (keep if (target[c] & mask) == (q & mask) else give).append(c)
            for c in give:
                arr = p.reduce_to(c, gpus[q], gpus[peer], ready[(c, q)], sink=gpus[target[c]])
                ready[(c, peer)] = max(ready[(c, peer)], arr)
            block[q] = keep
        mask >>= 1
    finish = {}
    for c in chunks:
        finish[c] = ready[(c, target[c])]
        p.mark_full(c, gpus[target[c]], finish[c])
    return finish


def recursive_doubling_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Recursive doubling: AllGather (blocks double every round) and AllReduce (full-vector
    exchange-and-reduce every round, latency-optimal); non-powers of two fold the extra GPUs
    into partners first and unfold at the end."""
    coll = instance.collective
    gpus = list(instance.topology.gpus)
    rank = {g: i for i, g in enumerate(gpus)}
    p = Placer(instance)
    if coll.kind == "allgather":
        have = {rank[g]: set(cs) for g, cs in _chunks_of(instance).items()}
        for r in range(len(gpus)):
            have.setdefault(r, set())
        _rd_allgather(p, gpus, have)
    elif coll.kind == "allreduce":
        n = len(gpus)
        core, partner = _fold(n)
        chunks = list(coll.chunk_ids)
        ready: dict[tuple[Chunk, int], int] = defaultdict(int)
        for e, q in partner.items():
            for c in chunks:
                # Core GPUs keep their buffers live while exchanging: relay through switches only.
                arr = p.reduce_to(c, gpus[e], gpus[q], 0, switches_only=True)
                ready[(c, q)] = max(ready[(c, q)], arr)
        mask = 1
        while mask < core:
            for q in range(core):
                peer = q ^ mask
                if peer < q:
                    continue
                for c in chunks:
                    at_peer, at_q = p.exchange(c, gpus[q], gpus[peer], ready[(c, q)], ready[(c, peer)])
                    ready[(c, peer)] = max(ready[(c, peer)], at_peer)
                    ready[(c, q)] = max(ready[(c, q)], at_q)
            mask <<= 1
        for q in range(core):
            for c in chunks:
                p.mark_full(c, gpus[q], ready[(c, q)])
        for e, q in partner.items():
            for c in chunks:
                p.copy(c, gpus[q], gpus[e])
    else:
        _unsupported("recursive-doubling", coll.kind)
    return p.schedule("recursive-doubling")


def recursive_halving_doubling_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Rabenseifner: recursive halving ReduceScatter, recursive doubling AllGather, and
    AllReduce as the two in sequence (non-powers of two folded)."""
    coll = instance.collective
    gpus = list(instance.topology.gpus)
    rank = {g: i for i, g in enumerate(gpus)}
    p = Placer(instance)
    if coll.kind == "allgather":
        return recursive_doubling_schedule(instance, options)
    if coll.kind not in ("reducescatter", "allreduce"):
        _unsupported("recursive-halving-doubling", coll.kind)
    core, partner = _fold(len(gpus))
    chunks = list(coll.chunk_ids)
    if coll.kind == "reducescatter":
        # Every chunk must end at its owner (an extra rank's chunks at its partner first).
        target = {c: partner.get(rank[c[0]], rank[c[0]]) for c in chunks}
    else:
        # AllReduce chunk labels are arbitrary: split the buffer evenly over the core ranks,
        # as Rabenseifner halves the vector.
        target = {c: i * core // len(chunks) for i, c in enumerate(chunks)}
    _rh_reducescatter(p, gpus, target)
    if coll.kind == "reducescatter":
        for c in chunks:
            if rank[c[0]] in partner:
                p.copy(c, gpus[target[c]], c[0])
    else:
        have: dict[int, set[Chunk]] = {q: set() for q in range(core)}
        for c, q in target.items():
            have[q].add(c)
        _rd_core_then_unfold(p, gpus, have, partner)
    return p.schedule("recursive-halving-doubling")


def _rd_core_then_unfold(
    p: Placer, gpus: Sequence[int], have: dict[int, set[Chunk]], partner: Mapping[int, int]
) -> None:
    _rd_exchange(p, gpus, have, len(have))
    for e, q in partner.items():
        for c in sorted(have[q]):
            p.copy(c, gpus[q], gpus[e])


# ====================================================================== hierarchical
def hierarchical_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Two-level rings: an intra-group ring and, per local index ("rail"), an inter-group ring.

    AllGather: rail rings first (each GPU gathers its rail), then intra-group rings pass
    everything on. ReduceScatter: intra-group ring ReduceScatter to the GPU of the owner's rail,
    then a rail ring ReduceScatter to the owner. AllReduce: ReduceScatter as above, then the
    AllGather in reverse order (rail ring from the owner, then intra-group rings).
    Groups: ``options.extra["groups"]`` or :func:`infer_groups`.
    """
    coll = instance.collective
    topo = instance.topology
    groups = _groups_from(instance, options)
    intra = [ring_order(topo, g) for g in groups]
    size = len(intra[0])
    if len({len(r) for r in intra}) != 1:
        raise ValidationError(f"hierarchical needs groups of equal size, got {[len(r) for r in intra]}")
    local = {g: j for ring in intra for j, g in enumerate(ring)}
    rails = [[intra[k][j] for k in range(len(intra))] for j in range(size)]
    rails = [ring_order(topo, rail) for rail in rails]
    p = Placer(instance)
    by_label = _chunks_of(instance)
    rail_of = {g: rail for rail in rails for g in rail}
    if coll.kind == "allgather":
        for rail in rails:
            _ring_ag(p, rail, {g: by_label[g] for g in rail})
        for ring in intra:
            _ring_ag(p, ring, {g: [c for h in rail_of[g] for c in by_label[h]] for g in ring})
    elif coll.kind in ("reducescatter", "allreduce"):
        ready: dict[tuple[Chunk, int], int] = defaultdict(int)
        for ring in intra:
            owned = {
                ring[j]: [c for g, cs in by_label.items() if local[g] == j for c in cs] for j in range(size)
            }
            # The rail member ends with its group's partial sum only; the rail ring goes on.
            _ring_rs(p, ring, owned, ready, mark=False)
        for rail in rails:
            _ring_rs(p, rail, {g: by_label[g] for g in rail}, ready, mark=True)
        if coll.kind == "allreduce":
            for rail in rails:
                _ring_ag(p, rail, {g: by_label[g] for g in rail})
            for ring in intra:
                _ring_ag(p, ring, {g: [c for h in rail_of[g] for c in by_label[h]] for g in ring})
    else:
        _unsupported("hierarchical", coll.kind)
    return p.schedule("hierarchical")


# ====================================================================== pairwise (AlltoAll)
def pairwise_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Direct pairwise exchange (NCCL's AlltoAll, also Scatter/Gather): in round ``k`` GPU ``i``
    sends to GPU ``i+k``, every transfer on its shortest path."""
    coll = instance.collective
    if coll.kind not in ("alltoall", "scatter", "gather"):
        _unsupported("pairwise", coll.kind)
    gpus = list(instance.topology.gpus)
    n = len(gpus)
    p = Placer(instance)
    wanted = coll.wanted
    by_pair: dict[tuple[int, int], list[Chunk]] = defaultdict(list)
    for c in coll.chunk_ids:
        (src,) = tuple(coll.holders[c])
        for d in wanted.get(c, ()):
            if d != src:
                by_pair[(src, d)].append(c)
    for k in range(1, n):
        for i in range(n):
            s, d = gpus[i], gpus[(i + k) % n]
            for c in by_pair.get((s, d), ()):
                p.copy(c, s, d)
    return p.schedule("pairwise")


# ====================================================================== registry
def _unsupported(method: str, kind: str) -> None:
    kinds = ", ".join(sorted(SUPPORTED[method]))
    raise ValidationError(f"method {method!r} does not support collective {kind!r} (supported: {kinds})")


Builder = Callable[[Instance, SolveOptions], Schedule]

BASELINES: dict[str, Builder] = {
    "ring": ring_schedule,
    "tree": tree_schedule,
    "double-binary-tree": double_binary_tree_schedule,
    "recursive-doubling": recursive_doubling_schedule,
    "recursive-halving-doubling": recursive_halving_doubling_schedule,
    "hierarchical": hierarchical_schedule,
    "pairwise": pairwise_schedule,
}
"""Method name -> schedule builder."""

SUPPORTED: dict[str, frozenset[str]] = {
    "ring": frozenset({"allgather", "reducescatter", "allreduce", "broadcast", "reduce"}),
    "tree": frozenset({"broadcast", "reduce", "allreduce"}),
    "double-binary-tree": frozenset({"allreduce"}),
    "recursive-doubling": frozenset({"allgather", "allreduce"}),
    "recursive-halving-doubling": frozenset({"allgather", "reducescatter", "allreduce"}),
    "hierarchical": frozenset({"allgather", "reducescatter", "allreduce"}),
    "pairwise": frozenset({"alltoall", "scatter", "gather"}),
}
"""Method name -> collectives it implements (the rest raise ValidationError)."""


def _make_engine(name: str, builder: Builder) -> Callable[[Instance, SolveOptions], Outcome]:
    def engine(instance: Instance, options: SolveOptions) -> Outcome:
        kind = instance.collective.kind
        if kind not in SUPPORTED[name]:
            _unsupported(name, kind)
        token = _DEADLINE.set(Deadline.after(options.time_limit))
        try:
            schedule = builder(instance, options)
        except OutOfTimeError:
            reason = f"time limit of {options.time_limit:g} s reached"
            return Outcome(schedule=None, status="unknown", details={"algorithm": name, "reason": reason})
        except KeyboardInterrupt:
            # One construction builds one schedule: nothing complete to hand out before it ends.
            return Outcome(schedule=None, status="unknown", details={"algorithm": name, "interrupted": True})
        finally:
            _DEADLINE.reset(token)
        return Outcome(schedule=schedule, status="feasible", details={"algorithm": name})

    engine.__name__ = f"{name.replace('-', '_')}_engine"
    first = builder.__doc__.splitlines()[0] if builder.__doc__ else ""
    engine.__doc__ = f"Registered engine {name!r}: {first}"
    return engine


for _name, _builder in BASELINES.items():
    register(_name)(_make_engine(_name, _builder))


def supports(method: str, kind: str) -> bool:
    """Whether baseline ``method`` implements collective ``kind``."""
    return kind in SUPPORTED.get(method, frozenset())
