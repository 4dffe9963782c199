"""Plots and the timeline JSON: files are produced and non-trivial (plots are not correctness)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccplan.errors import ValidationError
from ccplan.export.plots import gantt, plot_progress, utilization
from ccplan.export.schedule_json import schedule_timeline, write_timeline
from ccplan.instances import make_collective, make_instance, make_topology
from ccplan.schedule import Schedule, verify

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def ring_case():  # type: ignore[no-untyped-def]
    """Directed 3-ring AllGather, the ring schedule by hand: slot 0 every GPU sends its own chunk
    forward, slot 1 it forwards the chunk it received; makespan 2."""
    topo = make_topology("ring3", range(3), directed_links=[(i, (i + 1) % 3, 50.0, 0.0) for i in range(3)])
    inst = make_instance(topo, make_collective("allgather", topo), "3MB")
    sends = [((u, 0), u, (u + 1) % 3, 0) for u in range(3)]
    sends += [(((u - 1) % 3, 0), u, (u + 1) % 3, 1) for u in range(3)]
    schedule = Schedule.of(sends, method="ring")
    report = verify(inst, schedule)
    assert report.ok and report.makespan_slots == 2
    return inst, schedule


def test_gantt_and_utilization_png(tmp_path: Path, ring_case) -> None:  # type: ignore[no-untyped-def]
    inst, schedule = ring_case
    for func in (gantt, utilization):
        out = func(inst, schedule, tmp_path / f"{func.__name__}.png")
        data = out.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 5000


def test_gantt_svg(tmp_path: Path, ring_case) -> None:  # type: ignore[no-untyped-def]
    inst, schedule = ring_case
    text = gantt(inst, schedule, tmp_path / "g.svg").read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert len(text) > 5000


def test_bad_suffix(tmp_path: Path, ring_case) -> None:  # type: ignore[no-untyped-def]
    inst, schedule = ring_case
    with pytest.raises(ValidationError, match="suffix"):
        gantt(inst, schedule, tmp_path / "g.jpeg")


def test_plot_progress(tmp_path: Path) -> None:
    csv = tmp_path / "progress.csv"
    csv.write_text("seconds,objective,bound\n0.1,,3\n0.5,12,4\n1.2,9,5\n3.0,8,8\n")
    data = plot_progress(csv, tmp_path / "p.png").read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000
    bad = tmp_path / "bad.csv"
    bad.write_text("seconds,objective\n0.1,3\n")
    with pytest.raises(ValidationError, match="bound"):
        plot_progress(bad, tmp_path / "q.png")


def test_timeline_json(tmp_path: Path, ring_case) -> None:  # type: ignore[no-untyped-def]
    """Every link has l = L = 1 (one bandwidth, alpha 0): busy_until = arrival = slot + 1 and
    each of the 3 links is busy in 2 slots."""
    inst, schedule = ring_case
    doc = schedule_timeline(inst, schedule)
    assert doc["verified"] and doc["makespan_slots"] == 2
    assert all(s["arrival"] == s["busy_until"] == s["slot"] + 1 for s in doc["sends"])
    assert [lk["busy_slots"] for lk in doc["links"]] == [2, 2, 2]
    path = write_timeline(tmp_path / "t.json", inst, schedule)
    assert Schedule.from_dict(json.loads(path.read_text())["schedule"])[1] == schedule
