"""Bandwidth clusters of a topology: the chassis that its slowest links separate.

Used by the heuristics (``cut-aware`` schedules cluster by cluster) and by the exact engine
(which warm-starts machines of several chassis from ``cut-aware`` too), so it lives with the
topology rather than in either engine.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ccplan.instances.topology import Topology


def _clusters_above(topo: Topology, fast: np.ndarray) -> np.ndarray:
    """Weakly connected components of the links marked ``fast`` (label per node position),
    then every switch whose GPU neighbours all lie in one component joins it (AMD's per-pair
    NIC switches: the link into such a switch is the real cut, and the switch may copy a chunk
    to both GPUs behind it)."""
    nodes = topo.node_ids
    pos = {v: i for i, v in enumerate(nodes)}
    src = np.array([pos[lk.src] for lk in topo.links], dtype=np.int64)
    dst = np.array([pos[lk.dst] for lk in topo.links], dtype=np.int64)
    graph = sp.csr_array((np.ones(int(fast.sum())), (src[fast], dst[fast])), shape=(len(nodes), len(nodes)))
    _, found = connected_components(graph, directed=True, connection="weak")
    labels = np.asarray(found, dtype=np.int64)
    is_gpu = [topo.kind[v] == "gpu" for v in nodes]
    near: dict[int, set[int]] = {}
    for a, b in zip(src.tolist(), dst.tolist(), strict=True):
        for x, y in ((a, b), (b, a)):
            if not is_gpu[x] and is_gpu[y]:
                near.setdefault(x, set()).add(int(labels[y]))
    for x, ks in near.items():
        if len(ks) == 1:
            labels[x] = next(iter(ks))
    return labels


def has_chassis(topo: Topology) -> bool:
    """Whether the slowest links separate the GPUs into two or more clusters (chassis)."""
    bw = [lk.bandwidth_GBps for lk in topo.links]
    if not bw or min(bw) == max(bw):
        return False
    labels = _clusters_above(topo, np.array(bw) > min(bw))
    return len({int(labels[i]) for i, v in enumerate(topo.node_ids) if topo.kind[v] == "gpu"}) >= 2


def chassis_groups(topo: Topology) -> list[frozenset[int]]:
    """The chassis of ``topo`` as node sets (GPUs and the switches that serve only them),
    ordered by their smallest node id; empty when the slowest links do not separate the GPUs
    into two or more clusters (:func:`has_chassis`). Nodes outside every chassis (a switch
    joining several, e.g. a global NIC switch) belong to no group."""
    bw = [lk.bandwidth_GBps for lk in topo.links]
    if not bw or min(bw) == max(bw):
        return []
    labels = _clusters_above(topo, np.array(bw) > min(bw))
    groups: dict[int, set[int]] = {}
    for i, v in enumerate(topo.node_ids):
        groups.setdefault(int(labels[i]), set()).add(v)
    out = [frozenset(g) for g in groups.values() if any(topo.kind[v] == "gpu" for v in g)]
    return sorted(out, key=min) if len(out) >= 2 else []
