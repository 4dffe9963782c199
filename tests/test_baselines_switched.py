"""NCCL-style rings and trees through switches and across nodes: channel counts and times
derived by hand, schedules verified and held against the bounds."""

from __future__ import annotations

import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.heuristics import baselines as bl
from ccplan.heuristics.baselines.nodes import node_groups
from ccplan.heuristics.baselines.trees import _node_trees, node_chains
from ccplan.instances.builtin import dgx2, fat_tree, leaf_spine, ndv2, star_switch
from ccplan.instances.catalog import make_collective
from ccplan.instances.combining import COMBINING, make_combining
from ccplan.instances.importers import Network, import_topology
from ccplan.instances.instance import make_instance
from ccplan.instances.topology import make_topology
from ccplan.pipeline.solve import solve
from ccplan.schedule.simulate import simulate

M = 1e6  # bytes
DATA = Path(__file__).parent / "data" / "import"


def _coll(kind, topo, chunks=1):
    if kind in COMBINING:
        return make_combining(kind, topo, chunks)
    return make_collective(kind, topo, chunks)


def _hops(ring):
    return list(zip(ring, [*ring[1:], ring[0]], strict=True))


def _check_rings_fit(topo, found):
    """Every ring visits every GPU once, every hop's route joins its two GPUs through switches
    only, and the rings' speed fits every link they share."""
    load: Counter[tuple[int, int]] = Counter()
    for r in found.rings:
        assert sorted(r) == sorted(topo.gpus)
        for a, b in _hops(r):
            path = found.routes[(a, b)]
            assert path[0] == a and path[-1] == b
            assert all(topo.kind[v] == "switch" for v in path[1:-1])
            for u, v in pairwise(path):
                load[(u, v)] += 1
    for (u, v), n in load.items():
        assert n * found.speed_GBps <= topo.link(u, v).bandwidth_GBps + 1e-9
    return load


def _solved(inst, method):
    res = solve(inst, method)
    assert res.verified, res.report.violations[:2] if res.report else None
    assert res.schedule is not None and res.makespan_slots is not None
    assert res.makespan_slots >= lower_bound_slots(inst)
    sim = simulate(inst, res.schedule).completion_us
    assert res.physical_bound_us is None or sim >= res.physical_bound_us * (1 - 1e-9)
    return res, sim


# ====================================================================== one switch
def test_star_switch_ring_by_hand():
    """n = 8 GPUs on one switch, each port B = 50 GB/s each way, alpha 0.7 us per link.

    k: a ring leaves and enters every GPU once, and a GPU has one port of B each way, so
    k x s <= B; the ring in id order through the switch (NCCL tries a GPU's index neighbours
    first on NVSwitch) crosses every port once each way, so s = B: one channel at 50 GB/s.

    Time, store and forward, C = 1 (one chunk of M/n per GPU):

    - ReduceScatter: a partial sum moves GPU to GPU, each hop g -> switch -> g+1 on both links
      (alpha + M/(nB) each), every link carrying one partial sum per step, so nothing waits:
      (n-1) 2 (alpha + M/(nB)).
    - AllGather: the slot model's switch keeps a chunk it forwarded (DESIGN: a store-and-forward
      switch may hold a chunk and send it later), so a chunk goes up once, alpha + M/(nB), and
      the switch passes it on at each later ring step; each GPU's down-link then serves its
      n-1 chunks back to back: alpha + M/(nB) + (n-1) M/(nB) + alpha = 2 alpha + M/B.
    - Cut-through (AllGather): no slower than store and forward, not below the physical
      bound."""
    n, bw, alpha = 8, 50.0, 0.7
    topo = star_switch(n, bandwidth_GBps=bw, alpha_us=alpha)
    found = bl.find_channels(topo)
    assert found is not None
    assert (found.k, found.speed_GBps) == (1, bw)
    assert found.rings[0] == tuple(range(n))
    _check_rings_fit(topo, found)
    beta = 1.0 / (bw * 1e3)  # us per byte
    rs, sim_rs = _solved(make_instance(topo, _coll("reducescatter", topo), M), "ring")
    assert rs.details["channels"] == 1
    assert sim_rs == pytest.approx((n - 1) * 2 * (alpha + M / n * beta), rel=1e-9)
    _, sim_ag = _solved(make_instance(topo, _coll("allgather", topo), M), "ring")
    assert sim_ag == pytest.approx(2 * alpha + M * beta, rel=1e-9)
    fast = make_instance(topo, _coll("allgather", topo), M, switch_model="cut-through")
    _, sim_ct = _solved(fast, "ring")
    assert sim_ct <= sim_ag + 1e-9


