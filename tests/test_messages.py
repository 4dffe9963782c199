"""Bad input is refused up front: one short line on stderr naming the field or file, exit 2.

The table below holds one row per class of bad input and several members of each class; every
row runs through the CLI in-process. The API tests check that the public functions name a
wrong argument instead of failing deep inside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ccplan
from ccplan.cli import main
from ccplan.errors import ArgumentError, CCPlanError, ValidationError
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import line, ring
from ccplan.parsing import MAX_INDEX
from ccplan.schedule import Schedule, save_schedule

ROOT = Path(__file__).resolve().parents[1]
BIG = "9" * 5000  # beyond Python's 4,300-digit int conversion limit
I63 = str(2**63)


def _schedule_text(tmp: Path) -> str:
    """Broadcast of 2 chunks from GPU 0 on the line 0-1-2, valid (makespan 3, as test_cli's)."""
    topo = line(n=3)
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=2, root=0), "1MB")
    sched = Schedule.of(
        [((0, 0), 0, 1, 0), ((0, 0), 1, 2, 1), ((0, 1), 0, 1, 1), ((0, 1), 1, 2, 2)], method="hand"
    )
    save_schedule(tmp / "ok.json", inst, sched)
    save_schedule(tmp / "ok.npz", inst, sched)
    return (tmp / "ok.json").read_text()


def _edit(tmp: Path, name: str, old: str, new: str) -> list[str]:
    text = _schedule_text(tmp)
    assert old in text
    (tmp / name).write_text(text.replace(old, new, 1))
    return ["verify", str(tmp / name)]


def _raw(tmp: Path, name: str, data: bytes) -> list[str]:
    (tmp / name).write_bytes(data)
    return ["verify", str(tmp / name)]


def _npz(tmp: Path, name: str, **columns: object) -> list[str]:
    _schedule_text(tmp)
    with np.load(tmp / "ok.npz") as data:
        arrays = {k: data[k] for k in data.files}
    arrays.update(columns)
    np.savez(tmp / name, **arrays)  # type: ignore[arg-type]
    return ["verify", str(tmp / name)]


SWEEP = """name = "t"
collectives = COLL
sizes = ["1MB"]
chunks = [1]
[instance]
INST
[[topology]]
name = "ring"
params = {n = 4}
[[method]]
method = "ring"
METH
[run]
processes = 1
imports = ["ccplan.heuristics.baselines"]
"""


def _sweep(tmp: Path, coll: str = '["allgather"]', inst: str = "", meth: str = "") -> list[str]:
    path = tmp / "bad.toml"
    path.write_text(SWEEP.replace("COLL", coll).replace("INST", inst).replace("METH", meth))
    return ["sweep", "--quiet", "--out", str(tmp / "out.csv"), str(path)]


def _plan(tmp: Path, *flags: str) -> list[str]:
    return ["plan", "--topology", "ring", "--topo-arg", "n=4", "--out", str(tmp / "plan"), *flags]


def _bounds(*flags: str) -> list[str]:
    return ["bounds", "--no-upper", "--topology", "ring", "--topo-arg", "n=4", *flags]


