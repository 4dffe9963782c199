"""Topology import: nvidia-smi topo -m, NCCL topology dumps, rocm-smi --showtopo, clusters.

Expected values are derived by hand from the sample files (each test says how) or come from
an independent source (the built-in DGX1, whose NVLink pairs are TE-CCL's).
"""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from ccplan.cli import main
from ccplan.errors import ValidationError
from ccplan.instances.builtin import dgx1
from ccplan.instances.importers import (
    ClassDefaults,
    Network,
    import_topology,
    load_overrides,
    parse_assignments,
)
from ccplan.instances.topology import Topology

DATA = Path(__file__).parent / "data" / "import"


def _links(topo: Topology) -> set[tuple[int, int, float, float]]:
    return {(lk.src, lk.dst, lk.bandwidth_GBps, lk.alpha_us) for lk in topo.links}


def test_dgx1_matches_builtin() -> None:
    """The DGX-1 sample's NV1/NV2 pairs are TE-CCL's; with NV = 25 GB/s per link and alpha
    0.7 us the import must equal the independently written built-in ``dgx1`` link for link
    (the PCIe tree is left out because NVLink connects all eight GPUs)."""
    topo = import_topology(DATA / "nvsmi_dgx1_v100.txt")
    assert _links(topo) == _links(dgx1())
    assert topo.switches == ()


def test_h100_nvswitch() -> None:
    """NV18 against all 7 peers sums to 126 > 18 links, so one NVSwitch: 8 GPUs + 1 switch,
    16 directed links of 18 x 25 = 450 GB/s with the NVSwitch alpha 0.35 us."""
    topo = import_topology(DATA / "nvsmi_dgx_h100.txt")
    assert len(topo.gpus) == 8 and len(topo.switches) == 1
    sw = topo.switches[0]
    assert _links(topo) == {(g, sw, 450.0, 0.35) for g in range(8)} | {(sw, g, 450.0, 0.35) for g in range(8)}


def test_h100_nvswitch_can_be_refused() -> None:
    """``nvswitch="no"`` reads NV18 literally: 28 pairs x 2 directions of 450 GB/s."""
    topo = import_topology(DATA / "nvsmi_dgx_h100.txt", nvswitch="no")
    assert topo.switches == () and topo.num_links == 56
    assert set(topo.bandwidth.tolist()) == {450.0}


def test_pcie_box_tree() -> None:
    """8 GPUs: pairs (0,1),(2,3),(4,5),(6,7) PIX, 0-3 / 4-7 PXB, across sockets SYS.
    Tree: 4 PCIe switches, 2 switch hierarchies, 1 socket link = 7 hubs; 8 GPU edges + 4 + 2
    = 14 duplex edges = 28 links. GPU0 -> GPU1 takes 2 hops, GPU0 -> GPU4 six, and the most
    GPU0 can push to GPU4 is the SYS rate, 9 GB/s (max flow)."""
    topo = import_topology(DATA / "nvsmi_pcie_8gpu.txt")
    assert len(topo.switches) == 7 and topo.num_links == 28
    graph = topo.to_networkx()
    assert nx.shortest_path_length(graph, 0, 1) == 2
    assert nx.shortest_path_length(graph, 0, 4) == 6
    assert nx.maximum_flow_value(graph, 0, 4, capacity="bandwidth_GBps") == pytest.approx(9.0)
    assert nx.maximum_flow_value(graph, 0, 2, capacity="bandwidth_GBps") == pytest.approx(24.0)


def test_nccl_xml_dgx_a100() -> None:
    """Six NVSwitch targets with count 2 each: a 12-link port, 12 x 25 = 300 GB/s. With the
    PCIe tree (pcie="always"): hubs = 2 CPUs + 4 bridges + 1 socket hub = 7; edges: 8 GPUs +
    4 bridges + 2 CPUs = 14 duplex = 28 links at 16 lanes x 120 / 80 = 24 GB/s (Gen4) and 9
    on SYS."""
    topo = import_topology(DATA / "nccl_topo_dgx_a100.xml")
    assert len(topo.switches) == 1 and set(topo.bandwidth.tolist()) == {300.0}
    full = import_topology(DATA / "nccl_topo_dgx_a100.xml", pcie="always")
    assert len(full.switches) == 1 + 7
    assert full.num_links == 16 + 28
    assert sorted(set(full.bandwidth.tolist())) == [9.0, 24.0, 300.0]


