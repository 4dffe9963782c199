"""Memory refused up front: the budget sees a columnar schedule's declared size before any
column is decompressed, and ``import-topology`` its machine count before it builds."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from ccplan import cli
from ccplan.errors import ResourceLimitError
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import resolve_topology
from ccplan.limits import budget
from ccplan.schedule import load_schedule
from ccplan.schedule.columnar import COLUMNAR_FORMAT

SENDS = 5_000_000


def _zeros_npz(path: Path, sends: int) -> None:
    """A valid header and ``sends`` all-zero sends: compressed, a few kilobytes per million."""
    topo = resolve_topology("ring", n=4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    header = {"format": COLUMNAR_FORMAT, "method": "crafted", "instance": inst.to_dict()}
    zeros = np.zeros(sends, dtype=np.uint8)
    np.savez_compressed(
        path, header=np.array(json.dumps(header)), slot=zeros, chunk_source=zeros, chunk_index=zeros,
        src=zeros, dst=zeros, reduce=zeros.astype(bool),
    )


def test_npz_declaring_millions_of_sends_is_refused_before_it_is_loaded(tmp_path: Path) -> None:
    """5 million declared sends (a ~30 KB file) under a 100 MB budget: 5e6 x 120 bytes per
    send (the column loader and verifier, ``BYTES_PER_SEND_COLUMNS``) = 600 MB is refused,
    and the refusal costs well under the 5 MB a single decompressed column would take (the
    issue's 3.5 MB file declaring 600 million sends peaked at 3.5 GB)."""
    path = tmp_path / "crafted.npz"
    _zeros_npz(path, SENDS)
    assert path.stat().st_size < 200_000
    tracemalloc.start()
    try:
        with budget("100MB"), pytest.raises(ResourceLimitError, match=f"declaring {SENDS} sends"):
            load_schedule(path, check_budget=False)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000


def test_verify_of_such_a_file_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "crafted.npz"
    _zeros_npz(path, SENDS)
    code = cli.main(["--memory-budget", "100MB", "verify", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ccplan: error: load refused: ")


def test_a_small_crafted_file_within_the_budget_still_loads(tmp_path: Path) -> None:
    """The header check changes nothing for a file within the budget: 1,000 declared sends
    load (all-zero sends are then the verifier's business, not the loader's)."""
    path = tmp_path / "small.npz"
    _zeros_npz(path, 1000)
    _inst, sched = load_schedule(path, check_budget=False)
    assert len(sched) == 1000


DGX1 = Path(__file__).resolve().parent / "data" / "import" / "nvsmi_dgx1_v100.txt"


def test_import_topology_refuses_too_many_copies_before_building(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--nodes 100000`` DGX-1 copies: 900,000 nodes and about 5 million links (6.8 million
    by the estimate's upper bound per copy) at 1,600 bytes per imported link are far over 4 GB;
    refused from the counts in well under the minutes the build took, with one line."""
    out = tmp_path / "t.json"
    tracemalloc.start()
    try:
        code = cli.main(["import-topology", str(DGX1), "--nodes", "100000", "--out", str(out)])
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ccplan: error: import-topology refused: --nodes 100000")
    assert peak < 50_000_000
    assert not out.exists()


def test_import_topology_within_the_budget_still_builds(tmp_path: Path) -> None:
    """200 copies: 1,800 nodes, 10,000 links (8 GPUs x 4 + ... per copy, counted by the
    built topology itself) -- well inside the default budget."""
    from ccplan.instances.topology import Topology

    out = tmp_path / "t.json"
    assert cli.main(["import-topology", str(DGX1), "--nodes", "200", "--out", str(out)]) == 0
    topo = Topology.from_dict(json.loads(out.read_text()))
    assert len(topo.gpus) == 1600


def test_import_topology_estimates_the_parse_from_the_file_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 300-GPU rocm-smi matrix (about 0.9 MB of text, 10 bytes of parsing per byte: 9 MB)
    under a 2 MB budget is refused before the file is read."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import import_parsers as gen

    src = tmp_path / "rocm.txt"
    src.write_text(gen.rocm(300))
    argv = ["--memory-budget", "2MB", "import-topology", str(src), "--out", str(tmp_path / "t.json")]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("ccplan: error: import-topology refused: topology file")
