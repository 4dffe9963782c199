"""Test utilities independent of every engine: small topologies, a greedy schedule maker and
a hypothesis strategy for random small instances.

The greedy is deliberately naive and obviously valid: every chunk follows a shortest-path tree
(link weight ``L``) from its holders to the nodes that need it, and each tree edge is placed at
the earliest slot at which the sender holds the chunk and the link (and, with ``single_port``,
both ports) is free for ``l`` slots under ``omega`` and the outages. It is used to get valid
schedules of random instances, not good ones.
"""

from __future__ import annotations

import heapq
import random
from collections import defaultdict

from hypothesis import strategies as st

from ccplan.instances import Instance, Topology, make_collective, make_instance, make_topology
from ccplan.instances.collectives import Chunk
from ccplan.schedule import Schedule, Send

# --------------------------------------------------------------------------- topologies


def ring_topology(n: int, bidirectional: bool = False, bw: float = 50.0, alpha: float = 0.0) -> Topology:
    """Ring ``0 -> 1 -> ... -> n-1 -> 0`` (both ways when ``bidirectional``)."""
    links = [(i, (i + 1) % n, bw, alpha) for i in range(n)]
    if bidirectional:
        return make_topology(f"ring{n}-bi", range(n), duplex_links=links)
    return make_topology(f"ring{n}", range(n), directed_links=links)


def line_topology(n: int, bw: float = 50.0, alpha: float = 0.0) -> Topology:
    """Line ``0 - 1 - ... - n-1`` with duplex links."""
    return make_topology(f"line{n}", range(n), duplex_links=[(i, i + 1, bw, alpha) for i in range(n - 1)])


def full_topology(n: int, bw: float = 50.0, alpha: float = 0.0) -> Topology:
    """Every ordered pair of GPUs linked."""
    links = [(a, b, bw, alpha) for a in range(n) for b in range(a + 1, n)]
    return make_topology(f"full{n}", range(n), duplex_links=links)


def star_topology(n: int, bw: float = 50.0, alpha: float = 0.0) -> Topology:
    """``n`` GPUs ``0..n-1`` each linked both ways to switch ``n``."""
    return make_topology(
        f"star{n}", range(n), duplex_links=[(g, n, bw, alpha) for g in range(n)], switches=[n]
    )


# --------------------------------------------------------------------------- greedy schedules


def _tree_edges(instance: Instance, chunk: Chunk, rng: random.Random) -> list[tuple[int, int]]:
    """Edges of a shortest-path (weight L) tree from the chunk's holders to its demand nodes."""
    topo = instance.topology
    coll = instance.collective
    latency = instance.latency
    dist: dict[int, int] = {}
    parent: dict[int, int | None] = {}
    heap: list[tuple[int, float, int, int | None]] = []
    for h in coll.holders[chunk]:
        heapq.heappush(heap, (0, rng.random(), h, None))
    while heap:
        d, _, u, par = heapq.heappop(heap)
        if u in dist:
            continue
        dist[u] = d
        parent[u] = par
        for e in topo.out_links[u]:
            x = topo.links[e].dst
            if x not in dist:
                heapq.heappush(heap, (d + int(latency[e]), rng.random(), x, u))
    edges: set[tuple[int, int]] = set()
    for c, v in coll.demands:
        if c != chunk:
            continue
        if v not in dist:
            raise ValueError(f"chunk {chunk} cannot reach {v}")
        node = v
        while parent[node] is not None:
            p = parent[node]
            assert p is not None
            edges.add((p, node))
            node = p
    return sorted(edges)


