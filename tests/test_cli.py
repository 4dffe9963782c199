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
        (["solve", "--topology", "ring", "--root", "3"], "allgather has no root"),
        (["bounds", "--topology", "ring", "--dests", "1,2"], "only multicast takes destinations"),
        (["bounds", "--topology", "ring", "--size", "0.5"], "at least one byte"),
        (["bounds", "--topology", "ring", "--size", "7"], "chunks of 0.875 bytes"),
        (["bounds", "--topology", "ring", "--tau-rule", "explicit"], "needs --tau-us"),
        (["solve", "--topology", "ring", "--time-limit", "-1"], "argument --time-limit: must be a positive"),
        (["simulate", "x.json", "--reduce-cost", "nan"], "argument --reduce-cost"),
        (["export", "x.json", "--format", "msccl-xml", "--channels", "0", "--out", "x.xml"], "--channels"),
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
    assert main(["solve", "--no-such-flag"]) == 2
    assert "ccplan: error:" in capsys.readouterr().err
    assert main(["--help"]) == 0


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


# --------------------------------------------------------------------------- exit codes and files
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("flag", ["--out", "--report", "--log", "--progress"])
def test_output_pointing_at_a_directory_writes_nothing(capsys, tmp_path, flag):
    """Every output is checked before the work: a directory is one line, exit 2, and no other
    output (nor a temporary file) appears."""
    outdir = tmp_path / "outs"
    outdir.mkdir()
    paths = {"--out": outdir / "s.json", "--report": outdir / "r.json", "--log": outdir / "l.txt",
             "--progress": outdir / "p.csv"}
    paths[flag] = tmp_path  # the directory itself
    argv = ["solve", "--topology", "ring", "--topo-arg", "n=4", "--quiet"]
    for f, p in paths.items():
        argv += [f, str(p)]
    code, _out, err = run(capsys, *argv)
    assert code == 2
    assert err.strip() == f"ccplan: error: {flag} {str(tmp_path)!r} is a directory; give a file name"
    assert list(outdir.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outs"]


def test_a_failing_output_leaves_no_output_at_all(capsys, tmp_path, monkeypatch):
    """The report fails after the schedule was staged: neither file appears, no temporary file
    stays, and the error is one line."""
    import ccplan.cli.solve as solve_cmd

    def broken(outputs, result, data):  # type: ignore[no-untyped-def]
        from ccplan.schedule import save_schedule

        save_schedule(outputs.path("schedule"), result.instance, result.schedule)
        raise OSError(28, "No space left on device", "r.json")

    monkeypatch.setattr(solve_cmd, "_stage_result", broken)
    code, _out, err = run(
        capsys, "solve", "--topology", "ring", "--topo-arg", "n=4", "--quiet",
        "--out", str(tmp_path / "s.json"), "--report", str(tmp_path / "r.json"),
    )
    assert code == 2
    assert err.strip() == "ccplan: error: 'r.json': No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_no_schedule_exits_3_and_names_no_file(capsys, tmp_path):
    """ring-8 AllGather cannot finish in 2 slots (each GPU needs 7 chunks over 2 in-links of
    l=1: at least 4 slots), so the MILP with --horizon 2 is infeasible. A stale --out file is
    left alone and not named; the report (which was written) is."""
    pytest.importorskip("pyomo")
    stale = tmp_path / "s.json"
    stale.write_text("stale")
    rep = tmp_path / "r.json"
    code, out, err = run(
        capsys, "solve", "--topology", "ring", "--method", "milp", "--horizon", "2", "--quiet",
        "--out", str(stale), "--report", str(rep),
    )
    assert code == 3
    assert "found no schedule" in err and "infeasible" in err
    assert stale.read_text() == "stale"
    assert str(stale) not in out and f"-> {rep}" in out
    assert json.loads(rep.read_text())["status"] == "infeasible"


def test_verify_piped_into_head_keeps_the_failing_status(tmp_path):
    """3000 causality violations (every send one slot too early) print ~300 KB, more than a
    pipe holds; closing the pipe after one line must not turn exit 1 into 0."""
    topo = line(n=3)
    c = 3000
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=c, root=0), "1GB")
    sends = [((0, i), 0, 1, i) for i in range(c)] + [((0, i), 1, 2, i) for i in range(c)]
    path = tmp_path / "bad.json"
    save_schedule(path, inst, Schedule.of(sends))
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ccplan.cli", "verify", str(path), "--max-violations", "100000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 1, err
    assert first.startswith("instance")
    assert "Traceback" not in err and "Exception ignored" not in err


LONG_SOLVE = [
    sys.executable, "-m", "ccplan.cli", "solve", "--topology", "amd", "--topo-arg", "chassis=4",
    "--chunks", "2", "--size", "1MB", "--time-limit", "120",
]
"""A heuristic solve that has schedules to save within seconds and keeps searching for much
longer (its gap to the bound stays open), for the signal tests. The size is given (the
default, 1 MB) so that stderr holds no "note: size ... the default" line beside the one the
signal tests expect. 128 chunks in all: from 256 the portfolio builds the tree packing first
(``ccplan.heuristics.search``), about 5 s on AMD x4 before its first schedule, after the 4 s
at which the tests interrupt."""


