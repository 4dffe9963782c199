"""Running cells: in local worker processes tied to the sweep process, or on a Dask cluster
(with a bounded wait for its scheduler); results are yielded as cells finish.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ccplan.errors import CCPlanError, ValidationError
from ccplan.sweep.worker import run_cell

CellFunction = Callable[[Mapping[str, Any]], dict[str, Any]]
"""A module-level (picklable) function that runs one payload; :func:`run_cell` for sweeps."""


def _tie_to_parent(parent: int) -> None:
    """Worker initializer: die with the sweep process, even when it is killed with SIGKILL.

    Linux delivers SIGKILL to the worker when its parent dies (``PR_SET_PDEATHSIG``); a
    daemon thread that notices the parent change covers other systems and the window
    before the call.
    """
    import signal
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    if os.getppid() != parent:
        os._exit(1)
    # Ctrl-C reaches the whole process group; the sweep process decides what happens (it
    # stops the workers), so a worker prints no traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=watch, name="ccplan-parent-watch", daemon=True).start()


def _local_results(
    payloads: list[dict[str, Any]], processes: int, cell: CellFunction = run_cell
) -> Iterator[dict[str, Any]]:
    if processes == 1:
        # In-process: no pickling, simplest to debug; a crash loses only the running cell.
        for p in payloads:
            yield cell(p)
        return
    pool = ProcessPoolExecutor(max_workers=processes, initializer=_tie_to_parent, initargs=(os.getpid(),))
    with pool:
        futures: dict[Future[dict[str, Any]], dict[str, Any]] = {
            pool.submit(cell, p): p for p in payloads
        }
        try:
            for fut in as_completed(futures):
                try:
                    yield fut.result()
                except BrokenProcessPool:
                    running = [p["key"] for f, p in futures.items() if not f.done() or f is fut]
                    raise CCPlanError(
                        "a sweep worker process died (out of memory or killed) while cells were running; "
                        f"finished cells are saved, rerun to resume (first unfinished: {running[0]})"
                    ) from None
        except BaseException:
            # Ctrl-C or a failure: running cells are abandoned (finished rows are on disk);
            # waiting for them could take a whole cell time limit.
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            raise
        finally:
            for f in futures:
                f.cancel()


DASK_CONNECT_TIMEOUT = 30.0
"""Seconds ``--dask ADDRESS`` waits for the scheduler to answer (environment variable
:data:`DASK_TIMEOUT_ENV` overrides it); then the command ends with one line and exit 2."""

DASK_TIMEOUT_ENV = "CCPLAN_DASK_TIMEOUT"


def dask_connect_timeout() -> float:
    """The connect timeout in force (:data:`DASK_CONNECT_TIMEOUT` or :data:`DASK_TIMEOUT_ENV`)."""
    raw = os.environ.get(DASK_TIMEOUT_ENV, "").strip()
    if not raw:
        return DASK_CONNECT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValidationError(f"{DASK_TIMEOUT_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def _dask_client(address: str) -> Any:
    """A connected ``distributed.Client``, or :class:`CCPlanError` after the connect timeout.

    ``Client(address, timeout=...)`` does not end when the address accepts TCP and never
    answers (a wrong port, a service that is not a scheduler): it waits forever. So the
    connection is made in a helper thread, and the caller waits for it only so long (a late
    connection in the abandoned daemon thread ends with the process).
    """
    import threading

    from distributed import Client

    timeout = dask_connect_timeout()
    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = Client(address, timeout=timeout)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    helper = threading.Thread(target=connect, name="ccplan-dask-connect", daemon=True)
    helper.start()
    helper.join(timeout + 1.0)
    if "client" in box:
        return box["client"]
    if "error" in box:
        exc = box["error"]
        text = str(exc).splitlines()[0] if str(exc) else ""
        raise CCPlanError(f"--dask {address}: cannot connect to the scheduler ({type(exc).__name__}: {text})")
    raise CCPlanError(
        f"--dask {address}: the scheduler did not answer within {timeout:g} s "
        f"(is it a Dask scheduler? {DASK_TIMEOUT_ENV} sets a longer wait)"
    )


def _dask_results(
    payloads: list[dict[str, Any]], address: str, cell: CellFunction = run_cell
) -> Iterator[dict[str, Any]]:
    try:
        from distributed import as_completed as dask_as_completed
    except ImportError:
        raise CCPlanError("--dask needs the 'distributed' package: pip install 'ccplan[dask]'") from None
    client = _dask_client(address)
    try:
        futures = [
            client.submit(
                cell, p, key=f"ccplan-cell-{hashlib.sha1(p['key'].encode()).hexdigest()}", pure=False
            )
            for p in payloads
        ]
        for fut in dask_as_completed(futures):
            yield fut.result()
    finally:
        client.close()
