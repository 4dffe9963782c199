"""The nvidia-smi and rocm-smi parsers on moderately large generated matrices (correctness;
``benchmarks/import_parsers.py`` gives the times at 1,000 and 2,000 GPUs)."""

from __future__ import annotations

import sys
from pathlib import Path

from ccplan.instances.importers.machine import pcie_tree
from ccplan.instances.importers.nvidia_smi import parse_nvidia_smi
from ccplan.instances.importers.rocm_smi import parse_rocm_smi

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import import_parsers as gen


def test_nvswitch_matrix_of_96_gpus() -> None:
    """NV18 between all 96 GPUs: 96 x 95 x 18 / 2 NV links per GPU pair sums far beyond
    18 per GPU, so one NVSwitch with an 18-link port per GPU and no GPU-GPU cable."""
    m = parse_nvidia_smi(gen.nvidia_switch(96), "gen")
    assert m.gpus == 96
    assert m.cables == ()
    assert m.nvswitch_ports == {g: 18 for g in range(96)}
    assert len(m.nics) == 8


def test_pcie_matrix_of_96_gpus() -> None:
    """NV2 inside each group of 8 GPUs: 12 groups x C(8, 2) = 336 NV cables of 2 links
    (16 NV links per GPU: no switch); the PCIe classes give the tree of the pair classes."""
    n = 96
    m = parse_nvidia_smi(gen.nvidia_pcie(n), "gen")
    assert not m.nvswitch_ports
    assert len(m.cables) == (n // 8) * 28
    assert all(c.link_class == "NV" and c.count == 2 and c.a // 8 == c.b // 8 for c in m.cables)
    levels = {
        (a, b): gen._pcie_class(a, b, n)
        for a in range(n) for b in range(a + 1, n) if not gen._pcie_class(a, b, n).startswith("NV")
    }
    assert (m.hubs, m.hub_edges) == pcie_tree(n, levels)


def test_rocm_matrix_of_128_gcds() -> None:
    """xGMI (hop 1) inside each group of 8: 16 x 28 = 448 cables; the PCIe tree equals the
    tree of every pair's class (PHB on one NUMA node, SYS across), which the parser now
    builds from a chain through each node."""
    n = 128
    m = parse_rocm_smi(gen.rocm(n), "gen")
    assert len(m.cables) == (n // 8) * 28
    assert all(c.link_class == "XGMI" and c.a // 8 == c.b // 8 for c in m.cables)
    half = n // 2
    levels = {(a, b): "PHB" if (a < half) == (b < half) else "SYS" for a in range(n) for b in range(a + 1, n)}
    assert (m.hubs, m.hub_edges) == pcie_tree(n, levels)
    assert m.hubs == 3  # one per NUMA node, one joining them
