"""Shortest paths on a topology with per-link weights (slots ``L`` or microseconds)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from ccplan.instances.topology import Topology


def latency_distances(
    topology: Topology, weights: Sequence[float], sources: Iterable[int], *, reverse: bool = False
) -> dict[int, float]:
    """Multi-source Dijkstra: node -> smallest sum of link ``weights`` from any source.

    With ``reverse=True`` the links are followed backwards: node -> distance *to* the nearest
    source.

    Parameters
    ----------
    topology : Topology
    weights : sequence of float
        Non-negative weight per link, aligned with ``topology.links`` (e.g. ``instance.latency``).
    sources : iterable of int
        Node ids at distance 0.

    Returns
    -------
    dict
        Only reachable nodes appear.
    """
    dist: dict[int, float] = {}
    heap: list[tuple[float, int]] = []
    for s in sources:
        dist[s] = 0
        heap.append((0, s))
    heapq.heapify(heap)
    while heap:
        d, x = heapq.heappop(heap)
        if d > dist[x]:
            continue
        for j in (topology.in_links if reverse else topology.out_links)[x]:
            y = topology.links[j].src if reverse else topology.links[j].dst
            nd = d + weights[j]
            if nd < dist.get(y, float("inf")):
                dist[y] = nd
                heapq.heappush(heap, (nd, y))
    return dist