def test_rocm_smi() -> None:
    """12 pairs with link type XGMI at one hop: 24 directed links of one 50 GB/s xGMI link."""
    topo = import_topology(DATA / "rocm_smi_mi250_8gcd.txt")
    assert len(topo.gpus) == 8 and topo.num_links == 24
    assert set(topo.bandwidth.tolist()) == {50.0}
    assert topo.has_link(0, 1) and not topo.has_link(0, 3)


def test_class_overrides() -> None:
    """NV=20 (NVLink 1) turns the DGX-1's 50/25 GB/s pairs into 40/20; alpha follows."""
    d = ClassDefaults().with_overrides(parse_assignments(["NV=20"], "--class-bw"), {"NV": 0.5})
    topo = import_topology(DATA / "nvsmi_dgx1_v100.txt", defaults=d)
    assert sorted(set(topo.bandwidth.tolist())) == [20.0, 40.0]
    assert set(topo.alpha.tolist()) == {0.5}


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_override_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"classes{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps({"bandwidth_GBps": {"SYS": 6}, "alpha_us": {"PIX": 2}}))
    else:
        path.write_text("[bandwidth_GBps]\nSYS = 6\n[alpha_us]\nPIX = 2\n")
    d = load_overrides(path)
    assert d.bw("SYS") == 6.0 and d.alpha("PIX") == 2.0 and d.bw("NV") == 25.0
    graph = import_topology(DATA / "nvsmi_pcie_8gpu.txt", defaults=d).to_networkx()
    assert nx.maximum_flow_value(graph, 0, 4, capacity="bandwidth_GBps") == pytest.approx(6.0)


def test_bad_overrides() -> None:
    with pytest.raises(ValidationError, match="unknown link class 'NVL'"):
        parse_assignments(["NVL=3"], "--class-bw")
    with pytest.raises(ValidationError, match="positive"):
        parse_assignments(["NV=0"], "--class-bw")


def test_rail_and_switch_fabrics() -> None:
    """Two H100 machines. Rail, 8 NICs: every GPU has its own NIC, so it links straight to
    rail switch r: switches 2 NVSwitches + 8 rails; links 2 x 16 + 16 x 2 = 64, and GPU r of
    machine 0 reaches GPU r of machine 1 in 2 hops. One switch, 2 NICs: each NIC serves 4
    GPUs, so 4 NIC nodes; links 32 + 16 x 2 (GPU-NIC) + 4 x 2 (NIC-switch) = 72."""
    rail = import_topology(
        DATA / "nvsmi_dgx_h100.txt", network=Network(nodes=2, nics_per_node=8, fabric="rail")
    )
    assert len(rail.gpus) == 16 and len(rail.switches) == 10 and rail.num_links == 64
    assert nx.shortest_path_length(rail.to_networkx(), 3, 11) == 2
    assert set(rail.bandwidth.tolist()) == {450.0, 12.5}
    one = import_topology(
        DATA / "nvsmi_dgx_h100.txt", network=Network(nodes=2, nics_per_node=2, bandwidth_GBps=50.0)
    )
    assert len(one.switches) == 2 + 1 + 4 and one.num_links == 72
    graph = one.to_networkx()
    # Four GPUs share one 50 GB/s NIC: the cut between the machines is 2 NICs x 50 GB/s.
    assert nx.maximum_flow_value(graph, 0, 8, capacity="bandwidth_GBps") == pytest.approx(100.0)


