"""NCCL-style baselines: ring channels counted by hand, the k-ring time against the alpha-beta
formula, the single ring kept as ``ring-1``, NCCL's double binary tree, report labels."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.heuristics import baselines as bl
from ccplan.instances.builtin import DGX1_DOUBLE_PAIRS, DGX1_SINGLE_PAIRS, dgx1, fully_connected, ring
from ccplan.instances.catalog import make_collective
from ccplan.instances.combining import COMBINING, make_combining
from ccplan.instances.instance import make_instance
from ccplan.pipeline.solve import solve
from ccplan.plan import PlanRequest, run_plan
from ccplan.schedule.simulate import simulate

B = 50.0  # GB/s
ALPHA = 0.7  # us
BETA = 1.0 / (B * 1e3)  # us per byte
M = 1e6  # bytes


def _coll(kind, topo, chunks=1, root=None):
    if kind in COMBINING:
        return make_combining(kind, topo, chunks, root=root)
    return make_collective(kind, topo, chunks, root=root)


def _hops(ring_):
    return list(zip(ring_, [*ring_[1:], ring_[0]], strict=True))


def _check_rings_fit(topo, found):
    """Every ring visits every GPU once and the rings' speed fits every link they share."""
    load: Counter[tuple[int, int]] = Counter()
    for r in found.rings:
        assert sorted(r) == sorted(topo.gpus)
        for a, b in _hops(r):
            path = found.routes[(a, b)]
            for u, v in pairwise(path):
                load[(u, v)] += 1
    for (u, v), n in load.items():
        assert n * found.speed_GBps <= topo.link(u, v).bandwidth_GBps + 1e-9
    return load


def test_dgx1_has_six_nvlink_channels_by_hand():
    """DGX-1's hybrid cube-mesh, in units of one NVLink (25 GB/s each way): the 8 double pairs
    (0-1, 1-3, 3-2, 2-6, 6-7, 7-5, 5-4, 4-0) form the Hamiltonian cycle C = 0 1 3 2 6 7 5 4,
    the 8 single pairs (0-2, 2-1, 1-5, 5-6, 6-4, 4-7, 7-3, 3-0) the Hamiltonian cycle
    S = 0 2 1 5 6 4 7 3. NCCL's rule: a ring at per-channel speed s takes s on every link it
    crosses; maximise channels x s.

    - Every GPU has 2+2+1+1 = 6 units out, and each ring leaves every GPU once, so k s <= 6.
    - s = 2 (50 GB/s): only double links qualify, whose graph is the cycle C: its two directions
      give k = 2, k s = 4.
    - s = 1 (25 GB/s): C and its reverse twice each (2 units per double link each way) and S
      and its reverse once: k = 6, k s = 6, the maximum; every link is then full.
    - s = 1/2 gives at most 12 channels for the same 6 units, and NCCL keeps the fewer hops.

    So k = 6 at 25 GB/s (150 GB/s per GPU), every directed NVLink carrying as many channels as
    it has links. (NVIDIA/nccl#299 cites 4 rings on DGX-1 from NCCL 2.3; NCCL's later search
    maximises channels x speed as above.)"""
    topo = dgx1()
    found = bl.find_channels(topo)
    assert found is not None
    assert (found.k, found.speed_GBps) == (6, 25.0)
    load = _check_rings_fit(topo, found)
    for pairs, links in ((DGX1_DOUBLE_PAIRS, 2), (DGX1_SINGLE_PAIRS, 1)):
        for a, b in pairs:
            assert load[(a, b)] == links and load[(b, a)] == links
    res = solve(make_instance(topo, _coll("allgather", topo, 6), "1GB"), "ring")
    assert res.verified
    assert (res.details["channels"], res.details["channels_used"]) == (6, 6)
    assert bl.baseline_label("ring", res.details) == "NCCL-style ring (6 channels)"