# (class, argv maker, text the one line must contain)
CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    # numbers of hundreds or thousands of digits in a file
    ("digits", lambda t: _edit(t, "digits-slot", '"slot":2', f'"slot":{BIG}'), "send.slot"),
    ("digits", lambda t: _edit(t, "digits-bw", '"bandwidth_GBps":50.0', f'"bandwidth_GBps":{BIG}'), "bandwidth_GBps"),  # noqa: E501
    ("digits", lambda t: _edit(t, "digits-size", '"size_bytes":1000000.0', f'"size_bytes":{"9" * 400}'), "size"),  # noqa: E501
    ("digits", lambda t: _edit(t, "digits-node", '{"id":2,', f'{{"id":{"9" * 300},'), "node.id"),
    ("digits", lambda t: _edit(t, "digits-at", '"alpha_threshold":0.1', f'"alpha_threshold":{"9" * 400}'), "alpha_threshold"),  # noqa: E501
    # 2**63-range ids and slots in a file
    ("int63", lambda t: _edit(t, "i63-slot", '"slot":2', f'"slot":{I63}'), "send.slot"),
    ("int63", lambda t: _edit(t, "i63-cap", '"capacity":1', f'"capacity":{I63}'), "capacity"),
    ("int63", lambda t: _edit(t, "i63-outage", '"outages":[]', f'"outages":[[0,1,{I63}]]'), "outages[0][2]"),
    ("int63", lambda t: _edit(t, "i63-chunk", '"chunk":[0,1]', f'"chunk":[0,{I63}]'), "send.chunk"),
    ("int63", lambda t: _edit(t, "i63-src", '"src":0,"dst":1,"bandwidth', f'"src":{I63},"dst":1,"bandwidth'), "src"),  # noqa: E501
    # documents nested thousands deep
    ("nesting", lambda t: _raw(t, "deep.json", b"[" * 100_000 + b"]" * 100_000), "deep.json"),
    ("nesting", lambda t: _raw(t, "deep70.json", b'{"a":' * 70 + b"1" + b"}" * 70), "deep70.json"),
    ("nesting", lambda t: _sweep(t, meth="extra = {a = " + "[" * 3000 + "]" * 3000 + "}"), "bad.toml"),
    ("nesting", lambda t: _sweep(t, meth="extra = {a = " + "[" * 100 + "]" * 100 + "}"), "bad.toml"),
    # invalid UTF-8 / UTF-16 text
    ("encoding", lambda t: _raw(t, "latin1.json", b'{"format": "caf\xe9"}'), "latin1.json"),
    ("encoding", lambda t: _raw(t, "u16.json", '{"a": 1}'.encode("utf-16-le")), "u16.json"),
    ("encoding", lambda t: _raw(t, "bad16.json", b"\xff\xfe" + b"{\x00\x00\xd8"), "bad16.json"),
    ("encoding", lambda t: ["sweep", _raw(t, "x.toml", b'name = "\xff"')[1]], "x.toml"),
    ("encoding", lambda t: ["sweep", _raw(t, "y.toml", b"\xff\xfe" + b"n\x00\x00\xd8")[1]], "y.toml"),
    # malformed .npz files
    ("npz", lambda t: _npz(t, "obj.npz", slot=np.array([0, 1, None, 2], dtype=object)), "'slot'"),
    ("npz", lambda t: _npz(t, "twod.npz", slot=np.zeros((2, 2), dtype=np.int64)), "'slot'"),
    ("npz", lambda t: _npz(t, "zerod.npz", src=np.array(3)), "'src'"),
    ("npz", lambda t: _npz(t, "float.npz", dst=np.array([1.0, 2.0, 1.0, 2.0])), "'dst'"),
    ("npz", lambda t: _npz(t, "header.npz", header=np.array([[1, 2]])), "header"),
    ("npz", lambda t: _npz(t, "big.npz", slot=np.array([0, 1, 1, 2**63 - 1], dtype=np.uint64)), "slot[3]"),
    ("npz", lambda t: _raw(t, "empty.npz", b""), "empty.npz"),
    # flags with huge or 2**63-range numbers
    ("flags", lambda t: _bounds("--collective", "broadcast", "--root", BIG), "--root"),
    ("flags", lambda t: _bounds("--collective", "broadcast", "--root", I63), "--root"),
    ("flags", lambda t: _bounds("--chunks", I63), "--chunks"),
    ("flags", lambda t: _bounds("--size", BIG), "size"),
    ("flags", lambda t: _bounds("--collective", "multicast", "--dests", f"1,{I63}"), "--dests"),
    ("flags", lambda t: ["solve", "--topology", "ring", "--horizon", I63], "--horizon"),
    ("flags", lambda t: ["solve", "--topology", "ring", "--seed", BIG], "--seed"),
    ("flags", lambda t: ["verify", "x.json", "--max-violations", I63], "--max-violations"),
    ("flags", lambda t: ["bounds", "--topology", "ndv2", "--chassis", I63], "--chassis"),
    # sweep config values of the wrong type or range
    ("sweep", lambda t: _sweep(t, inst='alpha_threshold = "abc"'), "alpha_threshold"),
    ("sweep", lambda t: _sweep(t, inst="alpha_threshold = nan"), "alpha_threshold"),
    ("sweep", lambda t: _sweep(t, inst='switch_model = "teleport"'), "switch_model"),
    ("sweep", lambda t: _sweep(t, coll='[{kind = "broadcast", root = 99}]'), "root 99"),
    ("sweep", lambda t: _sweep(t, coll='"allgather"'), "collectives"),
    ("sweep", lambda t: _sweep(t, meth="time_limit = inf"), "time_limit"),
    ("sweep", lambda t: _sweep(t, meth="workers = 1.5"), "workers"),
    ("sweep", lambda t: _sweep(t, meth='warm_start = "no"'), "warm_start"),
    ("sweep", lambda t: _sweep(t, meth=f"seed = {BIG}"), "bad.toml"),
    # plan flags refused as solve refuses them
    ("plan", lambda t: _plan(t, "--time-limit", "inf"), "--time-limit"),
    ("plan", lambda t: _plan(t, "--collectives", "allgather", "--root", "0"), "root 0"),
    ("plan", lambda t: _plan(t, "--sizes", "1MB,1000KB"), "sizes"),
    ("plan", lambda t: _plan(t, "--collectives", "allgather,allgather"), "collectives"),
    ("plan", lambda t: _plan(t, "--methods", "ring,ring"), "methods"),
    ("plan", lambda t: _plan(t, "--sizes", "1B"), "size 1B"),
    ("plan", lambda t: _plan(t, "--collectives", "multicast"), "multicast"),
]


