"""Multi-spanning-tree AllReduce (``004_*.txt``): tree building by hand, schedules that verify."""

from __future__ import annotations

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.heuristics.multitree import Edge, build_trees, search_height, split_chunks, undirected_edges
from ccplan.instances.builtin import dgx1, dgx2, ndv2, ring, star_switch
from ccplan.instances.collectives import allgather, broadcast
from ccplan.instances.combining import allreduce, reduce, reducescatter
from ccplan.instances.instance import make_instance
from ccplan.pipeline.solve import solve

# The 4-cycle 0-1-2-3-0 with unit lengths; the edge 3-0 is half as wide.
SQUARE = [Edge(0, 1, 10.0, 1), Edge(1, 2, 10.0, 1), Edge(2, 3, 10.0, 1), Edge(0, 3, 5.0, 1)]


def test_widest_edges_first_then_residual_exhausted():
    """Step 1 with r = 1 and no height limit: from any start the widest edges (10) are taken
    first, so the tree is the path 0-1-2-3 with rate 10 (its bottleneck). Their residual drops
    to 0 < r, only 3-0 (5) is left, which spans nothing: Step 1 ends with one tree."""
    for seed in range(4):
        trees = build_trees([0, 1, 2, 3], SQUARE, height=10, r=1.0, seed=seed)
        assert len(trees) == 1
        assert sorted(trees[0].edges) == [0, 1, 2]
        assert trees[0].rate == 10.0


def test_rate_r_rule_builds_several_trees():
    """With rate = r = 5 the first tree (path of the three 10-edges) takes 5 from each; the
    next tree again prefers them (residual 5 = 5 on the 3-0 edge, ties broken by diameter and
    index); it takes three more edges to 0, and the one edge left cannot span: two trees
    (each tree needs 3 x 5 of the 35 units)."""
    trees = build_trees([0, 1, 2, 3], SQUARE, height=10, r=5.0, seed=0, rate_rule="r")
    assert [t.rate for t in trees] == [5.0, 5.0]


def test_height_binary_search():
    """Every spanning tree of a 4-cycle is a path of 3 edges, diameter 3, so the condition
    diameter <= 2H fails for H = 1 and holds for H = 2: the search returns H = 2 (tolerance
    0: the full rate 10 is also reached at H = 2)."""
    height, trees = search_height([0, 1, 2, 3], SQUARE, h_max=8, r=1.0, seed=0, tolerance=0.0)
    assert height == 2
    assert sum(t.rate for t in trees) == 10.0
    assert build_trees([0, 1, 2, 3], SQUARE, height=1, r=1.0, seed=0) == []


def test_split_in_proportion_to_rates():
    """Rates 3:1 over 8 chunks: smooth weighted round robin gives 6 and 2."""
    chunks = [(g, 0) for g in range(8)]
    shares = split_chunks(chunks, [3.0, 1.0])
    assert [len(s) for s in shares] == [6, 2]
    assert sorted(shares[0] + shares[1]) == chunks


def test_one_way_links_become_edges_only_when_needed():
    """NDv2 with 2 chassis: the two NIC links 0->9 and 8->1 are one-way, so the two-way edges
    leave the chassis apart and the one-way links are added (two extra edges); DGX1 has only
    two-way links."""
    assert len(undirected_edges(make_instance(dgx1(), allgather(dgx1()), "1MB"))) == 16
    edges = undirected_edges(make_instance(ndv2(2), allgather(ndv2(2)), "1MB"))
    assert len(edges) == 2 * 16 + 2


@pytest.mark.parametrize("topo", [ring(4), dgx1(), star_switch(5), ndv2(2)], ids=lambda t: t.name)
def test_multitree_schedules_verify(topo):
    """AllReduce, ReduceScatter, Reduce, AllGather and Broadcast on the trees all verify and are
    not below the lower bound."""
    for coll in (allreduce(topo, 2), reducescatter(topo), reduce(topo, 2, root=topo.gpus[-1]),
                 allgather(topo, 2), broadcast(topo, 2, root=topo.gpus[0])):
        inst = make_instance(topo, coll, "1MB")
        res = solve(inst, "multitree", SolveOptions(extra={"K": 3, "seed": 1}))
        assert res.verified, (coll.kind, res.report.violations[:2] if res.report else None)
        assert res.makespan_slots is not None and res.makespan_slots >= lower_bound_slots(inst)
        assert len(res.details["trees"]) <= 3


def test_switch_does_not_reduce_and_options_are_checked():
    """DGX2's NVSwitches are tree nodes but never reduce: every send into a switch is a copy
    of one GPU's partial sum. Bad parameters raise ValidationError."""
    topo = dgx2(2)
    inst = make_instance(topo, allreduce(topo), "1MB")
    res = solve(inst, "multitree", SolveOptions(extra={"K": 2}))
    assert res.verified and res.schedule is not None
    switches = set(topo.switches)
    assert not any(s.reduce and s.dst in switches for s in res.schedule.sends)
    with pytest.raises(ValidationError, match="multitree"):
        solve(make_instance(ring(4), allreduce(ring(4)), "1MB"), "multitree", SolveOptions(extra={"K": 0}))


# --------------------------------------------------------------------------- cluster AllReduce
@pytest.mark.parametrize("chunks", [1, 2])
def test_cluster_allreduce_verifies_and_crosses_each_pair_once_per_chunk(chunks):
    """DGX2 with 2 chassis: every chunk crosses between the chassis exactly once in each
    direction (the combining cut's minimum), the schedule verifies, the numeric replay ends
    with the exact sums, and the makespan is at least the bound."""
    from tests.test_combining import numeric_replay

    topo = dgx2(2)
    inst = make_instance(topo, allreduce(topo, chunks=chunks), "64MB")
    result = solve(inst, "cluster-allreduce")
    assert result.verified and numeric_replay(inst, result.schedule)
    assert result.makespan_slots >= result.lower_bound_slots
    slow = [s for s in result.schedule.sends if topo.link(s.src, s.dst).bandwidth_GBps < 100]
    n_chunks = 32 * chunks
    assert len(slow) == 2 * n_chunks
    assert len({s.chunk for s in slow if s.src < 16}) == n_chunks


def test_cluster_allreduce_ndv2_and_one_chassis():
    """NDv2 with 2 chassis (one link each way) verifies; a single chassis is refused."""

    topo = ndv2(2)
    inst = make_instance(topo, allreduce(topo), "1MB")
    result = solve(inst, "cluster-allreduce")
    assert result.verified and result.makespan_slots >= result.lower_bound_slots
    one = dgx1()
    with pytest.raises(ValidationError, match="one chassis"):
        solve(make_instance(one, allreduce(one), "1MB"), "cluster-allreduce")


def test_cluster_allreduce_refuses_what_it_cannot_do():
    """On a random graph whose 'chassis' are not strongly joined inside, the construction would
    lose a contribution; the engine refuses with one line instead of handing it out, and the
    AllReduce portfolio still returns a verified schedule."""
    import sys

    sys.path.insert(0, "tests")
    from test_combining_exact import random_combining

    base = random_combining(0)
    inst = make_instance(base.topology, allreduce(base.topology), base.size_bytes)
    with pytest.raises(ValidationError, match="does not apply"):
        solve(inst, "cluster-allreduce")
    assert solve(inst, "mteg").verified
