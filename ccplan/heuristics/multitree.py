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

from ccplan.contract import Outcome, SolveOptions, register
from ccplan.errors import ValidationError
from ccplan.heuristics.baselines import Placer
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.relays import LinkBook

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


# ====================================================================== cluster AllReduce
class _Links(LinkBook):
    """:class:`~ccplan.schedule.relays.LinkBook` that also keeps the sends booked."""

    def __init__(self, instance: Instance) -> None:
        super().__init__(instance)
        self.lat = [int(x) for x in instance.latency]
        self.count = [0] * instance.topology.num_links
        self.sends: list[Send] = []

    def send(self, chunk: Chunk, src: int, dst: int, ready: int, reduce: bool) -> tuple[int, int]:
        """Book ``src -> dst`` at the first free slot ``>= ready``; returns (start, arrival)."""
        link = self.instance.topology.link_index[(src, dst)]
        t = self.earliest(link, src, dst, max(0, ready))
        self.book(link, src, dst, t)
        self.count[link] += 1
        self.sends.append(Send(slot=t, chunk=chunk, src=src, dst=dst, reduce=reduce))
        return t, t + self.lat[link]


def _useful(tree: Mapping[int, int], kind: Mapping[int, str]) -> set[int]:
    """Nodes of the tree with a GPU at or below them (switch-only branches carry nothing)."""
    keep: set[int] = set()
    for x in tree:
        if kind[x] == "gpu":
            y = x
            while y in tree and y not in keep:
                keep.add(y)
                y = tree[y]
    return keep


def _hops(tree: Mapping[int, int], x: int, root: int) -> int:
    n = 0
    while x != root:
        x, n = tree[x], n + 1
    return n


def _clusters(instance: Instance) -> list[frozenset[int]]:
    """Weakly connected components of the links faster than the slowest (the chassis)."""
    topo = instance.topology
    slowest = min(lk.bandwidth_GBps for lk in topo.links)
    parent = {v: v for v in topo.node_ids}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for lk in topo.links:
        if lk.bandwidth_GBps > slowest:
            parent[find(lk.src)] = find(lk.dst)
    groups: dict[int, set[int]] = defaultdict(set)
    for v in topo.node_ids:
        groups[find(v)].add(v)
    return [frozenset(g) for g in groups.values()]


def _cluster_tree(instance: Instance, root: int, inside: frozenset[int], towards: bool) -> dict[int, int]:
    """Cheapest-occupancy tree of ``root`` inside one cluster (Prim; see :func:`_prim`)."""
    return _prim(instance, root, inside, towards)


def _prim(instance: Instance, root: int, inside: frozenset[int], towards: bool) -> dict[int, int]:
    import heapq

    topo = instance.topology
    occ = instance.occupancy
    adjacency = topo.in_links if towards else topo.out_links
    depth = {root: 0}
    nxt: dict[int, int] = {}
    heap: list[tuple[int, int, int, int]] = []

    def push(a: int) -> None:
        for li in adjacency[a]:
            lk = topo.links[li]
            b = lk.src if towards else lk.dst
            if b in inside and b not in depth:
                heapq.heappush(heap, (int(occ[li]), depth[a] + 1, b, a))

    push(root)
    while heap:
        _, d, b, a = heapq.heappop(heap)
        if b not in depth:
            depth[b], nxt[b] = d, a
            push(b)
    return nxt


def _path_inside(instance: Instance, src: int, dst: int, inside: frozenset[int]) -> list[int] | None:
    """Fewest-hops path ``src -> dst`` through nodes of one cluster."""
    topo = instance.topology
    prev = {src: src}
    frontier = [src]
    while frontier and dst not in prev:
        nxt = []
        for a in frontier:
            for li in topo.out_links[a]:
                b = topo.links[li].dst
                if b in inside and b not in prev:
                    prev[b] = a
                    nxt.append(b)
        frontier = nxt
    if dst not in prev:
        return None
    path = [dst]
    while path[-1] != src:
        path.append(prev[path[-1]])
    return path[::-1]


