"""The streamed MSCCL XML export: same bytes as the in-memory text, all or none on disk.

Schedules come from the engine-independent greedy of ``tests/helpers.py`` (checked by
:func:`ccplan.schedule.verify` first) or the ``heuristic`` engine through ``solve()`` (which
verifies). The written XML is checked by the independent validator of
``ccplan/export/xml_validate/``, which simulates the program against the instance's
postcondition.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import greedy_schedule

from ccplan.errors import ValidationError
from ccplan.export.msccl import export_msccl, rendering, to_msccl_xml, write_msccl_export, write_msccl_xml
from ccplan.export.xml_validate import validate_xml
from ccplan.instances import Instance, make_collective, make_instance
from ccplan.instances.builtin import dgx1, ndv2
from ccplan.schedule import Schedule, save_schedule, verify


def _allgather(topo_fn: object, chunks: int = 1) -> tuple[Instance, Schedule]:
    topo = topo_fn()  # type: ignore[operator]
    inst = make_instance(topo, make_collective("allgather", topo, chunks), "1MB")
    schedule = greedy_schedule(inst)
    assert verify(inst, schedule).ok
    return inst, schedule


def _solved(kind: str, topo_fn: object, chunks: int = 1) -> tuple[Instance, Schedule]:
    from ccplan.contract import SolveOptions
    from ccplan.pipeline.solve import solve

    topo = topo_fn()  # type: ignore[operator]
    inst = make_instance(topo, make_collective(kind, topo, chunks), "1MB")
    res = solve(inst, "heuristic", SolveOptions(time_limit=3))
    assert res.verified and res.schedule is not None
    return inst, res.schedule


@pytest.mark.parametrize(
    "options",
    [{}, {"inplace": False}, {"channels": 2, "instances": 2, "inplace": False}, {"dialect": "legacy"}],
)
def test_streamed_file_is_the_text_and_valid(tmp_path: Path, options: dict[str, object]) -> None:
    """DGX1 AllGather C=2: the streamed file has exactly the bytes of ``to_msccl_xml`` with the
    same options (out-of-place adds the own-shard copies; two instances interleave chunks),
    and the simulation finds every chunk where the postcondition wants it."""
    inst, schedule = _allgather(dgx1, chunks=2)
    out = tmp_path / "ag.xml"
    size = write_msccl_xml(out, inst, schedule, **options)
    text = to_msccl_xml(inst, schedule, **options)  # type: ignore[arg-type]
    assert out.read_bytes() == text.encode("ascii")
    assert size == len(text)
    report = validate_xml(out, expect=inst, dialect=str(options.get("dialect", "executor")))
    assert report.ok, [str(e) for e in report.errors[:3]]


def test_streamed_export_chooses_like_export_msccl(tmp_path: Path) -> None:
    """NDv2 x2 AllReduce C=2 needs more than 64 steps per thread block on one channel
    (``tests/test_msccl.py`` shows the refusal), and AllToAll has no in-place layout: the
    streamed export settles on the same channels / placement as :func:`export_msccl`, writes
    its bytes, and the validator accepts both files."""
    for kind, topo_fn, chunks in (("allreduce", lambda: ndv2(2), 2), ("alltoall", dgx1, 1)):
        inst, schedule = _solved(kind, topo_fn, chunks)
        choice = export_msccl(inst, schedule)
        out = tmp_path / f"{kind}.xml"
        written = write_msccl_export(out, inst, schedule)
        assert (written.channels, written.inplace, written.tried) == (
            choice.channels,
            choice.inplace,
            choice.tried,
        )
        assert out.read_text() == choice.text and written.bytes == len(choice.text)
        assert validate_xml(out, expect=inst).ok
    assert written.inplace is False  # AllToAll went out-of-place


def test_refused_export_leaves_the_target_alone(tmp_path: Path) -> None:
    """A limit violation is found before the file is opened: an existing target keeps its
    content and no staged file is left (AllToAll in place is refused by its layout)."""
    inst, schedule = _solved("alltoall", dgx1)
    out = tmp_path / "a2a.xml"
    out.write_text("old")
    with pytest.raises(ValidationError, match="inplace"):
        write_msccl_export(out, inst, schedule, inplace=True)
    with pytest.raises(ValidationError, match="unknown option"):
        write_msccl_xml(out, inst, schedule, chanels=2)
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a2a.xml"]


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_interrupted_stream_is_all_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    """A failure (a full disk) or Ctrl-C halfway through the lines: the target keeps its old
    content and the half-written staged file is removed."""
    inst, schedule = _allgather(dgx1)
    real = rendering._render

    def failing(built: object) -> Iterator[str]:
        for k, line in enumerate(real(built)):  # type: ignore[arg-type]
            if k == 20:
                raise error
            yield line

    monkeypatch.setattr(rendering, "_render", failing)  # where to_msccl_xml and _stream use it
    out = tmp_path / "ag.xml"
    out.write_text("old")
    with pytest.raises(type(error)):
        write_msccl_xml(out, inst, schedule)
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ag.xml"]


def test_cli_export_streams_a_valid_file(tmp_path: Path) -> None:
    """``ccplan export --format msccl-xml`` writes the bytes of :func:`export_msccl` (NDv2 x2
    AllGather through its switch, collapsed to GPU-to-GPU transfers) and nothing else."""
    from ccplan.cli import main

    inst, schedule = _allgather(lambda: ndv2(2))
    sched = tmp_path / "ag.json"
    save_schedule(sched, inst, schedule)
    out = tmp_path / "ag.xml"
    assert main(["export", str(sched), "--format", "msccl-xml", "--out", str(out)]) == 0
    assert out.read_text() == export_msccl(inst, schedule).text
    assert validate_xml(out, expect=inst).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ag.json", "ag.xml"]
