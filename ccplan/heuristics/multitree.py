r"""Multi-spanning-tree AllReduce (the patent ``004_*.txt``), method ``"multitree"``.

The method, step by step as the patent states it:

**Step 1** (S1-S11): on the residual bandwidth of the network, build a spanning tree whose
diameter (largest distance between two of its nodes, distances measured by the quantised link
delay) is at most ``2H`` using only edges with residual bandwidth ``>= r``: start from a
random node; repeatedly take, among the edges from the tree to a node outside it, the one with
the *largest residual bandwidth* (S7), among equally wide edges the one giving the smallest
diameter (S9-S10; then the smaller edge index), accepting it only if the diameter stays
``<= 2H`` (condition (2)). When the tree spans every node it gets the rate ``b`` = its
bottleneck residual bandwidth (the patent leaves ``b`` open; ``extra["rate"] = "r"`` assigns
exactly ``r`` instead), the residual bandwidths drop by ``b`` and the next tree is built; the
first failure ends Step 1 with the lists ``TL`` (trees) and ``RL`` (rates).

**Step 2**: binary search on ``H`` for the smallest height whose total rate ``sum(RL)`` is
within ``tolerance`` of the total rate at the largest height.

**Step 3**: keep the ``K`` fastest trees and split the data among them in proportion to their
rates. Each tree then runs a pipelined reduce (leaves to root) followed by a broadcast (root to
leaves) of its share, chunk by chunk, as early as the links allow (the shared
:class:`~ccplan.heuristics.baselines.Placer`; the trees share links honestly).

Here the graph is undirected: an edge joins two nodes linked in both directions, its bandwidth
is the smaller of the two and its length the larger latency ``L`` (slots, the "quantised
delay"). When such edges do not connect the GPUs (NDv2 with 2 chassis, DGX2: their
inter-chassis links are one-way), one-way links are added as edges too and the missing
direction is routed over a shortest path. Switches are tree nodes like any other; switch
leaves are pruned. The root of a tree is its GPU of smallest eccentricity.

The same trees also serve AllGather (every GPU's share floods its tree from the GPU),
ReduceScatter (reduce towards each shard's owner), Broadcast and Reduce (from / to the root).

Parameters (``options.extra``): ``H`` (upper end of the height search, slots), ``r`` (rate
floor, GB/s; default 1% of the widest edge), ``K`` (default 4), ``seed`` (default
``options.seed``), ``tolerance`` (default 0.05), ``rate`` (``"bottleneck"`` or ``"r"``).
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from ccplan.errors import ValidationError
from ccplan.heuristics.baselines import Placer
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.methods import Outcome, SolveOptions, register
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

SUPPORTED: frozenset[str] = frozenset({"allreduce", "allgather", "reducescatter", "broadcast", "reduce"})


@dataclass(frozen=True)
class Edge:
    """An undirected edge of the tree-building graph."""

    u: int
    v: int
    bandwidth: float
    length: int


@dataclass(frozen=True)
class Tree:
    """A spanning tree: its edges (indices into the edge list) and its rate (GB/s)."""

    edges: tuple[int, ...]
    rate: float


def undirected_edges(instance: Instance) -> list[Edge]:
    """Edges of the tree graph (module docstring), sorted by node pair."""
    topo = instance.topology
    lat = instance.latency
    index = topo.link_index
    pairs: dict[tuple[int, int], Edge] = {}
    for lk in topo.links:
        a, b = sorted(lk.key)
        if (a, b) in pairs or not topo.has_link(b, a) or not topo.has_link(a, b):
            continue
        back = topo.link(b, a)
        fwd = topo.link(a, b)
        pairs[(a, b)] = Edge(a, b, min(fwd.bandwidth_GBps, back.bandwidth_GBps),
                             int(max(lat[index[(a, b)]], lat[index[(b, a)]])))
    edges = sorted(pairs.values(), key=lambda e: (e.u, e.v))
    if not _connects(topo.node_ids, edges, topo.gpus):
        for lk in topo.links:
            a, b = sorted(lk.key)
            if (a, b) not in pairs:
                pairs[(a, b)] = Edge(a, b, lk.bandwidth_GBps, int(lat[index[lk.key]]))
        edges = sorted(pairs.values(), key=lambda e: (e.u, e.v))
        log.info("multitree on %s: one-way links added as tree edges", topo.name)
    return edges


def _connects(nodes: Sequence[int], edges: Sequence[Edge], gpus: Sequence[int]) -> bool:
    parent = {n: n for n in nodes}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for e in edges:
        parent[find(e.u)] = find(e.v)
    return len({find(g) for g in gpus}) == 1


def _grow(
    nodes: Sequence[int], edges: Sequence[Edge], incident: Mapping[int, Sequence[int]],
    residual: Sequence[float], height: int, r: float, rng: random.Random,
) -> list[int] | None:
    """Step 1, S2-S10: one spanning tree of diameter <= 2H on edges with residual >= r."""
    start = rng.choice(list(nodes))
    dist: dict[int, dict[int, int]] = {start: {start: 0}}
    diameter = 0
    chosen: list[int] = []
    while len(dist) < len(nodes):
        cands = [
            i for x in dist for i in incident[x]
            if residual[i] >= r and ((edges[i].u in dist) != (edges[i].v in dist))
        ]
        cands = sorted(set(cands), key=lambda i: (-residual[i], i))
        best: int | None = None
        best_d = 2 * height
        for i in cands:
            if best is not None and residual[best] > residual[i]:
                break  # S8: only edges as wide as the chosen one compete on diameter
            e = edges[i]
            inside = e.u if e.u in dist else e.v
            d = max(diameter, max(dist[inside].values()) + e.length)
            if d <= best_d and (best is None or d < best_d):
                best, best_d = i, d
        if best is None:
            return None
        e = edges[best]
        inside, outside = (e.u, e.v) if e.u in dist else (e.v, e.u)
        dist[outside] = {x: dx + e.length for x, dx in dist[inside].items()}
        dist[outside][outside] = 0
        for x, dx in dist[outside].items():
            if x != outside:
                dist[x][outside] = dx
        diameter = best_d
        chosen.append(best)
    return chosen


def build_trees(
    nodes: Sequence[int],
    edges: Sequence[Edge],
    height: int,
    r: float,
    seed: int,
    rate_rule: str = "bottleneck",
) -> list[Tree]:
    """Step 1: the list of trees ``TL`` with their rates ``RL`` for height bound ``height``."""
    rng = random.Random(seed)
    incident: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(edges):
        incident[e.u].append(i)
        incident[e.v].append(i)
    residual = [e.bandwidth for e in edges]
    trees: list[Tree] = []
    while len(trees) < 10 * len(edges) + 1:
        chosen = _grow(nodes, edges, incident, residual, height, r, rng)
        if chosen is None:
            break
        bottleneck = min((residual[i] for i in chosen), default=0.0)
        rate = bottleneck if rate_rule == "bottleneck" else min(r, bottleneck)
        if rate <= 0:
            break
        for i in chosen:
            residual[i] -= rate
        trees.append(Tree(tuple(chosen), rate))
    return trees


def search_height(
    nodes: Sequence[int], edges: Sequence[Edge], h_max: int, r: float, seed: int, tolerance: float,
    rate_rule: str = "bottleneck",
) -> tuple[int, list[Tree]]:
    """Step 2: the smallest ``H`` in ``[1, h_max]`` (binary search) whose total rate is at least
    ``(1 - tolerance)`` times the total rate at ``h_max``."""
    full = build_trees(nodes, edges, h_max, r, seed, rate_rule)
    target = (1 - tolerance) * sum(t.rate for t in full)
    if not full:
        return h_max, full
    lo, hi, best = 1, h_max, (h_max, full)
    while lo < hi:
        mid = (lo + hi) // 2
        trees = build_trees(nodes, edges, mid, r, seed, rate_rule)
        if trees and sum(t.rate for t in trees) >= target - 1e-12:
            hi, best = mid, (mid, trees)
        else:
            lo = mid + 1
    return best


def split_chunks(chunks: Sequence[Chunk], rates: Sequence[float]) -> list[list[Chunk]]:
    """Step 3: smooth weighted round robin, so every tree gets a share proportional to its rate
    (chunk order interleaves sources: ``(index, source)``)."""
    order = sorted(chunks, key=lambda c: (c[1], c[0]))
    total = sum(rates)
    credit = [0.0] * len(rates)
    out: list[list[Chunk]] = [[] for _ in rates]
    for c in order:
        for k, w in enumerate(rates):
            credit[k] += w
        k = max(range(len(rates)), key=lambda i: (credit[i], -i))
        credit[k] -= total
        out[k].append(c)
    return out


def _tree_adjacency(tree: Tree, edges: Sequence[Edge], kind: Mapping[int, str]) -> dict[int, set[int]]:
    adj: dict[int, set[int]] = defaultdict(set)
    for i in tree.edges:
        adj[edges[i].u].add(edges[i].v)
        adj[edges[i].v].add(edges[i].u)
    # Prune switch leaves (nothing to contribute or deliver), repeatedly.
    leaves = [x for x in adj if len(adj[x]) <= 1 and kind[x] == "switch"]
    while leaves:
        x = leaves.pop()
        for y in adj.pop(x, set()):
            adj[y].discard(x)
            if len(adj[y]) <= 1 and kind[y] == "switch":
                leaves.append(y)
    return adj


def _orient(adj: Mapping[int, set[int]], root: int) -> tuple[dict[int, int | None], list[int]]:
    parent: dict[int, int | None] = {root: None}
    order = [root]
    for x in order:
        for y in sorted(adj[x]):
            if y not in parent:
                parent[y] = x
                order.append(y)
    return parent, order


def _edge_path(p: Placer, a: int, b: int) -> list[int] | None:
    return [a, b] if p.topo.has_link(a, b) else None


def _reduce_on(p: Placer, adj: Mapping[int, set[int]], sink: int, chunks: Sequence[Chunk]) -> None:
    """Pipelined reduce towards ``sink`` on the tree. A switch does not reduce (no in-network
    reduction): a GPU below a switch sends its partial sum through the switch (and any switches
    above it) to its nearest GPU ancestor."""
    parent, order = _orient(adj, sink)
    kind = p.topo.kind
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for x in reversed(order):
        if parent[x] is None or kind[x] == "switch":
            continue
        path = [x]
        while True:
            nxt = parent[path[-1]]
            assert nxt is not None  # the sink is a GPU
            path.append(nxt)
            if kind[nxt] == "gpu":
                break
        hops_exist = all(p.topo.has_link(a, b) for a, b in pairwise(path))
        for c in chunks:
            route = path if hops_exist else p._partial_path(c, x, path[-1], sink, exchange=False)
            if sink in route[1:-1]:
                # Every route to the ancestor passes the sink (one-way links): stop there. The
                # sink is where the whole reduction ends, so the partial sum is counted once
                # either way; passing through would carry the sink's own sum away.
                route = route[: route.index(sink) + 1]
            arr = p.reduce_to(c, x, route[-1], ready[(c, x)], sink=sink, path=route)
            ready[(c, route[-1])] = max(ready[(c, route[-1])], arr)
    for c in chunks:
        p.mark_full(c, sink, ready[(c, sink)])


def _flood(p: Placer, adj: Mapping[int, set[int]], src: int, chunks: Sequence[Chunk]) -> None:
    parent, order = _orient(adj, src)
    for x in order:
        par = parent[x]
        if par is not None:
            for c in chunks:
                p.copy(c, par, x, path=_edge_path(p, par, x))


def _center(
    adj: Mapping[int, set[int]], edges_len: Mapping[tuple[int, int], int], gpus: Sequence[int]
) -> int:
    best: tuple[int, int] | None = None
    for g in gpus:
        dist = {g: 0}
        stack = [g]
        while stack:
            x = stack.pop()
            for y in adj[x]:
                if y not in dist:
                    dist[y] = dist[x] + edges_len[(min(x, y), max(x, y))]
                    stack.append(y)
        ecc = max(dist.values())
        if best is None or ecc < best[0]:
            best = (ecc, g)
    assert best is not None
    return best[1]


def multitree_schedule(instance: Instance, options: SolveOptions) -> tuple[Schedule, dict[str, Any]]:
    """Steps 1-3 and the pipelined per-tree schedule; returns the schedule and a summary."""
    coll = instance.collective
    topo = instance.topology
    if coll.kind not in SUPPORTED:
        raise ValidationError(
            f"method 'multitree' does not support collective {coll.kind!r} "
            f"(supported: {', '.join(sorted(SUPPORTED))})"
        )
    extra = dict(options.extra or {})
    edges = undirected_edges(instance)
    if not edges:
        raise ValidationError(f"multitree: topology {topo.name!r} has no links")
    widest = max(e.bandwidth for e in edges)
    r = float(extra.get("r", 0.01 * widest))
    k_max = int(extra.get("K", 4))
    seed = int(extra.get("seed", options.seed))
    tol = float(extra.get("tolerance", 0.05))
    rate_rule = str(extra.get("rate", "bottleneck"))
    if r <= 0 or k_max < 1 or not 0 <= tol < 1 or rate_rule not in ("bottleneck", "r"):
        raise ValidationError(
            f"multitree: need r > 0, K >= 1, 0 <= tolerance < 1, rate in (bottleneck, r); got r={r}, "
            f"K={k_max}, tolerance={tol}, rate={rate_rule!r}"
        )
    h_max = int(extra.get("H", sum(e.length for e in edges)))
    if h_max < 1:
        raise ValidationError(f"multitree: H must be >= 1, got {h_max}")
    height, trees = search_height(topo.node_ids, edges, h_max, r, seed, tol, rate_rule)
    if not trees:
        raise ValidationError(
            f"multitree: no spanning tree of height <= {h_max} with rate >= {r} GB/s on {topo.name!r}"
        )
    trees = sorted(trees, key=lambda t: -t.rate)[:k_max]
    gpus = frozenset(topo.gpus)
    lengths = {(e.u, e.v): e.length for e in edges}
    adjs = [_tree_adjacency(t, edges, topo.kind) for t in trees]
    p = Placer(instance)
    shares = split_chunks(coll.chunk_ids, [t.rate for t in trees])
    for adj, share in zip(adjs, shares, strict=True):
        if not share:
            continue
        if coll.kind == "allreduce":
            root = _center(adj, lengths, sorted(gpus))
            _reduce_on(p, adj, root, share)
            _flood(p, adj, root, share)
        elif coll.kind == "reducescatter":
            by_owner: dict[int, list[Chunk]] = defaultdict(list)
            for c in share:
                by_owner[c[0]].append(c)
            for owner, cs in sorted(by_owner.items()):
                _reduce_on(p, adj, owner, cs)
        elif coll.kind == "reduce":
            assert coll.root is not None
            _reduce_on(p, adj, coll.root, share)
        else:
            by_src: dict[int, list[Chunk]] = defaultdict(list)
            for c in share:
                by_src[c[0]].append(c)
            for src, cs in sorted(by_src.items()):
                _flood(p, adj, src, cs)
    summary = {
        "height": height,
        "trees": [{"edges": [(edges[i].u, edges[i].v) for i in t.edges], "rate_GBps": t.rate} for t in trees],
        "shares": [len(s) for s in shares],
    }
    return p.schedule("multitree"), summary


@register("multitree")
def multitree_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Registered engine ``multitree`` (``004_*.txt``, Steps 1-3)."""
    schedule, summary = multitree_schedule(instance, options)
    return Outcome(schedule=schedule, status="feasible", details=summary)
