"""Engine ``trees``: the placement order (deep trees ahead) and the shallow phase's pricing trees."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.heuristics.trees import TreePlan, schedule_trees
from ccplan.heuristics.trees_pack import Network, Packing, Tree
from ccplan.heuristics.trees_shallow import _spt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.topology import make_topology
from ccplan.limits import NEVER
from ccplan.schedule.verify import verify


def test_deep_tree_chunk_is_placed_first_on_the_shared_link():
    """Broadcast from GPU 0 to GPUs 1-4, every link 50 GB/s and alpha 0 (l = L = 1). Two trees
    of weight 1/2 share the link 0 -> 1: T_s = 0->1, then 1->2, 1->3, 1->4 (depth 2) and the
    chain T_d = 0->1->2->3->4 (depth 4). Stride scheduling gives chunk 0 to T_s (tie, first
    tree) and chunk 1 to T_d. In index order chunk 0 takes 0->1 at slot 0 and chunk 1 waits
    to slot 1, then 4 more hops: makespan 5. Ordered by k / rate - depth (0 - 2 = -2 for
    chunk 0, 1 - 4 = -3 for chunk 1), chunk 1 goes first: its chain ends at 4, and chunk 0
    (0->1 at slot 1, arriving 2) reaches 2, 3, 4 at slot 3: makespan 4."""
    links = [(0, 1), (1, 2), (2, 3), (3, 4), (1, 3), (1, 4)]
    topo = make_topology("fork", gpus=range(5), directed_links=[(a, b, 50.0, 0.0) for a, b in links])
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=2, root=0), "2MB")
    assert inst.occupancy.max() == 1 and inst.latency.max() == 1 == inst.latency.min()
    idx = {ab: topo.link_index[ab] for ab in links}
    shallow = Tree(0, tuple(idx[ab] for ab in [(0, 1), (1, 2), (1, 3), (1, 4)]), 0.5)
    deep = Tree(0, tuple(idx[ab] for ab in [(0, 1), (1, 2), (2, 3), (3, 4)]), 0.5)
    plan = TreePlan(Packing({0: [shallow, deep]}, 1.0, 1.0, "hand"), Fraction(1), topo.node_ids)
    sched = schedule_trees(inst, plan, NEVER)
    report = verify(inst, sched)
    assert report.ok, report.violations[:3]
    assert report.makespan_slots == 4
    assert report.makespan_slots >= lower_bound_slots(inst)


def test_shortest_path_tree_links_in_tree_order_when_costs_round():
    """Nodes 0 (root), 1, 2; links 0 -> 2 of cost 1e8 and 2 -> 1 of cost 1e-9: in floating
    point 1e8 + 1e-9 == 1e8, so node 1's distance ties node 2's and an order by distance
    (node id on ties) put 2 -> 1 before 0 -> 2. The tree must list 0 -> 2 first."""
    net = Network(3, (0, 2), (2, 1), (Fraction(1), Fraction(1)))
    links = _spt(net, 0, np.array([1e8, 1e-9]), np.array([0, 1, 2]))
    assert links == (0, 1)


@pytest.mark.slow
def test_chunks_auto_packs_once_for_every_chunk_count(monkeypatch):
    """``--chunks auto`` with ``trees`` on DGX-1 (1 GB): its links are 25 and 50 GB/s, so at
    every C the occupancies are 2 and 1 slots (tau is the chunk's time on the fastest link)
    and the slot capacities omega / l are the same; the column generation runs for the first
    C only and the later ones (C = 2, 4, ...: pipelining gains more than 1 % per doubling
    there) reuse its packing. Every candidate's schedule verifies and the chosen one is at
    least its slot bound."""
    import ccplan.heuristics.trees as trees_mod
    from ccplan.contract import SolveOptions
    from ccplan.instances.builtin import resolve_topology
    from ccplan.pipeline.chunks import solve_auto_chunks

    calls = []
    real = trees_mod.pack_trees

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(trees_mod, "pack_trees", counting)
    monkeypatch.setattr(trees_mod, "_PACKINGS", {}, raising=False)  # a fresh cache
    topo = resolve_topology("dgx1")
    inst, res = solve_auto_chunks(
        lambda c: make_instance(topo, make_collective("allgather", topo, chunks=c), "1GB"), "trees",
        SolveOptions(time_limit=30),
    )
    tried = res.details["auto_chunks"]
    assert len(tried) >= 3 and all(us is not None for us in tried.values())
    assert len(calls) == 1
    assert res.schedule is not None and verify(inst, res.schedule).ok
    assert res.makespan_slots is not None and res.makespan_slots >= lower_bound_slots(inst)