def test_ctrl_c_saves_the_best_schedule_and_exits_130(tmp_path):
    """SIGINT while the heuristic portfolio runs (:data:`LONG_SOLVE`, AMD 4 chassis AllGather, C=4: its first
    schedules come within seconds, and its gap to the bound stays open, so the rest of the
    portfolio runs towards the 120 s limit; DGX-1 with C=100, used before, is now proven
    optimal in about 2.5 s and exits 0 before the signal): exit 130, one line naming what was
    saved, and the saved schedule verifies."""
    import os
    import signal
    import time

    out = tmp_path / "s.json"
    rep = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*LONG_SOLVE, "--out", str(out), "--report", str(rep)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("solving ")
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _stdout, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [f"ccplan: interrupted; saved schedule -> {out}, report -> {rep}"], err
    inst, sched = load_schedule(out)
    from ccplan.schedule import verify

    report = verify(inst, sched)
    assert report.ok
    assert json.loads(rep.read_text())["makespan_slots"] == report.makespan_slots


def test_unexpected_error_is_one_line_exit_4(capsys, monkeypatch):
    import ccplan.cli.parser as cmds

    def boom(args):  # type: ignore[no-untyped-def]
        raise RuntimeError("something broke\nsecond line")

    monkeypatch.setitem(cmds.COMMANDS, "methods", cmds.Command("x", cmds._add_nothing, boom))
    code, _out, err = run(capsys, "methods")
    assert code == 4
    assert err.strip() == (
        "ccplan: internal error: RuntimeError: something broke (rerun with -v for the traceback)"
    )


def test_result_table_prints_integers_as_integers(capsys):
    """ring-8 AllGather: the bound and makespan are slot counts and print without exponent."""
    code, out, _ = run(capsys, "solve", "--topology", "ring", "--method", "ring", "--quiet")
    assert code == 0
    row = next(ln for ln in out.splitlines() if ln.startswith("lower bound"))
    assert "e+" not in row


def test_sigterm_takes_the_ctrl_c_path(tmp_path):
    """SIGTERM (e.g. from a job scheduler) during a long heuristic solve (:data:`LONG_SOLVE`):
    exit 130 with the one line, like Ctrl-C, instead of dying without a word."""
    import os
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [*LONG_SOLVE, "--out", str(tmp_path / "s.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("solving ")
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    _stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("ccplan: interrupted; saved schedule -> ")


BLOCKING_ENGINE = """
import hashlib
import sys
from pathlib import Path
import ccplan.cli
import ccplan.cli.signals
from ccplan.limits import on_stop
from ccplan.contract import register

flag = Path(sys.argv[1])

@register("blocker")
def blocker(instance, options):
    on_stop(lambda: flag.write_text("stop requested"))
    print("engine started", file=sys.stderr, flush=True)
    # A native call that releases the GIL and never returns to the interpreter, like a
    # solver's search: Python's own Ctrl-C handler cannot run until it ends (minutes).
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**9)

ccplan.cli.signals.STOP_GRACE_SECONDS = 1.0
sys.exit(ccplan.cli.main(["solve", "--topology", "ring", "--method", "blocker", "--quiet"]))
"""


def test_ctrl_c_ends_an_engine_stuck_in_native_code(tmp_path):
    """An engine inside a long native call (a C loop that never returns to the interpreter):
    Ctrl-C reaches its stop callback at once, and when it still does not return within the
    grace period the process ends with exit 130 and the one line, instead of ignoring Ctrl-C."""
    import os
    import signal
    import time

    flag = tmp_path / "stop.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", BLOCKING_ENGINE, str(flag)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().strip() == "engine started"
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 130
    assert err.strip() == "ccplan: interrupted; nothing saved (the engine did not stop within 1 s)"
    assert flag.read_text() == "stop requested"


@pytest.mark.parametrize("quiet", [False, True])
def test_solve_shows_layered_progress_notes_unless_quiet(capsys, monkeypatch, quiet):
    """``layered`` notes its progress on its log every ``_PROGRESS_EVERY`` seconds; ``solve``
    shows these notes on stderr (set to 0 here so that a 6x6 torus writes some), and
    ``--quiet`` hides them."""
    import logging

    from ccplan.heuristics.layered import construct

    monkeypatch.setattr(construct, "_PROGRESS_EVERY", 0.0)
    logger = logging.getLogger("ccplan.heuristics.layered")
    handlers, propagate, level = list(logger.handlers), logger.propagate, logger.level
    argv = ["solve", "--topology", "torus2d", "--topo-arg", "rows=6", "--topo-arg", "cols=6",
            "--size", "1GB", "--method", "layered"] + (["--quiet"] if quiet else [])

    def notes() -> list[str]:
        err = capsys.readouterr().err
        return [line for line in err.splitlines() if line.startswith("  [progress] layered: layer")]

    try:
        assert main(argv) == 0
        first = notes()
        assert main(argv) == 0  # a second run in the same process shows each note once
        second = notes()
    finally:
        logger.handlers[:] = handlers
        logger.propagate, logger.level = propagate, level
    assert (len(first) == 0) if quiet else (len(first) >= 2), first
    assert len(second) == len(first)
