"""Step 6 of the ``trees`` engine: packings on windowed capacities placed by per-link priority.

The priority placement (:func:`ccplan.heuristics.trees_jit.place_by_priority`) is checked for
what list scheduling promises, independently of its code: every schedule verifies, the trees
and their sends are the plan's, and no link is left with room in a block while a send of it was
already held at its tail (work conservation, checked slot by slot from the schedule alone).
:func:`ccplan.heuristics.trees_shallow.windowed_network` is checked against a hand derivation.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.heuristics.trees import plan_trees, schedule_trees, trees_engine
from ccplan.heuristics.trees_pack import Network
from ccplan.heuristics.trees_reduce import reduction_schedule
from ccplan.heuristics.trees_shallow import windowed_network
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import resolve_topology
from ccplan.instances.combining import make_combining
from ccplan.limits import NEVER, Deadline
from ccplan.schedule.verify import verify

CASES = [
    ("amd", {"chassis": 2}, 4, "64MB"),
    ("ndv2", {"chassis": 2}, 8, "16MB"),
    ("dgx2", {"chassis": 2}, 2, "64MB"),
    ("leaf_spine", {"leaves": 2, "gpus_per_leaf": 4, "spines": 2}, 6, "4MB"),
]


def _instance(name, params, chunks, size):  # type: ignore[no-untyped-def]
    topo = resolve_topology(name, **params)
    return make_instance(topo, make_collective("allgather", topo, chunks=chunks), size)


def _held(inst, sched):  # type: ignore[no-untyped-def]
    """Per (chunk, node): the first slot at which the node holds the chunk (from the sends)."""
    col = sched.columns()
    index = {(lk.src, lk.dst): e for e, lk in enumerate(inst.topology.links)}
    link = np.array([index[(a, b)] for a, b in zip(col["src"].tolist(), col["dst"].tolist(), strict=True)])
    held: dict[tuple[int, int, int], int] = {}
    for (s, i), holders in inst.collective.holders.items():
        for v in holders:
            held[(s, i, v)] = 0
    for k in np.argsort(col["slot"], kind="stable"):
        key = (int(col["chunk_source"][k]), int(col["chunk_index"][k]), int(col["dst"][k]))
        at = int(col["slot"][k] + inst.latency[link[k]])
        held[key] = min(held.get(key, at), at)
    return col, link, held


@pytest.mark.parametrize(("name", "params", "chunks", "size"), CASES)
@pytest.mark.parametrize("beta", [1.0, 3.0])
def test_priority_placement_verifies_and_conserves_work(name, params, chunks, size, beta):
    """Same sends as the order placement (the plan's trees), a verified schedule at or above
    the slot bound, and work conservation: for every send on link ``e`` in slot ``t``, no
    earlier block start ``t' < t`` of ``e`` (a multiple of its ``l``) had fewer than ``omega``
    sends while the chunk was already held at the tail -- list scheduling never idles a link
    that has a ready send (the order placement has this property too: a later chunk fills the
    earliest block with room)."""
    inst = _instance(name, params, chunks, size)
    plan = plan_trees(inst, NEVER)
    ordered = schedule_trees(inst, plan, NEVER)
    sched = schedule_trees(inst, plan, NEVER, priority=beta)
    report = verify(inst, sched)
    assert report.ok, report.violations[:3]
    assert sched.last_arrival(inst) >= lower_bound_slots(inst)

    def sends(s):  # type: ignore[no-untyped-def]
        c = s.columns()
        return sorted(zip(c["chunk_source"].tolist(), c["chunk_index"].tolist(), c["src"].tolist(),
                          c["dst"].tolist(), strict=True))

    assert sends(sched) == sends(ordered)
    col, link, held = _held(inst, sched)
    occ, omega = inst.occupancy, inst.link_capacity
    horizon = int(col["slot"].max()) + 1
    used = np.zeros((inst.topology.num_links, horizon + 1), dtype=np.int64)
    np.add.at(used, (link, col["slot"]), 1)
    for k in range(len(col["slot"])):
        e, t = int(link[k]), int(col["slot"][k])
        ready = held[(int(col["chunk_source"][k]), int(col["chunk_index"][k]), int(col["src"][k]))]
        first = -(-ready // int(occ[e])) * int(occ[e])
        starts = np.arange(first, t, int(occ[e]))
        assert not (used[e, starts] < omega[e]).any(), (
            f"link {e} had room at {starts[used[e, starts] < omega[e]][:3]} for a send placed at {t}"
        )


def test_windowed_network_by_hand():
    """GPU 0 -> switch 2 -> GPU 1, and GPU 1 -> GPU 0 directly; latencies 10, 20, 5 slots,
    capacities 1, 1, 2; roots and terminals the GPUs 0 and 1; horizon 100 slots.

    - link 0->2: a(0) = 0, L = 10, b(2) = 20 (2 -> 1): window 100 - 30 = 70 -> share 0.7
    - link 2->1: a(2) = 10, L = 20, b(1) = 0: 70 -> 0.7
    - link 1->0: a(1) = 0, L = 5, b(0) = 0: 95 -> 0.95
    Shares are rounded to the nearest 1/256 (``grain=256``): 0.7 -> 179/256 (179.2),
    0.95 -> 243/256 (243.2). With ``scale = 2`` the cuts double: 0.4 -> 102/256 (102.4),
    0.9 -> 230/256 (230.4). The default grain 1/1024: 0.7 -> 717/1024 (716.8).
    """
    net = Network(n=3, src=(0, 2, 1), dst=(2, 1, 0), cap=(Fraction(1), Fraction(1), Fraction(2)))
    out = windowed_network(net, [10, 20, 5], [0, 1], [0, 1], 100.0, grain=256)
    assert out.cap == (Fraction(179, 256), Fraction(179, 256), 2 * Fraction(243, 256))
    out2 = windowed_network(net, [10, 20, 5], [0, 1], [0, 1], 100.0, scale=2.0, grain=256)
    assert out2.cap == (Fraction(102, 256), Fraction(102, 256), 2 * Fraction(230, 256))
    assert windowed_network(net, [10, 20, 5], [0, 1], [0, 1], 100.0).cap[0] == Fraction(717, 1024)


def test_engine_keeps_the_shorter_windowed_schedule():
    """AMD x2 AllGather 64 MB at C = 16: latency counts (the NIC path's window is several
    percent of ``C / x*`` short), so step 6 runs; the engine's schedule verifies, is no longer
    than the one without step 6 (it keeps the shorter), and says what it did."""
    inst = _instance("amd", {"chassis": 2}, 16, "64MB")
    on = trees_engine(inst, SolveOptions(time_limit=60))
    off = trees_engine(inst, SolveOptions(time_limit=60, extra={"trees_windowed": False}))
    assert on.schedule is not None and off.schedule is not None
    for out in (on, off):
        report = verify(inst, out.schedule)
        assert report.ok, report.violations[:3]
    assert "windowed" in on.details and "windowed" not in off.details
    assert on.schedule.last_arrival(inst) <= off.schedule.last_arrival(inst)
    # a --chunks auto probe skips step 6 (a probe is the cheap look at one C)
    probe = trees_engine(inst, SolveOptions(time_limit=60, extra={"auto_probe": True}))
    assert probe.schedule is not None and verify(inst, probe.schedule).ok
    assert "windowed" not in probe.details


def test_reduction_keeps_the_shorter_windowed_placement():
    """The same for the trees reduction (ReduceScatter through switches that cannot reduce):
    verified both ways, and the windowed candidates never make it longer."""
    topo = resolve_topology("amd", chassis=2)
    inst = make_instance(topo, make_combining("reducescatter", topo, 4), "64MB")
    import time

    on = reduction_schedule(inst, Deadline(time.perf_counter() + 60), {})
    off = reduction_schedule(inst, Deadline(time.perf_counter() + 60), {"trees_windowed": False})
    for sched in (on, off):
        report = verify(inst, sched)
        assert report.ok, report.violations[:3]
    assert on.last_arrival(inst) <= off.last_arrival(inst)


@pytest.mark.parametrize(("name", "params", "chunks", "size"), CASES[:2])
def test_priority_placement_takes_the_least_key(name, params, chunks, size):
    """For two sends ``s``, ``s'`` on one link with ``s`` in slot ``t`` and ``s'`` later while
    already held at the tail by ``t``: ``key(s) <= key(s')``, the key being the chunk's release
    ``k / rate`` (``k`` its index among its root's chunks, ``rate`` the root's packing rate)
    less ``beta`` times the latency left: the link's ``L`` plus the longest chain of the same
    chunk's sends out of the head, recomputed from the schedule. The order placement breaks
    this (it is checked to, so the check can fail)."""
    inst = _instance(name, params, chunks, size)
    plan = plan_trees(inst, NEVER)
    beta = 2.0

    def violations(sched):  # type: ignore[no-untyped-def]
        col, link, held = _held(inst, sched)
        lat = inst.latency
        src, dst = col["src"].tolist(), col["dst"].tolist()
        chunk = list(zip(col["chunk_source"].tolist(), col["chunk_index"].tolist(), strict=True))
        out_of: dict[tuple[tuple[int, int], int], list[int]] = {}
        for k, c in enumerate(chunk):
            out_of.setdefault((c, src[k]), []).append(k)
        left: dict[int, float] = {}

        def below(k: int) -> float:
            if k not in left:
                left[k] = float(lat[link[k]]) + max((below(j) for j in out_of.get((chunk[k], dst[k]), [])),
                                                    default=0.0)
            return left[k]

        pos = inst.topology.node_index
        rank = {}
        for (r, i) in inst.collective.holders:
            rank.setdefault(r, []).append(i)
        rate = {r: sum(t.weight for t in plan.packing.trees[pos[r]]) for r in rank}
        key = [sorted(rank[c[0]]).index(c[1]) / rate[c[0]] - beta * below(k) for k, c in enumerate(chunk)]
        bad = 0
        by_link: dict[int, list[int]] = {}
        for k in range(len(chunk)):
            by_link.setdefault(int(link[k]), []).append(k)
        slot = col["slot"]
        for ks in by_link.values():
            for a in ks:
                for b in ks:
                    ready_b = held[(chunk[b][0], chunk[b][1], src[b])]
                    if slot[b] > slot[a] and ready_b <= slot[a] and key[b] < key[a] - 1e-9:
                        bad += 1
        return bad

    assert violations(schedule_trees(inst, plan, NEVER, priority=beta)) == 0
    assert violations(schedule_trees(inst, plan, NEVER)) > 0


def test_windowed_plan_falls_back_to_the_coarse_grain(monkeypatch):
    """Where the exact max-flows' integers overflow at shares of 1/1024 (AMD x3 AllGather 64 MB,
    C = 512, scale 2: "capacities too fine", which ended the trees variant of the portfolio),
    the packing is made at 1/256 instead; when both overflow the scale is skipped (None)."""
    import ccplan.heuristics.trees as trees_mod

    inst = _instance("amd", {"chassis": 2}, 16, "64MB")
    plan = plan_trees(inst, NEVER)
    cut_for = trees_mod.window_applies(inst, plan)
    assert cut_for is not None
    real = trees_mod.plan_trees
    base = trees_mod.slot_network(inst).cap
    grains: list[int] = []

    def fussy(instance, deadline, extra=None, relays=frozenset(), net=None):  # type: ignore[no-untyped-def]
        grain = max((c / b).denominator for c, b in zip(net.cap, base, strict=True))
        grains.append(grain)
        if grain > limit:
            raise ValueError("capacities too fine for exact max-flows (test)")
        return real(instance, deadline, extra, relays, net=net)

    monkeypatch.setattr(trees_mod, "plan_trees", fussy)
    limit = 512
    alt = trees_mod._windowed_plan(inst, NEVER, {}, frozenset(), cut_for, 1.0)
    assert alt is not None and grains[0] > 512 >= grains[-1] and len(grains) == 2
    assert verify(inst, schedule_trees(inst, alt, NEVER, priority=1.0)).ok
    limit = 1
    assert trees_mod._windowed_plan(inst, NEVER, {}, frozenset(), cut_for, 1.0) is None
