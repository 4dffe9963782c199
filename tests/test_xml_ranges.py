"""XML files a runtime selects correctly: size ranges, buffer modes, protocols, the manifest,
and ``validate-xml`` over a directory (gaps, overlaps).

The selection rule (RCCL / MSCCL executor, docs/runtime.md): a call runs the first loaded file
whose coll, ngpus and buffer mode match and whose ``minBytes <= nBytes <= maxBytes`` (both
inclusive, ``maxBytes="0"`` = no limit).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import greedy_schedule, ring_topology

from ccplan.cli import main
from ccplan.errors import ValidationError
from ccplan.export.msccl import (
    MAX_BYTES,
    byte_granularity,
    protocol_for,
    size_ranges,
    to_msccl_xml,
)
from ccplan.export.xml_validate import check_ranges, read_header, validate_directory, validate_xml
from ccplan.instances import make_collective, make_instance
from ccplan.schedule import load_schedule, verify


def _instance(coll: str = "allgather", size: str = "64KB"):  # type: ignore[no-untyped-def]
    """A verified schedule: the test greedy (AllGather) or the ring engine (AllReduce)."""
    from ccplan.pipeline import solve

    topo = ring_topology(4, bidirectional=True)
    inst = make_instance(topo, make_collective(coll, topo), size)
    schedule = greedy_schedule(inst) if coll == "allgather" else solve(inst, "ring").schedule
    assert schedule is not None and verify(inst, schedule).ok
    return inst, schedule


def _algo(text: str) -> dict[str, str]:
    return dict(ET.fromstring(text).attrib)


# --------------------------------------------------------------------------- ranges and protocols
def test_boundaries_are_geometric_means_rounded_to_the_upper_files_granularity() -> None:
    """1000 B and 64000 B: sqrt(1000*64000) = 8000; the 64000 B file serves multiples of 256 B
    (nchunksperloop 32 x sizeMultiplier 8), so it starts at ceil(8000/256)*256 = 8192 and the
    first file ends at 8191. 64000 and 1000000: sqrt = 252982.2 -> 252983, granularity 1 -> the
    third file starts there. The first starts at 0, the last has no limit."""
    got = size_ranges([1000, 64000, 1000000], [64, 256, 1])
    assert [(r.min_bytes, r.max_bytes) for r in got] == [(0, 8191), (8192, 252982), (252983, None)]
    assert byte_granularity("allgather", 8, 32) == 256
    assert byte_granularity("allreduce", 8, 32) == 32


def test_boundary_never_passes_the_upper_planned_size() -> None:
    """100 and 101 B: ceil(sqrt(10100)) = 101, rounded up to a multiple of 64 would be 128 > 101,
    so the upper file starts at its own planned size 101 (it must serve the size it was
    planned for)."""
    got = size_ranges([100, 101], [1, 64])
    assert [(r.min_bytes, r.max_bytes) for r in got] == [(0, 100), (101, None)]
    with pytest.raises(ValidationError, match="ascending"):
        size_ranges([64000, 1000])


def test_protocol_thresholds_match_rccls_own_8_gpu_allgather_files() -> None:
    """RCCL ships, for 8 GPUs, LL with maxBytes=8192 and LL128 with minBytes=8192,
    maxBytes=1048575: per GPU LL up to 1024 B, LL128 below 131072 B, Simple from there."""
    assert protocol_for(8192, 8) == ("LL", None)
    assert protocol_for(8193, 8) == ("LL128", None)
    assert protocol_for(1048575, 8) == ("LL128", None)
    assert protocol_for(1048576, 8) == ("Simple", None)
    proto, note = protocol_for(65536, 8, allowed=("LL", "Simple"))
    assert proto == "Simple" and note is not None and "LL128 not allowed" in note


# --------------------------------------------------------------------------- renderer
def test_renderer_writes_the_range_protocol_and_buffer_mode_it_is_given() -> None:
    inst, schedule = _instance()
    a = _algo(to_msccl_xml(inst, schedule, inplace=False, proto="LL128", min_bytes=8192, max_bytes=262143))
    assert (a["inplace"], a["outofplace"], a["proto"]) == ("0", "1", "LL128")
    assert (a["minBytes"], a["maxBytes"]) == ("8192", "262143")
    # No upper limit: "0" for the executor, 1 TiB for legacy MSCCL (which reads 0 literally).
    assert _algo(to_msccl_xml(inst, schedule))["maxBytes"] == "0"
    assert _algo(to_msccl_xml(inst, schedule, dialect="legacy"))["maxBytes"] == str(MAX_BYTES)
    # Legacy compares nbytes < maxBytes: an inclusive limit of 999 is written as 1000.
    assert _algo(to_msccl_xml(inst, schedule, dialect="legacy", max_bytes=999))["maxBytes"] == "1000"
    with pytest.raises(ValidationError, match="max_bytes"):
        to_msccl_xml(inst, schedule, min_bytes=10, max_bytes=9)


def test_ranged_files_stay_valid() -> None:
    """The header change touches no step: the validator passes both modes against the instance."""
    for coll in ("allgather", "allreduce"):
        inst, schedule = _instance(coll)
        for inplace in (True, False):
            text = to_msccl_xml(inst, schedule, inplace=inplace, proto="LL", min_bytes=1, max_bytes=2)
            assert validate_xml(text, expect=inst).ok


# --------------------------------------------------------------------------- directory check
def _write_variant(path: Path, text: str, **attrs: str) -> None:
    head, rest = text.split("\n", 1)
    for key, value in attrs.items():
        head = re.sub(rf'{key}="[^"]*"', f'{key}="{value}"', head)
    path.write_text(head + "\n" + rest)


@pytest.fixture()
def tiled_dir(tmp_path: Path) -> Path:
    """Three in-place and one out-of-place AllGather file of one schedule: in-place
    [0..8191] [8192..262143] [262144..inf], out-of-place [0..inf] -- a tiling in both modes."""
    inst, schedule = _instance()
    d = tmp_path / "xml"
    d.mkdir()
    text = to_msccl_xml(inst, schedule)
    _write_variant(d / "a.xml", text, minBytes="0", maxBytes="8191")
    _write_variant(d / "b.xml", text, minBytes="8192", maxBytes="262143")
    _write_variant(d / "c.xml", text, minBytes="262144", maxBytes="0")
    (d / "op.xml").write_text(to_msccl_xml(inst, schedule, inplace=False))
    return d


def test_directory_that_tiles_passes(tiled_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = validate_directory(tiled_dir)
    assert report.ok and report.ranges == []
    assert main(["validate-xml", str(tiled_dir)]) == 0
    assert "ranges tile [0, inf) in 2 group(s)" in capsys.readouterr().out


def test_gap_is_reported_with_files_and_bytes(tiled_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """b.xml starting at 9000 instead of 8192 leaves 8192..8999 to the library."""
    text = (tiled_dir / "b.xml").read_text()
    _write_variant(tiled_dir / "b.xml", text, minBytes="9000")
    problems = validate_directory(tiled_dir).ranges
    assert problems == [
        "range gap: allgather ngpus=4 in-place: no file serves 8192..8999 bytes "
        "(after a.xml maxBytes=8191, before b.xml minBytes=9000)"
    ]
    assert main(["validate-xml", str(tiled_dir)]) == 1
    assert "range gap" in capsys.readouterr().out


def test_overlap_is_reported_with_files_and_bytes(tiled_dir: Path) -> None:
    """a.xml ending at 10000 overlaps b.xml [8192..262143] on 8192..10000."""
    _write_variant(tiled_dir / "a.xml", (tiled_dir / "a.xml").read_text(), maxBytes="10000")
    (line,) = validate_directory(tiled_dir).ranges
    assert line.startswith("range overlap: allgather ngpus=4 in-place: a.xml [0..10000] and b.xml")
    assert "both serve 8192..10000 bytes" in line


def test_missing_top_and_bottom_are_gaps(tiled_dir: Path) -> None:
    """Without a.xml nothing serves 0..8191; with c.xml capped at 1 GB nothing serves above."""
    (tiled_dir / "a.xml").unlink()
    _write_variant(tiled_dir / "c.xml", (tiled_dir / "c.xml").read_text(), maxBytes="1000000000")
    assert validate_directory(tiled_dir).ranges == [
        "range gap: allgather ngpus=4 in-place: no file serves 0..8191 bytes "
        "(from 0, before b.xml minBytes=8192)",
        "range gap: allgather ngpus=4 in-place: no file serves 1000000001..inf bytes "
        "(after c.xml maxBytes=1000000000)",
    ]


def test_non_xml_file_in_the_directory_fails(tiled_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RCCL and the executor parse every regular file of MSCCL_ALGO_DIR as an algorithm."""
    (tiled_dir / "manifest.json").write_text("{}")
    assert validate_directory(tiled_dir).not_xml == ["manifest.json"]
    assert main(["validate-xml", str(tiled_dir)]) == 1
    assert "manifest.json: not an XML file" in capsys.readouterr().out


