"""Engine ``trees``: shallow trees at the optimal rate and periodic copies of one group."""

from __future__ import annotations

import numpy as np
import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.heuristics.trees import plan_trees, slot_network
from ccplan.heuristics.trees_period import copy_pattern, place_pattern
from ccplan.heuristics.trees_shallow import depth
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import resolve_topology, ring, torus2d
from ccplan.limits import Deadline
from ccplan.pipeline import solve
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import verify


def _ring_instance(chunks: int):  # type: ignore[no-untyped-def]
    """Unidirectional ring of 4 GPUs, 50 GB/s, alpha 1 us, 4 MB: a chunk of 4 MB / 4 / C takes
    tau = 2.5 us at C = 8 (l = 1) and alpha adds delta = 1 slot, so L = 2."""
    topo = ring(4, bidirectional=False, alpha_us=1.0)
    return make_instance(topo, make_collective("allgather", topo, chunks=chunks), f"{chunks // 2}MB")


def _lanes_of_ring(inst):  # type: ignore[no-untyped-def]
    """One lane per root: the path r -> r+1 -> r+2 -> r+3 (steps ``(link, tail position)``)."""
    topo = inst.topology
    return {r: [[(topo.link_index[((r + k) % 4, (r + k + 1) % 4)], k) for k in range(3)]] for r in range(4)}


@pytest.mark.parametrize("chunks", [8, 16])
def test_periodic_copies_on_a_ring_match_the_hand_formula(chunks):
    """Unidirectional ring of N = 4, l = 1, L = 2, one chunk per root and period. Every link
    carries one chunk of each of the N - 1 = 3 roots whose path uses it, so the period is
    P = 3 slots. Placing lanes in root order: root 0 sends at 0, 2, 4 (residues 0, 2, 1);
    root 1 at 0, 2, 4 (its links have 0 / 1 free), root 2 at 0, 2, 4, root 3 at 0, 2, 4: each
    hop right when the chunk arrives, so the pattern spans 4 + L = 6 slots. The last of the C
    groups starts at 3 (C - 1): makespan = P (C - 1) + 6 = 3 C + 3 = period x C + fill, with
    fill = (N - 1) L - P = 3 (the last chunk's three hops of L = 2 after its period).
    Independent check: every link carries 3 C sends of one slot, so D >= 3 C - 1 + L = 3 C + 1."""
    inst = _ring_instance(chunks)
    assert inst.occupancy.max() == 1 and inst.latency.min() == 2 == inst.latency.max()
    pattern = place_pattern(inst, _lanes_of_ring(inst), 3)
    assert pattern is not None
    assert pattern.span == 6
    assert pattern.makespan(chunks) == 3 * chunks + 3
    chunks_of = {r: list(range(chunks)) for r in range(4)}
    slot, root, index, link = copy_pattern(pattern, chunks_of)
    topo = inst.topology
    src = np.array([lk.src for lk in topo.links])[link]
    dst = np.array([lk.dst for lk in topo.links])[link]
    sched = Schedule.from_columns(slot=slot, chunk_source=root, chunk_index=index, src=src, dst=dst)
    report = verify(inst, sched)
    assert report.ok, report.violations[:3]
    assert report.makespan_slots == 3 * chunks + 3
    assert report.makespan_slots >= lower_bound_slots(inst)
    assert report.makespan_slots >= 3 * chunks + 1


def test_periodic_pattern_partial_last_group():
    """C = 5 chunks per root with n = 2 lanes per period: groups of 2, 2 and 1. The periodic
    schedule of the engine (forced) verifies, and its makespan is at least the slot bound."""
    topo = ring(4, bidirectional=False, alpha_us=1.0)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=5), "5MB")
    res = solve(inst, "trees", SolveOptions(time_limit=30, extra={"trees_placement": "periodic",
                                                                   "flow_bound": False}))
    assert res.schedule is not None and res.verified
    assert verify(inst, res.schedule).ok
    assert res.makespan_slots is not None and res.makespan_slots >= lower_bound_slots(inst)


def test_engine_periodic_and_full_table_verify_near_the_rate():
    """Bidirectional ring of 6 at C = 48: x* = 2/5 chunk per slot per root (in-capacity 2 over 5
    roots), so the throughput term is C / x* = 120 slots. Both placements verify, are at least
    the slot bound, and are within 25 % of the throughput term (the fill is a few hops of L)."""
    topo = ring(6)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=48), "96MB")
    for how in ("periodic", "full"):
        res = solve(inst, "trees", SolveOptions(time_limit=30, extra={"trees_placement": how,
                                                                       "flow_bound": False}))
        assert res.schedule is not None and res.verified and verify(inst, res.schedule).ok
        assert res.details["optimal_rate_exact"] == "2/5"
        assert lower_bound_slots(inst) <= res.makespan_slots <= 1.25 * 120
        if how == "periodic":
            assert res.details["placement"] == "periodic"