# ====================================================================== two chassis
A_SW, A_NIC = 0.35, 0.7  # us: a NIC hop costs as much latency as two switch links


def _two_chassis():
    """GPUs 0, 1 on switch 4 and GPUs 2, 3 on switch 5 (ports 50 GB/s); NICs 0 <-> 2 and
    1 <-> 3 at 25 GB/s, both ways."""
    return make_topology(
        "two-chassis",
        gpus=range(4),
        switches=[4, 5],
        duplex_links=[
            (0, 4, 50.0, A_SW), (1, 4, 50.0, A_SW), (2, 5, 50.0, A_SW), (3, 5, 50.0, A_SW),
            (0, 2, 25.0, A_NIC), (1, 3, 25.0, A_NIC),
        ],
    )  # fmt: skip


def test_two_chassis_rings_by_hand():
    """Two chassis of two GPUs on a switch (ports 50 GB/s), joined by two 25 GB/s NICs.

    k: the slowest links (the NICs) separate the chassis {0, 1} and {2, 3}. A ring leaves and
    enters each chassis at least once, and 2 x 25 GB/s leave each: k x s <= 50. A channel
    crosses a NIC at its own speed, so s <= 25, and two channels at 25 reach 50: the first
    enters chassis {2, 3} at 2 (NIC 0 -> 2) and leaves it through the other NIC (3 -> 1), the
    second uses the NICs the other way (1 -> 3, 2 -> 0): k = 2 at 25 GB/s, and the two rings
    share no link (each port carries one of them each way).

    Time, AllGather with C = 2 (one chunk of M/(nk) per GPU per channel), store and forward: a
    switch hop costs 2 (A_SW + M/(nk 50)) = A_NIC + M/(nk 25), as much as a NIC hop, so both
    rings step together without waiting: (n-1) (A_NIC + M/(nk s)) = (n-1) A_NIC + (n-1)/n x
    M/(k s). AllReduce is ReduceScatter then AllGather on the same rings: twice that. One ring
    (``ring-1``, C = 1) moves every byte through one NIC each way: at least (n-1)/n x M/25."""
    n, k, s = 4, 2, 25.0
    topo = _two_chassis()
    nodes = node_groups(topo)
    assert nodes is not None and nodes.groups == ((0, 1), (2, 3))
    found = bl.find_channels(topo)
    assert found is not None and (found.k, found.speed_GBps) == (k, s)
    load = _check_rings_fit(topo, found)
    assert set(load.values()) == {1}  # link-disjoint rings
    for r in found.rings:  # each ring runs through a chassis, then the other
        sides = [g in (0, 1) for g in r]
        assert sum(a != b for a, b in zip(sides, [*sides[1:], sides[0]], strict=True)) == 2
    step = A_NIC + M / (n * k) / (s * 1e3)
    for kind, phases in (("allgather", 1), ("allreduce", 2)):
        inst = make_instance(topo, _coll(kind, topo, k), M)
        res, sim = _solved(inst, "ring")
        assert res.details["channels"] == k
        assert sim == pytest.approx(phases * (n - 1) * step, rel=1e-9)
    one = make_instance(topo, _coll("allgather", topo, 1), M)
    _, sim1 = _solved(one, "ring-1")
    assert sim1 >= (n - 1) / n * M / (25.0 * 1e3)