def cluster_allreduce_schedule(instance: Instance) -> Schedule:
    """AllReduce across chassis, every chunk reduced once per chassis and exchanged once per
    pair of chassis, pipelined chunk after chunk.

    For chunk ``k`` and every ordered pair of chassis ``(A, B)``, the least used direct link
    ``A -> B`` (``o_AB -> h_AB``) is chosen. Chassis ``B`` reduces its GPUs' contributions up a
    cheapest-occupancy tree to ``r_B``, the head of the link chosen *into* ``B`` (switches
    reduce in-network); ``r_B`` copies its partial sum to the tail ``o_BA`` of every link out of
    ``B``, which sends it across; ``r_A`` folds every other chassis's partial sum into its own
    and so holds the full sum, which it copies down a tree to its chassis. Each chassis thus
    computes the full sum itself and every chunk crosses each pair of chassis once in each
    direction, the minimum the combining cut allows. Ordering guards keep the verifier's
    rules: a partial sum from outside lands at ``r_A`` only after ``r_A`` has sent its own on,
    and a full copy reaches a relay only after it has sent on the partial sum it relayed.

    A switch of the tree that cannot reduce (not in ``instance.reducing_switches``) relays
    instead: its children pass the partial sum from one to the next through it, each adding
    its own (:func:`_relay_chain`), and the last sends it on to the switch's parent.
    """
    topo = instance.topology
    clusters = [c for c in _clusters(instance) if any(topo.kind[v] == "gpu" for v in c)]
    if len(clusters) < 2:
        raise ValidationError(
            f"cluster-allreduce: {topo.name!r} has one chassis (no slower links between groups)"
        )
    between: dict[tuple[int, int], list[int]] = defaultdict(list)
    where = {v: i for i, c in enumerate(clusters) for v in c}
    for li, lk in enumerate(topo.links):
        a, b = where.get(lk.src), where.get(lk.dst)
        if a is not None and b is not None and a != b:
            between[(a, b)].append(li)
    for a in range(len(clusters)):
        for b in range(len(clusters)):
            if a != b and not between[(a, b)]:
                raise ValidationError(
                    f"cluster-allreduce: no direct link from chassis {a} to chassis {b} of {topo.name!r}"
                )
    book = _Links(instance)
    relay = frozenset(topo.switches) - instance.reducing_switches
    for chunk in sorted(instance.collective.chunk_ids, key=lambda c: (c[1], c[0])):
        pick = {
            pair: topo.links[min(links, key=lambda li: (book.count[li], li))]
            for pair, links in between.items()
        }
        roots = {b: pick[((b + 1) % len(clusters), b)].dst for b in range(len(clusters))}
        ready: dict[int, int] = {}
        sent_on: dict[int, int] = defaultdict(lambda: -1)
        for b, inside in enumerate(clusters):
            root = roots[b]
            up = _cluster_tree(instance, root, inside, towards=True)
            keep = _useful(up, topo.kind)
            arrive: dict[int, int] = defaultdict(int)
            chained: set[int] = set()
            for x in sorted(keep, key=lambda v: -_hops(up, v, root)):
                if x in relay or x in chained:
                    continue
                if up[x] in relay:
                    chained |= _relay_chain(book, chunk, up, keep, relay, up[x], arrive, sent_on)
                    continue
                start, t = book.send(chunk, x, up[x], arrive[x], reduce=True)
                sent_on[x] = max(sent_on[x], start)
                arrive[up[x]] = max(arrive[up[x]], t)
            ready[b] = arrive[root]
        full: dict[int, int] = {b: ready[b] for b in range(len(clusters))}
        for (a, b), lk in sorted(pick.items()):
            if roots[b] != lk.dst:
                # More than two chassis: the link into B must end at B's root.
                if not topo.has_link(lk.src, roots[b]):
                    raise ValidationError("cluster-allreduce: the chosen links do not meet the roots")
                lk = topo.link(lk.src, roots[b])
            path = _path_inside(instance, roots[a], lk.src, clusters[a])
            if path is None:
                raise ValidationError(f"cluster-allreduce: no path {roots[a]} -> {lk.src} inside a chassis")
            t = ready[a]
            for u, v in pairwise(path):
                start, t = book.send(chunk, u, v, t, reduce=False)
                sent_on[u] = max(sent_on[u], start)
            # The partial sum must land at the far root after that root sent its own on.
            start, t = book.send(chunk, lk.src, lk.dst, max(t, sent_on[lk.dst] + 1 - book.lat[
                topo.link_index[(lk.src, lk.dst)]]), reduce=True)
            sent_on[lk.src] = max(sent_on[lk.src], start)
            full[b] = max(full[b], t)
        for b, inside in enumerate(clusters):
            root = roots[b]
            down = _cluster_tree(instance, root, inside, towards=False)
            keep = _useful(down, topo.kind)
            hold = {root: full[b]}
            for x in sorted(keep, key=lambda v: _hops(down, v, root)):
                link = topo.link_index[(down[x], x)]
                guard = sent_on[x] + 1 - book.lat[link]
                _, t = book.send(chunk, down[x], x, max(hold[down[x]], guard), reduce=False)
                hold[x] = t
    return Schedule(tuple(sorted(book.sends)), method="cluster-allreduce")


