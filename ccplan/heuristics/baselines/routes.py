"""Ring hops as NCCL sees them: the widest route between two GPUs through switches only.

A ring relays at GPUs only as ring members, so a hop ``g -> h`` is a direct link or a path whose
inner nodes are all switches (NCCL's ``PATH_NVL`` through an NVSwitch, ``PATH_PIX``/``PXB``
through PCIe switches, a NIC and the fabric between nodes). Among such paths the hop takes the
widest, then the one with the fewest links. :func:`routes_from` searches from one GPU and stops
once the GPUs it was asked for are settled, so a ring over a 1,024-GPU fabric computes the
routes of its own hops, not of all pairs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ccplan.instances.topology import Topology

EPS = 1e-9
"""Tolerance on bandwidth comparisons (GB/s)."""

Route = tuple[tuple[int, ...], float]
"""A hop's node path and its bottleneck bandwidth (GB/s)."""


def routes_from(
    topo: Topology,
    g: int,
    targets: Collection[int] | None = None,
    within: Callable[[int], bool] | None = None,
) -> dict[int, Route]:
    """GPU -> (node path, bottleneck GB/s): the widest route from ``g`` through switches only
    (fewest links among the widest) to every GPU it reaches, or only to ``targets`` (the search
    stops once they are all settled; others found on the way may be included), through nodes
    ``within`` accepts only (default: all)."""
    kind = topo.kind
    best: dict[int, tuple[float, int]] = {g: (math.inf, 0)}
    prev: dict[int, int] = {}
    heap: list[tuple[float, int, int]] = [(-math.inf, 0, g)]
    found: dict[int, Route] = {}
    left = None if targets is None else {t for t in targets if t != g}
    done: set[int] = set()
    while heap:
        nbw, hops, a = heapq.heappop(heap)
        if a in done:
            continue  # stale heap entry: a was settled wider or shorter before
        done.add(a)
        bw = -nbw
        if a != g and kind[a] == "gpu":
            path = [a]
            while path[-1] != g:
                path.append(prev[path[-1]])
            found[a] = (tuple(reversed(path)), bw)
            if left is not None:
                left.discard(a)
                if not left:
                    break
            continue  # a GPU ends a route: rings relay at GPUs only as ring members
        for li in topo.out_links[a]:
            link = topo.links[li]
            b = link.dst
            if b in done or (within is not None and not within(b)):
                continue
            cand = (min(bw, link.bandwidth_GBps), hops + 1)
            old = best.get(b)
            wider = old is None or cand[0] > old[0] + EPS
            if wider or (old is not None and abs(cand[0] - old[0]) <= EPS and cand[1] < old[1]):
                best[b] = cand
                prev[b] = a
                heapq.heappush(heap, (-cand[0], cand[1], b))
    return found


def gpu_routes(topo: Topology) -> dict[int, dict[int, Route]]:
    """:func:`routes_from` every GPU to every GPU it reaches (all pairs: for small machines)."""
    return {g: routes_from(topo, g) for g in topo.gpus}


@dataclass(frozen=True)
class Channels:
    """The rings NCCL-style ring search found.

    Parameters
    ----------
    rings : tuple of tuple of int
        Directed rings over all GPUs.
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


class HopCapacity:
    """Residual link capacity shared by channels that each take ``speed`` on every link of
    every hop they use (NCCL's ring and chain search: a channel's speed is taken off each
    link it crosses). Subclasses set ``speed``, ``residual`` (per link, GB/s) and
    ``hop_links`` (GPU pair -> the links of its route)."""

    speed: float
    residual: list[float]
    hop_links: dict[tuple[int, int], tuple[int, ...]]

    def _fits(self, g: int, h: int) -> bool:
        links = self.hop_links.get((g, h))
        return links is not None and all(self.residual[li] >= self.speed - EPS for li in links)

    def _room(self, g: int, h: int) -> float:
        return min(self.residual[li] for li in self.hop_links[(g, h)])

    def _take(self, g: int, h: int, sign: float) -> None:
        for li in self.hop_links[(g, h)]:
            self.residual[li] -= sign * self.speed

