r"""NCCL-style ring channels: as many directed rings as the links carry at one per-channel speed.

NCCL's graph search (``ncclTopoCompute`` in ``src/graph/search.cc``) looks for rings at a
per-channel speed ``s``: every hop of a ring takes ``s`` from each link of its path
(``followPath`` subtracts it from the link's width, the search backtracks when a link has less
left), one ring after the other until no further ring fits; it retries at lower speeds and keeps
the set with the largest ``channels x s`` (``ncclTopoCompareGraphs``; at equal bandwidth, fewer
hops). On a DGX-1 this gives several rings over NVLink (docs/collectives.md, section 4a).

:func:`find_channels` applies the same rule to a :class:`~ccplan.instances.topology.Topology`.
A ring hop ``g -> h`` is a direct link or the widest route through switches only
(:mod:`~ccplan.heuristics.baselines.routes`; GPU -> NVSwitch -> GPU, as NCCL's ``PATH_NVL``
through an NVS node); it consumes ``s`` on every link of that route. Three ways to rings, each
stopping the search once a set reaches what no rings can exceed:

- through a switch fabric, one ring is built, not searched (:func:`tree_ring`);
- on a machine of several nodes, NCCL's inter-node rings, one chain per node joined through
  the NICs (:mod:`~ccplan.heuristics.baselines.nodes`);
- otherwise (and on switched machines up to ``_FLAT_SEARCH_GPUS`` GPUs) a depth-first search
  over all GPU pairs.

The search, as NCCL's (the nodes' search takes the same speeds):

- the speeds tried are the route bandwidths divided by 1..4, fastest first; a speed is skipped
  when even a perfect packing (``k <= min over GPUs of out- and in-capacity / s``) could not beat
  the best aggregate found;
- at one speed, rings are searched depth first (hops with the most capacity left first, then the
  fewest onward choices, then the id), after a ring its replay and its reverse are tried first
  (a duplex cable carries a ring both ways), and the search backtracks over earlier rings within
  an expansion budget; a multiset of rings is explored once;
- ``max_channels`` caps ``k`` as ``NCCL_MAX_NCHANNELS`` does (default 32, NCCL's MAXCHANNELS).

The set with the most ``k x s`` wins (the earlier at equal bandwidth).

What it leaves out: NCCL's per-channel speed is also bounded by what one SM moves, and NCCL
doubles the channels it found at run time to use more SMs on the same rings; neither changes the
link bandwidth a set of rings gets in the alpha-beta model, so they are not modelled.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise

from ccplan.heuristics.baselines.nodes import node_ceiling, node_channels, node_groups
from ccplan.heuristics.baselines.placer import _DEADLINE
from ccplan.heuristics.baselines.routes import EPS as _EPS
from ccplan.heuristics.baselines.routes import Channels, HopCapacity, gpu_routes
from ccplan.instances.topology import Topology

MAX_CHANNELS = 32
"""NCCL's compile-time channel limit (``MAXCHANNELS``), the default cap on rings."""

SPEED_DIVISORS = (1, 2, 3, 4)
"""Per-channel speeds tried: every route bandwidth divided by these."""

_BUDGET = 30_000
"""Search expansions per speed (one expansion = one GPU appended to a partial ring)."""

_FLAT_SEARCH_GPUS = 128
"""The depth-first search over all GPU pairs runs on switched machines up to this size only
(its all-pairs routes cost a search of the whole fabric per GPU); larger ones keep the
constructive rings."""