def test_cli_import_writes_loadable_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "topo.json"
    rc = main(
        ["import-topology", str(DATA / "nvsmi_pcie_8gpu.txt"), "--out", str(out), "--class-bw", "SYS=6"]
    )
    assert rc == 0
    topo = Topology.from_json(out)
    assert sorted(set(topo.bandwidth.tolist())) == [6.0, 24.0]
    assert "wrote" in capsys.readouterr().out


BAD = [
    ("nvsmi_short_row.txt", "nvsmi_short_row.txt:5: row GPU3 has 5 entries"),
    ("nvsmi_unknown_class.txt", "nvsmi_unknown_class.txt:7: GPU5 column GPU1: unknown connection 'NVX'"),
    ("nvsmi_asymmetric.txt", "nvsmi_asymmetric.txt:2: GPU0 -> GPU1 is NV2 but GPU1 -> GPU0 is NV1 (line 3)"),
    ("nccl_unclosed.xml", "nccl_unclosed.xml:12: invalid XML: mismatched tag"),
    ("nccl_unknown_target.xml", "nccl_unknown_target.xml:17: <nvlink> target '0000:aa:00.0'"),
    ("nccl_bad_count.xml", "nccl_bad_count.xml:9: <nvlink> attribute count='two' is not an integer"),
    ("rocm_bad_linktype.txt", "rocm_bad_linktype.txt:28: GPU0 column GPU1: unknown link type 'PCIX'"),
    ("not_a_topology.txt", "not_a_topology.txt:1: cannot tell the format"),
]


@pytest.mark.parametrize(("name", "message"), BAD)
def test_malformed_input_exit_2_one_line(
    name: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each malformed sample differs from a good one in one place (the line named)."""
    out = tmp_path / "topo.json"
    rc = main(["import-topology", str(DATA / "bad" / name), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and message in err
    assert not out.exists()


def test_unreadable_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="No such file"):
        import_topology(tmp_path / "missing.txt")
    with pytest.raises(ValidationError, match="format 'lspci'"):
        import_topology(DATA / "nvsmi_dgx1_v100.txt", "lspci")


def test_nic_speed_from_nccl_dump() -> None:
    """The dump's four NICs run at speed="200000" Mb/s = 25 GB/s; an unset --nic-bw takes
    it, an explicit one wins."""
    topo = import_topology(DATA / "nccl_topo_dgx_a100.xml", network=Network(nodes=2, nics_per_node=8))
    assert sorted(set(topo.bandwidth.tolist())) == [25.0, 300.0]
    assert "NIC bandwidth 25 GB/s from the file" in topo.description
    given = import_topology(
        DATA / "nccl_topo_dgx_a100.xml", network=Network(nodes=2, nics_per_node=8, bandwidth_GBps=50.0)
    )
    assert sorted(set(given.bandwidth.tolist())) == [50.0, 300.0]


def test_nvidia_smi_header_without_indent_and_with_colour(tmp_path: Path) -> None:
    """Copy-pasted output often loses the header's leading tab, and a terminal adds ANSI
    codes; both must import to the same topology as the file itself."""
    text = (DATA / "nvsmi_dgx1_v100.txt").read_text()
    pasted = tmp_path / "pasted.txt"
    pasted.write_text("\x1b[4m" + text.lstrip("\t").replace("\n", "\x1b[0m\n", 1))
    assert _links(import_topology(pasted)) == _links(import_topology(DATA / "nvsmi_dgx1_v100.txt"))


def test_network_rejects_bad_values(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="fabric"):
        Network(nodes=2, fabric="torus")
    with pytest.raises(ValidationError, match="nic bandwidth"):
        Network(nodes=2, bandwidth_GBps=float("nan"))
    with pytest.raises(ValidationError, match="exceeds the 8 GPUs"):
        import_topology(DATA / "nvsmi_dgx1_v100.txt", network=Network(nodes=2, nics_per_node=9))
    out = tmp_path / "t.json"
    rc = main(["import-topology", str(DATA / "nvsmi_dgx1_v100.txt"), "--nodes", "0", "--out", str(out)])
    assert rc == 2 and "nodes must be a positive integer" in capsys.readouterr().err and not out.exists()
