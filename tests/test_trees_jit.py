"""The compiled full-table placement of the ``trees`` engine against the Python one."""

from __future__ import annotations

import numpy as np
import pytest

import ccplan.heuristics.trees as trees_mod
from ccplan.heuristics.trees import plan_trees, schedule_trees
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import resolve_topology
from ccplan.limits import NEVER
from ccplan.schedule.verify import verify


def _python_placement(monkeypatch, inst, plan):  # type: ignore[no-untyped-def]
    with monkeypatch.context() as m:
        m.setattr(trees_mod, "_compiled_placement", lambda *args: None)
        return schedule_trees(inst, plan, NEVER)


@pytest.mark.parametrize(
    ("name", "params", "chunks", "size"),
    [("dgx1", {}, 16, "1GB"), ("amd", {"chassis": 1}, 8, "1GB"), ("ndv2", {"chassis": 2}, 4, "256MB")],
)
def test_compiled_placement_places_the_same_sends(monkeypatch, name, params, chunks, size):
    """Same rule, two implementations: the Python placement through the reservation table of
    MTEGCCA (slot by slot) and the compiled one over blocks of ``l`` slots give the same slot
    for every send, and the schedule verifies."""
    topo = resolve_topology(name, **params)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=chunks), size)
    plan = plan_trees(inst, NEVER)
    fast = schedule_trees(inst, plan, NEVER)
    slow = _python_placement(monkeypatch, inst, plan)
    a, b = fast.columns(), slow.columns()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    report = verify(inst, fast)
    assert report.ok, report.violations[:3]


def test_compiled_placement_with_several_sends_per_slot(monkeypatch):
    """Links that carry two chunks per slot (``capacity=2``) fill both places of a block
    before the next one: the two placements agree there too."""
    topo = resolve_topology("dgx1")
    inst = make_instance(topo, make_collective("allgather", topo, chunks=8), "1GB", capacity=2)
    assert int(np.min(inst.link_capacity)) == 2
    plan = plan_trees(inst, NEVER)
    fast = schedule_trees(inst, plan, NEVER)
    slow = _python_placement(monkeypatch, inst, plan)
    a, b = fast.columns(), slow.columns()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert verify(inst, fast).ok


def test_compiled_pricing_trees_match_the_python_ones():
    """The shallow phase's pricing trees, compiled (``_Pricing``: all roots, one pass) and in
    Python (``_spts`` and ``depth``, tree by tree), under random link costs on AMD x2: the
    same links in the same order and the same latency depth for every root."""
    from ccplan.heuristics.trees import roots_and_terminals, slot_network
    from ccplan.heuristics.trees_pack import Tree
    from ccplan.heuristics.trees_shallow import _Pricing, _spts, depth

    topo = resolve_topology("amd", chassis=2)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=64), "1GB")
    net = slot_network(inst)
    roots, terms = roots_and_terminals(inst)
    r_pos = [topo.node_index[r] for r in roots]
    term = np.asarray([topo.node_index[t] for t in terms], dtype=np.int64)
    lat = np.asarray(inst.latency, dtype=float)
    pricing = _Pricing(net, r_pos, term, lat)
    rng = np.random.default_rng(7)
    for _ in range(3):
        cost = rng.random(net.num_links) + 1e-9
        links, depths = pricing(cost)
        expected = _spts(net, r_pos, cost, term)
        assert links == expected
        for r, tree_links, d in zip(r_pos, links, depths, strict=True):
            assert d == pytest.approx(depth(Tree(r, tree_links), net.src, net.dst, lat))
