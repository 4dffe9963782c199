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
    (
        "nccl_duplicate_busid.xml",
        "nccl_duplicate_busid.xml:7: <pci> busid '0000:1A:00.0' already used at line 4",
    ),
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
    out = tmp_path / "t.json"
    rc = main(["import-topology", str(DATA / "nvsmi_dgx1_v100.txt"), "--nodes", "0", "--out", str(out)])
    assert rc == 2 and "nodes must be a positive integer" in capsys.readouterr().err and not out.exists()


def _gpu_uplinks(topo: Topology, gpu: int) -> list[tuple[int, float]]:
    """(neighbour, GB/s) of every link leaving ``gpu`` toward a switch."""
    switches = set(topo.switches)
    return sorted((lk.dst, lk.bandwidth_GBps) for lk in topo.links if lk.src == gpu and lk.dst in switches)


def test_rocm_sample_follows_the_weight_rule() -> None:
    """AMD documents (module doc of ``rocm_smi``) that ``--showtopo`` prints Hops 1 for every
    xGMI-reachable pair and a weight of 15 per xGMI hop. Read the sample's two matrices here,
    independently of the importer: every off-diagonal Hops entry is 1, and every weight is 15
    x the shortest-path length in the graph of the weight-15 pairs (a 3-cube: 12 pairs, degree
    3, antipodes 0-7, 1-6, 2-5, 3-4 at 3 hops = 45)."""
    text = (DATA / "rocm_smi_mi250_8gcd.txt").read_text().splitlines()

    def matrix(title: str) -> list[list[int]]:
        at = next(i for i, line in enumerate(text) if title in line)
        return [[int(t) for t in text[at + 2 + r].split()[1:]] for r in range(8)]

    weight, hops = matrix("Weight between"), matrix("Hops between")
    assert all(hops[a][b] == (0 if a == b else 1) for a in range(8) for b in range(8))
    direct = nx.Graph([(a, b) for a in range(8) for b in range(8) if weight[a][b] == 15])
    assert direct.number_of_edges() == 12 and {d for _, d in direct.degree()} == {3}
    dist = dict(nx.all_pairs_shortest_path_length(direct))
    assert all(weight[a][b] == 15 * dist[a][b] for a in range(8) for b in range(8))
    assert weight[0][7] == 45


def test_rocm_direct_links_come_from_weight_not_hops() -> None:
    """With Hops 1 for all 28 xGMI pairs (the documented output), only the 12 weight-15 pairs
    are direct: 24 directed links, none between GPU0 and GPU3 (weight 30) or GPU0 and GPU7
    (weight 45). Reading Hops as before would give 28 pairs = 56 links."""
    topo = import_topology(DATA / "rocm_smi_mi250_8gcd.txt")
    assert topo.num_links == 24
    assert topo.has_link(0, 1) and topo.has_link(0, 2) and topo.has_link(0, 4)
    assert not topo.has_link(0, 3) and not topo.has_link(0, 7)


def _drop_section(text: str, title: str) -> str:
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if title in line)
    end = next((j for j in range(at + 1, len(lines)) if lines[j].lstrip().startswith("=")), len(lines))
    return "".join(lines[:at] + lines[end:])


