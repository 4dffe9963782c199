"""Signal handling: the running command's clock and interrupt state, and the watcher that
notices Ctrl-C/SIGTERM while an engine is inside native code (:func:`_watch_signals`).
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from ccplan.cli.output import EXIT_INTERRUPTED

log = logging.getLogger("ccplan.cli")


_clock: dict[str, float] = {"start": time.perf_counter()}


STOP_GRACE_SECONDS = 15.0
"""After Ctrl-C/SIGTERM, how long an engine stuck in native code may take to return before
the process ends anyway (exit 130, nothing saved)."""

_stopping: dict[str, Any] = {"handled": False, "generation": 0, "rescue": None}
"""``handled``: the command took the interrupt path; ``generation`` changes when a ``main()``
call ends, so a watcher of an earlier call never ends a later one; ``rescue``: set by a
command, called by the watcher before it ends a process whose engine did not stop in time,
returns what was saved (``solve``: writes the best verified schedule; ``sweep``: the rows)."""

_STOP_LOCK = threading.Lock()
"""Held by whoever ends the command after an interrupt: the command's own interrupt path or
the watcher's rescue, never both."""


def _take_interrupt() -> None:
    """The command takes the interrupt path (the watcher then leaves it alone); waits while
    the watcher is already saving, which ends the process."""
    with _STOP_LOCK:
        _stopping["handled"] = True
    # After an interrupt the user sees one line: a library's warning about the work cut short
    # (e.g. matplotlib's, from a figure being drawn) is not news.
    warnings.simplefilter("ignore")


def _watch_signals() -> Callable[[], None]:
    """Notice Ctrl-C/SIGTERM at once, even while the main thread is inside native code.

    Python runs its signal handlers only when the main thread returns to the interpreter; a
    solver in C++ may not for the rest of its time limit. The C-level handler also writes the
    signal number to a wakeup pipe, which a helper thread reads: it asks registered engines to
    stop (:func:`ccplan.limits.on_stop`) and, if the command has not taken the interrupt path
    within :data:`STOP_GRACE_SECONDS`, ends the process with the one promised line.
    Returns the function that undoes the setup.
    """
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # pragma: no cover - not the main interpreter
        os.close(read_fd)
        os.close(write_fd)
        return lambda: None
    wanted = {int(signal.SIGINT), int(signal.SIGTERM)}
    generation = _stopping["generation"]

    def current() -> bool:
        return _stopping["generation"] == generation and not _stopping["handled"]

    def grace() -> None:
        from ccplan import limits

        limits.request_stop()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while time.monotonic() < deadline:
            if not current():
                return
            time.sleep(0.1)
        with _STOP_LOCK:  # the command cannot take the interrupt path meanwhile
            if not current():
                return
            _stopping["handled"] = True
            text = "nothing saved"
            rescue = _stopping.get("rescue")
            if callable(rescue):
                try:
                    text = str(rescue())
                except Exception:  # the promised line all the same
                    log.debug("saving on interrupt failed", exc_info=True)
            late = f"the engine did not stop within {STOP_GRACE_SECONDS:g} s"
            os.write(2, f"ccplan: interrupted; {text} ({late})\n".encode())
            os._exit(EXIT_INTERRUPTED)

    def watch() -> None:
        # Keep draining the pipe until undo() closes its write end, so that later signals
        # never find it full or closed.
        started = False
        try:
            while True:
                data = os.read(read_fd, 64)
                if not data:
                    return
                if wanted & set(data) and not started:
                    started = True
                    threading.Thread(target=grace, name="ccplan-stop-grace", daemon=True).start()
        except OSError:
            return
        finally:
            os.close(read_fd)  # only this thread reads it, so only it closes it

    threading.Thread(target=watch, name="ccplan-signal-watch", daemon=True).start()

    def undo() -> None:
        _stopping["generation"] += 1
        signal.set_wakeup_fd(old_fd)
        os.close(write_fd)  # the watcher's read returns b"" and it ends

    return undo


def threading_main() -> bool:
    """Whether this runs in the main thread (only it may install signal handlers)."""
    import threading

    return threading.current_thread() is threading.main_thread()
