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
