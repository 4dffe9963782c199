"""A full disk (``OSError(ENOSPC)`` from a write) in ``plan`` and the other writers: one line,
exit 2, and no temporary file left behind."""

from __future__ import annotations

import errno
import pathlib
from pathlib import Path

import pytest

from ccplan import cli


def _full_disk_on(monkeypatch: pytest.MonkeyPatch, hit: str) -> None:
    """``Path.write_text`` writes half of the text, then fails with ENOSPC, for every file
    whose name contains ``hit`` (the staged name keeps the target's stem and suffix); a file
    opened for writing with ``Path.open`` fails at its second write."""
    real = pathlib.Path.write_text

    def write_text(self: Path, data: str, *args: object, **kwargs: object) -> int:
        if hit in self.name:
            real(self, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, data, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    real_open = pathlib.Path.open

    class _Full:
        """A text file that takes a first write, then fails the next with ENOSPC (a stream
        writer, e.g. the MSCCL XML, dies half-written)."""

        def __init__(self, fh: object, name: str) -> None:
            self._fh, self._name, self._writes = fh, name, 0

        def write(self, data: str) -> int:
            self._writes += 1
            if self._writes > 1:
                raise OSError(errno.ENOSPC, "No space left on device", self._name)
            return self._fh.write(data)  # type: ignore[attr-defined,no-any-return]

        def __enter__(self) -> _Full:
            return self

        def __exit__(self, *exc: object) -> None:
            self._fh.close()  # type: ignore[attr-defined]

        def __getattr__(self, name: str) -> object:
            return getattr(self._fh, name)

    def open_(self: Path, mode: str = "r", *args: object, **kwargs: object) -> object:
        fh = real_open(self, mode, *args, **kwargs)  # type: ignore[call-overload]
        if hit in self.name and "w" in mode:
            return _Full(fh, str(self))
        return fh

    monkeypatch.setattr(pathlib.Path, "open", open_)


def _leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if "tmp" in p.name)


@pytest.mark.parametrize("hit", [".xml", "report", "plan"])
def test_plan_on_a_full_disk_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], hit: str
) -> None:
    """The XML export, the report and plan.json each fail half-written: exit 2, one line
    naming the file, and no ``*.tmp`` beside the outputs (before: ``allgather_1MB.xml.tmp``,
    ``report.md.tmp``, ``plan.json.tmp`` stayed)."""
    out = tmp_path / "plan"
    _full_disk_on(monkeypatch, hit)
    code = cli.main([
        "plan", "--topology", "ring", "--topo-arg", "n=4", "--collectives", "allgather",
        "--sizes", "1MB", "--methods", "mteg", "--baselines", "", "--out", str(out),
        "--no-plots", "--quiet",
    ])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("ccplan: error: ") and "No space left" in lines[0]
    assert _leftovers(out) == []


def test_solve_outputs_on_a_full_disk_leave_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``solve --out --report``: the report fails half-written; neither target appears and
    no staged file stays (all or none, :mod:`ccplan.atomic`)."""
    _full_disk_on(monkeypatch, "r")
    code = cli.main([
        "solve", "--topology", "ring", "--topo-arg", "n=4", "--method", "ring", "--quiet",
        "--out", str(tmp_path / "s.json"), "--report", str(tmp_path / "r.json"),
    ])
    err = capsys.readouterr().err
    assert code == 2, err
    assert next(ln for ln in err.splitlines() if ln.strip()).endswith("No space left on device")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
