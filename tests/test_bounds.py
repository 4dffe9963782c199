"""Lower bounds: hand-derived values on small topologies, NDv2, and properties.

Notation as in ``ccplan/bounds.py``: ``l`` occupancy, ``L`` latency (slots) of a link, ``C`` chunks
per GPU, ``N`` GPUs, ``tau`` the slot length, ``tr = mu / B`` the transfer time of one chunk.
"""

from __future__ import annotations

import itertools
import math

import networkx as nx
import pytest
from helpers import (
    full_topology,
    greedy_schedule,
    line_topology,
    random_instances,
    ring_topology,
    star_topology,
)
from hypothesis import HealthCheck, given, settings

from ccplan.bounds import Bounds, compute_bounds, lower_bound_slots
from ccplan.errors import ValidationError
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.instances.collectives import Collective
from ccplan.schedule import Schedule, Send, verify
from ccplan.schedule.simulate import simulate


def _allgather(topo, chunks: int, size: str = "1MB", **kw) -> Instance:  # type: ignore[no-untyped-def]
    return make_instance(topo, make_collective("allgather", topo, chunks=chunks), size, **kw)


def _triple(b: Bounds) -> tuple[int, int, int]:
    return (b.latency_slots, b.ingress_slots, b.cut_slots)


def test_unidirectional_ring_allgather() -> None:
    """Unidirectional ring, N=4, C=2, alpha=0: every link has l = L = 1.

    Latency: the farthest chunk is N-1 = 3 hops away. Ingress: v needs (N-1)C = 6 chunks on its
    single in-link, which delivers at most D by slot D, so D >= 6. Cut: for v and A = s + the k
    nodes v-k..v-1 the value is (N-1-k)C + D (one link leaves A), >= (N-1)C iff D >= kC, worst at
    k = N-1: D >= 6; a non-contiguous A only adds crossing links. So (3, 6, 6), best 6 = "ingress"
    (ties go to the simpler bound). Continuous: (N-1)C chunks through one link of rate 1/tr:
    T = 6 tr = 6 tau (ForestColl's (N-1)/N * M/b); latency_us = 3 tr.
    """
    inst = _allgather(ring_topology(4), chunks=2)
    b = compute_bounds(inst)
    assert _triple(b) == (3, 6, 6)
    assert (b.best_slots, b.best_name) == (6, "ingress")
    assert b.cut_us == pytest.approx(6 * inst.tau_us, rel=1e-9)
    assert b.latency_us == pytest.approx(3 * inst.tau_us, rel=1e-9)
    assert b.best_us == pytest.approx(6 * inst.tau_us, rel=1e-9)
    assert lower_bound_slots(inst) == 6


def test_unidirectional_ring_latency_dominates() -> None:
    """Unidirectional ring, N=4, C=1, alpha = tau (mu = 250 KB at 50 GB/s: tr = tau = 5 us).

    alpha / tau = 1 > 0.1, so delta = 1 and L = 2 (l = 1). Latency: 3 hops * 2 = 6. Ingress: the
    in-link's useful sends start in [0, D-2] (v-1 holds a chunk v needs from slot 0), so at most
    D-1 arrive: D-1 >= 3 gives 4. Cut (windowed): A = {s, v+1} (v+1 = v-3 holds the chunk that
    is 3 hops from v) has value 2 (source arcs of v-1, v-2) + the window of link v+1 -> v+2, whose
    sends must start by D - L - dist(v+2, v) = D - 6: 0 for D < 6, so the cut also carries the
    latency: 6. (Without windows the runs ending at v give (3-k) + (D-1) >= 3, i.e. 4.)
    So (6, 4, 6), best 6 "latency" (ties go to the simplest). Microseconds: latency
    3 (alpha + tr) = 30; the same cut needs T - (alpha + dist_us(v+2, v)) = T - 25 >= tr: 30;
    without windows (3 chunks through one link of rate 1/tr): 15.
    """
    inst = _allgather(ring_topology(4, alpha=5.0), chunks=1)
    assert inst.tau_us == pytest.approx(5.0)
    assert list(inst.latency) == [2, 2, 2, 2]
    b = compute_bounds(inst)
    assert _triple(b) == (6, 4, 6)
    assert (b.best_slots, b.best_name) == (6, "latency")
    assert b.latency_us == pytest.approx(30.0)
    assert b.cut_us == pytest.approx(30.0)
    assert b.best_us == pytest.approx(30.0)
    plain = compute_bounds(inst, time_windows=False)
    assert (plain.cut_slots, plain.cut_us) == (4, pytest.approx(15.0))