def test_four_gpus_two_nvlinks_per_pair_six_channels():
    """Four GPUs, every pair joined by 50 GB/s each way (NVIDIA/nccl#713: 4 V100 with two
    NVLinks per pair, where NCCL dumps 6 ring channels at one NVLink's speed). At s = 50 the
    rings use each directed link once; three would decompose the complete symmetric digraph on
    4 vertices into Hamiltonian cycles, which does not exist (Tillson 1980: none for n = 4, 6),
    so k = 2 (a ring and its reverse), 100 GB/s. At s = 25 each directed link takes two rings:
    the 6 directed Hamiltonian cycles of K4 each once use every directed link exactly twice,
    k = 6, 150 GB/s = the 3 x 50 GB/s each GPU sends, the maximum."""
    topo = fully_connected(4, bandwidth_GBps=50.0, alpha_us=0.0)
    found = bl.find_channels(topo)
    assert found is not None and (found.k, found.speed_GBps) == (6, 25.0)
    load = _check_rings_fit(topo, found)
    assert set(load.values()) == {2} and len(load) == 12
    assert len({r for r in found.rings}) == 6  # the 6 distinct directed Hamiltonian cycles


def test_k_ring_allgather_on_k4_meets_the_ingress_bound():
    """K4 as above, alpha 0, C = 6 (one chunk per GPU per channel): tau = chunk / 50 GB/s, one
    slot per chunk per link. Each GPU must receive 3 x 6 = 18 chunks over 3 in-links: >= 6
    slots. The 6 channels each run 3 ring steps with two channels per directed link, 2 slots a
    step: 6 slots, the bound. One ring (``ring-1``) brings all 18 in on one in-link: >= 18."""
    topo = fully_connected(4, bandwidth_GBps=50.0, alpha_us=0.0)
    inst = make_instance(topo, _coll("allgather", topo, 6), M)
    res = solve(inst, "ring")
    assert res.verified and res.makespan_slots == 6
    one = solve(inst, "ring-1")
    assert one.verified and one.makespan_slots is not None and one.makespan_slots >= 18


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_two_channel_ring_matches_alpha_beta_formula(n):
    """A bidirectional ring of n GPUs, 50 GB/s, alpha 0.7 us: every GPU has 2 x 50 GB/s out,
    a ring leaves each GPU once, and at s = 50 the forward and the backward ring fit: k = 2.
    With C = 2 each channel carries one chunk of size/(2n) per GPU on its own links, every hop
    alpha + size/(2n) beta and no hop ever waits: AllGather and ReduceScatter take
    (n-1)(alpha + size/(2n) beta) = (n-1) alpha + (n-1)/n x size / (k B), AllReduce twice
    that; one ring (``ring-1``, C = 1) takes (n-1)(alpha + size/n beta) (``003_*.txt``)."""
    topo = ring(n, bandwidth_GBps=B, alpha_us=ALPHA)
    found = bl.find_channels(topo)
    assert found is not None and found.k == 2 and found.speed_GBps == B
    for kind, steps in (("allgather", 1), ("reducescatter", 1), ("allreduce", 2)):
        inst = make_instance(topo, _coll(kind, topo, 2), M)
        res = solve(inst, "ring")
        assert res.verified and res.schedule is not None
        assert res.details["channels"] == 2
        k_ring = steps * ((n - 1) * ALPHA + (n - 1) / n * M / (2 * B * 1e3))
        assert simulate(inst, res.schedule).completion_us == pytest.approx(k_ring, rel=1e-9)
        whole = make_instance(topo, _coll(kind, topo, 1), M)
        one = solve(whole, "ring-1")
        assert one.verified and one.schedule is not None
        single = steps * bl.ring_allgather_cost(n, M, ALPHA, BETA)
        assert simulate(whole, one.schedule).completion_us == pytest.approx(single, rel=1e-9)