def test_shallow_phase_keeps_the_rate_and_bounds_the_depth():
    """Torus 4 x 4 (equal links, L = 2 slots per hop): x* = 4/15 per root (in-capacity 4 over
    15 roots). The column generation alone may return chains; after the shallow phase the
    rate is still x* and no tree is deeper than twice the torus diameter (4 hops, so 8 hops of
    L: 16 slots), where a spanning chain has 15 hops (30 slots)."""
    topo = torus2d(rows=4, cols=4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=16), "64MB")
    plan = plan_trees(inst, Deadline.after(30))
    assert str(plan.optimal) == "4/15"
    assert plan.packing.rate == pytest.approx(float(plan.optimal), rel=1e-5)
    assert plan.packing.method.endswith("+shallow")
    net = slot_network(inst)
    lat = [float(x) for x in inst.latency]
    assert lat == [2.0] * len(lat)
    deepest = max(depth(t, net.src, net.dst, lat) for ts in plan.packing.trees.values() for t in ts)
    assert deepest <= 2 * 2 * 4


@pytest.mark.slow
def test_amd_one_chassis_allgather_within_one_percent_of_the_limit():
    """AMD 16 GCDs, AllGather 1 GB, C = 256: the throughput limit is (M / N) max_S |S| / B+(S)
    in us (max-flows on the bandwidths, benchmarks/limit.py); the slot model's x* equals it
    here (the occupancies are exact: 50/100/200 GB/s give l = 4/2/1). The schedule verifies
    and reaches >= 0.99 of that limit (before the shallow phase: 0.988 at C = 1024)."""
    from ccplan.heuristics.trees import bandwidth_network
    from ccplan.heuristics.trees_pack import optimal_rate

    topo = resolve_topology("amd", chassis=1)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=256), "1GB")
    res = solve(inst, "trees", SolveOptions(time_limit=60, extra={"flow_bound": False}))
    assert res.schedule is not None and res.verified and verify(inst, res.schedule).ok
    net = bandwidth_network(topo)
    gpus = [topo.node_index[g] for g in topo.gpus]
    x, _ = optimal_rate(net, gpus, gpus)
    limit_us = 1e9 / len(gpus) / float(x) * 1e-3
    assert limit_us / res.makespan_us >= 0.99


def test_exact_warm_start_takes_the_trees_schedule():
    """The exact engine's warm-start companions include ``trees`` for a multi-chunk AllGather:
    with no portfolio schedule yet (ring of 4, C = 8, no chassis, so ``cut-aware`` does not
    apply), the companion round returns the ``trees`` schedule, which verifies and is at
    least the slot bound."""
    import time

    from ccplan.model.exact.warmstart import _companions

    topo = ring(4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=8), "32MB")
    schedule, source = _companions(inst, SolveOptions(time_limit=20), time.perf_counter(), None, None, 0)
    assert source == "trees"
    assert schedule is not None
    report = verify(inst, schedule)
    assert report.ok and report.makespan_slots is not None
    assert report.makespan_slots >= lower_bound_slots(inst)


def test_pattern_makespan_counts_the_full_group_before_a_partial_last_one():
    """A pattern of n = 2 lanes and period P = 3 on one link of L = 2 whose lane 1 queues:
    lane 0 sends at slot 0 (ends 2), lane 1 at slot 8 (ends 10), so the span is 10. C = 3
    chunks per root: group 0 (both lanes) ends at 10, group 1 (lane 0 only) at 3 + 2 = 5, so
    the makespan is 10, not the last group's 5. The copies' own last arrival agrees."""
    from ccplan.heuristics.trees_period import Pattern

    pattern = Pattern(
        slot=np.array([0, 8]), root=np.array([0, 0]), lane=np.array([0, 1]), link=np.array([0, 0]),
        period=3, lanes=2, span=10, latency=np.array([2]),
    )
    assert pattern.makespan(3) == 10
    assert pattern.makespan(2) == 10
    assert pattern.makespan(5) == 3 + 10  # groups 0, 1 full; group 2 lane 0 ends at 6 + 2
    for chunks in (1, 2, 3, 4, 5, 7):
        slot, _, _, link = copy_pattern(pattern, {0: list(range(chunks))})
        assert pattern.makespan(chunks) == int((slot + pattern.latency[link]).max())