# ====================================================================== search
class _Packer(HopCapacity):
    """Rings at one per-channel speed on the residual link capacities."""

    def __init__(
        self,
        topo: Topology,
        routes: dict[int, dict[int, tuple[tuple[int, ...], float]]],
        speed: float,
        budget: int,
    ) -> None:
        self.members = list(topo.gpus)
        self.start = self.members[0]
        self.speed = speed
        self.budget = budget
        self.residual = [float(lk.bandwidth_GBps) for lk in topo.links]
        index = topo.link_index
        self.hop_links: dict[tuple[int, int], tuple[int, ...]] = {
            (g, h): tuple(index[(a, b)] for a, b in pairwise(path))
            for g, targets in routes.items()
            for h, (path, _) in targets.items()
        }
        self.adj = {g: sorted(routes[g]) for g in self.members}

    # ----------------------------------------------------------------- capacity
    def _take_ring(self, ring: Sequence[int], sign: float) -> None:
        for a, b in zip(ring, [*ring[1:], ring[0]], strict=True):
            self._take(a, b, sign)

    def _ring_fits(self, ring: Sequence[int]) -> bool:
        if any((a, b) not in self.hop_links for a, b in zip(ring, [*ring[1:], ring[0]], strict=True)):
            return False  # a one-way link: the reverse ring has no such hop
        self._take_ring(ring, 1.0)
        ok = all(r >= -_EPS for r in self.residual)
        self._take_ring(ring, -1.0)
        return ok

    # ----------------------------------------------------------------- one ring
    def _spend(self) -> bool:
        self.budget -= 1
        if self.budget % 1024 == 0:
            _DEADLINE.get().check()
        return self.budget >= 0

    def _dfs(self) -> Iterator[tuple[int, ...]]:
        """Every directed ring from the first GPU that fits the residual capacity, yielded with
        its capacity taken (given back when the generator resumes)."""
        n = len(self.members)
        start = self.start
        path = [start]
        used = {start}

        def cands(a: int) -> Iterator[int]:
            nxt = [h for h in self.adj[a] if h not in used and self._fits(a, h)]

            def onward(h: int) -> int:
                return sum(1 for x in self.adj[h] if x not in used)

            nxt.sort(key=lambda h: (-self._room(a, h), onward(h), h))
            return iter(nxt)

        frames: list[Iterator[int]] = [cands(start)]
        while frames:
            h = next(frames[-1], None)
            if h is None:
                frames.pop()
                if len(path) > 1:
                    b = path.pop()
                    used.discard(b)
                    self._take(path[-1], b, -1.0)
                continue
            if not self._spend():
                return
            a = path[-1]
            self._take(a, h, 1.0)
            path.append(h)
            used.add(h)
            if len(path) == n:
                if self._fits(h, start):
                    self._take(h, start, 1.0)
                    yield tuple(path)
                    self._take(h, start, -1.0)
                path.pop()
                used.discard(h)
                self._take(a, h, -1.0)
                continue
            frames.append(cands(h))

    def _candidates(self, prev: tuple[int, ...] | None) -> Iterator[tuple[int, ...]]:
        """The previous ring again, its reverse, then every ring the search finds."""
        if prev is not None:
            rev = (prev[0], *reversed(prev[1:]))
            for ring in (prev, rev):
                if self._ring_fits(ring):
                    self._take_ring(ring, 1.0)
                    yield ring
                    self._take_ring(ring, -1.0)
        yield from self._dfs()

    # ----------------------------------------------------------------- many rings
    def pack(self, kmax: int) -> list[tuple[int, ...]]:
        """Up to ``kmax`` rings, the most found within the budget."""
        best: list[tuple[int, ...]] = []
        cur: list[tuple[int, ...]] = []
        seen: set[tuple[tuple[int, ...], ...]] = set()

        def rec(prev: tuple[int, ...] | None) -> bool:
            nonlocal best
            if len(cur) > len(best):
                best = list(cur)
            if len(best) >= kmax:
                return True
            for ring in self._candidates(prev):
                key = tuple(sorted([*cur, ring]))
                if key in seen:
                    continue
                seen.add(key)
                cur.append(ring)
                if rec(ring):
                    return True
                cur.pop()
                if self.budget < 0:
                    return True
            return False

        if len(self.members) < 2:
            return best
        rec(None)
        return best


def port_bound(topo: Topology) -> float:
    """GB/s no set of rings exceeds: each ring leaves and enters every GPU once, so ``k x s``
    is at most the smallest GPU out- or in-capacity."""
    caps = []
    for g in topo.gpus:
        out = sum(topo.links[li].bandwidth_GBps for li in topo.out_links[g])
        inn = sum(topo.links[li].bandwidth_GBps for li in topo.in_links[g])
        caps.append(min(out, inn))
    return min(caps) if caps else 0.0


