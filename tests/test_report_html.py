"""``report.html``: the plan's self-contained page (ccplan.export.report_html) and its
rendering in headless Chromium."""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError
from ccplan.export import report_html
from ccplan.export.report_html import bandwidth_figure, link_class_summary, render_html, series_styles
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import resolve_topology
from ccplan.pipeline.solve import solve

matplotlib = pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")

N = 4  # GPUs of the synthetic plan: busbw factor (n-1)/n = 0.75 for AllGather


def _cells() -> list[dict[str, Any]]:
    """AllGather on 4 GPUs at 1KB, 1MB, 1GB. heuristic and milp have the SAME numbers (the case
    where one line used to hide the other); ring is slower. busbw = 0.75 algbw."""
    rows = []
    for size, nbytes, t_best, t_ring in (
        ("1KB", 1e3, 1.0, 2.0),
        ("1MB", 1e6, 20.0, 30.0),
        ("1GB", 1e9, 1.2e4, 1.5e4),
    ):
        for method, role, t in (
            ("heuristic", "candidate", t_best),
            ("milp", "candidate", t_best),
            ("ring", "baseline", t_ring),
        ):
            algbw = nbytes / (t * 1e3)
            rows.append(
                {
                    "collective": "allgather", "size": size, "size_bytes": nbytes, "method": method,
                    "role": role, "status": "feasible", "makespan_us": t, "algbw_GBps": algbw,
                    "busbw_GBps": 0.75 * algbw,
                }
            )  # fmt: skip
    return rows


def _best(physical: bool) -> list[dict[str, Any]]:
    out = []
    for size, nbytes, t, bound in (
        ("1KB", 1e3, 1.0, 0.5),
        ("1MB", 1e6, 20.0, 10.0),
        ("1GB", 1e9, 1.2e4, 1e4),
    ):
        row: dict[str, Any] = {
            "collective": "allgather", "size": size, "size_bytes": nbytes, "method": "heuristic",
            "status": "feasible", "makespan_us": t, "lower_bound_us": bound, "gap": (t - bound) / t,
            "algbw_GBps": nbytes / (t * 1e3), "busbw_GBps": 0.75 * nbytes / (t * 1e3),
            "baselines": {"ring": {"makespan_us": 2 * t}}, "xml": f"xml/allgather_{size}.xml",
        }  # fmt: skip
        if physical:
            row.update(chunks=2, switch_model="cut-through", physical_bound_us=bound / 2, physical_gap=0.5)
        out.append(row)
    return out


def _plan_data(physical: bool = True, **extra: Any) -> dict[str, Any]:
    data = {
        "topology": "synthetic",
        "gpus": N,
        "request": {
            "collectives": ["allgather"],
            "methods": ["heuristic", "milp"],
            "baselines": ["ring"],
            "chunks": 1,
        },
        "best": _best(physical),
        "cells": _cells(),
    }
    data.update(extra)
    return data


def _data_images(text: str) -> list[bytes]:
    """Every <img> source must be a data: URI; return the decoded payloads."""
    srcs = re.findall(r'<img[^>]*\ssrc="([^"]*)"', text)
    assert len(srcs) == text.count("<img"), "an <img> without a src"
    out = []
    for src in srcs:
        assert src.startswith("data:image/png;base64,"), src[:60]
        out.append(base64.b64decode(src.split(",", 1)[1], validate=True))
    return out


# ============================================================================ the plot


def test_bandwidth_figure_every_series_and_the_bound() -> None:
    """One line per method and baseline with the cells' own (bytes, busbw) points; the bounds
    as dashed lines at size / bound * 0.75: 1MB with a physical bound of 5 us is
    1e6 B / 5e3 ns = 200 GB/s algbw, 150 GB/s busbw; the slot bound 10 us gives 75 GB/s.
    Log x axis whose ticks are exactly the plan's sizes, labelled as the plan names them."""
    fig = bandwidth_figure("allgather", _cells(), _best(True), methods=["heuristic", "milp", "ring"], gpus=N)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"heuristic", "milp", "ring (baseline)", "physical bound", "slot-model bound"}
    cells = _cells()
    for label, method in (("heuristic", "heuristic"), ("milp", "milp"), ("ring (baseline)", "ring")):
        xs, ys = lines[label].get_data()
        want = sorted((r["size_bytes"], r["busbw_GBps"]) for r in cells if r["method"] == method)
        assert list(xs) == [w[0] for w in want]
        assert list(ys) == pytest.approx([w[1] for w in want])
    xs, ys = lines["physical bound"].get_data()
    assert list(xs) == [1e3, 1e6, 1e9]
    assert list(ys) == pytest.approx([1e3 / 250 * 0.75, 150.0, 1e9 / 5e6 * 0.75])
    assert lines["slot-model bound"].get_data()[1][1] == pytest.approx(75.0)
    for label in ("physical bound", "slot-model bound"):
        assert lines[label].get_linestyle() not in ("-", "None")
        # drawn over the series: a schedule that meets its bound must not hide the bound
        assert lines[label].get_zorder() > max(
            lines[m].get_zorder() for m in ("heuristic", "milp", "ring (baseline)")
        )
    # heuristic and milp coincide: they must still differ in marker, line style and size
    h, m = lines["heuristic"], lines["milp"]
    assert (h.get_marker(), h.get_linestyle()) != (m.get_marker(), m.get_linestyle())
    assert h.get_markersize() > m.get_markersize() and h.get_zorder() < m.get_zorder()
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [1e3, 1e6, 1e9]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1KB", "1MB", "1GB"]
    matplotlib.pyplot.close(fig)


