"""``--dask ADDRESS`` that accepts TCP connections and never answers: the command ends after
the connect timeout with one line and exit 2 (before, ``plan`` and ``sweep`` waited forever).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]

SWEEP = """
name = "silent"
collectives = ["allgather"]
sizes = ["1MB"]
chunks = [1]

[[topology]]
name = "ring"
params = {n = 4}

[[method]]
method = "mteg"
"""


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.parametrize("command", ["sweep", "plan"])
def test_silent_dask_address_times_out_with_one_line(
    tmp_path: Path, silent_server: str, command: str
) -> None:
    """With ``CCPLAN_DASK_TIMEOUT=2`` the command gives up after about 2 s (plus start-up),
    prints one line naming the address, and exits 2."""
    if command == "sweep":
        config = tmp_path / "silent.toml"
        config.write_text(SWEEP)
        argv = ["sweep", str(config), "--out", str(tmp_path / "out.csv"), "--quiet", "--dask", silent_server]
    else:
        argv = ["plan", "--topology", "ring", "--collectives", "allgather", "--sizes", "1MB",
                "--methods", "mteg", "--baselines", "", "--out", str(tmp_path / "plan"), "--quiet",
                "--no-plots", "--dask", silent_server]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CCPLAN_DASK_TIMEOUT": "2"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ccplan", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=90)
    assert time.monotonic() - start < 60
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [
        f"ccplan: error: --dask {silent_server}: the scheduler did not answer within 2 s "
        "(is it a Dask scheduler? CCPLAN_DASK_TIMEOUT sets a longer wait)"
    ], proc.stderr


def test_dask_timeout_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented default, the environment override, and a bad value named."""
    from ccplan.errors import ValidationError
    from ccplan.sweep import DASK_CONNECT_TIMEOUT, dask_connect_timeout

    monkeypatch.delenv("CCPLAN_DASK_TIMEOUT", raising=False)
    assert dask_connect_timeout() == DASK_CONNECT_TIMEOUT == 30.0
    monkeypatch.setenv("CCPLAN_DASK_TIMEOUT", "7.5")
    assert dask_connect_timeout() == 7.5
    monkeypatch.setenv("CCPLAN_DASK_TIMEOUT", "-1")
    with pytest.raises(ValidationError, match="CCPLAN_DASK_TIMEOUT"):
        dask_connect_timeout()