def _upper_k(topo: Topology, speed: float) -> int:
    """``k`` no packing exceeds at ``speed`` (:func:`port_bound`)."""
    return math.floor(port_bound(topo) / speed + _EPS)


def _flat_channels(
    topo: Topology,
    max_channels: int,
    budget: int,
    on_speed: Callable[[float, int], None] | None,
) -> Channels | None:
    """The depth-first search of the module docstring over all GPU pairs."""
    gpus = list(topo.gpus)
    routes = gpu_routes(topo)
    if any(not routes[g] for g in gpus):
        return None
    widths = sorted({round(bw, 9) for targets in routes.values() for _, bw in targets.values()}, reverse=True)
    speeds = sorted({round(w / d, 9) for w in widths for d in SPEED_DIVISORS}, reverse=True)
    best: tuple[list[tuple[int, ...]], float] | None = None
    barren: set[frozenset[tuple[int, int]]] = set()
    for s in speeds:
        if best is not None and s < 0.49 * best[1]:
            break  # NCCL lowers the speed only to about half the best one found
        kmax = min(max_channels, _upper_k(topo, s))
        if kmax < 1:
            continue
        if best is not None and kmax * s <= len(best[0]) * best[1] * (1 + 1e-6):
            continue  # not even a perfect packing at this speed would carry more
        hops = frozenset((g, h) for g in gpus for h, (_, bw) in routes[g].items() if bw >= s - _EPS)
        if {g for g, _ in hops} != set(gpus) or {h for _, h in hops} != set(gpus) or hops in barren:
            continue  # a GPU without a hop in or out, or the same hops that held no ring before
        rings = _Packer(topo, routes, s, budget).pack(kmax)
        if on_speed is not None:
            on_speed(s, len(rings))
        if not rings:
            barren.add(hops)
        elif best is None or len(rings) * s > len(best[0]) * best[1] * (1 + 1e-6):
            best = (rings, s)
    if best is None:
        return None
    rings, s = best
    used = {(a, b) for ring in rings for a, b in zip(ring, [*ring[1:], ring[0]], strict=True)}
    return Channels(rings=tuple(rings), speed_GBps=s, routes={hop: routes[hop[0]][hop[1]][0] for hop in used})


