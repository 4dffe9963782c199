"""Sweeps: resumable tables, kill-and-resume, Dask path (ccplan/sweep/).

The engines under test here are toy engines registered below, so these tests do not depend
on the real engines. ``toy-seq`` sends every chunk along a BFS tree, one send at a time (each
send starts only after the previous one has arrived), which is trivially valid: no two sends
ever overlap in time, so no capacity can be exceeded and every sender already holds its chunk.
It logs each call to the file named by ``CCPLAN_TOY_LOG`` and can sleep to make a sweep slow
enough to be killed mid-run.
"""

from __future__ import annotations

import collections
import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ccplan.contract import Outcome, SolveOptions, register
from ccplan.errors import ResourceLimitError, ValidationError
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule, Send
from ccplan.sweep import (
    COLUMNS,
    TIMING_COLUMNS,
    SweepConfig,
    cells_of,
    load_results,
    run_sweep,
)

TESTS_DIR = Path(__file__).resolve().parent
REPO = TESTS_DIR.parent


@register("toy-seq")
def _toy_sequential(instance: Instance, options: SolveOptions) -> Outcome:
    log_path = os.environ.get("CCPLAN_TOY_LOG")
    if log_path:
        with open(log_path, "a") as fh:
            fh.write(f"{os.getpid()} {instance.describe()}\n")
    time.sleep(float(options.extra.get("sleep", 0.0)))
    topo = instance.topology
    latency = instance.latency
    coll = instance.collective
    sends: list[Send] = []
    slot = 0
    for chunk in coll.chunk_ids:
        held = coll.holders[chunk]
        parent: dict[int, tuple[int, int]] = {}  # node -> (parent node, link index)
        order: list[int] = []
        frontier = sorted(held)
        seen = set(held)
        while frontier:
            nxt = []
            for u in frontier:
                for li in topo.out_links.get(u, ()):
                    v = topo.links[li].dst
                    if v not in seen:
                        seen.add(v)
                        parent[v] = (u, li)
                        order.append(v)
                        nxt.append(v)
            frontier = nxt
        needed: set[int] = set()
        for v in coll.wanted.get(chunk, frozenset()) - held:
            while v not in held and v not in needed:
                needed.add(v)
                v = parent[v][0]
        for v in order:  # BFS order: a parent is served before its children
            if v in needed:
                u, li = parent[v]
                sends.append(Send(slot=slot, chunk=chunk, src=u, dst=v))
                slot += int(latency[li])
    return Outcome(Schedule(tuple(sends), method="toy-seq"), status="feasible")


@register("toy-fail")
def _toy_fail(instance: Instance, options: SolveOptions) -> Outcome:
    raise RuntimeError("toy engine failure\nsecond line of the message")


SMOKE_TOML = """
name = "toy"
sizes = {sizes}
chunks = [1]
collectives = ["allgather"]

[[topology]]
name = "line"
params = {{n = 3}}
label = "line3"

[[topology]]
name = "ring"
params = {{n = 4}}

[[method]]
label = "toy"
method = "toy-seq"
extra = {{sleep = {sleep}}}

[run]
processes = {processes}
imports = ["test_sweep"]
"""


def _write_config(tmp_path: Path, sizes: list[str], sleep: float = 0.0, processes: int = 1) -> Path:
    cfg = tmp_path / "toy.toml"
    cfg.write_text(SMOKE_TOML.format(sizes=str(sizes).replace("'", '"'), sleep=sleep, processes=processes))
    return cfg


def _keys(path: Path) -> list[str]:
    with path.open(newline="") as fh:
        return [row["key"] for row in csv.DictReader(fh)]


