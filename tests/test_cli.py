"""The CLI: thin commands, clear errors (one line, exit 2, no traceback), nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ccplan.cli import main
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import line
from ccplan.schedule import Schedule, load_schedule, save_schedule


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def line_schedule(tmp_path: Path) -> Path:
    """Broadcast of 2 chunks from GPU 0 on the line 0-1-2 (l = L = 1 at 1 MB).

    Chunk 0 goes 0->1 at slot 0 and 1->2 at slot 1; chunk 1 follows one slot behind
    (0->1 at slot 1, 1->2 at slot 2), so the last arrival is at slot 3: makespan 3.
    """
    topo = line(n=3)
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=2, root=0), "1MB")
    sched = Schedule.of(
        [((0, 0), 0, 1, 0), ((0, 0), 1, 2, 1), ((0, 1), 0, 1, 1), ((0, 1), 1, 2, 2)], method="hand"
    )
    path = tmp_path / "line.json"
    save_schedule(path, inst, sched)
    return path


def test_topologies_lists_paper_and_generic_families(capsys):
    code, out, _ = run(capsys, "topologies")
    assert code == 0
    for name in ("dgx1", "ndv2", "dgx2", "amd", "ring", "torus2d", "star_switch", "hypercube"):
        assert f"\n{name} " in "\n" + out
    code, out, _ = run(capsys, "topologies", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["dgx1"]["links"] == 32  # 16 NVLink pairs, both directions


def test_verify_accepts_a_valid_schedule(capsys, line_schedule):
    code, out, _ = run(capsys, "verify", str(line_schedule))
    assert code == 0
    assert "makespan 3 slots" in out


def test_verify_rejects_a_corrupted_schedule_with_exit_1(capsys, line_schedule, tmp_path):
    """Moving chunk 0's second hop to slot 0 breaks causality: node 1 holds it only from slot 1."""
    data = json.loads(line_schedule.read_text())
    data["sends"][1]["slot"] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    code, out, _ = run(capsys, "verify", str(bad))
    assert code == 1
    assert "causality" in out and "1->2" in out and "slot 0" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["verify", "does-not-exist.json"], "does-not-exist.json"),
        (["bounds", "--topology", "nosuchnet"], "nosuchnet"),
        (["bounds", "--topology", "ring", "--topo-arg", "n=1"], "'n'"),
        (["bounds", "--topology", "ring", "--size", "12XB"], "12XB"),
        (["bounds", "--topology", "ring", "--collective", "allgathr"], "allgathr"),
        (["bounds", "--topology", "ring", "--collective", "broadcast", "--root", "99"], "root 99"),
        (["bounds", "--topology", "ring", "--chunks", "0"], "chunks"),
        (["solve", "--topology", "ring", "--method", "nosuchmethod"], "nosuchmethod"),
        (["solve", "--topology", "ring", "--out", "/nonexistent-dir/x.json"], "nonexistent-dir"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, _out, err = run(capsys, *argv)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("ccplan: error:")
    assert needle in lines[0]
    assert "Traceback" not in err


def test_bad_flag_is_usage_error_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["solve", "--no-such-flag"])
    assert exc.value.code == 2
    assert "ccplan: error:" in capsys.readouterr().err


def test_console_script_runs_as_module():
    """`python -m ccplan.cli --help` works in a fresh interpreter (the installed entry point's target)."""
    proc = subprocess.run(
        [sys.executable, "-m", "ccplan.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    assert "solve" in proc.stdout and "verify" in proc.stdout


def test_solve_writes_schedule_and_report_that_verify(capsys, tmp_path):
    """The default method on a small ring: the files exist, the schedule re-verifies, and the
    report's makespan is at least its own lower bound."""
    out = tmp_path / "s.json"
    rep = tmp_path / "r.json"
    code, stdout, _ = run(
        capsys, "solve", "--topology", "ring", "--topo-arg", "n=4", "--size", "1MB", "--chunks", "2",
        "--out", str(out), "--report", str(rep), "--quiet",
    )
    assert code == 0, stdout
    report = json.loads(rep.read_text())
    assert report["verified"] is True
    assert report["makespan_slots"] >= report["lower_bound_slots"]
    for key in ("method", "status", "makespan_slots", "lower_bound_slots", "tau_us", "makespan_us",
                "algbw_GBps", "solve_seconds", "verified"):
        assert key in report
    inst, _sched = load_schedule(out)
    assert inst.collective.kind == "allgather"
    code, stdout, _ = run(capsys, "verify", str(out))
    assert code == 0
    assert f"makespan {report['makespan_slots']} slots" in stdout


def test_bounds_prints_the_cut_bound(capsys):
    """Unidirectional ring of 4, 1 chunk each, 1 MB: node v must receive 3 chunks on its single
    in-link (l = L = 1), so D >= 3; the cut bound reports at least that."""
    code, out, _ = run(
        capsys, "bounds", "--topology", "ring", "--topo-arg", "n=4", "--topo-arg", "bidirectional=false",
        "--no-upper", "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["best_slots"] >= 3


def test_dump_model_is_written_even_when_no_solve_is_needed(capsys, tmp_path):
    """On DGX1 at 1 MB the heuristic meets the lower bound, so CP-SAT never runs; the LP file of
    the model over H (the heuristic's makespan) must still be written, with the paper's
    objective and named constraints."""
    lp = tmp_path / "m.lp"
    argv = ["solve", "--topology", "dgx1", "--method", "milp", "--dump-model", str(lp), "--quiet"]
    code, out, _ = run(capsys, *argv)
    assert code == 0, out
    text = lp.read_text()
    assert "obj_1" in text and "c6_buffer" in text and "c7_capacity" in text