def _relay_chain(
    book: _Links,
    chunk: Chunk,
    up: Mapping[int, int],
    keep: set[int],
    relay: frozenset[int],
    switch: int,
    arrive: dict[int, int],
    sent_on: dict[int, int],
) -> set[int]:
    """The children of ``switch`` (a switch that cannot reduce) add their partial sums in a
    chain through it: each copies its sum into the switch, which passes it to the next child
    (receive-and-reduce), the last child's to the switch's parent. The switch holds one
    partial sum at a time (each child sends only after the previous sum reached it). The
    chain starts at a different child for every chunk, so the switch's links share the load.
    Returns the children chained."""
    children = sorted(x for x in keep if up.get(x) == switch)
    if any(x in relay for x in children) or up[switch] in relay:
        raise ValidationError("cluster-allreduce: nested switches that cannot reduce")
    turn = sum(chunk) % len(children)
    children = children[turn:] + children[:turn]
    children.sort(key=lambda x: arrive[x])  # stable: ready ones first, rotated among equals
    targets = [*children[1:], up[switch]]
    for x, nxt in zip(children, targets, strict=True):
        start, t = book.send(chunk, x, switch, arrive[x], reduce=False)
        sent_on[x] = max(sent_on[x], start)
        start, t = book.send(chunk, switch, nxt, t, reduce=True)
        sent_on[switch] = max(sent_on[switch], start)
        arrive[nxt] = max(arrive[nxt], t)
    return set(children)


@register("cluster-allreduce")
def cluster_allreduce_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Registered engine ``cluster-allreduce`` (AllReduce on machines of several chassis).

    Raises :class:`ValidationError` when the machine has one chassis, a pair of chassis has no
    direct link, or the schedule does not verify (chassis whose fast links do not join them
    strongly, as on some random graphs); the ``heuristic`` AllReduce then keeps its others."""
    if instance.collective.kind != "allreduce":
        raise ValidationError(
            f"method 'cluster-allreduce' schedules allreduce only, not {instance.collective.kind!r}"
        )
    from ccplan.schedule.verify import verify

    schedule = cluster_allreduce_schedule(instance)
    report = verify(instance, schedule)
    if not report.ok:
        # Built for chassis that their fast links join strongly (DGX2, NDv2); elsewhere the
        # trees or the ordering guards can miss a case: refuse rather than hand it out.
        raise ValidationError(
            f"cluster-allreduce does not apply to {instance.topology.name!r}: {report.violations[0]}"
        )
    return Outcome(schedule=schedule, status="feasible")
