"""Shallow reduce trees (trees_reduce_shallow.py) and their priority placement through
switches that only relay (trees_reduce.place_arcs_by_priority)."""

from __future__ import annotations

import numpy as np
import pytest

from ccplan.heuristics import trees_reduce
from ccplan.heuristics.trees import plan_trees, slot_network
from ccplan.heuristics.trees_reduce_shallow import arc_depth, shallow_arc_trees
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import amd
from ccplan.limits import Deadline
from ccplan.schedule.relays import relaying_switches
from ccplan.schedule.verify import verify


def _twin_trees(chunks: int, size: str = "64MB"):  # type: ignore[no-untyped-def]
    """AMD x2 ReduceScatter, its reversed twin, the relays and the trees engine's arc trees."""
    topo = amd(2)
    inst = make_instance(topo, make_collective("reducescatter", topo, chunks=chunks), size)
    twin = trees_reduce._twin(inst)
    relays = relaying_switches(inst)
    pos = twin.topology.node_index
    plan = plan_trees(twin, Deadline.after(60), {"trees_shallow": False}, frozenset(pos[v] for v in relays))
    compiled = trees_reduce._arcs(twin, plan, relays)
    weights = {r: [t.weight for t in plan.packing.trees[pos[r]]] for r in compiled}
    return inst, twin, relays, compiled, weights


def test_shallow_arc_trees_keep_rate_and_capacity_and_are_shallower() -> None:
    """AMD x2 at 64 MB, C = 64. Checked from the returned trees alone: every tree spans the 32
    GPUs (each GPU but the root is the head of exactly one arc, every arc leaves a GPU the tree
    already holds, its links are a path through switches only); every root keeps the rate;
    the loads, one per arc on each link of its path (a relay does not merge), times the
    weights fit every link's capacity; and the rate-weighted squared depth is lower than the
    first packing's (the shortest-path pricing of the links found nothing here: the two-round
    phase this replaces left it as it was)."""
    _, twin, relays, compiled, weights = _twin_trees(64)
    topo = twin.topology
    pos = topo.node_index
    net = slot_network(twin)
    lat = np.asarray(twin.latency, dtype=float)
    gpus = set(topo.gpus)
    rate = min(sum(w) for w in weights.values())
    trees, tree_w = shallow_arc_trees(
        net, lat, {pos[r]: v for r, v in compiled.items()}, {pos[r]: v for r, v in weights.items()},
        [pos[g] for g in sorted(gpus)], Deadline.after(60),
    )
    ids = topo.node_ids
    load = np.zeros(net.num_links)
    before = sum(
        y * arc_depth(a, lat) ** 2 for r in compiled for a, y in zip(compiled[r], weights[r], strict=True)
    )
    after = 0.0
    for rp, per_tree in trees.items():
        root = ids[rp]
        assert sum(tree_w[rp]) >= rate * (1 - 1e-6)
        for arcs, y in zip(per_tree, tree_w[rp], strict=True):
            held = [root]
            for tail, path in arcs:
                node = held[tail]
                for e in path:
                    link = topo.links[e]
                    assert link.src == node
                    node = link.dst
                    load[e] += y
                assert all(topo.links[e].dst in relays for e in path[:-1])
                assert node in gpus
                held.append(node)
            assert sorted(held) == sorted(gpus)
            after += y * arc_depth(arcs, lat) ** 2
    cap = np.array([float(c) for c in net.cap])
    assert (load <= cap * (1 + 1e-6)).all()
    assert after < before


def _stays_overlap(twin, relays, cols) -> int:  # type: ignore[no-untyped-def]
    """Count, per chunk and relaying switch, the arrivals that come before the last stay there
    ended: sorted arrivals ``a`` and departures ``d`` (sends out of the switch) alternate with
    ``a[i + 1] > d[i]`` exactly when the stays are disjoint in any pairing."""
    slot, root, index, link = cols
    topo = twin.topology
    lat = np.asarray(twin.latency)
    arrive: dict[tuple[int, int, int], list[int]] = {}
    leave: dict[tuple[int, int, int], list[int]] = {}
    for s, r, i, e in zip(slot.tolist(), root.tolist(), index.tolist(), link.tolist(), strict=True):
        lk = topo.links[e]
        if lk.dst in relays:
            arrive.setdefault((r, i, lk.dst), []).append(s + int(lat[e]))
        if lk.src in relays:
            leave.setdefault((r, i, lk.src), []).append(s)
    bad = 0
    for key, a in arrive.items():
        a, d = sorted(a), sorted(leave[key])
        assert len(a) == len(d) and all(x <= y for x, y in zip(a, d, strict=True))
        bad += sum(a[k + 1] <= d[k] for k in range(len(a) - 1))
    return bad


@pytest.mark.parametrize("beta", [1.0, 3.0])
def test_priority_placement_keeps_one_partial_sum_per_relay(beta: float) -> None:
    """AMD x2 ReduceScatter at 64 MB, C = 16, arc trees placed by per-link priority: the
    reflection verifies, and no relaying switch holds two partial sums of a chunk at once
    (checked from the placed sends by :func:`_stays_overlap`). The same placement with the
    rule switched off (no switch marked as relaying) does overlap stays on this instance, so
    the check can fail."""
    inst, twin, relays, compiled, weights = _twin_trees(16)
    cols = trees_reduce.place_arcs_by_priority(twin, compiled, weights, relays, beta)
    assert cols is not None
    assert _stays_overlap(twin, relays, cols) == 0
    report = verify(inst, trees_reduce.reflect(inst, *cols, relays))
    assert report.ok, report.violations[:1]
    free = trees_reduce.place_arcs_by_priority(twin, compiled, weights, frozenset(), beta)
    assert free is not None
    assert _stays_overlap(twin, relays, free) > 0


def test_a_probe_of_the_reduction_asks_for_the_second_run() -> None:
    """A ``--chunks auto`` probe (``extra.auto_probe``) of a ReduceScatter through a switch that
    only relays skips the windowed packings, so its result says so (``details["auto_probe"]``)
    and ``--chunks auto`` runs the method once more, in full, at the C it picks; without the
    flag it does not. GPUs 0, 1 and 2, 3 on 50 GB/s pairs, each with a 25 GB/s cable to one
    switch; C = 8 (32 chunks in all: the native reduction is the only candidate)."""
    from ccplan.contract import SolveOptions
    from ccplan.instances import make_topology
    from ccplan.pipeline import solve

    topo = make_topology(
        "two-chassis", gpus=range(4), switches=[4],
        duplex_links=[(0, 1, 50.0, 0.7), (2, 3, 50.0, 0.7)] + [(g, 4, 25.0, 1.3) for g in range(4)],
    )
    inst = make_instance(topo, make_collective("reducescatter", topo, chunks=8), "1GB")
    probe = solve(inst, "heuristic", SolveOptions(time_limit=30, workers=1, extra={"auto_probe": True}))
    full = solve(inst, "heuristic", SolveOptions(time_limit=30, workers=1))
    assert probe.verified and full.verified
    assert "auto_probe" in probe.details and "auto_probe" not in full.details