def test_row_numbers_of_a_hand_checked_cell(tmp_path):
    """line-3 AllGather, 3 MB, C=1, toy-seq.

    mu = 1 MB, tau = 1e6 B / 50 GB/s = 20 us; alpha/tau = 0.7/20 = 0.035 <= 0.1 so delta = 0,
    L = 1 on every link. toy-seq sends each chunk along its BFS tree, one send per slot:
    chunk 0: 0->1, 1->2; chunk 1: 1->0, 1->2; chunk 2: 2->1, 1->0: 6 sends, makespan 6 slots
    = 120 us; algbw = 3e6 B / 120 us = 25 GB/s.

    Physical bound: GPU 2 receives 2 MB over its one in-link 1->2 at 50 GB/s (40 us), the
    first byte no sooner than alpha: >= 40 us; and a finely pipelined relay through GPU 1
    (any chunking) finishes by 40 us + 2 alpha = 41.4 us, so a valid bound is at most that.
    """
    cfg = SweepConfig.from_toml(_write_config(tmp_path, ["3MB"]))
    out = run_sweep(cfg, out=tmp_path / "t.csv", progress=False)
    rows = [r for r in load_results(out) if r["topology"] == "line3"]
    assert len(rows) == 1
    r = rows[0]
    assert r["status"] == "feasible" and r["verified"] is True
    assert r["makespan_slots"] == 6
    assert r["tau_us"] == pytest.approx(20.0)
    assert r["makespan_us"] == pytest.approx(120.0)
    assert r["algbw_GBps"] == pytest.approx(25.0)
    assert r["num_sends"] == 6
    assert r["gpus"] == 3 and r["links"] == 4
    assert r["lower_bound_slots"] <= 6
    assert 40.0 - 1e-9 <= r["physical_bound_us"] <= 41.4 + 1e-9
    assert r["physical_gap"] == pytest.approx(1 - r["physical_bound_us"] / 120.0)
    assert r["switch_model"] == "store-and-forward"
    assert "C = 1" in r["claim"] and "physical bound" in r["claim"]
    assert r["host_cores"] == os.cpu_count()