@pytest.mark.parametrize(
    ("kind", "make", "needle"), CASES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(CASES)]
)
def test_bad_input_is_one_short_line_and_exit_2(capsys, tmp_path, kind, make, needle):
    argv = make(tmp_path)
    capsys.readouterr()
    code = main(argv)
    _, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, err[:500]
    assert len(lines) == 1, lines[:5]
    assert len(lines[0]) < 300
    assert needle in lines[0]
    if kind == "plan":
        assert not (tmp_path / "plan").exists()  # refused before any cell ran


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_a_byte_order_mark_is_read_not_blamed(capsys, tmp_path, encoding):
    """A schedule saved with a BOM (UTF-8, or UTF-16 which needs one) is the same schedule:
    it verifies with the makespan 3 of the hand derivation in ``_schedule_text``."""
    text = _schedule_text(tmp_path)
    (tmp_path / "bom.json").write_bytes(text.encode(encoding))
    assert main(["verify", str(tmp_path / "bom.json")]) == 0
    assert "makespan 3 slots" in capsys.readouterr().out


def test_last_resort_guard_keeps_input_errors_at_exit_2(capsys, monkeypatch):
    """An exception class that only a bad input file raises (here an OverflowError, as a
    reader that forgot a range check would) exits 2 with one line, not 4."""
    from ccplan.cli import parser as cmds

    def boom(args: object) -> int:
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setitem(cmds.COMMANDS, "methods", cmds.Command("x", cmds._add_nothing, boom))
    assert main(["methods"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "out of range" in err[0]


# --------------------------------------------------------------------------- API
@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda t: ccplan.verify(None, None), "instance"),
        (lambda t: ccplan.lower_bound_slots(t), "instance"),
        (lambda t: ccplan.compute_bounds("ring"), "instance"),
        (lambda t: ccplan.make_collective("allgather", "ring"), "topology"),
        (lambda t: ccplan.make_collective("allgather", None), "topology"),
        (lambda t: ccplan.make_instance(t, "allgather", "1MB"), "collective"),
        (lambda t: ccplan.solve("ring", "ring"), "instance"),
        (lambda t: ccplan.simulate(t, []), "instance"),
        (lambda t: ccplan.load_schedule(None), "path"),
    ],
)
def test_api_names_a_wrong_argument(call, argument):
    topo = ring(n=4)
    with pytest.raises(ArgumentError, match=f"argument '{argument}' must be"):
        call(topo)


