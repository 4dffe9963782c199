"""Engine ``trees`` on 2-D tori: one root's schedule translated to every root."""

from __future__ import annotations

import numpy as np
import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.heuristics.trees_symmetry import _direction, balanced_tree, torus_shape
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import mesh2d, torus2d
from ccplan.instances.topology import make_topology
from ccplan.pipeline import solve
from ccplan.schedule.verify import verify


def _allgather(topo, chunks):  # type: ignore[no-untyped-def]
    return make_instance(topo, make_collective("allgather", topo, chunks=chunks), "1GB")


def test_torus_detection():
    """torus2d(R, C) is found with its shape; a mesh, and a torus with one cable slower than
    the others (translations are no longer automorphisms), are not."""
    assert torus_shape(_allgather(torus2d(4, 6), 1)) == (4, 6)
    assert torus_shape(_allgather(torus2d(5, 5), 1)) == (5, 5)
    assert torus_shape(_allgather(mesh2d(4, 4), 1)) is None
    base = torus2d(4, 4)
    cables = {tuple(sorted((lk.src, lk.dst))) for lk in base.links}
    slow = make_topology("t", gpus=range(16), duplex_links=[
        (a, b, 25.0 if (a, b) == (0, 1) else 50.0, 0.7) for a, b in sorted(cables)])
    assert torus_shape(_allgather(slow, 1)) is None


@pytest.mark.parametrize("shape", [(5, 5), (8, 8), (4, 6), (3, 7)])
def test_balanced_tree_spans_by_shortest_paths_and_evens_directions(shape):
    """Every GPU but 0 gets one parent one hop closer to GPU 0 (a shortest-path spanning tree:
    depth = the torus diameter floor(R/2) + floor(C/2)); the four directions carry N - 1 links
    in all, and, since most GPUs have two parents to choose from, no direction more than
    (N - 1) / 4 + 2."""
    rows, cols = shape
    n = rows * cols
    tree = balanced_tree(shape)
    parent = {v: u for u, v in tree}
    assert len(tree) == n - 1 and set(parent) == set(range(1, n))
    hops = {0: 0}
    for u, v in tree:
        hops[v] = hops[u] + 1  # breadth-first order: the parent came first
    assert max(hops.values()) == rows // 2 + cols // 2
    per = np.bincount([_direction(shape, u, v) for u, v in tree], minlength=4)
    assert per.sum() == n - 1 and per.max() <= (n - 1) / 4 + 2


def test_square_torus_reaches_the_in_capacity_bound():
    """5 x 5 torus, C = 4, 50 GB/s, 1 GB: chunks of 10 MB (200 us against alpha 0.7 us), so
    l = L = 1. A GPU receives (N - 1) C = 96 chunks on 4
    in-links of one chunk per slot, so D >= 24. Chunk k rides the balanced tree rotated by
    k x 90 degrees: over the 4 chunks every direction carries exactly N - 1 = 24 of root 0's
    sends, so root 0's table (hence, by translation, every link) is busy 24 slots: the
    schedule verifies with D = 24, the optimum."""
    inst = _allgather(torus2d(5, 5), 4)
    assert inst.occupancy.max() == 1 and inst.latency.max() == 1
    res = solve(inst, "trees", SolveOptions(time_limit=30))
    assert res.schedule is not None and res.verified and verify(inst, res.schedule).ok
    assert res.details["placement"] == "symmetric"
    assert lower_bound_slots(inst) == 24
    assert res.makespan_slots == 24


def test_symmetric_and_lp_paths_both_verify_on_a_rectangular_torus():
    """4 x 6 torus, C = 8, 1 GB (l = L = 1): the translated schedule and the LP packing
    (trees_symmetry off) both verify and are at least the slot bound; the translated one is
    within two slots of the in-capacity term C (N - 1) / 4 = 46 slots (the reflections
    balance +/- of each axis; the tree's parents balance rows against columns)."""
    inst = _allgather(torus2d(4, 6), 8)
    assert inst.occupancy.max() == 1 and inst.latency.max() == 1
    sym = solve(inst, "trees", SolveOptions(time_limit=30))
    lp = solve(inst, "trees", SolveOptions(time_limit=30, extra={"trees_symmetry": False}))
    for res in (sym, lp):
        assert res.schedule is not None and res.verified and verify(inst, res.schedule).ok
        assert res.makespan_slots is not None and res.makespan_slots >= lower_bound_slots(inst)
    assert sym.details["placement"] == "symmetric" and lp.details["placement"] != "symmetric"
    assert sym.makespan_slots is not None and sym.makespan_slots <= 46 + 2


@pytest.mark.slow
def test_torus_32x32_by_translation_is_fast_and_near_the_bound():
    """1,024 GPUs, C = 1, 1 GB: chunks of 1 MB (20 us at 50 GB/s against alpha 0.7 us), l = L = 1.
    A GPU receives 1,023 chunks on 4 in-links, D >= 256 slots; one tree
    per root (C = 1: no rotation to average over) has at most (N - 1) / 4 + 2 = 257.75 links
    per direction, so about 258 slots plus a hop of fill; the 1,047,552 sends verify."""
    inst = _allgather(torus2d(32, 32), 1)
    assert inst.occupancy.max() == 1 and inst.latency.max() == 1
    res = solve(inst, "trees", SolveOptions(time_limit=60, extra={"flow_bound": False}))
    assert res.schedule is not None and res.verified
    assert res.makespan_slots is not None and 256 <= res.makespan_slots <= 260
