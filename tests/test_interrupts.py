"""Ctrl-C and SIGTERM at any moment: one line on stderr, exit 130, what was saved is written
and named, no temporary file left behind.

Every test runs the command line in a subprocess and signals it at a moment it can observe
(a marker the child writes, a line it prints), with bounded waits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ccplan.schedule import load_schedule, verify

ROOT = Path(__file__).resolve().parents[1]

# A sitecustomize that makes one import slow and says when it starts: the signal then
# arrives while that module is being imported.
SLOW_IMPORT = """
import os, sys, time
_target = os.environ.get("CCPLAN_TEST_SLOW_IMPORT")
_mark = os.environ.get("CCPLAN_TEST_MARK")

class _Slow:
    def find_spec(self, name, path=None, target=None):
        if name == _target:
            open(_mark, "w").close()
            time.sleep(20)
        return None

if _target:
    sys.meta_path.insert(0, _Slow())
"""


def _wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, f"{path.name} never appeared"
        time.sleep(0.02)


def _finish(proc: subprocess.Popen[str], seconds: float = 40.0) -> tuple[int, str]:
    try:
        _out, err = proc.communicate(timeout=seconds)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def _lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.strip()]


@pytest.mark.parametrize(
    ("argv", "module", "sig"),
    [
        # the console script: `from ccplan.cli import main; main()`; main imports the registry
        (["-c", "import sys; from ccplan.cli import main; sys.exit(main(['methods']))"],
         "ccplan.contract", signal.SIGINT),
        (["-c", "import sys; from ccplan.cli import main; sys.exit(main(['methods']))"],
         "ccplan.contract", signal.SIGTERM),
        # python -m ccplan, while the command line module itself loads
        (["-m", "ccplan", "methods"], "ccplan.errors", signal.SIGTERM),
        (["-m", "ccplan", "methods"], "ccplan.errors", signal.SIGINT),
    ],
    ids=["entry-sigint", "entry-sigterm", "module-sigterm", "module-sigint"],
)
def test_signal_during_the_imports_is_one_line_and_exit_130(
    tmp_path: Path, argv: list[str], module: str, sig: signal.Signals
) -> None:
    """A signal while ccplan's modules load (the first second of every command on a busy
    machine). Before: SIGTERM ended the process without a word (exit 143, the handler came
    after the imports) and Ctrl-C printed a traceback."""
    (tmp_path / "sitecustomize.py").write_text(SLOW_IMPORT)
    mark = tmp_path / "importing"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "CCPLAN_TEST_SLOW_IMPORT": module,
        "CCPLAN_TEST_MARK": str(mark),
    }
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(mark, proc)
    proc.send_signal(sig)
    code, err = _finish(proc)
    assert code == 130, err
    assert _lines(err) == ["ccplan: interrupted; nothing saved"], err


STUCK_ENGINE = """
import hashlib, sys
from pathlib import Path
import ccplan.cli
import ccplan.cli.signals
from ccplan.limits import note_incumbent
from ccplan.contract import SolveOptions, register
from ccplan.pipeline import get_engine

mark = Path(sys.argv[1])
with_incumbent = sys.argv[2] == "yes"

@register("stuck")
def stuck(instance, options):
    # what milp does: its verified incumbent noted, a solver log being written ...
    if with_incumbent:
        ring = get_engine("ring")(instance, SolveOptions()).schedule
        note_incumbent(instance, ring, "ring")
    options.log_path.write_text("search log so far\\n")
    mark.write_text("ready")
    # ... and then a native call that does not return to the interpreter for minutes
    # (HiGHS's LP of the flow bound, CP-SAT's presolve)
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**9)