def test_api_names_a_schedule_given_as_a_list():
    topo = ring(n=4)
    inst = ccplan.make_instance(topo, ccplan.make_collective("allgather", topo), "1MB")
    for call in (ccplan.verify, ccplan.simulate):
        with pytest.raises(ArgumentError, match="'schedule' must be Schedule, got list"):
            call(inst, [])
    with pytest.raises(CCPlanError):  # also a TypeError, for callers that catch that
        ccplan.verify(inst, [])
    with pytest.raises(TypeError):
        ccplan.verify(inst, [])


def test_set_memory_budget_takes_a_float_number_of_bytes():
    from ccplan.limits import memory_budget

    try:
        ccplan.set_memory_budget(1.5e9)
        assert memory_budget() == 1_500_000_000
        for bad in (float("nan"), float("inf"), 5e5):
            with pytest.raises(ValidationError, match="memory budget"):
                ccplan.set_memory_budget(bad)
    finally:
        ccplan.set_memory_budget(None)


def test_bounds_are_documented():
    assert MAX_INDEX == 2**31 - 1
    assert "2**31 - 1" in (ROOT / "ccplan" / "parsing.py").read_text()


# --------------------------------------------------------------------------- simulate
@pytest.mark.parametrize("kind", ["allreduce", "reducescatter"])
def test_simulate_reports_the_slotted_time_of_combining_schedules(capsys, tmp_path, kind):
    """The slotted time is the verifier's makespan times tau (the independent check), and it
    is not 0: every GPU holds its own contribution from slot 0, the reduction only later."""
    topo = ring(n=4)
    inst = make_instance(topo, make_collective(kind, topo), "1MB")
    result = ccplan.solve(inst, "ring", ccplan.SolveOptions(workers=1))
    report = ccplan.verify(inst, result.schedule)
    assert report.ok and report.makespan_slots and report.makespan_slots > 0
    sim = ccplan.simulate(inst, result.schedule)
    assert sim.slotted_us == pytest.approx(report.makespan_us)
    save_schedule(tmp_path / "s.json", inst, result.schedule)
    assert main(["simulate", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert f"slotted     {report.makespan_us:.6g} us" in out


# --------------------------------------------------------------------------- environment
def _env(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@pytest.mark.slow
def test_layered_runs_without_a_writable_numba_cache(tmp_path):
    """A read-only install (numba cannot write beside the module: simulated, since root may
    write anywhere) and a HOME that is no directory: the layered engine still runs."""
    (tmp_path / "file").write_text("")
    script = (
        "import sys, numba.core.caching as c\n"
        "def refuse(self):\n"
        "    raise PermissionError(13, 'read-only', self.get_cache_path())\n"
        "c.InTreeCacheLocator.ensure_cache_path = refuse\n"
        "from ccplan.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = _env(HOME=str(tmp_path / "file" / "home"), XDG_CACHE_HOME=None, NUMBA_CACHE_DIR=None)
    proc = subprocess.run(
        [sys.executable, "-c", script, "solve", "--topology", "torus2d", "--method", "layered", "--quiet"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "verified     True" in proc.stdout


def test_ascii_locale_prints_a_non_ascii_topology_name(tmp_path):
    topo = line(n=3).to_dict()
    topo["name"] = "t\u00f8po-\u00fc"
    path = tmp_path / "uni.json"
    path.write_text(json.dumps(topo, ensure_ascii=False), encoding="utf-8")
    env = _env(LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONIOENCODING=None)
    for argv, code in ((["--no-upper"], 0), (["--collective", "broadcast", "--root", "7"], 2)):
        proc = subprocess.run(
            [sys.executable, "-m", "ccplan", "bounds", "--topology", str(path), *argv],
            cwd=ROOT, env=env, capture_output=True, timeout=120,
        )
        assert proc.returncode == code, proc.stderr
        assert b"t\\xf8po-\\xfc" in proc.stdout + proc.stderr