def test_series_styles_distinct() -> None:
    """The first 8 series differ pairwise in (marker, line style), and sizes shrink."""
    styles = series_styles(8)
    assert len({(s["marker"], s["linestyle"]) for s in styles}) == 8
    sizes = [s["markersize"] for s in styles]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 8


# ============================================================================ the page


def test_render_html_self_contained_tables_and_images() -> None:
    text = render_html(_plan_data(physical=True))
    assert "<script" not in text.lower()
    assert not re.search(r"(src|href)=\"(https?:)?//", text), "a network reference"
    images = _data_images(text)
    assert len(images) == 1  # the bandwidth plot (no schedule given: no Gantt)
    for data in images:
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        with Image.open(io.BytesIO(data)) as im:
            assert im.size[0] > 100 and im.size[1] > 100
    header = re.search(r"<table>\s*<tr>(.*?)</tr>", text, re.S)
    assert header is not None
    columns = re.findall(r"<th[^>]*>(.*?)</th>", header.group(1))
    for col in ("size", "C", "switch model", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "bound (us)", "gap",
                "physical bound (us)", "physical gap", "ring (us)"):  # fmt: skip
        assert col in columns, col
    first = re.findall(r"<td[^>]*>(.*?)</td>", text.split("</tr>")[1])
    row = dict(zip(columns, first, strict=True))
    assert row["size"] == "1KB" and row["C"] == "2" and row["switch model"] == "cut-through"
    assert row["physical bound (us)"] == "0.25" and row["physical gap"] == "50.0%"
    assert row["ring (us)"] == "2" and row["gap"] == "50.0%"


def test_render_html_absent_columns_show_dash() -> None:
    """Rows without chunks / switch model / physical bound: '-' (C falls back to the request's)."""
    text = render_html(_plan_data(physical=False, plots=False))
    assert "<img" not in text
    header = re.search(r"<table>\s*<tr>(.*?)</tr>", text, re.S)
    assert header is not None
    columns = re.findall(r"<th[^>]*>(.*?)</th>", header.group(1))
    row = dict(zip(columns, re.findall(r"<td[^>]*>(.*?)</td>", text.split("</tr>")[1]), strict=True))
    assert row["C"] == "1"
    assert row["switch model"] == row["physical bound (us)"] == row["physical gap"] == "-"


def test_render_html_without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Any:
        raise CCPlanError("pictures need matplotlib, which is not installed")

    monkeypatch.setattr(report_html, "_pyplot", missing)
    text = render_html(_plan_data())
    assert "<img" not in text and "No pictures: pictures need matplotlib" in text
    assert "physical bound (us)" in text and "heuristic" in text


def _ring_allgather(n: int) -> tuple[Any, Any, Any]:
    topo = resolve_topology("ring", n=n)
    instance = make_instance(topo, make_collective("allgather", topo, chunks=1), "1MB")
    result = solve(instance, "ring", SolveOptions(time_limit=10, workers=1))
    assert result.verified and result.schedule is not None  # solve ran the independent verifier
    return instance, result.schedule, result


def test_link_class_summary_ring4() -> None:
    """Built-in ring n=4 (duplex 50 GB/s, alpha 0.7 us), AllGather 1MB, C=1: chunk 250 KB,
    tau = 5 us, l = 1, delta = 1. The ring baseline sends each chunk 3 hops one way round:
    4 of the 8 directed links carry 3 sends each (12 sends), makespan 3 hops x 2 slots = 6.
    Busy share of a used link 3/6 = 0.5; mean over the 8 links 0.25."""
    instance, schedule, result = _ring_allgather(4)
    assert result.makespan_slots == 6
    (summary,) = link_class_summary(instance, schedule, result.makespan_slots)
    assert summary["class"] == "gpu->gpu" and summary["links"] == 8 and summary["used"] == 4
    assert summary["sends"] == 12
    assert summary["busy_max"] == pytest.approx(0.5) and summary["busy_mean"] == pytest.approx(0.25)
    # without the makespan it is the last arrival, the same 6 slots
    assert link_class_summary(instance, schedule)[0]["busy_max"] == pytest.approx(0.5)