def test_dgx2_x2_finds_one_channel_per_nic():
    """DGX-2 x2: 16 GPUs per NVSwitch (ports 125 GB/s), the odd GPU s of one chassis sends to
    GPU s-1 of the other through a 12.5 GB/s NIC, 8 NICs each way.

    k: every ring leaves each chassis, through 8 x 12.5 = 100 GB/s in all, so k x s <= 100; a
    channel crosses a NIC at its speed, so s <= 12.5; eight channels at 12.5 reach 100, one per
    NIC, as NCCL builds them (one ring per NIC, "NET n -> GPU a -> .. -> GPU x -> NET n"):
    each enters a chassis at an even GPU and leaves it at the odd GPU of the same NIC, so every
    port carries 8 x 12.5 = 100 <= 125. The search had found no ring here before (it searched
    all GPU orders); it must now take well under a second.

    AllGather 1 GB, C = 8 (one chunk of M/(nk) per GPU per channel): every NIC carries n-1 of
    its channel's chunks, so at least (n-1)/n x M/(k s) = 9,687.5 us; the NVSwitch hops are ten
    times faster and pipeline behind the NIC, adding a few hops' latency (under 1 %)."""
    topo = dgx2(2)
    start = time.perf_counter()
    found = bl.find_channels(topo)
    elapsed = time.perf_counter() - start
    assert found is not None and (found.k, found.speed_GBps) == (8, 12.5)
    assert elapsed < 5.0
    load = _check_rings_fit(topo, found)
    nics = [(a, b) for a, b in load if a < 32 and b < 32]
    assert len(nics) == 16 and all(load[e] == 1 for e in nics)
    for r in found.rings:
        sides = [g < 16 for g in r]
        assert sum(a != b for a, b in zip(sides, [*sides[1:], sides[0]], strict=True)) == 2
    n, k, s, size = 32, 8, 12.5, 1e9
    inst = make_instance(topo, _coll("allgather", topo, k), size)
    res, sim = _solved(inst, "ring")
    assert res.details["channels"] == 8
    floor = (n - 1) / n * size / (k * s * 1e3)
    assert floor <= sim <= floor * 1.01


@pytest.mark.parametrize(
    "topo",
    [fat_tree(16), leaf_spine(leaves=32, gpus_per_leaf=32, spines=8)],
    ids=["fat-tree-16", "leaf-spine-32x32"],
)
def test_rings_through_a_1024_gpu_fabric_in_seconds(topo):
    """1,024 GPUs behind switches, every GPU one port of 50 GB/s each way (the leaf-spine's
    uplinks are 100 GB/s): k x s <= 50 by the port argument. The GPUs in depth-first order of a
    spanning tree of the switches, each hop along the tree, cross every tree link once each way
    (a depth-first tour), so one ring runs at the full port speed: k = 1 at 50 GB/s. It is built,
    not searched: well under the seconds the all-pairs search took."""
    start = time.perf_counter()
    found = bl.find_channels(topo)
    assert time.perf_counter() - start < 5.0
    assert found is not None and (found.k, found.speed_GBps) == (1, 50.0)
    load = _check_rings_fit(topo, found)
    assert max(load.values()) == 1