@pytest.mark.parametrize("kind", ["broadcast", "reduce", "allreduce", "reducescatter"])
def test_k_rings_verify_and_respect_the_bound_on_dgx1(kind):
    """Every collective the ring implements verifies on DGX-1 with its 6 channels and is not
    below the slot-model lower bound."""
    topo = dgx1()
    inst = make_instance(topo, _coll(kind, topo, 6, root=3), "1MB")
    res = solve(inst, "ring")
    assert res.verified, res.report.violations[:2] if res.report else None
    assert res.makespan_slots is not None and res.makespan_slots >= lower_bound_slots(inst)
    assert res.details["channels_used"] == 6


def test_max_channels_and_one_way_rings():
    """``extra["max_channels"]`` caps the rings (NCCL_MAX_NCHANNELS): with 1, DGX-1 keeps one
    ring at 50 GB/s (the double-link cycle, the fastest single channel). A one-way ring has
    one ring only (its reverse has no links). A bad cap is refused naming the field."""
    topo = dgx1()
    inst = make_instance(topo, _coll("allgather", topo, 2), "1MB")
    res = solve(inst, "ring", SolveOptions(extra={"max_channels": 1}))
    assert res.verified and res.details["channels"] == 1 and res.details["channel_GBps"] == 50.0
    with pytest.raises(ValidationError, match="max_channels"):
        solve(inst, "ring", SolveOptions(extra={"max_channels": 0}))
    one_way = ring(5, bidirectional=False)
    found = bl.find_channels(one_way)
    assert found is not None and found.k == 1


def test_double_binary_trees_follow_nccl():
    """NCCL's trees (src/graph/trees.cc). Tree 1 on 8 ranks: rank 0 is the root; with b the
    lowest set bit of r, parent(r) = (r ^ b) | 2b, or r ^ b past n: 1, 3 -> 2; 5, 7 -> 6;
    2, 6 -> 4; 4 -> (0 | 8 = 8 >= 8) -> 0. Tree 2, n even, is the mirror r -> 7 - r: parent2(r)
    = 7 - parent1(7 - r): 6, 4 -> 5; 2, 0 -> 1; 5, 1 -> 3; 3 -> 7; 7 is the root. Interior
    ranks {0, 2, 4, 6} and {1, 3, 5, 7}: each rank forwards in one tree only. With 5 ranks
    (odd) tree 2 is tree 1 shifted by one: root 1 (NCCL's ncclGetDtreeRoots)."""
    t1, t2 = bl.double_binary_trees(8)
    assert t1 == {0: None, 1: 2, 3: 2, 5: 6, 7: 6, 2: 4, 6: 4, 4: 0}
    assert t2 == {6: 5, 4: 5, 2: 1, 0: 1, 5: 3, 1: 3, 3: 7, 7: None}
    _, t2_odd = bl.double_binary_trees(5)
    assert [r for r, p in t2_odd.items() if p is None] == [1]
    topo = dgx1()
    inst = make_instance(topo, _coll("allreduce", topo, 2), "1MB")
    res = solve(inst, "double-binary-tree")
    assert res.verified and res.makespan_slots >= lower_bound_slots(inst)


def test_plan_report_names_the_nccl_style_ring(tmp_path: Path):
    """The plan report names the ring baseline with its channel count (2 on a bidirectional
    ring: the forward and the backward ring) and says its times are alpha-beta model times."""
    topo = ring(4)
    req = PlanRequest(
        topo, ("allgather",), ("1MB",), methods=("heuristic",), baselines=("ring", "ring-1"),
        chunks=2, time_limit=2,
    )  # fmt: skip
    res = run_plan(req, tmp_path / "p", plots=False)
    base = res.best[0]["baselines"]
    assert base["ring"]["label"] == "NCCL-style ring (2 channels)"
    assert base["ring-1"]["label"] == "single ring"
    report = (tmp_path / "p" / "report.md").read_text()
    assert "| NCCL-style ring (2 channels) (us) |" in report
    assert "alpha-beta model, not measurements" in report