@pytest.mark.parametrize(("n", "chunks", "expected"), [(5, 2, (2, 4, 4)), (4, 1, (2, 2, 2))])
def test_bidirectional_ring_allgather(n: int, chunks: int, expected: tuple[int, int, int]) -> None:
    """Bidirectional ring, l = L = 1. Latency: floor(N/2) hops. Ingress: two in-links deliver 2D
    chunks by D, so D >= ceil((N-1)C/2) (N=5, C=2: 4; N=4, C=1: 2). Cut: A = s + V minus v is the
    ingress cut; a one-sided run of k < N-1 nodes leaves through the link into v (cap D) and
    the link away from v (cap <= D), value (N-1-k)C + 2D, which needs only 2D >= kC; two-sided
    runs cross four links. So the cut equals the ingress bound. Continuous: 2T/tr >= (N-1)C, i.e.
    cut_us = (N-1)C/2 tr (ForestColl's (N-1)/N * M/(2b)).
    """
    inst = _allgather(ring_topology(n, bidirectional=True), chunks=chunks)
    b = compute_bounds(inst)
    assert _triple(b) == expected
    assert b.cut_us == pytest.approx((n - 1) * chunks / 2 * inst.tau_us, rel=1e-9)


def test_fully_connected_allgather() -> None:
    """Fully connected N=4, C=3, l = L = 1. Latency 1. Ingress: N-1 in-links give (N-1)D >= (N-1)C,
    D >= 3. Cut: A = s + X (|X| = k, v not in X) has value (N-1-k)C + kD (links into v)
    + k(N-1-k)(D-1) (links to other nodes: the chunk still needs one hop, window D-1); at D = 3
    this is 9 - 3k + 3k + 2k(3-k) >= 9. So (1, 3, 3); continuous T = C tr = M/(N b).
    """
    inst = _allgather(full_topology(4), chunks=3)
    b = compute_bounds(inst)
    assert _triple(b) == (1, 3, 3)
    assert b.cut_us == pytest.approx(3 * inst.tau_us, rel=1e-9)


@pytest.mark.parametrize("chunks", [1, 2])
def test_star_switch_allgather(chunks: int) -> None:
    """N=4 GPUs around one switch w, duplex links, l = L = 1. Latency: 2 hops.

    Ingress: v's only in-link is w -> v; w holds nothing before slot 1 (its in-links deliver at
    slot 1 at the earliest), so useful sends on w -> v start in [1, D-1]: at most D-1 of them, and
    D - 1 >= (N-1)C gives D >= (N-1)C + 1 (4 for C=1, 7 for C=2). Achievable: w receives all
    chunks by slot 1.. and streams (N-1)C of them to v in slots 1..(N-1)C. The cut is the same
    (A = s + V minus v is the binding set). Continuous: w holds a chunk from tr on, so
    (T - tr)/tr >= (N-1)C: cut_us = ((N-1)C + 1) tr. Without time windows the switch's delay is
    lost: ingress = cut = (N-1)C, cut_us = (N-1)C tr (ForestColl's (N-1)/N * M/b).
    """
    inst = _allgather(star_topology(4), chunks=chunks)
    n1c = 3 * chunks
    b = compute_bounds(inst)
    assert _triple(b) == (2, n1c + 1, n1c + 1)
    assert b.cut_us == pytest.approx((n1c + 1) * inst.tau_us, rel=1e-9)
    plain = compute_bounds(inst, time_windows=False)
    assert _triple(plain) == (2, n1c, n1c)
    assert plain.cut_us == pytest.approx(n1c * inst.tau_us, rel=1e-9)


def test_line_rooted_collectives() -> None:
    """Line 0 - 1 - 2, C=2, root 0, l = L = 1.

    Broadcast: node 2's in-link 1 -> 2 is useful from slot 1 (node 1 holds nothing before), so
    D - 1 >= 2: 3 (the pipeline C + hops - 1). Scatter: the root alone holds the 4 chunks the
    others need and has one out-link (egress): D >= 4 (the cut bound includes egress), while
    the per-destination ingress is only 3 (node 2: window [1, D-1] for 2 chunks). Gather: the
    root receives 4 chunks on one in-link: 4.
    """
    topo = line_topology(3)
    bc = compute_bounds(make_instance(topo, make_collective("broadcast", topo, chunks=2, root=0), "1MB"))
    assert _triple(bc) == (2, 3, 3)
    sc = compute_bounds(make_instance(topo, make_collective("scatter", topo, chunks=2, root=0), "1MB"))
    assert _triple(sc) == (2, 3, 4)
    ga = compute_bounds(make_instance(topo, make_collective("gather", topo, chunks=2, root=0), "1MB"))
    assert _triple(ga) == (2, 4, 4)