ccplan.cli.signals.STOP_GRACE_SECONDS = 1.0
sys.exit(ccplan.cli.main(["solve", "--topology", "ring", "--method", "stuck", "--quiet",
                          "--out", sys.argv[3], "--log", sys.argv[4]]))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupt_while_the_engine_is_stuck_saves_its_verified_incumbent(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Ctrl-C/SIGTERM while ``milp``-like engine sits in native code after a verified
    incumbent: the watcher writes that incumbent (it verifies) and the log, says so, and
    leaves no staged file. Before: "nothing saved", and the staged log stayed behind."""
    mark, out, log = tmp_path / "ready", tmp_path / "s.json", tmp_path / "solver.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", STUCK_ENGINE, str(mark), "yes", str(out), str(log)],
                            cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(mark, proc)
    proc.send_signal(sig)
    code, err = _finish(proc)
    assert code == 130, err
    assert _lines(err) == [
        f"ccplan: interrupted; saved schedule -> {out}, solver log -> {log} "
        "(the best verified schedule so far) (the engine did not stop within 1 s)"
    ], err
    inst, sched = load_schedule(out)
    assert verify(inst, sched).ok
    assert log.read_text() == "search log so far\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready", "s.json", "solver.log"]


def test_interrupt_while_stuck_without_incumbent_leaves_no_staged_log(tmp_path: Path) -> None:
    """Nothing verified yet: "nothing saved" is true, and the staged solver log is removed
    (before, the watcher's exit skipped the clean-up and left ``.solver.ccplan-tmp-PID.log``)."""
    mark, out, log = tmp_path / "ready", tmp_path / "s.json", tmp_path / "solver.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", STUCK_ENGINE, str(mark), "no", str(out), str(log)],
                            cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(mark, proc)
    proc.send_signal(signal.SIGINT)
    code, err = _finish(proc)
    assert code == 130, err
    assert _lines(err) == ["ccplan: interrupted; nothing saved (the engine did not stop within 1 s)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ready"]


STUCK_SWEEP_MODULE = """
import hashlib, os
from pathlib import Path
from ccplan.contract import register

@register("stuck")
def stuck(instance, options):
    Path(os.environ["CCPLAN_TEST_MARK"]).write_text("ready")
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 10**9)
"""

SWEEP_CONFIG = """
name = "stuck"
collectives = ["allgather"]
sizes = ["1MB"]
chunks = [1]

[[topology]]
name = "ring"
params = {n = 4}

[[method]]
method = "ring"

[[method]]
method = "stuck"

[run]
processes = 1
imports = ["ccplan.heuristics.baselines", "stuckmod"]
"""


def test_ctrl_c_in_a_sweep_reports_the_rows_it_saved(tmp_path: Path) -> None:
    """A sweep whose second cell never returns from native code: Ctrl-C ends it after the
    grace period and the line names the one row on disk (before: "nothing saved")."""
    (tmp_path / "stuckmod.py").write_text(STUCK_SWEEP_MODULE)
    config = tmp_path / "stuck.toml"
    config.write_text(textwrap.dedent(SWEEP_CONFIG))
    table = tmp_path / "out.csv"
    mark = tmp_path / "ready"
    code_text = (
        "import sys; import ccplan.cli as c; import ccplan.cli.signals as s; s.STOP_GRACE_SECONDS = 1.0; "
        f"sys.exit(c.main(['sweep', {str(config)!r}, '--out', {str(table)!r}, '--quiet']))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
           "CCPLAN_TEST_MARK": str(mark)}
    proc = subprocess.Popen([sys.executable, "-c", code_text], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(mark, proc)
    proc.send_signal(signal.SIGINT)
    code, err = _finish(proc)
    assert code == 130, err
    assert _lines(err)[-1] == (
        f"ccplan: interrupted; saved 1 new row(s) -> {table} (rerun to resume) "
        "(the engine did not stop within 1 s)"
    ), err
    rows = table.read_text().splitlines()
    assert len(rows) == 2 and ",ring," in rows[1]  # header and the ring cell


def test_milp_notes_every_verified_incumbent_for_the_watcher() -> None:
    """``milp`` hands its verified incumbents to :func:`ccplan.limits.note_incumbent` (what
    the watcher writes when the engine cannot return in time); the noted schedule is one of
    this instance and verifies."""
    from ccplan.contract import SolveOptions
    from ccplan.instances import make_collective, make_instance
    from ccplan.instances.builtin import resolve_topology
    from ccplan.limits import best_incumbent, clear_incumbent
    from ccplan.pipeline.solve import solve

    clear_incumbent()
    topo = resolve_topology("ring", n=4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    result = solve(inst, "milp", SolveOptions(time_limit=20, workers=1))
    noted = best_incumbent()
    assert noted is not None and noted[0] is inst
    report = verify(inst, noted[1])
    assert report.ok and report.makespan_slots == result.makespan_slots
    clear_incumbent()


def test_ctrl_c_in_milps_warm_start_ends_the_run_with_its_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the warm start's heuristic portfolio runs: the portfolio returns its
    best so far flagged ``interrupted``; ``milp`` must stop there with that schedule
    (``SolveInterrupted`` carrying it, verified) instead of going on to the flow bound and
    the solver until the watcher gives up ("nothing saved")."""
    from ccplan import pipeline as methods
    from ccplan.contract import Outcome, SolveOptions
    from ccplan.errors import SolveInterrupted
    from ccplan.instances import make_collective, make_instance
    from ccplan.instances.builtin import resolve_topology
    from ccplan.pipeline.solve import solve

    ring = methods.get_engine("ring")
    calls: list[str] = []

    def interrupted_portfolio(instance: object, options: SolveOptions) -> Outcome:
        calls.append("heuristic")
        out = ring(instance, options)  # type: ignore[arg-type]
        return Outcome(schedule=out.schedule, status="feasible", details={"interrupted": True})

    real_get = methods.get_engine

    def fake_get(name: str) -> object:
        return interrupted_portfolio if name == "heuristic" else real_get(name)

    import ccplan.model.exact.engine as engine
    import ccplan.model.exact.warmstart as warmstart

    monkeypatch.setattr(warmstart, "sub_engine", fake_get)
    monkeypatch.setattr(engine, "_flow_bound", lambda *a: calls.append("flow"))
    topo = resolve_topology("dgx1")
    inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    with pytest.raises(SolveInterrupted) as info:
        solve(inst, "milp", SolveOptions(time_limit=20, workers=1))
    assert calls == ["heuristic"]
    result = info.value.result
    assert result is not None and result.verified  # type: ignore[attr-defined]


def test_after_an_interrupt_a_library_warning_adds_no_line() -> None:
    """Once a command takes the interrupt path, the user sees its one line only: a warning a
    library raises about the work cut short (matplotlib's, from a figure being drawn) is
    silenced. In a fresh interpreter (pytest records warnings itself, so in-process they would
    never reach stderr either way); without the filter Python prints the warning's two lines."""
    code = (
        "import sys, warnings\n"
        "from ccplan.cli.signals import _take_interrupt\n"
        "_take_interrupt()\n"
        "print('ccplan: interrupted; nothing saved', file=sys.stderr)\n"
        "warnings.warn('FigureCanvasAgg is non-interactive, and thus cannot be shown', UserWarning)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().splitlines() == ["ccplan: interrupted; nothing saved"], done.stderr
