"""Two ``sweep`` runs on one result table at once: the second refuses with one line (exit 2)
while the first holds the table, so no cell is computed and written twice."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SLOW_MODULE = """
import os, time
from pathlib import Path
from ccplan.pipeline import get_engine
from ccplan.contract import register

@register("slow-ring")
def slow_ring(instance, options):
    Path(os.environ["CCPLAN_TEST_MARK"]).write_text("running")
    time.sleep(float(os.environ.get("CCPLAN_TEST_SLEEP", "0")))
    return get_engine("ring")(instance, options)
"""

CONFIG = """
name = "locked"
collectives = ["allgather"]
sizes = ["1MB", "1GB"]
chunks = [1]

[[topology]]
name = "ring"
params = {n = 4}

[[method]]
method = "slow-ring"

[run]
processes = 1
imports = ["ccplan.heuristics.baselines", "slowmod"]
"""


def _start(tmp_path: Path, table: Path, mark: Path, sleep: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
           "CCPLAN_TEST_MARK": str(mark), "CCPLAN_TEST_SLEEP": sleep}
    return subprocess.Popen(
        [sys.executable, "-m", "ccplan", "sweep", str(tmp_path / "locked.toml"), "--out", str(table),
         "--quiet"],
        cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )


def test_second_sweep_on_the_same_table_refuses_and_no_cell_runs_twice(tmp_path: Path) -> None:
    """Sweep A sleeps 4 s in its first cell; sweep B, started meanwhile on the same table,
    exits 2 at once with one line naming the table and A's pid, and runs no cell (its marker
    never appears); A ends with each of its 2 cells once in the table and no lock file left.
    Before: B ran both cells too and the table held 4 rows."""
    (tmp_path / "slowmod.py").write_text(SLOW_MODULE)
    (tmp_path / "locked.toml").write_text(CONFIG)
    table = tmp_path / "results.csv"
    mark_a, mark_b = tmp_path / "a.mark", tmp_path / "b.mark"
    first = _start(tmp_path, table, mark_a, "4")
    try:
        end = time.monotonic() + 60
        while not mark_a.exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < end
            time.sleep(0.05)
        second = _start(tmp_path, table, mark_b, "0")
        _out, err_b = second.communicate(timeout=60)
        _out_a, err_a = first.communicate(timeout=90)
    finally:
        for proc in (first,):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert second.returncode == 2, err_b
    lines = [ln for ln in err_b.splitlines() if ln.strip()]
    assert lines == [
        f"ccplan: error: results table {str(table)!r} is being written by another sweep "
        f"(pid {first.pid}); wait for it to finish (then rerun to resume) or write to another file (--out)"
    ], err_b
    assert not mark_b.exists()
    assert first.returncode == 0, err_a
    with table.open() as fh:
        keys = [row["key"] for row in csv.DictReader(fh)]
    assert len(keys) == 2 and len(set(keys)) == 2
    assert not (tmp_path / "results.csv.lock").exists()


def test_a_stale_lock_file_does_not_block(tmp_path: Path) -> None:
    """A lock file left by a killed sweep (no process holds its lock) is taken over."""
    from ccplan.sweep import ResultTable

    table = tmp_path / "t.csv"
    (tmp_path / "t.csv.lock").write_text("999999\n")
    rt = ResultTable(table)
    assert rt.open() == set()
    assert (tmp_path / "t.csv.lock").read_text() == f"{os.getpid()}\n"
    rt.close()
    assert not (tmp_path / "t.csv.lock").exists()