# ====================================================================== through a switch fabric
def tree_ring(topo: Topology) -> Channels | None:
    """One ring through the switches, built rather than searched (NCCL's NVSwitch rings: the
    search tries a GPU's index neighbours first, ``ncclTopoSearchNextGpuSort``).

    The switches joined by duplex links form a widest spanning tree (Prim, widest link first,
    from the switch of the first GPU); every GPU hangs from its widest duplex link to a switch;
    the ring visits the GPUs in depth-first order of that tree (a switch's own GPUs by id, then
    its subtrees), each hop along the tree path. A depth-first tour crosses every tree link once
    each way, so one ring runs at the narrowest tree link it uses: on a crossbar (NVSwitch), a
    star, a leaf-spine or a fat-tree that is each GPU's port, all a GPU can send. ``None`` when
    some GPU has no duplex switch link or the switches do not join all GPUs.
    """
    if not topo.switches or len(topo.gpus) < 2:
        return None
    kind = topo.kind
    index = topo.link_index
    links = topo.links

    def duplex(a: int, b: int) -> float:
        back = index.get((b, a))
        return 0.0 if back is None else min(links[index[(a, b)]].bandwidth_GBps, links[back].bandwidth_GBps)

    attach: dict[int, int] = {}
    for g in topo.gpus:
        near = [links[li].dst for li in topo.out_links[g] if kind[links[li].dst] == "switch"]
        ports = [(w, -sw) for sw in near if (w := duplex(g, sw)) > 0]
        if not ports:
            return None
        attach[g] = -max(ports)[1]
    root = attach[topo.gpus[0]]
    parent: dict[int, int | None] = {}
    children: dict[int, list[int]] = defaultdict(list)
    heap: list[tuple[float, int, int]] = [(-math.inf, root, root)]
    while heap:
        _, sw, up = heapq.heappop(heap)
        if sw in parent:
            continue
        parent[sw] = None if sw == root else up
        if sw != root:
            children[up].append(sw)
        for li in topo.out_links[sw]:
            b = links[li].dst
            if kind[b] == "switch" and b not in parent:
                w = duplex(sw, b)
                if w > 0:
                    heapq.heappush(heap, (-w, b, sw))
    if any(s not in parent for s in attach.values()):
        return None
    hung: dict[int, list[int]] = defaultdict(list)
    for g in topo.gpus:
        hung[attach[g]].append(g)
    ring: list[int] = []
    stack = [root]
    while stack:  # preorder, iteratively: a fabric may be deep
        sw = stack.pop()
        ring.extend(sorted(hung[sw]))
        stack.extend(sorted(children[sw], reverse=True))
    depth: dict[int, int] = {}
    for sw, above in parent.items():  # parents are settled before children (Prim's order)
        depth[sw] = 0 if above is None else depth[above] + 1

    def tree_path(a: int, b: int) -> list[int]:
        left, right = [a], [b]
        while left[-1] != right[-1]:
            if depth[left[-1]] >= depth[right[-1]]:
                left.append(parent[left[-1]])  # type: ignore[arg-type]
            else:
                right.append(parent[right[-1]])  # type: ignore[arg-type]
        return left + right[-2::-1]

    routes: dict[tuple[int, int], tuple[int, ...]] = {}
    uses: Counter[int] = Counter()
    for a, b in zip(ring, [*ring[1:], ring[0]], strict=True):
        path = (a, *tree_path(attach[a], attach[b]), b)
        routes[(a, b)] = path
        for u, v in pairwise(path):
            uses[index[(u, v)]] += 1
    speed = min(links[li].bandwidth_GBps / n for li, n in uses.items())
    return Channels(rings=(tuple(ring),), speed_GBps=speed, routes=routes)


# ====================================================================== all together
def _better(best: Channels | None, found: Channels | None) -> Channels | None:
    """The set with more ``k x speed``; the earlier one at equal bandwidth."""
    if found is None:
        return best
    if best is None or found.total_GBps > best.total_GBps * (1 + 1e-6):
        return found
    return best


def find_channels(
    topo: Topology,
    max_channels: int = MAX_CHANNELS,
    budget: int = _BUDGET,
    on_speed: Callable[[float, int], None] | None = None,
) -> Channels | None:
    """NCCL-style ring channels of ``topo`` (module docstring); ``None`` when no ring joins
    all GPUs through direct links or switch-only routes.

    In turn, stopping as soon as a set reaches what no rings can exceed: the constructive ring
    through the switches (:func:`tree_ring`); on a machine of several nodes, NCCL's per-node
    rings joined through the NICs (:func:`~ccplan.heuristics.baselines.nodes.node_channels`);
    then the depth-first search over all GPU pairs (machines without switches, or up to
    ``_FLAT_SEARCH_GPUS`` GPUs). The set with the most ``k x speed`` wins.

    Parameters
    ----------
    topo : Topology
        The machine.
    max_channels : int
        Cap on the number of rings (``NCCL_MAX_NCHANNELS``).
    budget : int
        Search expansions per speed.
    on_speed : callable, optional
        Called with ``(speed, rings found)`` for every speed searched (tests, logging).
    """
    gpus = list(topo.gpus)
    if len(gpus) < 2:
        return None
    ceiling = port_bound(topo)
    best = tree_ring(topo)
    if best is not None and best.total_GBps >= ceiling * (1 - 1e-6):
        return best
    groups = node_groups(topo)
    if groups is not None:
        found = node_channels(topo, groups, max_channels=max_channels, budget=budget, on_speed=on_speed)
        if found is not None:
            best = _better(best, found)
            if best is not None and best.total_GBps >= min(ceiling, node_ceiling(topo, groups)) * (1 - 1e-6):
                return best  # the nodes' NIC cut allows no more
    if not topo.switches or len(gpus) <= _FLAT_SEARCH_GPUS:
        best = _better(best, _flat_channels(topo, max_channels, budget, on_speed))
    return best