def test_outage_delays_the_bound() -> None:
    """Link 0 -> 1 at 25 GB/s, 1 -> 0 at 50 GB/s (tau from the fast one): l(0->1) = L = 2.

    Broadcast C=2 from 0: without outage the sends start at 0 and 2 and the last arrives at 4.
    With slot 2 out on 0 -> 1 the second send cannot start at 1 (overlaps the first) or 2 (out);
    it starts at 3 and arrives at 5. Both the ingress and cut bounds follow (greedy earliest fit
    of 2-slot intervals avoiding slot 2), and the greedy schedule meets them.
    """
    topo = make_topology("pair", [0, 1], directed_links=[(0, 1, 25.0, 0.0), (1, 0, 50.0, 0.0)])
    coll = make_collective("broadcast", topo, chunks=2, root=0)
    base = make_instance(topo, coll, "1MB")
    out = make_instance(topo, coll, "1MB", outages=[(0, 1, 2)])
    assert _triple(compute_bounds(base)) == (2, 4, 4)
    assert _triple(compute_bounds(out)) == (2, 5, 5)
    assert verify(out, greedy_schedule(out)).makespan_slots == 5


def test_ndv2_two_chassis_allgather_1gb() -> None:
    """NDv2 2 chassis (16 GPUs, DGX1 inside, 0 -> 9 and 8 -> 1 at 12.5 GB/s), AllGather 1 GB, C=1.

    mu = 1 GB / 16 = 62.5 MB, tau = mu / 50 GB/s = 1250 us; l = 1, 2, 4 on 50, 25, 12.5 GB/s links;
    alpha / tau < 0.1 so delta = 0 and L = l. Plain cut (no windows): S = chassis 0 holds the 8
    chunks any chassis-1 GPU needs, and only 0 -> 9 leaves it: floor((D-4)/4) + 1 >= 8 gives
    D >= 32, i.e. algbw <= 1e9 B / (32 * 1250 us) = 25 GB/s (M/2 bytes through 12.5 GB/s:
    T >= 40000 us). D = 32 is feasible for every destination: route the 8 remote chunks through
    0 -> 9 (cap 8) and everything else on shortest paths; no intra-chassis link carries more
    than 15 units and each has cap >= floor((32-2)/2) + 1 = 16, so plain cut = 32 and plain
    cut_us = 40000 exactly (intra links carry 25 GB/s * 40 ms = 16 chunks >= 15).
    With time windows: the 8th send on 0 -> 9 starts >= 28 and arrives at 9 at >= 32; GPU 14
    (chassis 1, local 6) is 3 slots from GPU 9 (local 1: 1-3 (1) + 3-2 (1) + 2-6 (1), or 1-2 (2) +
    2-6 (1)), so the windowed cut is >= 35, and <= any valid schedule's makespan.
    """
    builtin = pytest.importorskip("ccplan.instances.builtin")
    topo = builtin.ndv2(chassis=2)
    assert len(topo.gpus) == 16 and not topo.switches
    assert topo.link(0, 9).bandwidth_GBps == 12.5 and topo.link(8, 1).bandwidth_GBps == 12.5
    inst = _allgather(topo, chunks=1, size="1GB")
    assert inst.tau_us == pytest.approx(1250.0)
    plain = compute_bounds(inst, time_windows=False)
    assert plain.cut_slots == 32
    assert plain.cut_us == pytest.approx(40000.0, rel=1e-9)
    assert inst.algbw_GBps(plain.cut_slots * inst.tau_us) == pytest.approx(25.0)
    assert inst.algbw_GBps(plain.cut_us) == pytest.approx(25.0)
    b = compute_bounds(inst)
    assert b.cut_slots >= 35
    assert inst.algbw_GBps(b.best_slots * inst.tau_us) <= 25.0
    schedule = greedy_schedule(inst)
    report = verify(inst, schedule)
    assert report.ok
    assert b.best_slots <= report.makespan_slots  # type: ignore[operator]