def test_rerun_skips_finished_cells_and_failures_are_rows(tmp_path, monkeypatch):
    """A second run over a complete table solves nothing; an engine error becomes one row."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("CCPLAN_TOY_LOG", str(log))
    cfg_path = _write_config(tmp_path, ["1MB", "2MB"])
    text = cfg_path.read_text() + '\n[[method]]\nlabel = "broken"\nmethod = "toy-fail"\n'
    cfg_path.write_text(text)
    out = tmp_path / "t.csv"
    run_sweep(cfg_path, out=out, progress=False)
    assert len(log.read_text().splitlines()) == 4  # 2 topologies x 2 sizes of toy-seq
    rows = load_results(out)
    assert len(rows) == 8
    broken = [r for r in rows if r["method_label"] == "broken"]
    assert len(broken) == 4 and all(r["status"] == "error" for r in broken)
    assert all("toy engine failure | second line" in r["error"] for r in broken)
    run_sweep(cfg_path, out=out, progress=False)
    assert len(log.read_text().splitlines()) == 4
    assert sorted(_keys(out)) == sorted({*_keys(out)})


def test_killed_sweep_resumes_without_redoing_finished_cells(tmp_path, monkeypatch):
    """Kill a 2-process sweep (whole process group, SIGKILL) after a few rows, add a torn
    line, resume: every cell appears exactly once and no cell finished before the kill is
    solved again."""
    sizes = ["1MB", "2MB", "3MB", "4MB", "5MB", "6MB"]
    cfg = _write_config(tmp_path, sizes, sleep=0.4, processes=2)
    out = tmp_path / "t.csv"
    log = tmp_path / "calls.log"
    env = dict(os.environ, CCPLAN_TOY_LOG=str(log), PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(REPO)]))
    code = f"from ccplan.sweep import run_sweep; run_sweep({str(cfg)!r}, out={str(out)!r}, progress=False)"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if out.exists() and len(load_results(out)) >= 4:  # 4 complete rows
                break
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                pytest.fail(f"sweep ended before it was killed: {err[-2000:]}")
            time.sleep(0.05)
        else:
            pytest.fail("sweep wrote no rows within 60 s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # a row the kill tore mid-write is not finished: the sweep's own reader drops it (and the
    # resume solves that cell again), so count only the rows it reads
    finished_first = {r["key"] for r in load_results(out)}
    total = len(cells_of(SweepConfig.from_toml(cfg)))
    assert 4 <= len(finished_first) < total, "the kill must land mid-run"
    with out.open("a") as fh:  # a row cut off mid-write
        fh.write('"line3|allgather|9MB|C1|toy|deadbeef00",toy,line3,li')
    first_calls = len(log.read_text().splitlines())

    monkeypatch.setenv("CCPLAN_TOY_LOG", str(log))
    run_sweep(cfg, out=out, progress=False, processes=1)

    keys = _keys(out)
    assert len(keys) == total and len(set(keys)) == total
    assert "deadbeef00" not in out.read_text()
    expected = {c.key for c in cells_of(SweepConfig.from_toml(cfg))}
    assert set(keys) == expected
    second = log.read_text().splitlines()[first_calls:]
    by_key = {r["key"]: r for r in load_results(out)}
    # The toy logs instance.describe() ("line-3 allgather size=1MB C=1 ..."): map back to cells.
    second_cells = collections.Counter(" ".join(line.split()[1:4]) for line in second)
    for k in finished_first:
        r = by_key[k]
        topo_name = "line-3" if r["topology"] == "line3" else "ring-4"
        assert second_cells[f"{topo_name} allgather size={r['size']}"] == 0, f"{k} was solved again"
    assert sum(second_cells.values()) == total - len(finished_first)


def test_dask_local_cluster_gives_the_same_table(tmp_path):
    """The same grid on a Dask LocalCluster (in-process workers) and locally: equal rows
    except the timing/host columns."""
    distributed = pytest.importorskip(
        "distributed", reason="dask.distributed is not installed (pip install 'dask[distributed]')"
    )
    cfg = SweepConfig.from_toml(_write_config(tmp_path, ["1MB", "4MB"]))
    local = run_sweep(cfg, out=tmp_path / "local.csv", progress=False)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        remote = run_sweep(
            cfg, out=tmp_path / "dask.csv", dask_address=cluster.scheduler_address, progress=False
        )

    def strip(path: Path) -> list[dict]:
        rows = load_results(path)
        return sorted(
            ({k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows), key=lambda r: r["key"]
        )

    a, b = strip(local), strip(remote)
    assert len(a) == 4
    assert a == b


def test_config_errors_name_the_field(tmp_path):
    cfg = _write_config(tmp_path, ["1MB"])
    cfg.write_text(cfg.read_text().replace('label = "toy"', 'label = "toy"\ntime_limt = 5'))
    with pytest.raises(ValidationError, match="time_limt"):
        SweepConfig.from_toml(cfg)
    with pytest.raises(ValidationError, match="does not exist"):
        SweepConfig.from_toml(tmp_path / "nope.toml")
    cfg.write_text(_write_config(tmp_path, ["1MB"]).read_text().replace('sizes = ["1MB"]', 'sizes = ["1XB"]'))
    with pytest.raises(ValidationError, match="size"):
        SweepConfig.from_toml(cfg)


def test_method_restrictions_and_key_stability(tmp_path):
    """A method limited to some sizes gets only those cells; a changed time limit changes the
    key (the cell is rerun), an unchanged config gives the same keys."""
    cfg_path = _write_config(tmp_path, ["1KB", "1MB", "1GB"])
    text = cfg_path.read_text() + textwrap.dedent("""
        [[method]]
        label = "exact"
        method = "toy-seq"
        time_limit = 60
        sizes = ["1MB", "1000000000"]
        topologies = ["line3"]
    """)
    cfg_path.write_text(text)
    cells = cells_of(SweepConfig.from_toml(cfg_path))
    exact = sorted(c.size for c in cells if c.method.label == "exact")
    assert exact == ["1GB", "1MB"]
    assert len(cells) == 2 * 3 + 2
    again = [c.key for c in cells_of(SweepConfig.from_toml(cfg_path))]
    assert again == [c.key for c in cells]
    cfg_path.write_text(text.replace("time_limit = 60", "time_limit = 61"))
    changed = cells_of(SweepConfig.from_toml(cfg_path))
    assert {c.key for c in changed if c.method.label == "exact"}.isdisjoint(
        {c.key for c in cells if c.method.label == "exact"}
    )
    assert set(COLUMNS) >= set(TIMING_COLUMNS)


def test_table_of_an_older_column_set_is_upgraded_in_place(tmp_path):
    """A table whose header is a subset of today's columns keeps its rows (new columns empty)
    and its keys still count as done; a table with unknown columns is refused."""
    from ccplan.sweep import ResultTable

    path = tmp_path / "old.csv"
    path.write_text("key,status,makespan_us\na|1,feasible,12.5\nb|2,optimal,3.0\n")
    table = ResultTable(path)
    assert table.open() == {"a|1", "b|2"}
    table.append({"key": "c|3", "status": "feasible"})
    table.close()
    rows = load_results(path)
    assert [r["key"] for r in rows] == ["a|1", "b|2", "c|3"]
    assert rows[0]["makespan_us"] == 12.5 and rows[0]["tau_us"] is None
    bad = tmp_path / "bad.csv"
    bad.write_text("key,colour\nx,red\n")
    with pytest.raises(ValidationError, match="colour"):
        ResultTable(bad).open()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # the command name may contain spaces: the fields after it start past ')'
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_killed_sweep(tmp_path):
    """SIGKILL the sweep process alone (not its group): its worker processes must not stay
    behind running cells; they exit within a few seconds."""
    sizes = [f"{i}MB" for i in range(1, 13)]
    cfg = _write_config(tmp_path, sizes, sleep=2.0, processes=2)
    out = tmp_path / "t.csv"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(REPO)]))
    code = f"from ccplan.sweep import run_sweep; run_sweep({str(cfg)!r}, out={str(out)!r}, progress=False)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(workers) < 2:
            workers = _children(proc.pid)
            time.sleep(0.1)
        assert workers, "the sweep started no worker"
        time.sleep(0.5)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers), "workers outlived the killed sweep"
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in workers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_unknown_method_is_refused_before_any_cell(tmp_path):
    cfg = _write_config(tmp_path, ["1MB"])
    cfg.write_text(cfg.read_text() + '\n[[method]]\nlabel = "typo"\nmethod = "mtge"\n')
    out = tmp_path / "t.csv"
    with pytest.raises(ValidationError, match="method 'typo' names unknown engine 'mtge'"):
        run_sweep(cfg, out=out, progress=False)
    assert not out.exists()


def test_oversized_cell_is_refused_before_any_cell(tmp_path):
    cfg = _write_config(tmp_path, ["1MB"])
    cfg.write_text(cfg.read_text().replace("chunks = [1]", "chunks = [1, 1000000000]"))
    out = tmp_path / "t.csv"
    with pytest.raises(ResourceLimitError, match="chunks=1000000000"):
        run_sweep(cfg, out=out, progress=False)
    assert not out.exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_a_sweep_with_one_line_and_no_worker_left(tmp_path):
    """SIGINT to the sweep's process group (what a terminal's Ctrl-C does) after two rows:
    exit 130, one line naming the saved rows and the table, no traceback from any worker, and
    the workers gone."""
    sizes = [f"{i}MB" for i in range(1, 13)]
    cfg = _write_config(tmp_path, sizes, sleep=1.0, processes=2)
    out = tmp_path / "t.csv"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS_DIR), str(REPO)]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ccplan.cli", "sweep", str(cfg), "--out", str(out), "--quiet"],
        env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            workers = sorted(set(workers) | set(_children(proc.pid)))
            if out.exists() and len(out.read_text().splitlines()) >= 3:
                break
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        _stdout, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    saved = len(out.read_text().splitlines()) - 1
    assert lines == [f"ccplan: interrupted; saved {saved} new row(s) -> {out} (rerun to resume)"], err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.1)
    assert workers and not any(_alive(p) for p in workers)


def test_cut_through_sweep_of_a_combining_collective(tmp_path):
    """A cut-through sweep runs combining collectives too (it was refused before).

    Ring AllReduce of 4 GPUs around one cut-through switch, C = 1: 2(N-1) = 6 ring steps, each
    one chunk of M/N through the switch; a cut-through hop GPU -> switch -> GPU takes one slot
    (tau = the chunk's time on one 50 GB/s link, alpha rounded to 0), so 6 slots; no send
    combines partial sums at the switch (it relays each).
    """
    cfg = tmp_path / "ct.toml"
    cfg.write_text(
        'name = "ct"\ncollectives = ["allreduce"]\nsizes = ["4MB"]\nchunks = [1]\n'
        '[[topology]]\nname = "star_switch"\nparams = {n = 4}\n'
        '[[method]]\nlabel = "ring"\nmethod = "ring"\n'
        '[instance]\nswitch_model = "cut-through"\n[run]\nprocesses = 1\nsimulate = false\n'
    )
    out = run_sweep(SweepConfig.from_toml(cfg), out=tmp_path / "ct.csv", progress=False)
    (row,) = load_results(out)
    assert row["error"] in (None, ""), row["error"]
    assert row["verified"] is True and row["switch_model"] == "cut-through"
    assert row["makespan_slots"] == 6
    assert row["physical_bound_us"] <= row["makespan_us"] * (1 + 1e-9)