def test_legacy_ranges_are_exclusive_above(tmp_path: Path) -> None:
    """Legacy MSCCL compares nbytes < maxBytes: maxBytes=8192 then minBytes=8192 tiles."""
    inst, schedule = _instance()
    text = to_msccl_xml(inst, schedule, dialect="legacy")
    _write_variant(tmp_path / "a.xml", text, minBytes="0", maxBytes="8192")
    _write_variant(tmp_path / "b.xml", text, minBytes="8192")
    headers = [read_header(tmp_path / n, "legacy") for n in ("a.xml", "b.xml")]
    assert headers[0].max_bytes == 8191
    assert check_ranges(headers) == []
    assert check_ranges([read_header(tmp_path / n) for n in ("a.xml", "b.xml")])[0].startswith(
        "range overlap"
    )


# --------------------------------------------------------------------------- a plan
def test_plan_on_dgx1_tiles_both_modes_and_manifest_matches(tmp_path: Path) -> None:
    """dgx1 (8 GPUs), AllGather and AllReduce at 1KB, 64KB, 1MB, heuristic, C = 1: per
    collective and buffer mode the files in xml/ tile [0, inf), every file passes the
    validator, and the manifest lists each file with the attributes the file carries."""
    from ccplan.instances.builtin import resolve_topology
    from ccplan.plan import PlanRequest, run_plan

    req = PlanRequest(
        resolve_topology("dgx1"),
        ("allgather", "allreduce"),
        ("1KB", "64KB", "1MB"),
        methods=("heuristic",),
        baselines=(),
        chunks=1,
        time_limit=5,
    )
    out = tmp_path / "p"
    res = run_plan(req, out, plots=False)
    for best in res.best:
        instance, schedule = load_schedule(out / best["schedule"])
        assert verify(instance, schedule).ok
    report = validate_directory(out / "xml")
    assert report.ok, (report.ranges, report.not_xml, {k: v.errors[:1] for k, v in report.files.items()})
    modes = {(h.kind, m) for h in report.headers for m in h.modes}
    assert modes == {(c, m) for c in ("allgather", "allreduce") for m in ("in-place", "out-of-place")}
    manifest = json.loads((out / "manifest.json").read_text())
    listed = {f["path"] for f in manifest["files"] if f["dialect"] == "executor"}
    assert listed == {f"xml/{name}" for name in report.files}
    for f in manifest["files"]:
        a = _algo((out / f["path"]).read_text().split("\n", 1)[0] + "</algo>")
        assert a["proto"] == f["proto"] == protocol_for(f["size_bytes"], 8)[0]
        assert int(a["minBytes"]) == f["min_bytes"] and int(a["nchannels"]) == f["nchannels"]
        assert a["maxBytes"] == ("0" if f["max_bytes"] is None else str(f["max_bytes"]))
        assert (a["inplace"], a["outofplace"]) == (str(int(f["inplace"])), str(int(f["outofplace"])))
        assert f["min_bytes"] <= f["size_bytes"] and (
            f["max_bytes"] is None or f["size_bytes"] <= f["max_bytes"]
        )
        assert f["verified"] and f["makespan_us"] > 0
    assert main(["validate-xml", str(out / "xml")]) == 0


def test_replanning_removes_files_the_new_plan_does_not_write(tmp_path: Path) -> None:
    """A second plan in the same directory with other sizes must not leave the first plan's
    files in xml/: their ranges would overlap the new ones."""
    from ccplan.plan import PlanRequest, run_plan

    topo = ring_topology(4, bidirectional=True)
    out = tmp_path / "p"
    for sizes in (("64KB", "1MB"), ("4MB",)):
        run_plan(
            PlanRequest(topo, ("allgather",), sizes, methods=("heuristic",), baselines=(), chunks=1),
            out,
            plots=False,
        )
    names = sorted(p.name for p in (out / "xml").glob("*.xml"))
    assert names == ["allgather_4MB.xml", "allgather_4MB_op.xml"]
    assert validate_directory(out / "xml").ok
