"""Shortest paths on a topology with per-link weights (slots ``L`` or microseconds)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra

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


def latency_matrix(topology: Topology, weights: Sequence[float] | np.ndarray) -> np.ndarray:
    """All-pairs shortest latency ``d(u, w)`` (sum of integer link ``weights``, e.g. ``L``) as
    a ``(V, V)`` array indexed by :attr:`Topology.node_index`, inf when ``w`` is unreachable
    from ``u``: one compiled Dijkstra per source (scipy's csgraph).

    Parallel links keep their smallest weight (a sparse matrix would add them up); integer
    sums are exact in float64, so the values equal those of :func:`latency_distances`.
    """
    pos = topology.node_index
    n = len(pos)
    lat = np.asarray(weights, dtype=np.int64)
    src = np.array([pos[lk.src] for lk in topology.links], dtype=np.int64)
    dst = np.array([pos[lk.dst] for lk in topology.links], dtype=np.int64)
    if not len(lat):
        out = np.full((n, n), np.inf)
        np.fill_diagonal(out, 0)
        return out
    if int(lat.min()) <= 0:
        # csgraph reads a stored 0 as "no link": take the plain Dijkstra (L >= 1 in practice)
        out = np.full((n, n), np.inf)
        plain = [int(x) for x in lat]
        for s, p in pos.items():
            for v, d in latency_distances(topology, plain, [s]).items():
                out[p, pos[v]] = d
        return out
    order = np.lexsort((lat, src * n + dst))
    key = (src * n + dst)[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    sel = order[first]
    graph = csr_matrix((lat[sel].astype(np.float64), (src[sel], dst[sel])), shape=(n, n))
    return np.asarray(dijkstra(graph, directed=True))