@pytest.mark.parametrize(("n", "pictures"), [(8, True), (65, False)])
def test_schedule_pictures_up_to_64_gpus(n: int, pictures: bool) -> None:
    """Gantt and utilisation embedded up to 64 GPUs; beyond, the link-class table only."""
    instance, schedule, result = _ring_allgather(n)
    best = [
        {
            "collective": "allgather", "size": "1MB", "size_bytes": 1e6, "method": "ring",
            "status": result.status, "makespan_us": result.makespan_us,
            "makespan_slots": result.makespan_slots, "_instance": instance, "_schedule": schedule,
        }
    ]  # fmt: skip
    text = render_html(
        {"topology": f"ring-{n}", "gpus": n, "request": {"collectives": ["allgather"]}, "best": best}
    )
    alts = re.findall(r'<img[^>]*alt="([^"]*)"', text)
    assert any("Gantt" in a for a in alts) is pictures
    assert any("utilisation" in a for a in alts) is pictures
    assert '<th class="t">link class</th>' in text and f"<td>{2 * n}</td>" in text
    for data in _data_images(text):
        with Image.open(io.BytesIO(data)) as im:
            assert im.size[0] > 100


def test_gantt_one_collection_per_link(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The Gantt of a 64-GPU ring took over a minute with one bar collection per send. Ring
    n=8 AllGather 1MB by the ring baseline: 8 x 7 = 56 sends on the 8 links of one direction;
    chunk 125 KB / 50 GB/s = 2.5 us = tau, so l = 1, and alpha / tau = 0.28 > 0.1 gives
    delta = 1: every send has an in-flight tail. One call per used link for the bars and one
    for the tails = 16 calls, each send drawn once as a bar and once as a tail."""
    from matplotlib.axes import Axes

    from ccplan.export import plots

    calls: list[int] = []
    original = Axes.broken_barh

    def counting(self: Any, xranges: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(list(xranges)))
        return original(self, xranges, *args, **kwargs)

    monkeypatch.setattr(Axes, "broken_barh", counting)
    instance, schedule, _ = _ring_allgather(8)
    assert len(schedule.sends) == 56
    plots.gantt(instance, schedule, tmp_path / "g.png")
    assert len(calls) == 16 and sum(calls) == 2 * 56


# ============================================================================ in a browser


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _browser(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


# Test-only probe appended to a copy of the page (the report itself has no script): once the
# page has loaded, write how many images there are and how many failed to decode into the DOM,
# which --dump-dom prints.
PROBE = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !i.complete || i.naturalWidth === 0; });
  document.body.setAttribute("data-images", String(imgs.length));
  document.body.setAttribute("data-broken", String(broken.length));
});
</script>"""


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    """A real `ccplan plan` (ring of 4 GPUs, AllGather at two sizes) writes report.html beside
    report.md; Chromium renders it to a screenshot that is not blank, and every image decodes."""
    binary = _chromium()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no chromium binary on PATH (.ci/run installs Debian's chromium)")
        pytest.skip("no chromium binary found (apt-get install chromium); CI runs this test")
    from ccplan.cli import main

    out = tmp_path / "plan"
    rc = main(
        [
            "plan", "--topology", "ring", "--topo-arg", "n=4", "--collectives", "allgather",
            "--sizes", "64KB,1MB", "--methods", "heuristic", "--baselines", "ring",
            "--time-limit", "2", "--out", str(out), "--quiet",
        ]
    )  # fmt: skip
    assert rc == 0
    assert (out / "report.md").is_file()
    page = out / "report.html"
    text = page.read_text()
    assert len(_data_images(text)) == 3  # busbw plot, Gantt, utilisation

    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", PROBE + "\n</body>"))
    dom = _browser(binary, "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    images = re.search(r'data-images="(\d+)"', dom.stdout)
    broken = re.search(r'data-broken="(\d+)"', dom.stdout)
    assert images and broken, "the probe did not run: " + dom.stdout[:300]
    assert int(images.group(1)) == 3 and int(broken.group(1)) == 0

    shot = tmp_path / "shot.png"
    run = _browser(binary, f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    with Image.open(shot) as im:
        gray = im.convert("L")
        assert gray.size == (1280, 2000)
        pixels = np.asarray(gray, dtype=float)
    variance = float(pixels.var())
    dark = float((pixels < 128).mean())
    # a blank (white) page has variance 0; text, tables and plots give thousands
    assert variance > 500, variance
    assert 0.005 < dark < 0.5, dark