def test_multi_node_channel_counts():
    """NDv2 x2 (one NIC link each way, 0 -> 9 and 8 -> 1, 12.5 GB/s) and NDv2 x4 (GPU 0 of
    every chassis sends to a global switch, which sends to GPU 1 of every chassis): every ring
    leaves each chassis through its single 12.5 GB/s way out, so k x s <= 12.5 and one channel
    at 12.5 reaches it, entering each chassis at GPU 1 and leaving it at GPU 0 (NCCL: one NIC,
    one channel's worth of bandwidth)."""
    for chassis in (2, 4):
        topo = ndv2(chassis)
        found = bl.find_channels(topo)
        assert found is not None and (found.k, found.speed_GBps) == (1, 12.5)
        _check_rings_fit(topo, found)
        ring = found.rings[0]
        for c in range(chassis):
            inside = [g for g in ring if g // 8 == c]
            assert inside[0] == 8 * c + 1 and inside[-1] == 8 * c


@pytest.mark.parametrize("fabric", ["rail", "switch"])
def test_imported_h100_rings(fabric):
    """An imported DGX H100 (``nvidia-smi topo -m``: 8 GPUs on NVSwitch, 450 GB/s ports): one
    ring in id order at the port's 450 GB/s (k x s <= 450 by the port argument). Two of them
    joined by 8 NICs of 50 GB/s per node (one per GPU; rail-optimised or one fabric switch):
    every ring leaves each node through NICs worth 8 x 50 = 400 GB/s, a channel crosses a NIC at
    its speed (s <= 50), and 8 channels at 50 GB/s reach 400 (NVIDIA/nccl#412: as many flows as
    the NICs carry, each entering and leaving the node through a NIC)."""
    one = import_topology(DATA / "nvsmi_dgx_h100.txt")
    found = bl.find_channels(one)
    assert found is not None and (found.k, found.speed_GBps) == (1, 450.0)
    nics = Network(nodes=2, nics_per_node=8, bandwidth_GBps=50.0, fabric=fabric)
    two = import_topology(DATA / "nvsmi_dgx_h100.txt", network=nics)
    found = bl.find_channels(two)
    assert found is not None and (found.k, found.speed_GBps) == (8, 50.0)
    _check_rings_fit(two, found)


# ====================================================================== trees
def test_node_trees_by_hand():
    """NCCL's trees across nodes (``connectTrees``): per channel a chain through each node, the
    chains' first GPUs joined by the double binary tree over nodes (``ncclGetDtree``; for two
    nodes tree 1 has node 0 at the root, its mirror tree 2 node 1).

    On the two-chassis machine the first ring enters chassis {0, 1} at 1 and chassis {2, 3} at
    2 (see test_two_chassis_rings_by_hand): chains [1, 0] and [2, 3]. Tree 1: 1 is the root,
    0 -> 1, 2 -> 1 (node 1's chain head to node 0's), 3 -> 2. Tree 2: 2 is the root, 3 -> 2,
    1 -> 2, 0 -> 1. With 8 one-GPU nodes (a leaf-spine: the slowest links are the GPU ports),
    the chains are the GPUs and the node trees are NCCL's flat trees over ranks 0..7."""
    topo = _two_chassis()
    inst = make_instance(topo, _coll("allreduce", topo, 4), M)
    across = node_chains(inst)
    assert across is not None
    nodes, chains = across
    assert len(chains) == 2
    assert chains[0] == [[1, 0], [2, 3]]
    t1, t2 = _node_trees(nodes, chains[0])
    assert t1 == {1: None, 0: 1, 2: 1, 3: 2}
    assert t2 == {2: None, 3: 2, 1: 2, 0: 1}
    flat = leaf_spine()
    fnodes = node_groups(flat)
    assert fnodes is not None and fnodes.groups == tuple((g,) for g in range(8))
    assert _node_trees(fnodes, [[g] for g in range(8)]) == list(bl.double_binary_trees(8))


@pytest.mark.parametrize(
    "make", [_two_chassis, lambda: ndv2(2), lambda: dgx2(2)], ids=["two-chassis", "ndv2-2", "dgx2-2"]
)
def test_double_binary_tree_across_nodes_verifies(make):
    """The tree across nodes is a valid AllReduce (independent verifier), not below the slot
    bound nor the physical bound; it reports the node tree and its channels. A single node
    (DGX-2 x1) keeps the flat tree."""
    topo = make()
    inst = make_instance(topo, _coll("allreduce", topo, 8), "16MB")
    res, _ = _solved(inst, "double-binary-tree")
    assert res.details["tree"] == "nodes"
    assert res.details["nodes"] == 2
    one = dgx2(1)
    res1, _ = _solved(make_instance(one, _coll("allreduce", one, 2), "1MB"), "double-binary-tree")
    assert res1.details["tree"] == "flat"