def greedy_schedule(instance: Instance, seed: int = 0, max_slot: int = 100_000) -> Schedule:
    """A valid (not good) schedule for a data-movement instance; see the module docstring."""
    rng = random.Random(seed)
    topo = instance.topology
    coll = instance.collective
    occ = instance.occupancy
    latency = instance.latency
    hold: dict[tuple[Chunk, int], int] = {}
    for c, hs in coll.holders.items():
        for h in hs:
            hold[(c, h)] = 0
    pending: list[tuple[Chunk, int, int]] = []
    for c in coll.chunk_ids:
        pending.extend((c, u, x) for u, x in _tree_edges(instance, c, rng))
    rng.shuffle(pending)
    load: dict[tuple[int, int], int] = defaultdict(int)
    port: set[tuple[str, int, int]] = set()
    sends: list[Send] = []
    t = 0
    while pending:
        if t > max_slot:
            raise RuntimeError("greedy schedule did not finish")
        rest = []
        for c, u, x in pending:
            at = hold.get((c, u))
            if at is None or at > t:
                rest.append((c, u, x))
                continue
            e = topo.link_index[(u, x)]
            window = range(t, t + int(occ[e]))
            fits = all(load[(e, s)] < instance.omega(e, s) for s in window)
            if fits and instance.single_port:
                fits = all(("s", u, s) not in port and ("r", x, s) not in port for s in window)
            if not fits:
                rest.append((c, u, x))
                continue
            for s in window:
                load[(e, s)] += 1
                if instance.single_port:
                    port.add(("s", u, s))
                    port.add(("r", x, s))
            hold[(c, x)] = t + int(latency[e])
            sends.append(Send(slot=t, chunk=c, src=u, dst=x))
        pending = rest
        t += 1
    return Schedule(tuple(sends), method="test-greedy")


def demand_makespan(instance: Instance, schedule: Schedule) -> int:
    """Max over demands of the slot the delivering send makes the chunk usable (independent of
    the verifier: first delivering send per (chunk, node))."""
    index = instance.topology.link_index
    arrive: dict[tuple[Chunk, int], int] = {}
    for s in schedule.sends:
        key = (s.chunk, s.dst)
        at = s.slot + int(instance.latency[index[(s.src, s.dst)]])
        arrive[key] = min(arrive.get(key, at), at)
    return max((arrive[d] for d in instance.collective.demands), default=0)


# --------------------------------------------------------------------------- random instances

BANDWIDTHS = (12.5, 25.0, 50.0)
ALPHAS = (0.0, 0.3, 1.5, 4.0)


@st.composite
def random_topologies(draw: st.DrawFn, max_gpus: int = 5) -> Topology:
    """Strongly connected small topologies: a directed cycle through all nodes plus random links."""
    n_gpu = draw(st.integers(2, max_gpus))
    n_switch = draw(st.integers(0, 1))
    n = n_gpu + n_switch
    order = draw(st.permutations(list(range(n))))
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    extra = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=n * 2))
    pairs |= {(a, b) for a, b in extra if a != b}
    links = []
    for a, b in sorted(pairs):
        links.append((a, b, draw(st.sampled_from(BANDWIDTHS)), draw(st.sampled_from(ALPHAS))))
    return make_topology("random", range(n_gpu), directed_links=links, switches=range(n_gpu, n))


@st.composite
def random_instances(
    draw: st.DrawFn,
    max_gpus: int = 5,
    collectives: tuple[str, ...] = ("allgather", "alltoall", "broadcast", "multicast", "gather", "scatter"),
    allow_capacity: bool = True,
    allow_outages: bool = True,
    allow_single_port: bool = True,
    alpha_threshold: float | None = None,
    switch_models: tuple[str, ...] = ("store-and-forward",),
) -> Instance:
    """Random small data-movement instances covering every option of the slot model."""
    topo = draw(random_topologies(max_gpus=max_gpus))
    kind = draw(st.sampled_from(collectives))
    gpus = topo.gpus
    root = draw(st.sampled_from(gpus))
    dests = None
    if kind == "multicast":
        dests = draw(st.sets(st.sampled_from(gpus), min_size=1))
    coll = make_collective(kind, topo, chunks=draw(st.integers(1, 2)), root=root, dests=dests)
    outages: list[tuple[int, int, int]] = []
    if allow_outages and draw(st.booleans()):
        for _ in range(draw(st.integers(1, 3))):
            link = draw(st.sampled_from(topo.links))
            outages.append((link.src, link.dst, draw(st.integers(0, 6))))
    return make_instance(
        topo,
        coll,
        draw(st.sampled_from(("64KB", "1MB", "3MB"))),
        tau_rule=draw(st.sampled_from(("fastest", "slowest"))),
        alpha_threshold=draw(st.sampled_from((0.0, 0.1))) if alpha_threshold is None else alpha_threshold,
        single_port=allow_single_port and draw(st.booleans()),
        capacity=draw(st.sampled_from((1, 2))) if allow_capacity else 1,
        outages=outages,
        switch_model=draw(st.sampled_from(switch_models)),
    )