def test_ndv2_two_chassis_alltoall_1gb() -> None:
    """NDv2 2 chassis, AllToAll 1 GB, C=1: mu = 1 GB / 16, tau = 1250 us, l = 4 on 0 -> 9.

    Set cut S = chassis 0 (a bandwidth cluster: its GPUs are joined by links faster than
    12.5 GB/s): each of its 8 GPUs has a distinct chunk for each of the 8 GPUs of chassis 1, so 64
    chunks leave through 0 -> 9 alone: floor((D - 4)/4) + 1 >= 64 gives D >= 256 (GPU 9 itself
    wants some, so the window adds nothing). The per-destination flows alone only give 35.
    Continuously: 64 mu = 4 GB through 12.5 GB/s takes 320000 us, plus the link's alpha 1.3 us
    with time windows (the last chunk is usable at 9 only alpha after it leaves the link).
    """
    builtin = pytest.importorskip("ccplan.instances.builtin")
    topo = builtin.ndv2(chassis=2)
    inst = make_instance(topo, make_collective("alltoall", topo, chunks=1), "1GB")
    b = compute_bounds(inst)
    assert b.cut_slots == 256
    assert b.cut_us == pytest.approx(64 * 5000.0 + 1.3, rel=1e-12)
    plain = compute_bounds(inst, time_windows=False)
    assert plain.cut_slots == 256
    assert plain.cut_us == pytest.approx(64 * 5000.0, rel=1e-12)


def _reduce_like(topo, post_nodes: tuple[int, ...], chunks: int) -> Collective:  # type: ignore[no-untyped-def]
    gpus = topo.gpus
    pre = tuple(((0, i), tuple(gpus)) for i in range(chunks))
    post = tuple(((0, i), post_nodes) for i in range(chunks))
    return Collective("custom", chunks, pre, post, pieces=chunks, combining=True)


def test_combining_collectives() -> None:
    """Combining collectives built by hand on the line 0 - 1 - 2 (l = L = 1).

    Reduce to 0, C=2: contribution of 2 is 2 hops from the root (latency 2); the reversed problem
    is a broadcast from 0 on the (symmetric) line, bound 3 (see test_line_rooted_collectives;
    directly: both messages on 1 -> 0 must carry 2's contribution, at 1 from slot 1, so they
    start in [1, D-1] and D - 1 >= 2);
    achievable: 2 sends chunk i at slot i, 1 reduces and forwards at i+1, arrival at 0 at i+2,
    last 3. AllReduce, C=1: latency 2 (0 and 2 need each other's contribution), every node must
    receive one message (ingress 1), and the reversed problem is empty: best 2.
    """
    topo = line_topology(3)
    red = make_instance(topo, _reduce_like(topo, (0,), 2), "1MB")
    b = compute_bounds(red)
    assert (b.latency_slots, b.best_slots) == (2, 3)
    sends = [Send(slot=i, chunk=(0, i), src=2, dst=1, reduce=True) for i in range(2)]
    sends += [Send(slot=i + 1, chunk=(0, i), src=1, dst=0, reduce=True) for i in range(2)]
    report = verify(red, Schedule(tuple(sends)))
    assert report.ok and report.makespan_slots == 3
    allred = make_instance(topo, _reduce_like(topo, (0, 1, 2), 1), "1MB")
    b2 = compute_bounds(allred)
    assert (b2.latency_slots, b2.ingress_slots, b2.best_slots) == (2, 1, 2)


def test_unreachable_demand_is_a_validation_error() -> None:
    """0 -> 1 only: node 0 can never receive node 1's chunk."""
    topo = make_topology("oneway", [0, 1], directed_links=[(0, 1, 50.0, 0.0)])
    # The instance itself refuses a topology that cannot host the collective.
    with pytest.raises(ValidationError, match=r"chunk \[1, 0\] cannot reach node 0"):
        _allgather(topo, chunks=1)


