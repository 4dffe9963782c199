"""Blow-up inputs: every entry point refuses them up front (exit 2, one line) or returns a
verified schedule, under a memory cap and a timeout so a regression cannot eat the machine.

Each command runs in a fresh interpreter with ``RLIMIT_AS`` at 3 GB and a 60 s timeout; a
blow-up shows as a timeout, a MemoryError or an exit code other than the expected one.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ccplan.contract import SolveOptions
from ccplan.errors import ResourceLimitError, ValidationError
from ccplan.instances import Link, Node, Topology, make_collective, make_instance
from ccplan.instances.builtin import resolve_topology
from ccplan.instances.estimate import estimate_collective, horizon_lower_bound
from ccplan.limits import Deadline, OutOfTimeError, budget, memory_budget, parse_budget
from ccplan.pipeline.estimate import estimate_solve
from ccplan.pipeline.solve import solve
from ccplan.schedule import load_schedule, verify

ROOT = Path(__file__).resolve().parent.parent
MEMORY_CAP = 3 * 10**9


def _cap() -> None:  # runs in the child before exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CCPLAN_MEMORY_BUDGET", None)
    return subprocess.run(
        [sys.executable, "-m", "ccplan.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_cap,
        env=env,
        cwd=ROOT,
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("solving ")]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("ccplan: error:"), lines[0]
    return lines[0]


def _two_gpus(name: str, bw01: float, bw10: float, alpha01: float = 0.0) -> Topology:
    return Topology(name, (Node(0), Node(1)), (Link(0, 1, bw01, alpha01), Link(1, 0, bw10)))


# --------------------------------------------------------------------------- the blow-ups
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        # 8 GPUs x 1e9 chunks: the collective's tables alone would be ~8.6 TB
        (["solve", "--topology", "dgx1", "--size", "1MB", "--chunks", "1000000000"], "--chunks 1000000000"),
        # AllGather on 100000 GPUs: 1e10 (chunk, node) entries
        (["solve", "--topology", "ring", "--topo-arg", "n=100000", "--size", "1MB"], "100000 GPUs"),
        (["bounds", "--topology", "ring", "--topo-arg", "n=100000", "--size", "1MB"], "100000 GPUs"),
        # 100000 GPUs all joined: 1e10 links, refused from the counts before any link list is made
        # (it used to build the cable tuples first and passed 20 GB)
        (["solve", "--topology", "fully_connected", "--topo-arg", "n=100000"], "9999900000 links"),
        (["bounds", "--topology", "ring", "--topo-arg", "n=6000000"], "12000000 links"),
        # tau = 1e-9 us against 2.5 us chunk transfers: 2.5e9 slots per hop, 1.4e11 link-slots
        (["bounds", "--topology", "ring", "--tau-rule", "explicit", "--tau-us", "1e-9"], "link-slots"),
        (["solve", "--topology", "ring", "--tau-rule", "explicit", "--tau-us", "1e-9"], "link-slots"),
        # an explicit tau so small that one hop is more than 1e12 slots: refused when built
        (["solve", "--topology", "ring", "--tau-rule", "explicit", "--tau-us", "1e-15"], "at most 1e+12"),
    ],
)
def test_blowup_commands_are_refused_up_front(argv, needle):
    start = time.monotonic()
    proc = cli(*argv, "--quiet") if argv[0] == "solve" else cli(*argv)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert needle in line
    assert time.monotonic() - start < 30  # refused, not computed


@pytest.mark.parametrize(
    ("links", "needle"),
    [
        # 50 and 5e-7 GB/s: the slow link occupies 1e8 slots per chunk
        ([(0, 1, 50.0, 0.0), (1, 0, 5e-7, 0.0)], "occupies 1e+08 slots"),
        # 1e308 GB/s makes tau 5e-306 us: the 50 GB/s link would be 2e306 slots
        ([(0, 1, 1e308, 0.0), (1, 0, 50.0, 0.0)], "bandwidth_GBps 50"),
        ([(0, 1, 50.0, 1e300), (1, 0, 50.0, 0.0)], "alpha_us 1e+300"),
    ],
)
def test_extreme_links_are_refused(tmp_path, links, needle):
    topo = {
        "name": "two",
        "nodes": [{"id": 0}, {"id": 1}],
        "links": [{"src": a, "dst": b, "bandwidth_GBps": bw, "alpha_us": al} for a, b, bw, al in links],
    }
    path = tmp_path / "two.json"
    path.write_text(json.dumps(topo))
    for command in ("solve", "bounds"):
        proc = cli(command, "--topology", str(path), "--size", "1MB")
        assert proc.returncode == 2, proc.stderr
        assert needle in one_error_line(proc)


def _schedule_file(tmp_path: Path, tau_us: float, size: str) -> Path:
    """2-GPU AllGather with one send each way at slot 0 (valid in any slot length)."""
    inst = {
        "topology": {
            "name": "two",
            "nodes": [{"id": 0}, {"id": 1}],
            "links": [
                {"src": 0, "dst": 1, "bandwidth_GBps": 50.0},
                {"src": 1, "dst": 0, "bandwidth_GBps": 50.0},
            ],
        },
        "collective": {"kind": "allgather", "chunks": 1},
        "size_bytes": size,
        "tau_rule": "explicit",
        "tau_us": tau_us,
    }
    sends = [
        {"chunk": [0, 0], "src": 0, "dst": 1, "slot": 0},
        {"chunk": [1, 0], "src": 1, "dst": 0, "slot": 0},
    ]
    path = tmp_path / "tiny_tau.json"
    path.write_text(json.dumps({"instance": inst, "sends": sends}))
    return path


@pytest.mark.parametrize("command", ["verify", "simulate", "export"])
def test_schedule_with_a_tiny_slot_is_refused(tmp_path, command):
    """1 KB over 2 GPUs: 500-byte chunks take 0.01 us at 50 GB/s; with tau = 1e-12 us each send
    occupies its link for 1e10 slots, so replaying it would record 2e10 link-slots."""
    path = _schedule_file(tmp_path, 1e-12, "1KB")
    extra = ["--format", "json", "--out", str(tmp_path / "o.json")] if command == "export" else []
    proc = cli(command, str(path), *extra)
    assert proc.returncode == 2, proc.stderr
    assert "2e+10 link-slots" in one_error_line(proc)
    assert not (tmp_path / "o.json").exists()


def test_schedule_whose_hop_overflows_is_refused(tmp_path):
    """1 MB: 500 KB chunks take 10 us, 1e13 slots of 1e-12 us, past the per-hop limit."""
    proc = cli("verify", str(_schedule_file(tmp_path, 1e-12, "1MB")))
    assert proc.returncode == 2
    assert "at most 1e+12" in one_error_line(proc)


def test_time_limit_holds_and_returns_a_verified_schedule(tmp_path):
    """DGX-1 AllGather with C=200: the portfolio left alone runs about 35 s on 2 cores before
    it stops; with --time-limit 6 it stops on time with its best verified schedule. (The
    limit leaves the engine seconds even on a loaded machine, where start-up alone can take
    2-3 s: its first schedule comes after about 0.25 s unloaded. With --time-limit 1 a CI
    machine at load 8 once left the engine 0.25 s and no schedule.)"""
    report = tmp_path / "r.json"
    out = tmp_path / "s.json"
    proc = cli(
        "solve", "--topology", "dgx1", "--size", "1MB", "--chunks", "200", "--time-limit", "6",
        "--quiet", "--report", str(report), "--out", str(out),
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["solve_seconds"] < 7.5
    assert data["verified"] is True
    assert data["makespan_slots"] >= data["lower_bound_slots"]
    inst, sched = load_schedule(out)
    assert verify(inst, sched).makespan_slots == data["makespan_slots"]


# --------------------------------------------------------------------------- the estimates
def test_memory_budget_option_and_env(tmp_path):
    """ring-64 AllGather, C=4: 64*4*63 = 16128 deliveries, ~32 MB estimated: a budget of 1 MB
    refuses it, the default budget accepts it."""
    argv = ["bounds", "--topology", "ring", "--topo-arg", "n=64", "--chunks", "4", "--no-upper"]
    proc = cli("--memory-budget", "1MB", *argv)
    assert proc.returncode == 2
    assert "memory budget of 0.001 GB" in one_error_line(proc)
    assert cli(*argv).returncode == 0
    proc = cli("--memory-budget", "lots", *argv)
    assert proc.returncode == 2 and "--memory-budget" in one_error_line(proc)


def test_budget_parsing_and_context():
    assert parse_budget("8GB") == 8 * 10**9
    with pytest.raises(ValidationError, match="at least 1MB"):
        parse_budget("10KB")
    before = memory_budget()
    with budget("2GB"):
        assert memory_budget() == 2 * 10**9
    assert memory_budget() == before


def test_collective_estimate_counts_table_entries():
    """AllGather on N GPUs with C chunks: N*C pre entries and N*C*N post entries."""
    est = estimate_collective("allgather", 8, 3)
    assert est.bytes == pytest.approx(8 * 3 * 9 * 120)
    topo = resolve_topology("ring", n=4)
    with budget(10**6), pytest.raises(ResourceLimitError, match="--chunks 1000"):
        make_collective("allgather", topo, chunks=1000)


def test_horizon_lower_bound_is_below_true_optima():
    """The estimate's horizon is a valid lower bound: on the line 0-1-2 broadcast of 2 chunks
    (optimum 3, derived in tests/test_cli.py's fixture) it is 2 (node 2 needs 2 chunks over
    one in-link of l=1); on the 50 vs 5e-7 GB/s pair it is the 1e8-slot hop."""
    from ccplan.instances.builtin import line

    topo = line(n=3)
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=2, root=0), "1MB")
    assert horizon_lower_bound(inst) == 2
    assert solve(inst, "heuristic", SolveOptions(time_limit=2)).makespan_slots == 3
    slow = _two_gpus("slow", 50.0, 5e-7)
    inst = make_instance(slow, make_collective("allgather", slow), "1MB")
    assert horizon_lower_bound(inst) == 10**8
    with pytest.raises(ResourceLimitError, match="occupies 1e\\+08 slots"):
        estimate_solve(inst).check()


@pytest.mark.parametrize(
    ("kind", "args"),
    [("allgather", {}), ("broadcast", {"chunks": 3, "root": 2}), ("gather", {"root": 5}),
     ("alltoall", {}), ("scatter", {"root": 1})],
)
def test_deliveries_per_node_equal_the_demands(kind, args):
    """The per-node delivery counts the estimates use (from the pre/postcondition tables) are
    the counts of ``Collective.demands``, which they no longer build (1.45 GB at 4,096 GPUs)."""
    from collections import Counter

    from ccplan.instances.estimate import _deliveries_per_node

    topo = resolve_topology("ndv2", chassis=2)
    inst = make_instance(topo, make_collective(kind, topo, **args), "1MB")
    got = _deliveries_per_node(inst)
    expect = Counter(v for _c, v in inst.collective.demands)
    assert {v: int(k) for v, k in enumerate(got) if k} == dict(expect)
    assert sum(expect.values()) > 0


def test_deadline():
    with pytest.raises(OutOfTimeError):
        Deadline.after(0).check()
    Deadline.after(None).check()
    assert Deadline.after(None).remaining() == float("inf")


@pytest.mark.parametrize("method", ["heuristic", "mteg", "layered", "ring", "recursive-doubling"])
def test_every_heuristic_engine_checks_the_clock(method):
    """A limit that has passed before the first stage completes: the engine stops and says so
    (no schedule, status unknown, the reason in details) instead of finishing anyway; with a
    normal limit the same instance gets a verified schedule at or above the lower bound."""
    topo = resolve_topology("dgx1")
    inst = make_instance(topo, make_collective("allgather", topo, chunks=4), "1MB")
    res = solve(inst, method, SolveOptions(time_limit=1e-6))
    if method == "layered":
        # layered hands over to its shortest-path-tree fallback (ccplan.heuristics.tree_fallback)
        assert res.verified and res.status == "feasible"
        assert "time limit" in str(res.details.get("fallback"))
    else:
        assert res.schedule is None and res.status == "unknown" and not res.verified
        assert "time limit" in str(res.details.get("reason"))
    res = solve(inst, method, SolveOptions(time_limit=10))
    assert res.verified and res.makespan_slots is not None
    assert res.makespan_slots >= res.lower_bound_slots


def test_verify_budget_is_the_column_verifiers_for_a_columnar_file(tmp_path):
    """A ``.npz`` schedule is checked by the column verifier, so ``ccplan verify`` plans for
    its memory, not the replay's (the 64x64 torus file was refused at 13.4 GB under the
    default 4 GB; it verifies in 2.04 GB).

    Torus 8x8 AllGather, C=1: 64 * 63 = 4,032 sends of one slot each. Replay estimate:
    4,032 * (600 + 200) = 3.2 MB; column estimate: 4,032 * (120 + 40) = 0.65 MB; the horizon
    term (64 bytes a slot, a few dozen slots) is negligible. Under a 2 MB budget the ``.npz``
    file verifies, the same schedule as JSON is refused, and the ``.npz`` file with one send
    dropped (a node misses a chunk: the column check fails) is refused before the replay
    that would list the violation; under the default budget that file gives exit 1.
    """
    from ccplan.schedule import Schedule, save_schedule
    from ccplan.schedule.estimate import estimate_schedule
    from ccplan.schedule.verify import estimate_verify

    topo = resolve_topology("torus2d", rows=8, cols=8)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    res = solve(inst, "layered", SolveOptions(seed=0))
    assert res.verified and len(res.schedule) == 4032
    npz, js, bad = tmp_path / "s.npz", tmp_path / "s.json", tmp_path / "bad.npz"
    save_schedule(npz, inst, res.schedule)
    save_schedule(js, inst, res.schedule)
    cols = res.schedule.columns()
    keep = {k: cols[k][:-1] for k in ("slot", "chunk_source", "chunk_index", "src", "dst")}
    save_schedule(bad, inst, Schedule.from_columns(**keep, method="layered"))

    inst2, loaded = load_schedule(npz, check_budget=False)
    assert 3.2e6 <= estimate_schedule(inst2, loaded).bytes <= 3.3e6
    assert 0.64e6 <= estimate_verify(inst2, loaded).bytes <= 0.7e6
    inst3, from_json = load_schedule(js, check_budget=False)
    assert estimate_verify(inst3, from_json).bytes == estimate_schedule(inst3, from_json).bytes

    ok = cli("--memory-budget", "2MB", "verify", str(npz))
    assert ok.returncode == 0, ok.stderr
    assert "OK        makespan" in ok.stdout
    refused = cli("--memory-budget", "2MB", "verify", str(js))
    assert refused.returncode == 2
    assert "4032 sends" in one_error_line(refused)
    broken = cli("--memory-budget", "2MB", "verify", str(bad))
    assert broken.returncode == 2
    assert "the column check failed" in one_error_line(broken)
    assert broken.stdout == ""
    listed = cli("verify", str(bad))
    assert listed.returncode == 1
    assert "FAILED" in listed.stdout
