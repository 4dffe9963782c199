"""Engine ``trees``: optimal rate by max-flow, tree packing, verified pipelined schedules."""

from __future__ import annotations

from fractions import Fraction

import networkx as nx
import numpy as np
import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.heuristics.trees import slot_network
from ccplan.heuristics.trees_pack import Network, min_arborescence, optimal_rate, pack_trees
from ccplan.instances import make_collective, make_instance, make_topology
from ccplan.instances.builtin import fully_connected, ring, star_switch
from ccplan.pipeline import solve
from ccplan.schedule.verify import verify


def _net(n: int, links: list[tuple[int, int, int]]) -> Network:
    """Directed links ``(u, v, capacity)``."""
    return Network(n, tuple(u for u, _, _ in links), tuple(v for _, v, _ in links),
                   tuple(Fraction(c) for _, _, c in links))


def _duplex(pairs: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    return [x for u, v, c in pairs for x in ((u, v, c), (v, u, c))]


def _two_chassis():
    """GPUs 0, 1 (chassis A) and 2, 3 (chassis B); NVLink 0<->1 and 2<->3 at 50 GB/s; every
    GPU has a 25 GB/s NIC cable to one switch (4)."""
    return make_topology(
        "two-chassis", gpus=range(4), switches=[4],
        duplex_links=[(0, 1, 50.0, 0.7), (2, 3, 50.0, 0.7)] + [(g, 4, 25.0, 1.3) for g in range(4)],
    )


def _solve(topo, kind: str = "allgather", chunks: int = 4, **kw):  # type: ignore[no-untyped-def]
    inst = make_instance(topo, make_collective(kind, topo, chunks=chunks), kw.pop("size", "64MB"), **kw)
    result = solve(inst, "trees", SolveOptions(time_limit=30, workers=1, extra={"flow_bound": False}))
    assert result.schedule is not None
    report = verify(inst, result.schedule)
    assert report.ok, report.violations[:3]
    assert result.verified
    assert result.makespan_slots is not None
    assert result.makespan_slots >= lower_bound_slots(inst)
    return inst, result


# --------------------------------------------------------------------------- the optimal rate


def test_rate_bidirectional_ring():
    """Bidirectional ring of 5, capacity 1 each way, AllGather. The cut "all but v" has
    B+ = 2 (v's two in-links) and 4 roots: x <= 1/2. Any other S leaving a node out is a union
    of arcs of the cycle; each arc of k nodes has B+ = 2 and k <= 4 roots, so the ratio is
    >= 2/4 and x* = 1/2."""
    net = _net(5, _duplex([(i, (i + 1) % 5, 1) for i in range(5)]))
    x, cut = optimal_rate(net, range(5), range(5))
    assert x == Fraction(1, 2)
    assert cut is not None and len(cut) == 4


def test_rate_thin_bridge_takes_a_newton_step():
    """Pairs {0, 1} and {2, 3} (capacity 10 each way inside) joined by 1 <-> 2 at capacity
    1. The start value is the best single-node cut, nodes 0 and 3: in-capacity 10 over 3
    roots, 10/3. The cut S = {0, 1} has B+ = 1 (the bridge) and 2 roots: 1/2, and no cut is
    smaller (every S leaving a GPU out either crosses the bridge, B+ >= 1 with <= 2 roots...
    or leaves out a GPU of its own pair, B+ >= 10 with <= 3 roots), so x* = 1/2, reached only
    through a violated max-flow cut."""
    net = _net(4, _duplex([(0, 1, 10), (2, 3, 10), (1, 2, 1)]))
    x, cut = optimal_rate(net, range(4), range(4))
    assert x == Fraction(1, 2)
    assert cut in (frozenset({0, 1}), frozenset({2, 3}))


def test_rate_star_switch_and_broadcast():
    """Star of 4 GPUs around switch 4, capacity 1 up and down. AllGather: S = all but GPU v
    (with the switch) has B+ = 1 and 3 roots, x* = 1/3 (msccl_and_peers.md section 3, star).
    Broadcast from 0: every other GPU's max-flow from 0 is 1, x* = 1."""
    net = _net(5, _duplex([(g, 4, 1) for g in range(4)]))
    assert optimal_rate(net, range(4), range(4))[0] == Fraction(1, 3)
    assert optimal_rate(net, [0], range(4))[0] == Fraction(1)


def test_packing_reaches_the_max_flow_rate():
    """The column generation's LP rate equals x* on the graphs above (the Edmonds / ForestColl
    theorem: the cut bound is attained by a fractional tree packing; in the star the trees
    pass through the switch, which splitting off turns into GPU-to-GPU arcs)."""
    cases = [
        (_net(5, _duplex([(i, (i + 1) % 5, 1) for i in range(5)])), range(5)),
        (_net(4, _duplex([(0, 1, 10), (2, 3, 10), (1, 2, 1)])), range(4)),
        (_net(5, _duplex([(g, 4, 1) for g in range(4)])), range(4)),
    ]
    for net, gpus in cases:
        x, _ = optimal_rate(net, list(gpus), list(gpus))
        packing = pack_trees(net, list(gpus), list(gpus), float(x), gap=1e-9)
        assert packing.rate == pytest.approx(float(x), rel=1e-6)
        loads = np.zeros(net.num_links)
        for trees in packing.trees.values():
            assert sum(t.weight for t in trees) >= float(x) * (1 - 1e-6)
            for t in trees:
                loads[list(t.links)] += t.weight
        assert np.all(loads <= np.array([float(c) for c in net.cap]) + 1e-9)


def test_min_arborescence_against_networkx():
    """Chu-Liu/Edmonds against networkx's implementation on random digraphs (costs 0..4,
    many ties, a chain 0 -> 1 -> ... keeps every node reachable from 0)."""
    rng = np.random.default_rng(7)
    for _ in range(150):
        n = int(rng.integers(2, 10))
        w = np.where(rng.random((n, n)) < 0.5, rng.integers(0, 5, (n, n)).astype(float), np.inf)
        for v in range(1, n):
            w[v - 1, v] = float(rng.integers(0, 5))
        par = min_arborescence(w, 0)
        for v in range(1, n):
            seen, u = set(), v
            while u != 0:
                assert u not in seen
                seen.add(u)
                u = int(par[u])
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_weighted_edges_from((u, v, w[u, v]) for u in range(n) for v in range(1, n)
                                  if u != v and np.isfinite(w[u, v]))
        best = sum(d["weight"] for *_, d in nx.minimum_spanning_arborescence(g).edges(data=True))
        assert sum(w[par[v], v] for v in range(1, n)) == pytest.approx(best)


# --------------------------------------------------------------------------- schedules


def test_bidirectional_ring_reaches_the_closed_form_limit():
    """Bidirectional ring of N = 4 GPUs, equal links (l = 1, omega = 1), C = 12. Every GPU
    receives C (N - 1) = 36 chunks over 2 in-links, one chunk each per slot: D >= 18 =
    C (N - 1) / 2, the closed form (N - 1)/N * M / (2b) in slots. x* = 2/3 (the rate test
    above), so 18 slots is the throughput term; a chunk's path is at most N - 1 = 3 hops of
    one slot, so the pipeline adds at most 3: 18 <= D <= 21."""
    inst, result = _solve(ring(4), chunks=12, size="48MB")
    assert inst.occupancy.max() == 1 and inst.delay.max() == 0
    assert 18 <= result.makespan_slots <= 21
    assert result.details["optimal_rate_exact"] == "2/3"


@pytest.mark.parametrize(
    "topo",
    [ring(5), ring(4, bidirectional=False), fully_connected(4), star_switch(4), _two_chassis()],
    ids=["ring5", "ring4-uni", "mesh4", "star4", "two-chassis"],
)
def test_verified_allgather_and_broadcast(topo):
    """Every schedule verifies and is at least the analytic lower bound (``_solve``)."""
    _solve(topo, "allgather", chunks=4)
    _solve(topo, "broadcast", chunks=6)


def test_rate_in_details_matches_hand_values():
    """Star of 4 around a switch at equal bandwidth: x* = 1/3 chunk per slot (the star case
    above). Two chassis: the 25 GB/s NIC links take l = 2 slots of the 50 GB/s tau, so each
    carries 1/2 chunk per slot. S = chassis A = {0, 1}: B+ = its two NIC up-links = 1, with 2
    roots: 1/2. S = all but GPU 0: B+ = 1 (from GPU 1) + 1/2 (from the switch), 3 roots: 1/2.
    S = {0, 1, 4}: B+ = the switch's two down-links to chassis B = 1, 2 roots: 1/2. No cut is
    smaller (a single GPU left out has in-capacity 3/2 for 3 roots; S = {0, 1, 2, 4} ... also
    3/2 over 3), so x* = 1/2."""
    _, star = _solve(star_switch(4), chunks=3)
    assert star.details["optimal_rate_exact"] == "1/3"
    _, two = _solve(_two_chassis(), chunks=4)
    assert two.details["optimal_rate_exact"] == "1/2"


def test_combining_collectives_by_reversal():
    """ReduceScatter, Reduce and AllReduce go through the reversal construction (combine.py)
    and verify."""
    for kind in ("reducescatter", "allreduce", "reduce"):
        _solve(_two_chassis(), kind, chunks=2)


def test_outages_and_single_port():
    """The reservation table honours outages and the single-port rule; still verified."""
    topo = ring(4)
    outages = [(0, 1, t) for t in range(0, 6)] + [(2, 3, 3)]
    _solve(topo, chunks=4, outages=outages)
    _solve(topo, chunks=4, single_port=True)
    _solve(_two_chassis(), chunks=3, single_port=True)


def test_slot_network_capacities():
    """omega / l per link: the 25 GB/s NIC links occupy 2 slots of the 50 GB/s tau."""
    topo = _two_chassis()
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "4MB")
    net = slot_network(inst)
    nic = topo.link_index[(0, 4)]
    assert net.cap[nic] == Fraction(1, 2)
    assert net.cap[topo.link_index[(0, 1)]] == Fraction(1)


def test_unsupported_collective_is_refused():
    topo = ring(4)
    inst = make_instance(topo, make_collective("alltoall", topo, chunks=1), "1MB")
    with pytest.raises(ValidationError, match="trees"):
        solve(inst, "trees")