def test_bounds_dataclass_validates() -> None:
    with pytest.raises(ValidationError, match="best_slots"):
        Bounds(1, 2, 3, 2, "cut", 0.0, 0.0, 0.0)
    with pytest.raises(ValidationError, match="best_name"):
        Bounds(1, 2, 3, 3, "magic", 0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- properties

_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(random_instances())
def test_bounds_below_greedy_schedules(inst: Instance) -> None:
    """Every bound is <= the makespan of a valid schedule (the test greedy); the microsecond bound
    is <= its alpha-beta replay; the plain continuous cut is <= D * tau (module docstring of
    ccplan.bounds: mu/l_e <= B_e tau), and so is best_us when alpha_threshold = 0."""
    schedule = greedy_schedule(inst)
    report = verify(inst, schedule)
    assert report.ok, report.violations[:3]
    D = report.makespan_slots
    assert D is not None
    b = compute_bounds(inst)
    plain = compute_bounds(inst, time_windows=False)
    for bound in (b, plain):
        assert max(_triple(bound)) == bound.best_slots <= D
        assert plain.cut_slots <= b.cut_slots and plain.ingress_slots <= b.ingress_slots
    assert plain.cut_us <= D * inst.tau_us * (1 + 1e-6) + 1e-9
    if inst.alpha_threshold == 0:
        assert b.best_us <= D * inst.tau_us * (1 + 1e-6) + 1e-9
    sim = simulate(inst, schedule)
    assert b.best_us <= sim.completion_us * (1 + 1e-9) + 1e-9
    assert lower_bound_slots(inst) == b.best_slots


def _brute_force_cut(inst: Instance) -> int:
    """The windowed cut bound by enumerating every node set (no max-flow), without outages.

    Uses networkx Dijkstra for distances and the capacity formula
    omega_e * (floor((D - L_e - dist(x, v) - e_v(u)) / l_e) + 1) (0 if negative; omega_e the
    link's chunks per slot, ``instance.link_capacity``), plus the set
    cuts on singletons and bandwidth clusters, exactly as defined in the ccplan.bounds docstring.
    """
    topo = inst.topology
    coll = inst.collective
    g = nx.DiGraph()
    g.add_nodes_from(topo.node_ids)
    for i, lk in enumerate(topo.links):
        g.add_edge(lk.src, lk.dst, w=int(inst.latency[i]))
    dist = dict(nx.all_pairs_dijkstra_path_length(g, weight="w"))

    def d(a: int, b: int) -> float:
        return dist[a].get(b, math.inf)

    needs: dict[int, list[tuple[int, int]]] = {}
    for c, v in coll.demands:
        needs.setdefault(v, []).append(c)
    nodes = topo.node_ids
    omega = [int(x) for x in inst.link_capacity]

    def cap(i: int, lo: float, hi: float) -> int:
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi < max(lo, 0):
            return 0
        return omega[i] * (int(hi - max(lo, 0)) // int(inst.occupancy[i]) + 1)

    def feasible(D: int) -> bool:
        for v, cs in needs.items():
            early = {u: min(d(h, u) for c in cs for h in coll.holders[c]) for u in nodes}
            others = [u for u in nodes if u != v]
            for k in range(len(others) + 1):
                for A in itertools.combinations(others, k):
                    inside = set(A)
                    value = sum(1 for c in cs for h in coll.holders[c] if h not in inside)
                    for i, lk in enumerate(topo.links):
                        if lk.src in inside and lk.dst not in inside:
                            value += cap(i, early[lk.src], D - int(inst.latency[i]) - d(lk.dst, v))
                    if value < len(cs):
                        return False
        return True

    D = 0
    while not feasible(D):
        D += 1
    # Set cuts on singletons and bandwidth clusters (weakly connected components of the links
    # strictly faster than each link speed): the distinct chunks held only inside S and wanted
    # outside cross the links leaving S within their windows.
    family = [{u} for u in nodes]
    for speed in sorted({lk.bandwidth_GBps for lk in topo.links}):
        fast = nx.Graph()
        fast.add_nodes_from(nodes)
        fast.add_edges_from((lk.src, lk.dst) for lk in topo.links if lk.bandwidth_GBps > speed)
        family.extend(set(comp) for comp in nx.connected_components(fast) if 1 < len(comp) < len(nodes))
    for S in family:
        pairs = [(c, v) for c, v in coll.demands if coll.holders[c] <= S and v not in S]
        if not pairs:
            continue
        chunks = {c for c, _ in pairs}
        dests = {v for _, v in pairs}
        early = {u: min(d(h, u) for c in chunks for h in coll.holders[c]) for u in nodes}
        leaving = [(i, lk) for i, lk in enumerate(topo.links) if lk.src in S and lk.dst not in S]
        E = 0
        while sum(
            cap(i, early[lk.src], E - int(inst.latency[i]) - min(d(lk.dst, w) for w in dests))
            for i, lk in leaving
        ) < len(chunks):
            E += 1
        D = max(D, E)
    return D


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_instances(max_gpus=4, allow_outages=False))
def test_max_flow_cut_matches_enumeration(inst: Instance) -> None:
    """The max-flow + search computation equals a brute-force minimum over all node sets."""
    assert compute_bounds(inst).cut_slots == _brute_force_cut(inst)
