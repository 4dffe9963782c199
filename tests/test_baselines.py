"""Classic baselines: step counts derived by hand, closed forms, conformance with the verifier."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.heuristics import baselines as bl
from ccplan.instances.builtin import (
    dgx1,
    fully_connected,
    line,
    ndv2,
    resolve_topology,
    ring,
    star_switch,
    torus2d,
)
from ccplan.instances.catalog import make_collective
from ccplan.instances.collectives import allgather, alltoall, broadcast
from ccplan.instances.combining import COMBINING, allreduce, make_combining, reduce
from ccplan.instances.instance import make_instance
from ccplan.instances.topology import make_topology
from ccplan.pipeline.solve import solve
from ccplan.schedule.simulate import simulate

B = 50.0  # GB/s
ALPHA = 0.7  # us
BETA = 1.0 / (B * 1e3)  # us per byte: 1 GB/s = 1e3 bytes/us
M = 1e6  # bytes


def _coll(kind, topo, chunks=1, root=None):
    if kind in COMBINING:
        return make_combining(kind, topo, chunks, root=root)
    return make_collective(kind, topo, chunks, root=root)


def test_ring_allreduce_on_4_gpus_takes_2_n_minus_1_steps():
    """Ring of 4 GPUs, alpha 0, one chunk per shard: every link carries one chunk per slot
    (L = 1). ReduceScatter: shard q starts at q+1 and needs 3 hops to come back to q, all
    shards in lockstep: 3 slots. AllGather: 3 more hops from the owner. 2(N-1) = 6 slots, and
    no link ever carries two chunks in a slot (each GPU sends one shard per step)."""
    topo = ring(4, alpha_us=0.0)
    inst = make_instance(topo, allreduce(topo), "1MB")
    res = solve(inst, "ring-1")
    assert res.verified and res.schedule is not None
    assert res.makespan_slots == 2 * (4 - 1)
    # 2(N-1) steps of N sends each.
    assert len(res.schedule) == 2 * (4 - 1) * 4


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_ring_simulation_matches_closed_form(n):
    """Uniform bidirectional ring, alpha 0.7 us, 50 GB/s. The ring uses one direction; at
    every step each link carries exactly one chunk of size/n, and a chunk goes on as soon as it
    arrives, so in the alpha-beta replay every hop costs alpha + (size/n) beta and the chain
    of n-1 (AllGather, ReduceScatter) or 2(n-1) (AllReduce) hops never waits for a link:
    T = (n-1)(alpha + size/n beta) and twice that (``003_*.txt``)."""
    topo = ring(n, bandwidth_GBps=B, alpha_us=ALPHA)
    cases = [("allgather", bl.ring_allgather_cost), ("reducescatter", bl.ring_reducescatter_cost),
             ("allreduce", bl.ring_allreduce_cost)]
    for kind, formula in cases:
        inst = make_instance(topo, _coll(kind, topo), M)
        res = solve(inst, "ring-1")
        assert res.verified and res.schedule is not None
        expected = formula(n, M, ALPHA, BETA)
        assert simulate(inst, res.schedule).completion_us == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_binomial_tree_simulation_matches_closed_form(n):
    """Fully connected, n = 2^m, one chunk (the whole buffer). In the binomial tree rank r
    receives from r minus its highest bit, so its depth is popcount(r); the deepest rank
    (n-1) is m = log2 n hops from the root, each hop alpha + size beta on its own link:
    T = log2(n)(alpha + size beta) (``001_*.txt``), for Broadcast and, mirrored, Reduce."""
    topo = fully_connected(n, bandwidth_GBps=B, alpha_us=ALPHA)
    for kind, formula in (("broadcast", bl.binomial_broadcast_cost), ("reduce", bl.binomial_reduce_cost)):
        inst = make_instance(topo, _coll(kind, topo, root=0), M)
        res = solve(inst, "tree")
        assert res.verified and res.schedule is not None
        expected = formula(n, M, ALPHA, BETA)
        assert simulate(inst, res.schedule).completion_us == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [2, 4, 8, 6])
def test_recursive_halving_doubling_against_closed_form(n):
    """Rabenseifner on a fully connected uniform network, one chunk per GPU.

    The closed form 2 log2(n') alpha + 2 (n'-1)/n' size beta (+ 2(alpha + size beta) when
    n' = 2^floor(log2 n) < n) charges every round one whole message. For n = 2 each round *is*
    one chunk, so the replay equals it. Otherwise a chunk may start its next round as soon as
    it has arrived, so the replay is at most the formula; and it is at least the chain of one
    chunk: log2(n') halving hops to its core rank and log2(n') doubling hops from there, each
    alpha + (size/n) beta.
    """
    topo = fully_connected(n, bandwidth_GBps=B, alpha_us=ALPHA)
    inst = make_instance(topo, allreduce(topo), M)
    res = solve(inst, "recursive-halving-doubling")
    assert res.verified and res.schedule is not None
    t = simulate(inst, res.schedule).completion_us
    formula = bl.recursive_halving_doubling_allreduce_cost(n, M, ALPHA, BETA)
    m = math.floor(math.log2(n))
    chain = 2 * m * (ALPHA + M / n * BETA)
    if n == 2:
        assert t == pytest.approx(formula, rel=1e-9)
    else:
        assert chain - 1e-9 <= t <= formula + 1e-9


def test_closed_forms_reduce_to_textbook_values():
    """Hand values: ring AllReduce of 8 MB on 8 GPUs, alpha 1, beta 1e-6: 14 (1 + 1) = 28;
    Rabenseifner on 6 GPUs (n' = 4) with size 4 and beta 1: 4 alpha + 2*(3/4)*4 + 2(alpha + 4)."""
    assert bl.ring_allreduce_cost(8, 8e6, 1.0, 1e-6) == pytest.approx(28.0)
    assert bl.recursive_halving_doubling_allreduce_cost(6, 4.0, 1.0, 1.0) == pytest.approx(4 + 6 + 2 * 5)
    assert bl.recursive_doubling_allgather_cost(4, 4.0, 1.0, 1.0) == pytest.approx(2 + 3)
    hier = bl.hierarchical_allreduce_cost(2, 4, 8.0, 0.0, 1.0, 0.0, 1.0)
    assert hier == pytest.approx(2 * 3 * 2 + 2 * 1 * 1)


# --------------------------------------------------------------------------- conformance
TOPOLOGIES = {
    "ring5": lambda: ring(5),
    "line3": lambda: line(3),
    "fc6": lambda: fully_connected(6),
    "star5": lambda: star_switch(5),
    "dgx1": dgx1,
    "ndv2x2": lambda: ndv2(2),
}

# Recursive-doubling AllReduce keeps both partners' buffers live during an exchange, so no GPU
# can relay it: it needs partners joined directly or through switches only.
_NEEDS_DIRECT = {("recursive-doubling", "allreduce")}


@pytest.mark.parametrize("topo_name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("method", sorted(bl.SUPPORTED))
def test_every_baseline_conforms(topo_name, method):
    """Every collective a baseline supports verifies on every small topology (C = 1 and 2) and
    is not below the lower bound; an unsupported collective raises ValidationError."""
    topo = TOPOLOGIES[topo_name]()
    for kind in sorted(bl.SUPPORTED[method]):
        for chunks in (1, 2):
            inst = make_instance(topo, _coll(kind, topo, chunks, root=topo.gpus[-1]), "1MB")
            if (method, kind) in _NEEDS_DIRECT and topo_name in {"ring5", "line3", "ndv2x2"}:
                with pytest.raises(ValidationError, match="no route"):
                    solve(inst, method)
                continue
            res = solve(inst, method)
            assert res.verified, (kind, chunks, res.report.violations[:2] if res.report else None)
            assert res.makespan_slots is not None and res.makespan_slots >= lower_bound_slots(inst)
    unsupported = sorted({"allgather", "allreduce", "alltoall", "broadcast"} - bl.SUPPORTED[method])
    if unsupported:
        inst = make_instance(topo, _coll(unsupported[0], topo, root=topo.gpus[0]), "1MB")
        with pytest.raises(ValidationError, match="does not support"):
            solve(inst, method)


def test_single_port_and_outages_are_respected():
    """The placer honours single-port and an outage: the ring AllGather still verifies, and
    with link 0->1 down in slot 0 nothing uses it then."""
    topo = ring(4, alpha_us=0.0)
    inst = make_instance(topo, allgather(topo, 2), "1MB", single_port=True, outages=[(0, 1, 0)])
    res = solve(inst, "ring")
    assert res.verified and res.schedule is not None
    assert not any(s.src == 0 and s.dst == 1 and s.slot == 0 for s in res.schedule.sends)


def test_reduce_chain_on_the_single_and_the_nccl_style_ring():
    """A Reduce chain to root 2 on 5 fully connected GPUs verifies with one ring and with the
    NCCL-style channels (NCCL's double binary tree shape: tests/test_baselines_nccl.py)."""
    topo = fully_connected(5)
    for method in ("ring-1", "ring"):
        res = solve(make_instance(topo, reduce(topo, 3, root=2), "1MB"), method)
        assert res.verified


def test_ring_order_and_groups_on_real_topologies():
    """DGX1 has the Hamiltonian NVLink cycle 0-1-3-2-6-7-5-4 (among others): the search finds a
    cycle using direct links only. NDv2 with 2 chassis splits into its two chassis when the
    12.5 GB/s NIC links are removed."""
    topo = dgx1()
    order = bl.ring_order(topo)
    assert sorted(order) == list(topo.gpus)
    assert all(topo.has_link(a, b) for a, b in zip(order, order[1:] + order[:1], strict=True))
    groups = bl.infer_groups(ndv2(2))
    assert sorted(map(sorted, groups)) == [list(range(8)), list(range(8, 16))]


def test_ring_order_on_thousands_of_gpus():
    """A 40x40 torus (1,600 GPUs): the search path is as long as the ring, deeper than Python's
    recursion limit; the ring it returns is a Hamiltonian cycle of direct links (a torus row
    snake closes, so one exists), and the ring AllGather on it verifies on a 12x12 torus."""
    topo = torus2d(rows=40, cols=40)
    order = bl.ring_order(topo)
    assert sorted(order) == list(topo.gpus)
    assert all(topo.has_link(a, b) for a, b in zip(order, order[1:] + order[:1], strict=True))
    small = torus2d(rows=12, cols=12)
    res = solve(make_instance(small, allgather(small), "1MB"), "ring")
    assert res.verified and res.makespan_slots >= lower_bound_slots(res.instance)


def test_hierarchical_with_explicit_groups_and_bad_groups():
    topo = fully_connected(6)
    inst = make_instance(topo, allreduce(topo), "1MB")
    res = solve(inst, "hierarchical", SolveOptions(extra={"groups": [[0, 1, 2], [3, 4, 5]]}))
    assert res.verified
    with pytest.raises(ValidationError, match="partition"):
        solve(inst, "hierarchical", SolveOptions(extra={"groups": [[0, 1], [3, 4, 5]]}))


def test_pairwise_alltoall_and_broadcast_baselines():
    topo = star_switch(4)
    res = solve(make_instance(topo, alltoall(topo, 2), "1MB"), "pairwise")
    assert res.verified and res.makespan_slots is not None
    assert res.makespan_slots >= res.lower_bound_slots
    res = solve(make_instance(topo, broadcast(topo, 3, root=1), "1MB"), "tree")
    assert res.verified


def test_recursive_doubling_copy_does_not_pass_a_switch_holding_a_partial_sum() -> None:
    """A full mesh of GPUs 0-4 (100 GB/s), GPUs 5-8 on switch 9 (50 GB/s), every GPU on NIC
    switch 10 (16 GB/s), AllReduce C = 3: 9 GPUs, so rank 8 folds into rank 0 and gets the
    result back by a copy 0 -> 10 -> 8, while exchanges between the chassis (2 <-> 6 at mask 4)
    still pass their partial sums through switch 10. The copy used to land at switch 10 while
    2's partial sum rested there, so it overwrote it: 6 ended without the contributions of
    0, 1, 2, 3 and 8. A switch keeps one buffer per chunk: the copy must wait, and the
    combining verifier (an independent replay of the sums) accepts the schedule."""
    topo = resolve_topology(Path(__file__).parent / "data" / "mesh5_switch4_nic.json")
    inst = make_instance(topo, allreduce(topo, 3), "1MB")
    res = solve(inst, "recursive-doubling", SolveOptions(extra={"flow_bound": False}))
    assert res.verified, res.report.violations[:1] if res.report else None
    assert res.makespan_slots is not None and res.makespan_slots >= lower_bound_slots(inst)


@pytest.mark.parametrize("kind", ["reducescatter", "allreduce"])
def test_recursive_halving_doubling_through_its_sink_does_not_deliver_the_sum_twice(kind: str) -> None:
    """GPUs 0, 1, 2 on switch 6 and a ring 2-3-4-5-2 (100 GB/s, no alpha), C = 1: GPU 2 is
    the ring's only way out. 6 GPUs fold into 4 core ranks (4 -> 0, 5 -> 1), so the fold of
    ranks 4 and 5 and the halving step 1 -> 3 must all pass GPU 2, the sink of chunk
    (2, 0) (of the chunk ending at rank 2 for AllReduce): the complete sum reaches GPU 2 on
    its way to 3 (1 -> 6 -> 2 -> 3), and the last halving step 3 -> 2 used to bring it back,
    a duplicate receive the combining verifier rejects. A node keeps what it received, so
    that send carries nothing and the verifier accepts the schedule."""
    duplex = [(2, 3), (3, 4), (4, 5), (2, 5), (0, 6), (1, 6), (2, 6)]
    links = [(a, b, 100.0, 0.0) for a, b in duplex]
    topo = make_topology("ring4-bridge", range(6), duplex_links=links, switches=[6])
    inst = make_instance(topo, make_combining(kind, topo, 1), "1MB")
    res = solve(inst, "recursive-halving-doubling", SolveOptions(extra={"flow_bound": False}))
    assert res.verified, res.report.violations[:1] if res.report else None
    assert res.makespan_slots is not None and res.makespan_slots >= lower_bound_slots(inst)
