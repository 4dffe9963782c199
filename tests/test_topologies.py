"""Built-in topologies: sizes, exact links, symmetry, reachability and parameter errors.

Every expected number below is derived by hand from ``shared/reference/teccl.md`` section 1
(the paper machines) or from the family's definition, never read off the code.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
import pytest

from ccplan.errors import ValidationError
from ccplan.instances.builtin import TOPOLOGIES, catalog, resolve_topology
from ccplan.instances.topology import Topology

# (name, params, nodes, links, gpus, switches)
SIZES: list[tuple[str, dict[str, Any], int, int, int, int]] = [
    # DGX1: 8 pairs at 50 GB/s + 8 pairs at 25 GB/s = 16 cables -> 32 directed links.
    ("dgx1", {}, 8, 32, 8, 0),
    # NDv2 x1 is the DGX1 graph.
    ("ndv2", {"chassis": 1}, 8, 32, 8, 0),
    # NDv2 x2 (default): 2 * 32 NVLink links + the directed NICs 0->9 and 8->1 = 66.
    ("ndv2", {}, 16, 66, 16, 0),
    # NDv2 x3: 24 GPUs + 1 global switch; 3 * 32 + 3 * (GPU0->sw, sw->GPU1) = 102.
    ("ndv2", {"chassis": 3}, 25, 102, 24, 1),
    # NDv2 x4: 32 GPUs + 1 switch = 33 nodes (as TE-CCL); 4 * 32 + 4 * 2 = 136.
    ("ndv2", {"chassis": 4}, 33, 136, 32, 1),
    # DGX2 x1: 16 GPUs + 1 NVSwitch; 16 GPU<->switch cables = 32 links.
    ("dgx2", {"chassis": 1}, 17, 32, 16, 1),
    # DGX2 x2 (default): 34 nodes as TE-CCL; 2 * 32 + 8 odd GPUs per chassis * 2 chassis = 80.
    ("dgx2", {}, 34, 80, 32, 2),
    # DGX2 x3: 48 GPUs + 3 switches; 3 * 32 + 3 * 8 = 120.
    ("dgx2", {"chassis": 3}, 51, 120, 48, 3),
    # AMD x1 (default): 8 + 4 + 16 = 28 xGMI pairs -> 56 links.
    ("amd", {}, 16, 56, 16, 0),
    # AMD x2: 32 GCDs + 16 small + 1 global switch = 49 nodes; per chassis 56 xGMI
    # + 16 GCD<->small cables (32) + 8 uplink cables (16) = 104, times 2 = 208.
    ("amd", {"chassis": 2}, 49, 208, 32, 17),
    # AMD x3: 48 + 24 + 1 = 73 nodes, 3 * 104 = 312 links.
    ("amd", {"chassis": 3}, 73, 312, 48, 25),
    # Ring: n cables -> 2n links; n = 2 has a single cable; unidirectional: n links.
    ("ring", {}, 8, 16, 8, 0),
    ("ring", {"n": 2}, 2, 2, 2, 0),
    ("ring", {"n": 5, "bidirectional": False}, 5, 5, 5, 0),
    # Line: n-1 cables.
    ("line", {}, 4, 6, 4, 0),
    ("line", {"n": 2}, 2, 2, 2, 0),
    # Fully connected: n(n-1) directed links.
    ("fully_connected", {}, 4, 12, 4, 0),
    ("fully_connected", {"n": 5}, 5, 20, 5, 0),
    # Torus 4x4: every node has a right and a down cable: 32 cables -> 64 links.
    ("torus2d", {}, 16, 64, 16, 0),
    # Torus 2x3: rows are 3-rings (3 cables each, 6), columns of 2 have one cable (3): 9 -> 18.
    ("torus2d", {"rows": 2, "cols": 3}, 6, 18, 6, 0),
    # Torus 1x2: one cable.
    ("torus2d", {"rows": 1, "cols": 2}, 2, 2, 2, 0),
    # Mesh 4x4: 4*3 horizontal + 4*3 vertical = 24 cables -> 48 links (no row wrap).
    ("mesh2d", {}, 16, 48, 16, 0),
    # Mesh 2x3: 2*2 + 3*1 = 7 cables -> 14 links.
    ("mesh2d", {"rows": 2, "cols": 3}, 6, 14, 6, 0),
    # Star: n GPUs + 1 switch, n cables.
    ("star_switch", {}, 9, 16, 8, 1),
    ("star_switch", {"n": 3}, 4, 6, 3, 1),
    # Leaf-spine 2x4, 2 spines: 8 GPUs + 2 leaves + 2 spines; 8 + 2*2 cables = 12 -> 24.
    ("leaf_spine", {}, 12, 24, 8, 4),
    # 3 leaves x 2 GPUs, 1 spine: 6 + 3 + 1 nodes; 6 + 3 cables -> 18 links.
    ("leaf_spine", {"leaves": 3, "gpus_per_leaf": 2, "spines": 1}, 10, 18, 6, 4),
    # Hypercube: 2^d nodes, d * 2^(d-1) cables.
    ("hypercube", {}, 8, 24, 8, 0),
    ("hypercube", {"dim": 1}, 2, 2, 2, 0),
    ("hypercube", {"dim": 4}, 16, 64, 16, 0),
    # Fat-tree k=4 (default): k^3/4 = 16 GPUs; k*k/2 = 8 edge + 8 aggregation + (k/2)^2 = 4
    # core switches = 20; cables GPU-edge 16 + edge-agg 4 pods * 2 * 2 = 16 + agg-core 16 = 48.
    ("fat_tree", {}, 36, 96, 16, 20),
    # k=2: 2 GPUs, 2 edge + 2 aggregation + 1 core; per pod one cable per level: 6 cables.
    ("fat_tree", {"k": 2}, 7, 12, 2, 5),
]

# Cluster-scale built-ins (same columns), checked with linear-time tests only.
SCALE: list[tuple[str, dict[str, Any], int, int, int, int]] = [
    # NDv2 x128: 1024 GPUs + 1 switch; 128 * 32 NVLink links + 128 * 2 NIC links = 4352.
    ("ndv2", {"chassis": 128}, 1025, 4352, 1024, 1),
    # DGX2 x128: 2048 GPUs + 128 NVSwitches; 128 * 32 + 8 NICs * 128 = 5120.
    ("dgx2", {"chassis": 128}, 2176, 5120, 2048, 128),
    # AMD x128: 2048 GCDs + 1024 small + 1 global switch; 128 * 104 = 13312 links.
    ("amd", {"chassis": 128}, 3073, 13312, 2048, 1025),
    # Torus 64x64: 2 cables per GPU -> 4 * 4096 links.
    ("torus2d", {"rows": 64, "cols": 64}, 4096, 16384, 4096, 0),
    # Mesh 64x64: 64 * 63 horizontal + 63 * 64 vertical = 8064 cables.
    ("mesh2d", {"rows": 64, "cols": 64}, 4096, 16128, 4096, 0),
    # Leaf-spine 64 leaves x 16 GPUs, 16 spines: 1024 + 64 + 16 nodes; 1024 + 64 * 16 cables.
    ("leaf_spine", {"leaves": 64, "gpus_per_leaf": 16, "spines": 16}, 1104, 4096, 1024, 80),
    # Fat-tree k=16: 16^3/4 = 1024 GPUs; 128 edge + 128 aggregation + 64 core switches;
    # 1024 GPU-edge + 16 pods * 64 edge-agg + 16 pods * 64 agg-core = 3072 cables.
    ("fat_tree", {"k": 16}, 1344, 6144, 1024, 320),
]


def _one_way_links(name: str, params: dict[str, Any]) -> int:
    """Expected number of links without a reverse link.

    NDv2 x2: 0->9 and 8->1 (2); NDv2 x k >= 3: GPU0->switch and switch->GPU1 per chassis (2k);
    DGX2 x k >= 2: 8 odd GPUs per chassis send to the next chassis (8k); one-way ring of
    n >= 3: n. Everything else is full duplex (0).
    """
    k = int(params.get("chassis", 2))
    if name == "ndv2":
        return 0 if k == 1 else 2 * k if k >= 3 else 2
    if name == "dgx2":
        return 0 if k == 1 else 8 * k
    if name == "ring" and params.get("bidirectional") is False:
        return int(params.get("n", 8))
    return 0


def _ident(case: tuple[str, dict[str, Any], int, int, int, int]) -> str:
    name, params = case[0], case[1]
    return name + "".join(f"-{k}={v}" for k, v in params.items())


def _build(name: str, params: dict[str, Any]) -> Topology:
    return resolve_topology(name, **params)


def _bw_alpha(topo: Topology, a: int, b: int) -> tuple[float, float]:
    link = topo.link(a, b)
    return link.bandwidth_GBps, link.alpha_us


@pytest.mark.parametrize("case", SCALE, ids=[_ident(c) for c in SCALE])
def test_scale_builtins(case: tuple[str, dict[str, Any], int, int, int, int]) -> None:
    """Thousands of GPUs: counts (derivations next to each SCALE entry), id layout, the
    documented one-way links, and strong connectivity (every GPU reaches every GPU)."""
    name, params, nodes, links, gpus, switches = case
    topo = _build(name, params)
    assert (topo.num_nodes, topo.num_links, len(topo.gpus), len(topo.switches)) == (
        nodes, links, gpus, switches,
    )
    assert sorted(topo.gpus) == list(range(gpus))
    assert sorted(topo.switches) == list(range(gpus, nodes))
    one_way = [lk for lk in topo.links if not topo.has_link(lk.dst, lk.src)]
    assert len(one_way) == _one_way_links(name, params)
    assert nx.is_strongly_connected(topo.to_networkx())


def test_fat_tree_wiring() -> None:
    """k=16: every switch has k = 16 ports (edge: 8 GPUs + 8 aggregation; aggregation: 8 edge +
    8 core; core: one aggregation switch per pod), so bisection is full; GPU 1023 hangs off the
    last edge switch (1024 + 127), and core switch 1024 + 256 + 8a + j joins aggregation
    switch a of every pod."""
    topo = resolve_topology("fat_tree", k=16)
    for sw in topo.switches:
        assert len(topo.out_links[sw]) == 16 and len(topo.in_links[sw]) == 16
    assert topo.has_link(1023, 1024 + 127) and topo.has_link(1024 + 127, 1023)
    agg0, core0 = 1024 + 128, 1024 + 256
    for a in range(8):
        for j in range(8):
            core = core0 + 8 * a + j
            assert {topo.links[i].dst for i in topo.out_links[core]} == {agg0 + 8 * p + a for p in range(16)}
    assert not topo.has_link(0, agg0)
    assert _bw_alpha(topo, agg0, core0) == (50.0, 1.3)


@pytest.mark.parametrize("case", SIZES, ids=[_ident(c) for c in SIZES])
def test_sizes(case: tuple[str, dict[str, Any], int, int, int, int]) -> None:
    """Node, link, GPU and switch counts (derivations next to each SIZES entry)."""
    name, params, nodes, links, gpus, switches = case
    topo = _build(name, params)
    assert (topo.num_nodes, topo.num_links, len(topo.gpus), len(topo.switches)) == (
        nodes,
        links,
        gpus,
        switches,
    )


def test_every_builtin_has_a_size_case() -> None:
    """No registered topology escapes the hand-derived size table."""
    assert {c[0] for c in SIZES} == set(TOPOLOGIES)


@pytest.mark.parametrize("case", SIZES, ids=[_ident(c) for c in SIZES])
def test_ids_are_gpus_then_switches(case: tuple[str, dict[str, Any], int, int, int, int]) -> None:
    """Documented id layout: GPUs are 0..G-1 and switches G..N-1."""
    topo = _build(case[0], case[1])
    g = len(topo.gpus)
    assert sorted(topo.gpus) == list(range(g))
    assert sorted(topo.switches) == list(range(g, topo.num_nodes))


@pytest.mark.parametrize("case", SIZES, ids=[_ident(c) for c in SIZES])
def test_every_gpu_reaches_every_gpu(case: tuple[str, dict[str, Any], int, int, int, int]) -> None:
    """Any collective is feasible only if each GPU can reach each other GPU (directed)."""
    topo = _build(case[0], case[1])
    graph = topo.to_networkx()
    gpus = set(topo.gpus)
    for g in topo.gpus:
        assert gpus - {g} <= nx.descendants(graph, g), f"GPU {g} cannot reach every GPU"


@pytest.mark.parametrize("case", SIZES, ids=[_ident(c) for c in SIZES])
def test_symmetry(case: tuple[str, dict[str, Any], int, int, int, int]) -> None:
    """Full-duplex topologies have b->a with the same numbers for every a->b; the NIC links of
    NDv2 (x>=2), DGX2 (x>=2) and the one-way ring are the documented exceptions."""
    name, params = case[0], case[1]
    topo = _build(name, params)
    one_way = [lk for lk in topo.links if not topo.has_link(lk.dst, lk.src)]
    assert len(one_way) == _one_way_links(name, params)
    for lk in topo.links:
        if lk in one_way:
            continue
        assert _bw_alpha(topo, lk.dst, lk.src) == (lk.bandwidth_GBps, lk.alpha_us)


# ---------------------------------------------------------------------- paper machines
def test_dgx1_links() -> None:
    """teccl.md 1.1: 0-1 is a double NVLink (50 GB/s), 0-2 a single one (25 GB/s), 0-5 none;
    alpha 0.7 us. Each V100 has 6 NVLinks of 25 GB/s: 150 GB/s out of every GPU."""
    topo = resolve_topology("dgx1")
    assert _bw_alpha(topo, 0, 1) == (50.0, 0.7)
    assert _bw_alpha(topo, 1, 0) == (50.0, 0.7)
    assert _bw_alpha(topo, 0, 2) == (25.0, 0.7)
    assert _bw_alpha(topo, 6, 7) == (50.0, 0.7)
    assert _bw_alpha(topo, 4, 7) == (25.0, 0.7)
    assert not topo.has_link(0, 5)
    assert not topo.has_link(3, 4)
    for g in topo.gpus:
        assert sum(topo.links[i].bandwidth_GBps for i in topo.out_links[g]) == 150.0


def test_ndv2_two_chassis() -> None:
    """teccl.md 1.2: GPU g of chassis c is 8c+g; NICs 0->9 and 8->1 only, 12.5 GB/s, 1.3 us;
    every one of the 16 nodes is a GPU (TE-CCL's GPU-0-as-switch quirk is not copied)."""
    topo = resolve_topology("ndv2", chassis=2)
    assert _bw_alpha(topo, 0, 9) == (12.5, 1.3)
    assert _bw_alpha(topo, 8, 1) == (12.5, 1.3)
    assert not topo.has_link(9, 0)
    assert not topo.has_link(1, 8)
    assert not topo.has_link(0, 8)
    # Chassis 1 repeats DGX1 with ids shifted by 8: 0-1 (50) -> 8-9, 0-2 (25) -> 8-10.
    assert _bw_alpha(topo, 8, 9) == (50.0, 0.7)
    assert _bw_alpha(topo, 8, 10) == (25.0, 0.7)
    assert topo.kind[0] == "gpu"
    cross = {(lk.src, lk.dst) for lk in topo.links if (lk.src < 8) != (lk.dst < 8)}
    assert cross == {(0, 9), (8, 1)}


def test_ndv2_global_switch() -> None:
    """chassis >= 3: GPU0 of each chassis -> switch 8k -> GPU1 of each chassis (teccl.md 1.2,
    with TE-CCL's switch 0 renumbered to 8k and its GPU i+1 to our i)."""
    topo = resolve_topology("ndv2", chassis=4)
    switch = 32
    assert topo.switches == (switch,)
    for c in range(4):
        assert _bw_alpha(topo, 8 * c, switch) == (12.5, 1.3)
        assert _bw_alpha(topo, switch, 8 * c + 1) == (12.5, 1.3)
    assert len(topo.out_links[switch]) == 4
    assert len(topo.in_links[switch]) == 4
    assert not topo.has_link(switch, 0)
    assert not topo.has_link(1, switch)


def _teccl_dgx2_to_ours(node: int, chassis: int = 2) -> int:
    """TE-CCL DGX2 ids: switch of chassis c = 17c, local GPU s = 17c + s + 1.
    Ours: GPU 16c + s, switch 16k + c."""
    c, r = divmod(node, 17)
    return 16 * chassis + c if r == 0 else 16 * c + r - 1


def test_dgx2_inter_chassis_links_match_teccl() -> None:
    """teccl.md 1.3 lists TE-CCL's 16 NIC links: 2->18, 4->20, ..., 16->32 and
    19->1, 21->3, ..., 33->15. Mapped to our ids they must be exactly our 12.5 GB/s links,
    each with alpha 2.6 us."""
    topo = resolve_topology("dgx2", chassis=2)
    teccl = [(2 * m, 2 * m + 16) for m in range(1, 9)] + [(17 + 2 * m, 2 * m - 1) for m in range(1, 9)]
    assert teccl[0] == (2, 18) and teccl[7] == (16, 32) and teccl[8] == (19, 1) and teccl[-1] == (33, 15)
    expected = {(_teccl_dgx2_to_ours(a), _teccl_dgx2_to_ours(b)) for a, b in teccl}
    assert (1, 16) in expected and (31, 14) in expected
    nic = {(lk.src, lk.dst) for lk in topo.links if lk.bandwidth_GBps == 12.5}
    assert nic == expected
    for a, b in expected:
        assert topo.link(a, b).alpha_us == 2.6


def test_dgx2_nvswitch_links() -> None:
    """Every GPU <-> its own NVSwitch at 125 GB/s, 0.35 us; no GPU-GPU link in a chassis."""
    topo = resolve_topology("dgx2", chassis=2)
    for g in range(32):
        sw = 32 + g // 16
        assert _bw_alpha(topo, g, sw) == (125.0, 0.35)
        assert _bw_alpha(topo, sw, g) == (125.0, 0.35)
        assert not topo.has_link(g, 32 + 1 - g // 16)
    intra_gpu = [lk for lk in topo.links if lk.src < 32 and lk.dst < 32 and lk.src // 16 == lk.dst // 16]
    assert intra_gpu == []


def test_dgx2_three_chassis_ring_of_chassis() -> None:
    """chassis=3: odd local s of chassis i sends to local s-1 of chassis (i+1) mod 3.
    Chassis 1 local 15 = 31 -> chassis 2 local 14 = 46; chassis 2 local 15 = 47 -> 14."""
    topo = resolve_topology("dgx2", chassis=3)
    assert _bw_alpha(topo, 1, 16) == (12.5, 2.6)
    assert _bw_alpha(topo, 31, 46) == (12.5, 2.6)
    assert _bw_alpha(topo, 47, 14) == (12.5, 2.6)
    assert not topo.has_link(17, 0)  # chassis 1 sends to 2, not back to 0
    assert topo.switches == (48, 49, 50)


def test_amd_single_chassis_links() -> None:
    """teccl.md 1.4: 0-1 w=4 (200), 0-4 w=2 (100), 0-8 w=1 (50), 0-2 absent, alpha 0.7.
    Every GCD has 7 xGMI links of 50 GB/s: 350 GB/s out."""
    topo = resolve_topology("amd")
    assert _bw_alpha(topo, 0, 1) == (200.0, 0.7)
    assert _bw_alpha(topo, 0, 4) == (100.0, 0.7)
    assert _bw_alpha(topo, 0, 8) == (50.0, 0.7)
    assert _bw_alpha(topo, 13, 15) == (50.0, 0.7)
    assert not topo.has_link(0, 2)
    for g in topo.gpus:
        assert sum(topo.links[i].bandwidth_GBps for i in topo.out_links[g]) == 350.0


def test_amd_two_chassis_switches() -> None:
    """Ids: GCD 16c+g, small switch 16k+8c+m joining GCDs 2m, 2m+1, global switch 24k = 48.
    TE-CCL's bugs are gone: GCD 15 is a GPU with no link to the global switch, small switch 7
    of each chassis (ids 39, 47) has an uplink, and every switch link is 25 GB/s, 1.3 us."""
    topo = resolve_topology("amd", chassis=2)
    assert topo.gpus == tuple(range(32))
    assert topo.switches == tuple(range(32, 49))
    glob = 48
    for c in range(2):
        for m in range(8):
            small = 32 + 8 * c + m
            for g in (16 * c + 2 * m, 16 * c + 2 * m + 1):
                assert _bw_alpha(topo, g, small) == (25.0, 1.3)
                assert _bw_alpha(topo, small, g) == (25.0, 1.3)
            assert _bw_alpha(topo, small, glob) == (25.0, 1.3)
            assert _bw_alpha(topo, glob, small) == (25.0, 1.3)
            assert len(topo.out_links[small]) == 3
    assert not topo.has_link(15, glob)
    assert len(topo.out_links[glob]) == 16
    # Chassis 1 repeats the xGMI graph shifted by 16.
    assert _bw_alpha(topo, 16, 17) == (200.0, 0.7)
    assert not topo.has_link(1, 17)


# ---------------------------------------------------------------------- generic families
def test_generic_family_links() -> None:
    """Spot checks of each family's definition with the default 50 GB/s, 0.7 us."""
    ring = resolve_topology("ring", n=4)
    assert ring.has_link(3, 0) and ring.has_link(0, 3) and not ring.has_link(0, 2)
    uni = resolve_topology("ring", n=4, bidirectional=False)
    assert uni.has_link(3, 0) and not uni.has_link(0, 3)
    mesh = resolve_topology("mesh2d", rows=4, cols=4)
    # TE-CCL's Mesh wraps (3, 4): GPU (0, 3) to (1, 0). Ours does not; (0,3)-(1,3) exists.
    assert not mesh.has_link(3, 4) and not mesh.has_link(7, 8) and not mesh.has_link(11, 12)
    assert _bw_alpha(mesh, 3, 7) == (50.0, 0.7)
    torus = resolve_topology("torus2d", rows=4, cols=4)
    assert torus.has_link(3, 0) and torus.has_link(12, 0) and not torus.has_link(3, 4)
    cube = resolve_topology("hypercube", dim=3)
    assert cube.has_link(0, 4) and cube.has_link(5, 7) and not cube.has_link(0, 3)
    ls = resolve_topology("leaf_spine", uplink_GBps=25.0)
    # GPUs 0..7, leaves 8, 9, spines 10, 11.
    assert _bw_alpha(ls, 5, 9) == (50.0, 0.7)
    assert _bw_alpha(ls, 9, 10) == (25.0, 1.3)
    assert not ls.has_link(0, 10)
    star = resolve_topology("star_switch", n=3, bandwidth_GBps=10, alpha_us=0)
    assert _bw_alpha(star, 2, 3) == (10.0, 0.0)


# ---------------------------------------------------------------------- resolve / registry
def test_resolve_aliases_and_cli_strings() -> None:
    """Names are case-insensitive with - and _ alike; CLI strings become typed values;
    None means "not given"."""
    assert resolve_topology("NDv2", chassis="4") == resolve_topology("ndv2", chassis=4)
    assert resolve_topology("fully-connected", n="3").num_links == 6
    assert resolve_topology("ring", n=None).num_nodes == 8
    assert resolve_topology("ring", bidirectional="false").num_links == 8
    assert resolve_topology("ring", bandwidth_GBps=25).links[0].bandwidth_GBps == 25.0
    assert resolve_topology("dgx1", chassis=None).num_nodes == 8


def test_resolve_file(tmp_path: Any) -> None:
    """A JSON path loads the file; parameters with a file are rejected."""
    path = tmp_path / "t.json"
    topo = resolve_topology("torus2d", rows=2, cols=3)
    topo.to_json(path)
    assert resolve_topology(str(path)) == topo
    assert resolve_topology(path) == topo
    with pytest.raises(ValidationError, match="'chassis' only applies to built-in"):
        resolve_topology(str(path), chassis=2)
    with pytest.raises(ValidationError, match="topology file"):
        resolve_topology(str(tmp_path / "missing.json"))


BAD_PARAMS: list[tuple[str, dict[str, Any], str]] = [
    ("ring", {"chassis": 2}, "unknown parameter 'chassis' for topology 'ring'"),
    ("dgx1", {"chassis": 2}, "unknown parameter 'chassis' for topology 'dgx1'"),
    ("ring", {"n": 1}, "'n' must be >= 2"),
    ("ring", {"n": "eight"}, "'n' must be an integer"),
    ("ring", {"n": 2.5}, "'n' must be an integer"),
    ("ring", {"n": True}, "'n' must be an integer"),
    ("ring", {"bidirectional": "maybe"}, "'bidirectional' must be true or false"),
    ("ring", {"bandwidth_GBps": 0}, "'bandwidth_GBps' must be a positive"),
    ("line", {"bandwidth_GBps": float("inf")}, "'bandwidth_GBps' must be a positive"),
    ("line", {"alpha_us": -1}, "'alpha_us' must be a non-negative"),
    ("ndv2", {"chassis": 0}, "'chassis' must be >= 1"),
    ("dgx2", {"chassis": -1}, "'chassis' must be >= 1"),
    ("amd", {"chassis": "x"}, "'chassis' must be an integer"),
    ("torus2d", {"rows": 0}, "'rows' must be >= 1"),
    ("mesh2d", {"rows": 1, "cols": 1}, "rows * cols must be >= 2"),
    ("fully_connected", {"n": 0}, "'n' must be >= 2"),
    ("star_switch", {"n": 1}, "'n' must be >= 2"),
    ("leaf_spine", {"spines": 0}, "'spines' must be >= 1"),
    ("leaf_spine", {"uplink_GBps": -5.0}, "'uplink_GBps' must be a positive"),
    ("leaf_spine", {"leaves": 1, "gpus_per_leaf": 1}, "leaves * gpus_per_leaf must be >= 2"),
    ("hypercube", {"dim": 0}, "'dim' must be >= 1"),
    ("hypercube", {"dim": 40}, "'dim' must be <= 16"),
    ("fat_tree", {"k": 3}, "'k' must be even"),
    ("fat_tree", {"k": 0}, "'k' must be >= 2"),
    ("no_such_topology", {}, "'no_such_topology' is neither a built-in"),
]


@pytest.mark.parametrize("name,params,message", BAD_PARAMS, ids=[f"{b[0]}-{b[2][:20]}" for b in BAD_PARAMS])
def test_bad_parameters(name: str, params: dict[str, Any], message: str) -> None:
    """Errors name the bad parameter (or name)."""
    with pytest.raises(ValidationError) as info:
        resolve_topology(name, **params)
    assert message in str(info.value)


def test_catalog_rows() -> None:
    """One row per registered topology at default parameters; counts as in SIZES' default rows."""
    rows = {row["name"]: row for row in catalog()}
    assert list(rows) == list(TOPOLOGIES)
    defaults = {c[0]: c[2:] for c in SIZES if not c[1]}
    assert set(defaults) == set(rows)
    for name, row in rows.items():
        assert set(row) == {"name", "parameters", "nodes", "links", "gpus", "switches", "description"}
        assert (row["nodes"], row["links"], row["gpus"], row["switches"]) == defaults[name]
        assert row["description"] and "\n" not in row["description"]
    assert rows["ndv2"]["parameters"] == {"chassis": 2}
    assert rows["ring"]["parameters"]["bandwidth_GBps"] == 50.0
    assert rows["dgx1"]["parameters"] == {}


# ---------------------------------------------------------------------- schedules on larger fabrics
def test_layered_on_torus_reaches_the_ingress_bound() -> None:
    """AllGather 1 GB, C=1 on the 12x12 torus: each GPU must receive 143 chunks over 4 in-links
    that carry one chunk per slot (l = 1, alpha/tau below the threshold, so L = 1), hence
    >= ceil(143 / 4) = 36 slots. The layered constructor's schedule must pass the verifier,
    respect that hand bound and the library's slot bound, and here meets it exactly."""
    from ccplan.bounds import lower_bound_slots
    from ccplan.heuristics.layered import layered_schedule
    from ccplan.instances import make_collective, make_instance
    from ccplan.schedule.verify import verify

    topo = resolve_topology("torus2d", rows=12, cols=12)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    report = verify(inst, layered_schedule(inst))
    assert report.ok, report.violations[:1]
    assert lower_bound_slots(inst) == 36
    assert report.makespan_slots == 36


@pytest.mark.parametrize("method", ["layered", "mteg"])
def test_heuristics_on_fat_tree(method: str) -> None:
    """AllGather 1 GB, C=1 on the k=4 fat-tree (16 GPUs, 20 switches): the schedule passes the
    verifier and is no shorter than the slot lower bound; every GPU has one 50 GB/s in-link,
    so at least 15 slots (one chunk per slot on it)."""
    from ccplan.bounds import lower_bound_slots
    from ccplan.heuristics.layered import layered_schedule
    from ccplan.heuristics.mteg import mteg_schedule
    from ccplan.instances import make_collective, make_instance
    from ccplan.schedule.verify import verify

    topo = resolve_topology("fat_tree", k=4)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    schedule = layered_schedule(inst) if method == "layered" else mteg_schedule(inst).schedule
    report = verify(inst, schedule)
    assert report.ok, report.violations[:1]
    bound = lower_bound_slots(inst)
    assert bound >= 15
    assert report.makespan_slots is not None and report.makespan_slots >= bound


def test_links_between_is_link_index_for_arrays() -> None:
    """``links_between`` answers what ``link_index`` answers, pair by pair (-1 for no link),
    on every ordered pair of node ids of a few topologies plus ids they do not have."""
    from ccplan.instances import builtin as bt

    for topo in (bt.dgx1(), bt.ndv2(2), bt.amd(1), bt.leaf_spine(2, 4, 2)):
        ids = [*topo.node_ids, max(topo.node_ids) + 1, 10**6]
        pairs = [(a, b) for a in ids for b in ids]
        src = np.array([a for a, _ in pairs])
        dst = np.array([b for _, b in pairs])
        want = [topo.link_index.get(p, -1) for p in pairs]
        assert topo.links_between(src, dst).tolist() == want
        assert sum(w >= 0 for w in want) == topo.num_links
