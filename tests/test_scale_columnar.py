"""The columnar (.npz) schedule file: round trip, size, CLI, and bad files named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ccplan.errors import ValidationError
from ccplan.heuristics.layered import layered_schedule
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.schedule import load_schedule, save_schedule, verify
from ccplan.schedule.core import Schedule, Send

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def torus_run():
    """AllGather 1 GB on a 6x6 torus by ``layered``: 36 x 35 = 1,260 sends."""
    topo = bt.torus2d(6, 6)
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    return inst, layered_schedule(inst)


def test_round_trip_is_send_for_send(tmp_path, torus_run):
    inst, sched = torus_run
    assert len(sched) == 36 * 35
    path = tmp_path / "s.npz"
    save_schedule(path, inst, sched)
    inst2, sched2 = load_schedule(path)
    assert sched2.sends == sched.sends and sched2.method == sched.method
    assert inst2.to_dict() == inst.to_dict()
    assert verify(inst2, sched2).ok


def test_reduce_flags_survive(tmp_path):
    """A combining collective keeps its per-send ``reduce`` flags through the file."""
    topo = bt.ring(3)
    inst = make_instance(topo, make_collective("reducescatter", topo), "3MB")
    sched = Schedule((Send(slot=0, chunk=(0, 0), src=0, dst=1, reduce=True),
                      Send(slot=1, chunk=(0, 0), src=1, dst=2)), method="hand")
    path = tmp_path / "r.npz"
    save_schedule(path, inst, sched)
    assert load_schedule(path)[1].sends == sched.sends


def test_smaller_than_json(tmp_path, torus_run):
    """The columnar file is at least 5x smaller than the JSON one for the same sends (the JSON
    spells ``{"chunk":[a,b],"src":u,"dst":v,"slot":t}`` per send, ~45 bytes; the columns are
    compressed integers)."""
    inst, sched = torus_run
    save_schedule(tmp_path / "s.json", inst, sched)
    save_schedule(tmp_path / "s.npz", inst, sched)
    sends_json = (tmp_path / "s.json").stat().st_size - len(json.dumps(inst.to_dict()))
    assert (tmp_path / "s.npz").stat().st_size * 5 < sends_json


def test_columns_are_written_narrow_and_read_back_exact(tmp_path):
    """Each integer column is stored in the narrowest unsigned type holding its largest value
    (numpy's ``min_scalar_type``): here node ids < 256 -> uint8, slots up to 70,000 -> uint32,
    chunk index 300 -> uint16; reading widens them again, send for send."""
    topo = bt.ring(3)
    inst = make_instance(topo, make_collective("allgather", topo), "3MB")
    sends = (
        Send(slot=0, chunk=(0, 0), src=0, dst=1),
        Send(slot=70_000, chunk=(2, 300), src=2, dst=0),
    )
    sched = Schedule.from_columns(
        slot=np.array([s.slot for s in sends]),
        chunk_source=np.array([s.chunk[0] for s in sends]),
        chunk_index=np.array([s.chunk[1] for s in sends]),
        src=np.array([s.src for s in sends]),
        dst=np.array([s.dst for s in sends]),
        method="hand",
    )
    path = tmp_path / "n.npz"
    save_schedule(path, inst, sched)
    with np.load(path) as data:
        kinds = {k: data[k].dtype for k in ("slot", "chunk_source", "chunk_index", "src", "dst", "reduce")}
    assert kinds == {
        "slot": np.uint32,
        "chunk_source": np.uint8,
        "chunk_index": np.uint16,
        "src": np.uint8,
        "dst": np.uint8,
        "reduce": np.bool_,
    }
    back = load_schedule(path)[1]
    assert back.sends == sends
    assert all(col.dtype == np.int64 for name, col in back.columns().items() if name != "reduce")


def _write(path: Path, header: object, **cols: np.ndarray) -> None:
    with path.open("wb") as fh:
        np.savez(fh, header=np.array(json.dumps(header)), **cols)


def test_bad_files_are_named(tmp_path, torus_run):
    inst, sched = torus_run
    good = tmp_path / "g.npz"
    save_schedule(good, inst, sched)
    with np.load(good) as data:
        cols = {k: data[k] for k in data.files if k != "header"}
        header = json.loads(str(data["header"]))
    bad = tmp_path / "b.npz"
    _write(bad, {**header, "format": "other/9"}, **cols)
    with pytest.raises(ValidationError, match=r"header\.format"):
        load_schedule(bad)
    _write(bad, header, **{k: v for k, v in cols.items() if k != "dst"})
    with pytest.raises(ValidationError, match="'dst' is missing"):
        load_schedule(bad)
    neg = dict(cols, slot=cols["slot"].astype(np.int64))  # written unsigned: widen to hold -1
    neg["slot"][3] = -1
    _write(bad, header, **neg)
    with pytest.raises(ValidationError, match=r"slot\[3\] must be >= 0"):
        load_schedule(bad)
    _write(bad, header, **dict(cols, reduce=np.ones(len(cols["slot"]), dtype=bool)))
    with pytest.raises(ValidationError, match="not a combining"):
        load_schedule(bad)
    short = dict(cols, src=cols["src"][:-1])
    _write(bad, header, **short)
    with pytest.raises(ValidationError, match="'src' must be one-dimensional"):
        load_schedule(bad)
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValidationError, match=r"not a readable \.npz"):
        load_schedule(bad)


def test_cli_writes_and_verifies_npz(tmp_path):
    """``solve --out x.npz`` writes the columnar file, ``verify x.npz`` accepts it (exit 0)."""
    out = tmp_path / "run.npz"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "ccplan.cli"]
    solved = subprocess.run(
        [*cmd, "solve", "--topology", "dgx1", "--collective", "allgather", "--size", "1MB",
         "--method", "layered", "--quiet", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, env=env, check=False,
    )
    assert solved.returncode == 0, solved.stderr
    with np.load(out) as data:
        assert json.loads(str(data["header"]))["format"] == "ccplan-schedule-columnar/1"
    checked = subprocess.run([*cmd, "verify", str(out)], cwd=ROOT, capture_output=True, text=True,
                             env=env, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