@pytest.mark.parametrize(
    ("drop", "note", "links"),
    [
        # Hops 1 everywhere, so the documented fallback reads all 28 XGMI pairs as direct.
        (("Weight between",), "no Weight section: XGMI pairs at Hops 1 read as direct links", 56),
        (
            ("Weight between", "Hops between"),
            "no Weight or Hops section: every XGMI pair read as a direct link",
            56,
        ),
        # Weight still there: the 12 cube pairs; the missing NUMA data only touches the PCIe tree.
        (("Numa Nodes",), "no Numa Nodes section: all GPUs assumed on one NUMA node", 24),
    ],
)
def test_rocm_missing_sections_are_noted(
    drop: tuple[str, ...],
    note: str,
    links: int,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A section the parser fills with a default is said once: a logging warning from the
    library, one ``note:`` line on stderr from the CLI (not repeated on stdout)."""
    text = (DATA / "rocm_smi_mi250_8gcd.txt").read_text()
    for title in drop:
        text = _drop_section(text, title)
    path = tmp_path / "rocm.txt"
    path.write_text(text)
    with caplog.at_level("WARNING", logger="ccplan.instances.importers"):
        topo = import_topology(path)
    assert topo.num_links == links
    assert [r.getMessage() for r in caplog.records if note in r.getMessage()] != []
    rc = main(["import-topology", str(path), "--out", str(tmp_path / "t.json")])
    captured = capsys.readouterr()
    assert rc == 0
    said = [line for line in captured.err.splitlines() if note in line]
    assert len(said) == 1 and said[0].startswith(f"note: {note}")
    assert note not in captured.out


def test_rocm_complete_file_has_no_assumption_notes(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="ccplan.instances.importers"):
        import_topology(DATA / "rocm_smi_mi250_8gcd.txt")
    assert caplog.records == []


def test_nccl_empty_link_speed_reads_as_nccl_fallback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A VM dump: NCCL writes link_speed="" link_width="" when /sys has no entry, and reads
    them as its kvDictPciGen fallback 60 (8 GT/s) and width 0 -> 16: 16 x 60 / 80 = 12 GB/s.
    Two GPUs under one <cpu>, no NVLink: 1 hub, 2 duplex edges = 4 links of 12 GB/s. With
    --pcie never the file imports too (no links); --pcie-gen 4 makes it 16 x 120 / 80 = 24."""
    with caplog.at_level("WARNING", logger="ccplan.instances.importers"):
        topo = import_topology(DATA / "nccl_topo_vm_2gpu.xml")
    assert len(topo.switches) == 1 and topo.num_links == 4
    assert set(topo.bandwidth.tolist()) == {12.0}
    assert any("empty link_speed on 2 PCIe link(s) (line 3, 6)" in r.getMessage() for r in caplog.records)
    assert import_topology(DATA / "nccl_topo_vm_2gpu.xml", pcie="never").num_links == 0
    gen4 = import_topology(DATA / "nccl_topo_vm_2gpu.xml", pcie_gen=4)
    assert set(gen4.bandwidth.tolist()) == {24.0}


def test_nccl_link_speed_from_the_file_and_the_pcie_gen_override(tmp_path: Path) -> None:
    """The dump says 8.0 GT/s x16 everywhere (Gen3): 16 x 60 / 80 = 12 GB/s on its 3 duplex
    edges (bridge-CPU, two GPU-bridge). --pcie-gen 5 keeps the width: 16 x 240 / 80 = 48; a
    x8 GPU link at Gen4 is 8 x 120 / 80 = 12 while the x16 bridge is 24."""
    topo = import_topology(DATA / "nccl_topo_pcie_2gpu.xml")
    assert topo.num_links == 6 and set(topo.bandwidth.tolist()) == {12.0}
    assert set(import_topology(DATA / "nccl_topo_pcie_2gpu.xml", pcie_gen=5).bandwidth.tolist()) == {48.0}
    narrow = tmp_path / "x8.xml"
    text = (DATA / "nccl_topo_pcie_2gpu.xml").read_text()
    head, tail = text.split('busid="0000:1a:00.0"', 1)
    narrow.write_text(head + 'busid="0000:1a:00.0"' + tail.replace('link_width="16"', 'link_width="8"', 1))
    mixed = import_topology(narrow, pcie_gen=4)
    assert _gpu_uplinks(mixed, 0)[0][1] == 12.0 and _gpu_uplinks(mixed, 1)[0][1] == 24.0
    with pytest.raises(ValidationError, match="pcie_gen must be one of 1, 2, 3, 4, 5, 6, got 7"):
        import_topology(DATA / "nccl_topo_pcie_2gpu.xml", pcie_gen=7)


def test_cli_pcie_gen_on_nvidia_smi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """nvidia-smi does not print the generation: --pcie-gen 3 sets PIX/PXB/PHB/NODE to
    16 x 60 / 80 = 12 GB/s (SYS, the socket link, stays 9), so GPU0 -> GPU2 (PXB, two PCIe
    links each way) can push 12. Giving --class-bw PIX too is refused (two sources)."""
    out = tmp_path / "t.json"
    assert (
        main(["import-topology", str(DATA / "nvsmi_pcie_8gpu.txt"), "--out", str(out), "--pcie-gen", "3"])
        == 0
    )
    graph = Topology.from_json(out).to_networkx()
    assert nx.maximum_flow_value(graph, 0, 2, capacity="bandwidth_GBps") == pytest.approx(12.0)
    assert nx.maximum_flow_value(graph, 0, 4, capacity="bandwidth_GBps") == pytest.approx(9.0)
    capsys.readouterr()
    rc = main(
        [
            "import-topology",
            str(DATA / "nvsmi_pcie_8gpu.txt"),
            "--out",
            str(tmp_path / "u.json"),
            "--pcie-gen",
            "3",
            "--class-bw",
            "PIX=10",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--pcie-gen 3 and a PIX bandwidth" in err
    assert not (tmp_path / "u.json").exists()


def test_one_gpu_machine_is_refused_at_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """nvidia-smi topo -m of a one-GPU box: no pair, so no collective; import says so (exit 2,
    one line, nothing written). Two copies joined by --nodes 2 are a 2-GPU cluster: each GPU's
    own NIC links it to the one fabric switch, 2 duplex links of 12.5 GB/s."""
    out = tmp_path / "t.json"
    rc = main(["import-topology", str(DATA / "nvsmi_1gpu.txt"), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "nvsmi_1gpu.txt: the machine has one GPU, so there is no collective to plan" in err
    assert not out.exists()
    pair = import_topology(DATA / "nvsmi_1gpu.txt", network=Network(nodes=2))
    assert len(pair.gpus) == 2 and len(pair.switches) == 1 and pair.num_links == 4
    assert set(pair.bandwidth.tolist()) == {12.5}


def test_more_nics_than_gpus() -> None:
    """16 NICs on each 8-GPU H100 box: NIC r belongs to GPU r * 8 // 16, two per GPU. Rail:
    GPU g reaches rails 2g and 2g+1 at 12.5 GB/s each; switches 2 NVSwitches + 16 rails,
    links 2 x 16 + 2 x 16 NICs x 2 = 96. One switch: a GPU's two NICs are one 25 GB/s link;
    switches 2 + 1, links 32 + 2 x 8 x 2 = 64. The cut between the machines is 16 NICs x
    12.5 = 200 GB/s either way (max flow from all GPUs of one machine to the other's)."""
    rail = import_topology(
        DATA / "nvsmi_dgx_h100.txt", network=Network(nodes=2, nics_per_node=16, fabric="rail")
    )
    assert len(rail.switches) == 18 and rail.num_links == 96
    assert [bw for _, bw in _gpu_uplinks(rail, 0)].count(12.5) == 2
    one = import_topology(DATA / "nvsmi_dgx_h100.txt", network=Network(nodes=2, nics_per_node=16))
    assert len(one.switches) == 3 and one.num_links == 64
    assert [bw for _, bw in _gpu_uplinks(one, 0)].count(25.0) == 1
    for topo in (rail, one):
        graph = topo.to_networkx()
        graph.add_edges_from((("s", g) for g in range(8)), bandwidth_GBps=1e9)
        graph.add_edges_from(((g, "t") for g in range(8, 16)), bandwidth_GBps=1e9)
        assert nx.maximum_flow_value(graph, "s", "t", capacity="bandwidth_GBps") == pytest.approx(200.0)


def test_imported_cluster_with_extra_nics_plans_a_verified_schedule() -> None:
    """Two VM boxes of 2 GPUs with 4 NICs each (more NICs than GPUs) on one switch: a ring
    AllGather on it is checked by the independent verifier."""
    from ccplan.instances import make_collective, make_instance
    from ccplan.pipeline.solve import solve

    topo = import_topology(DATA / "nccl_topo_vm_2gpu.xml", network=Network(nodes=2, nics_per_node=4))
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    result = solve(inst, "ring")
    assert result.verified and result.schedule is not None
