"""Writing output files all or none.

A command that writes several files (schedule, report, solver log, progress CSV) stages each
one under a temporary name in the target's own directory and renames them into place only
when every one of them is complete. A failure (a full disk, Ctrl-C, a bug) before that point
leaves the targets as they were and no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from ccplan.errors import ValidationError


def check_target(path: Path, flag: str) -> None:
    """Raise :class:`ValidationError` unless ``path`` can be written as a regular file.

    Parameters
    ----------
    path : Path
    flag : str
        The option that named the file (e.g. ``"--out"``), for the message.
    """
    if path.is_dir():
        raise ValidationError(f"{flag} {str(path)!r} is a directory; give a file name")
    parent = path.parent
    if not parent.exists():
        raise ValidationError(f"cannot write {str(path)!r}: directory {str(parent)!r} does not exist")
    if not parent.is_dir():
        raise ValidationError(f"cannot write {str(path)!r}: {str(parent)!r} is not a directory")
    if not os.access(parent, os.W_OK):
        raise ValidationError(f"cannot write {str(path)!r}: directory {str(parent)!r} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValidationError(f"cannot write {str(path)!r}: the file is not writable")


def staging_path(path: Path) -> Path:
    """A temporary name next to ``path`` that keeps its suffix (writers choose a format by it)."""
    return path.parent / f".{path.stem}.ccplan-tmp-{os.getpid()}{path.suffix}"


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """Hold off Ctrl-C while files are renamed into place (delivered right after)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class OutputSet:
    """The files one command writes, staged and committed together.

    Parameters
    ----------
    targets : mapping of str to Path or None
        ``what -> path`` (e.g. ``"schedule" -> out.json``); None entries are not requested.
    flags : mapping of str to str, optional
        ``what -> option name`` for messages (default ``--what``).

    Raises
    ------
    ValidationError
        A target is a directory, its directory is missing or not writable, or two targets
        name the same file.
    """

    def __init__(self, targets: Mapping[str, Path | None], flags: Mapping[str, str] | None = None) -> None:
        self.targets: dict[str, Path] = {k: Path(v) for k, v in targets.items() if v is not None}
        flags = dict(flags or {})
        seen: dict[Path, str] = {}
        for what, path in self.targets.items():
            flag = flags.get(what, f"--{what}")
            check_target(path, flag)
            key = path.resolve()
            if key in seen:
                raise ValidationError(f"{flag} {str(path)!r} names the same file as {seen[key]}")
            seen[key] = flag
        self.staged: dict[str, Path] = {what: staging_path(p) for what, p in self.targets.items()}

    def path(self, what: str) -> Path | None:
        """The staging path to write ``what`` to (None when not requested)."""
        return self.staged.get(what)

    def write_text(self, what: str, text: str) -> None:
        """Stage ``text`` as the content of ``what`` (ignored when not requested)."""
        staged = self.staged.get(what)
        if staged is not None:
            staged.write_text(text)

    def commit(self) -> list[tuple[str, Path]]:
        """Rename every staged file that was written into place; return ``(what, target)``.

        Requested outputs that nobody wrote (e.g. no solver log from a heuristic) are left
        out of the returned list, so a caller never names a file it did not write.
        """
        done: list[tuple[str, Path]] = []
        with sigint_blocked():
            for what, staged in self.staged.items():
                if staged.exists():
                    staged.replace(self.targets[what])
                    done.append((what, self.targets[what]))
        return done

    def discard(self) -> None:
        """Remove every staged file (after a failure: the targets stay as they were)."""
        for staged in self.staged.values():
            with contextlib.suppress(OSError):
                staged.unlink()


def write_atomic(path: str | Path, text: str) -> None:
    """Write one text file atomically: a staged temporary renamed into place, removed on failure."""
    target = Path(path)
    if target.is_dir():
        raise ValidationError(f"cannot write {str(target)!r}: it is a directory")
    tmp = staging_path(target)
    try:
        tmp.write_text(text)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
