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
