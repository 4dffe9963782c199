r"""NCCL-style ring channels: as many directed rings as the links carry at one per-channel speed.

NCCL's graph search (``ncclTopoCompute`` in ``src/graph/search.cc``) looks for rings at a
per-channel speed ``s``: every hop of a ring takes ``s`` from each link of its path
(``followPath`` subtracts it from the link's width, the search backtracks when a link has less
left), one ring after the other until no further ring fits; it retries at lower speeds and keeps
the set with the largest ``channels x s`` (``ncclTopoCompareGraphs``; at equal bandwidth, fewer
hops). On a DGX-1 this gives several rings over NVLink (docs/collectives.md, section 4a).

:func:`find_channels` applies the same rule to a :class:`~ccplan.instances.topology.Topology`:

- a ring hop ``g -> h`` is a direct link or the widest route through switches only (the GPU
  graph of :func:`~ccplan.heuristics.baselines.rings.ring_order`); it consumes ``s`` on every
  link of that route;
- the speeds tried are the route bandwidths divided by 1..4, fastest first; a speed is skipped
  when even a perfect packing (``k <= min over GPUs of out- and in-capacity / s``) could not beat
  the best aggregate found;
- at one speed, rings are searched depth first (hops with the most capacity left first, then the
  fewest onward choices, then the id), after a ring its replay and its reverse are tried first
  (a duplex cable carries a ring both ways), and the search backtracks over earlier rings within
  an expansion budget; a multiset of rings is explored once;
- ``max_channels`` caps ``k`` as ``NCCL_MAX_NCHANNELS`` does (default 32, NCCL's MAXCHANNELS).

What it leaves out: NCCL's per-channel speed is also bounded by what one SM moves, and NCCL
doubles the channels it found at run time to use more SMs on the same rings; neither changes the
link bandwidth a set of rings gets in the alpha-beta model, so they are not modelled.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

from ccplan.heuristics.baselines.placer import _DEADLINE
from ccplan.instances.topology import Topology

MAX_CHANNELS = 32
"""NCCL's compile-time channel limit (``MAXCHANNELS``), the default cap on rings."""

SPEED_DIVISORS = (1, 2, 3, 4)
"""Per-channel speeds tried: every route bandwidth divided by these."""

_BUDGET = 30_000
"""Search expansions per speed (one expansion = one GPU appended to a partial ring)."""

_EPS = 1e-9


@dataclass(frozen=True)
class Channels:
    """The rings NCCL-style ring search found.

    Parameters
    ----------
    rings : tuple of tuple of int
        Directed rings over all GPUs, each starting at the first GPU.
    speed_GBps : float
        Per-channel speed: every hop of every ring carries it on each link of its route.
    routes : dict
        ``(g, h) -> node path`` of every hop used (direct link or through switches only).
    """

    rings: tuple[tuple[int, ...], ...]
    speed_GBps: float
    routes: dict[tuple[int, int], tuple[int, ...]]

    @property
    def k(self) -> int:
        """Number of channels."""
        return len(self.rings)

    @property
    def total_GBps(self) -> float:
        """Aggregate ring bandwidth ``k x speed``."""
        return self.k * self.speed_GBps


# ====================================================================== routes
def gpu_routes(topo: Topology) -> dict[int, dict[int, tuple[tuple[int, ...], float]]]:
    """GPU -> {GPU: (node path, bottleneck GB/s)}: the widest path through switches only
    (fewest hops among the widest), for every GPU pair such a path joins."""
    kind = topo.kind
    out: dict[int, dict[int, tuple[tuple[int, ...], float]]] = {}
    for g in topo.gpus:
        best: dict[int, tuple[float, int]] = {g: (math.inf, 0)}
        prev: dict[int, int] = {}
        heap: list[tuple[float, int, int]] = [(-math.inf, 0, g)]
        found: dict[int, tuple[tuple[int, ...], float]] = {}
        while heap:
            nbw, hops, a = heapq.heappop(heap)
            bw = -nbw
            if bw < best[a][0] - _EPS or (bw <= best[a][0] + _EPS and hops > best[a][1]):
                continue  # stale heap entry
            if a != g and kind[a] == "gpu":
                path = [a]
                while path[-1] != g:
                    path.append(prev[path[-1]])
                found[a] = (tuple(reversed(path)), bw)
                continue  # a GPU ends a route: rings relay at GPUs only as ring members
            for li in topo.out_links[a]:
                link = topo.links[li]
                b = link.dst
                cand = (min(bw, link.bandwidth_GBps), hops + 1)
                old = best.get(b)
                wider = old is None or cand[0] > old[0] + _EPS
                if wider or (old is not None and abs(cand[0] - old[0]) <= _EPS and cand[1] < old[1]):
                    best[b] = cand
                    prev[b] = a
                    heapq.heappush(heap, (-cand[0], cand[1], b))
        out[g] = found
    return out


# ====================================================================== search
class _Packer:
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
    def _fits(self, g: int, h: int) -> bool:
        links = self.hop_links.get((g, h))
        return links is not None and all(self.residual[li] >= self.speed - _EPS for li in links)

    def _room(self, g: int, h: int) -> float:
        return min(self.residual[li] for li in self.hop_links[(g, h)])

    def _take(self, g: int, h: int, sign: float) -> None:
        for li in self.hop_links[(g, h)]:
            self.residual[li] -= sign * self.speed

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


def _upper_k(topo: Topology, speed: float) -> int:
    """``k`` no packing exceeds: each ring leaves and enters every GPU once at ``speed``."""
    caps = []
    for g in topo.gpus:
        out = sum(topo.links[li].bandwidth_GBps for li in topo.out_links[g])
        inn = sum(topo.links[li].bandwidth_GBps for li in topo.in_links[g])
        caps.append(min(out, inn))
    return math.floor(min(caps) / speed + _EPS) if caps else 0


def find_channels(
    topo: Topology,
    max_channels: int = MAX_CHANNELS,
    budget: int = _BUDGET,
    on_speed: Callable[[float, int], None] | None = None,
) -> Channels | None:
    """NCCL-style ring channels of ``topo`` (module docstring); ``None`` when no ring joins
    all GPUs through direct links or switch-only routes.

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
    routes = gpu_routes(topo)
    if len(gpus) < 2 or any(not routes[g] for g in gpus):
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
