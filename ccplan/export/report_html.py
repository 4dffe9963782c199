"""A plan's report as one self-contained HTML file (``report.html`` beside ``report.md``).

Everything the page shows is inside the file: the pictures are PNG images embedded as
``data:`` URIs, the style sheet is inline and the page runs no script, so it opens from a
mail attachment or an archive with no network and no sibling files.

Per collective the page has

- a table, one row per size: C, the switch model, the best method, its time, algbw and busbw,
  the slot-model bound and gap, the physical bound and gap, and every baseline's time;
- busbw against size on a logarithmic axis whose ticks are the plan's sizes (``64KB``,
  ``1MB`` ...), one line per method and baseline, each with its own marker, line style and
  width (drawn largest first, so a series that coincides with another stays visible around
  it), and the bounds as dashed lines;
- the Gantt chart and the link utilisation of the best schedule at the largest size when the
  machine has at most :data:`MAX_PICTURE_GPUS` GPUs (beyond that one row per link is
  unreadable), and in every case a per-link-class summary (links of the same endpoint kinds,
  bandwidth and alpha: how many, how many used, their busy share of the makespan).

Without matplotlib the page still renders, with the tables and a line saying why there are
no pictures.
"""

from __future__ import annotations

import base64
import html
import io
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccplan.errors import CCPlanError
from ccplan.parsing import parse_size, plain_number

if TYPE_CHECKING:
    from ccplan.instances.instance import Instance
    from ccplan.schedule.core import Schedule

__all__ = ["MAX_PICTURE_GPUS", "bandwidth_figure", "link_class_summary", "render_html", "series_styles"]

MAX_PICTURE_GPUS = 64
"""Gantt and utilisation pictures up to this many GPUs; a per-link-class table beyond."""

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES = ("-", "--", "-.", ":")
_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #111; background: #fff; max-width: 110em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 1.6em; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: 0.6em 0 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #999; padding: 0.2em 0.5em; text-align: right; }
th { background: #e8e8e8; } td.t, th.t { text-align: left; }
tr:nth-child(even) td { background: #f6f6f6; }
.scroll { overflow: auto; max-height: 60em; border: 1px solid #ccc; margin-bottom: 1em; }
.scroll img { display: block; }
img.plot { max-width: 100%; height: auto; }
.note { background: #fff4d6; padding: 0.4em 0.7em; border-left: 4px solid #d9a400; }
"""


# ============================================================================ helpers


def _num(value: Any, spec: str = ".4g") -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "-"
    if spec == ".4g":
        return plain_number(value)  # 21475, never 2.147e+04
    return format(value, spec)


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else html.escape(str(value))


def _bytes(row: Mapping[str, Any]) -> float | None:
    size = row.get("size_bytes")
    if isinstance(size, (int, float)) and size > 0:
        return float(size)
    try:
        return parse_size(row["size"])
    except (CCPlanError, KeyError, TypeError):
        return None


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 0) -> list[str]:
    """HTML table; cells are already escaped; the first ``left`` columns align left."""

    def cls(i: int) -> str:
        return ' class="t"' if i < left else ""

    out = ["<table>", "<tr>"]
    out += [f"<th{cls(i)}>{html.escape(h)}</th>" for i, h in enumerate(headers)]
    out.append("</tr>")
    for row in rows:
        out.append("<tr>" + "".join(f"<td{cls(i)}>{c}</td>" for i, c in enumerate(row)) + "</tr>")
    out.append("</table>")
    return out


def _img(data: bytes, alt: str, *, scroll: bool) -> str:
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    cls = "" if scroll else ' class="plot"'
    tag = f'<img src="{uri}" alt="{html.escape(alt)}"{cls}>'
    # The Gantt of 64 GPUs is thousands of pixels wide: shown at its own size in a scroll box,
    # it stays readable; shrunk to the window it would not be.
    return f'<div class="scroll">{tag}</div>' if scroll else tag


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CCPlanError(
            "pictures need matplotlib, which is not installed: pip install matplotlib"
        ) from None
    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    _pyplot().close(fig)
    return buf.getvalue()


# ============================================================================ bandwidth plot


def series_styles(count: int) -> list[dict[str, Any]]:
    """Matplotlib keyword styles for ``count`` series, pairwise distinguishable.

    Series ``i`` gets marker ``i mod 8`` and line style ``i mod 4`` (distinct pairs for the first
    8 series), a marker and a line that shrink with ``i`` and a z-order that grows with it: two
    series with equal values show as a small marker inside a larger one, not as one line.
    """
    styles = []
    for i in range(count):
        styles.append(
            {
                "marker": _MARKERS[i % len(_MARKERS)],
                "linestyle": _LINESTYLES[i % len(_LINESTYLES)],
                "markersize": max(4.0, 12.0 - 1.1 * i),
                "linewidth": max(1.0, 3.2 - 0.4 * i),
                "markerfacecolor": "none" if i % 2 else None,
                "zorder": 3 + i,
            }
        )
    return styles


def _busbw_factor(cells: Sequence[Mapping[str, Any]]) -> float | None:
    """busbw / algbw as the plan computed it (nccl-tests' factor for the GPU count)."""
    for r in cells:
        algbw, busbw = r.get("algbw_GBps"), r.get("busbw_GBps")
        if isinstance(algbw, (int, float)) and isinstance(busbw, (int, float)) and algbw > 0:
            return float(busbw) / float(algbw)
    return None


def bandwidth_figure(
    collective: str,
    cells: Sequence[Mapping[str, Any]],
    best: Sequence[Mapping[str, Any]],
    *,
    methods: Sequence[str] = (),
    gpus: int | None = None,
) -> Any:
    """busbw vs size of one collective: one line per method/baseline, the bounds dashed.

    Parameters
    ----------
    collective : str
    cells : sequence of dict
        Plan rows (``collective``, ``size``, ``method``, ``busbw_GBps``, ...); rows of other
        collectives are ignored.
    best : sequence of dict
        Best rows; their ``physical_bound_us`` (when present) and ``lower_bound_us`` give the
        bound lines (``size / bound`` times the busbw factor: no schedule lies above them).
    methods : sequence of str
        Series order (others found in ``cells`` follow in order of appearance).
    gpus : int, optional
        For the title.

    Returns
    -------
    matplotlib.figure.Figure or None
        None when no cell of ``collective`` has a bandwidth.
    """
    plt = _pyplot()
    from matplotlib.ticker import NullLocator

    rows = [r for r in cells if r.get("collective") == collective]
    order = [m for m in methods if any(r.get("method") == m for r in rows)]
    order += [m for m in dict.fromkeys(str(r.get("method")) for r in rows) if m not in order]
    series = []
    for method in order:
        pts = sorted(
            (x, float(r["busbw_GBps"]))
            for r in rows
            if r.get("method") == method
            and isinstance(r.get("busbw_GBps"), (int, float))
            and (x := _bytes(r)) is not None
        )
        if pts:
            series.append((method, pts))
    if not series:
        return None
    factor = _busbw_factor(rows) or 1.0
    fig, ax = plt.subplots(figsize=(8.0, 4.6))
    for (method, pts), style in zip(series, series_styles(len(series)), strict=True):
        role = next((r.get("role") for r in rows if r.get("method") == method), None)
        named = next((r.get("label") for r in rows if r.get("method") == method and r.get("label")), method)
        label = f"{named} (baseline)" if role == "baseline" else method
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **style)
    mine = [b for b in best if b.get("collective") == collective]
    for key, label, style in (
        ("physical_bound_us", "physical bound", {"color": "black", "linestyle": "--", "linewidth": 1.6}),
        (
            "lower_bound_us",
            "slot-model bound",
            {"color": "dimgray", "linestyle": (0, (2, 2)), "linewidth": 1.3},
        ),
    ):
        pts = sorted(
            (x, x / (float(b[key]) * 1e3) * factor)
            for b in mine
            if isinstance(b.get(key), (int, float)) and b[key] > 0 and (x := _bytes(b)) is not None
        )
        if pts:
            # on top of the series: a schedule that meets its bound would hide a line drawn below
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, zorder=50, **style)
    ticks: dict[float, str] = {}
    for r in (*rows, *mine):
        x = _bytes(r)
        if x is not None and x not in ticks:
            ticks[x] = str(r.get("size", _num(x)))
    ax.set_xscale("log")
    xs = sorted(ticks)
    ax.set_xticks(xs)
    ax.set_xticklabels([ticks[x] for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlim(xs[0] / 1.6, xs[-1] * 1.6)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("buffer size (log scale)")
    ax.set_ylabel("busbw (GB/s)")
    on = f" on {gpus} GPUs" if gpus else ""
    ax.set_title(f"{collective}: busbw vs size{on}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    return fig


# ============================================================================ link classes


def link_class_summary(
    instance: Instance, schedule: Schedule, makespan_slots: int | None = None
) -> list[dict[str, Any]]:
    """One row per link class: links with the same endpoint kinds, bandwidth and alpha.

    Parameters
    ----------
    instance, schedule
    makespan_slots : int, optional
        The schedule's makespan (computed from the sends when not given: the last arrival).

    Returns
    -------
    list of dict
        ``class`` (e.g. ``"gpu->switch"``), ``bandwidth_GBps``, ``alpha_us``, ``links``,
        ``used`` (links carrying at least one send), ``sends``, ``busy_mean`` and ``busy_max``
        (occupied slots / makespan over the class's links), sorted by class.
    """
    topo = instance.topology
    index = topo.link_index
    occupancy, latency = instance.occupancy, instance.latency
    busy = [0] * topo.num_links
    sends = [0] * topo.num_links
    last = 0
    for s in schedule.sends:
        li = index.get((s.src, s.dst))
        if li is None:
            continue
        busy[li] += int(occupancy[li])
        sends[li] += 1
        last = max(last, s.slot + int(latency[li]))
    span = max(1, makespan_slots if makespan_slots else last)
    groups: dict[tuple[str, float, float], list[int]] = {}
    for li, link in enumerate(topo.links):
        key = (f"{topo.kind[link.src]}->{topo.kind[link.dst]}", link.bandwidth_GBps, link.alpha_us)
        groups.setdefault(key, []).append(li)
    out = []
    for (cls, bw, alpha), members in sorted(groups.items()):
        shares = [busy[li] / span for li in members]
        out.append(
            {
                "class": cls,
                "bandwidth_GBps": bw,
                "alpha_us": alpha,
                "links": len(members),
                "used": sum(1 for li in members if sends[li]),
                "sends": sum(sends[li] for li in members),
                "busy_mean": sum(shares) / len(shares),
                "busy_max": max(shares),
            }
        )
    return out


def _schedule_pictures(instance: Instance, schedule: Schedule) -> list[tuple[str, bytes]]:
    from ccplan.export import plots

    out = []
    with tempfile.TemporaryDirectory(prefix="ccplan-report-") as tmp:
        for kind, func in (("Gantt chart", plots.gantt), ("link utilisation", plots.utilization)):
            path = Path(tmp) / f"{kind.split()[-1]}.png"
            func(instance, schedule, path)
            out.append((kind, path.read_bytes()))
    return out


# ============================================================================ the page


def _label(baseline: str, best: Sequence[Mapping[str, Any]]) -> str:
    """A baseline as its runs named it (``label``: "NCCL-style ring (6 channels)"), else its method."""
    for b in best:
        label = ((b.get("baselines") or {}).get(baseline) or {}).get("label")
        if label:
            return str(label)
    return baseline


def _best_table(best: Sequence[Mapping[str, Any]], baselines: Sequence[str], chunks: Any) -> list[str]:
    headers = [
        "size", "C", "switch model", "method", "status", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
        "bound (us)", "gap", "physical bound (us)", "physical gap",
        *[f"{_label(b, best)} (us)" for b in baselines], "XML",
    ]  # fmt: skip
    rows = []
    for b in best:
        if "method" not in b:
            rows.append([_text(b.get("size")), *["-"] * (len(headers) - 3), _text(b.get("error")), "-"])
            continue
        base = b.get("baselines") or {}
        xml = b.get("xml")
        rows.append(
            [
                _text(b.get("size")),
                _text(b.get("chunks", chunks)),
                _text(b.get("switch_model")),
                _text(b.get("method")),
                _text(b.get("status")),
                _num(b.get("makespan_us")),
                _num(b.get("algbw_GBps")),
                _num(b.get("busbw_GBps")),
                _num(b.get("lower_bound_us")),
                _num(b.get("gap"), ".1%"),
                _num(b.get("physical_bound_us")),
                _num(b.get("physical_gap"), ".1%"),
                *[_num((base.get(name) or {}).get("makespan_us")) for name in baselines],
                f'<a href="{html.escape(str(xml))}">{html.escape(Path(str(xml)).name)}</a>'
                if xml
                else "not exportable",
            ]
        )
    return _table(headers, rows, left=1)


def _cells_table(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    headers = [
        "size",
        "method",
        "role",
        "status",
        "time (us)",
        "bound (us)",
        "algbw (GB/s)",
        "busbw (GB/s)",
        "solve (s)",
        "error",
    ]
    rows = [
        [
            _text(r.get("size")),
            _text(r.get("method")),
            _text(r.get("role")),
            _text(r.get("status")),
            _num(r.get("makespan_us")),
            _num(r.get("lower_bound_us")),
            _num(r.get("algbw_GBps")),
            _num(r.get("busbw_GBps")),
            _num(r.get("solve_seconds"), ".2f"),
            _text(r.get("error")),
        ]
        for r in cells
    ]
    return _table(headers, rows, left=3)


def _link_class_table(summary: Sequence[Mapping[str, Any]]) -> list[str]:
    headers = ["link class", "GB/s", "alpha (us)", "links", "used", "sends", "busy mean", "busy max"]
    rows = [
        [
            html.escape(str(c["class"])),
            _num(c["bandwidth_GBps"]),
            _num(c["alpha_us"]),
            str(c["links"]),
            str(c["used"]),
            str(c["sends"]),
            _num(c["busy_mean"], ".1%"),
            _num(c["busy_max"], ".1%"),
        ]
        for c in summary
    ]
    return _table(headers, rows, left=1)


def render_html(plan_data: Mapping[str, Any]) -> str:
    """The plan's report as one self-contained HTML page.

    Parameters
    ----------
    plan_data : mapping
        What ``plan.json`` holds (``topology``, ``gpus``, ``request``, ``best``, ``cells``),
        optionally ``switches``, ``links`` (counts), ``note`` and ``plot_note`` (text shown at
        the top and in place of the pictures) and ``plots`` (False: no pictures). A best row
        may carry ``_instance`` and ``_schedule``; the largest size's of each collective is
        drawn (Gantt, utilisation) and summarised per link class. Rows may carry ``chunks``,
        ``switch_model``, ``physical_bound_us`` and ``physical_gap``; absent ones show ``-``.

    Returns
    -------
    str
        The HTML text: no external resource, no script.
    """
    request = plan_data.get("request") or {}
    best = list(plan_data.get("best") or ())
    cells = list(plan_data.get("cells") or ())
    gpus = plan_data.get("gpus")
    name = str(plan_data.get("topology", "?"))
    methods = list(request.get("methods") or ())
    baselines = list(request.get("baselines") or ())
    collectives = list(
        request.get("collectives") or dict.fromkeys(str(r.get("collective")) for r in (*best, *cells))
    )
    want_plots = plan_data.get("plots", True)
    plot_note = plan_data.get("plot_note")
    plt: Any = None
    if want_plots:
        try:
            plt = _pyplot()
        except CCPlanError as exc:
            plot_note = str(exc)

    shape = [f"{gpus} GPUs" if gpus is not None else None]
    for key, what in (("switches", "switches"), ("links", "directed links")):
        if plan_data.get(key) is not None:
            shape.append(f"{plan_data[key]} {what}")
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>Plan for {html.escape(name)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>Plan for {html.escape(name)}</h1>",
        "<p>"
        + html.escape(
            f"{', '.join(s for s in shape if s)}. Candidates: {', '.join(methods) or '-'}; "
            f"baselines: {', '.join(baselines) or 'none'}. C = {request.get('chunks', '-')} chunk(s) per "
            f"contribution, {request.get('time_limit', '-')} s per cell."
        )
        + "</p>",
        "<p>Every schedule passed the independent verifier; every XML file passed the validator against "
        "its instance. Times are those of the alpha-beta model the schedules were computed in, not "
        "measurements. Gap = (time - bound) / time. busbw = algbw &times; 2(n-1)/n (AllReduce), "
        "(n-1)/n (AllGather, ReduceScatter, AllToAll), 1 (Broadcast, Reduce), as nccl-tests reports "
        "it.</p>",
    ]
    if plan_data.get("note"):
        lines.append(f'<p class="note">{html.escape(str(plan_data["note"]))}</p>')
    if plot_note:
        lines.append(f'<p class="note">No pictures: {html.escape(str(plot_note))}</p>')
    for coll in collectives:
        mine = [b for b in best if b.get("collective") == coll]
        rows = [r for r in cells if r.get("collective") == coll]
        lines.append(f'<h2 id="{html.escape(coll)}">{html.escape(coll)}</h2>')
        lines += _best_table(
            mine,
            [b for b in baselines if any(b in (m.get("baselines") or {}) for m in mine)],
            request.get("chunks"),
        )
        if plt is not None:
            fig = bandwidth_figure(coll, rows, mine, methods=[*methods, *baselines], gpus=gpus)
            if fig is not None:
                lines.append(_img(_png(fig), f"{coll}: busbw vs size", scroll=False))
        drawn = [b for b in mine if b.get("_instance") is not None and b.get("_schedule") is not None]
        if drawn:
            largest = max(drawn, key=lambda b: _bytes(b) or 0.0)
            instance, schedule = largest["_instance"], largest["_schedule"]
            n = len(instance.topology.gpus)
            size, method = _text(largest.get("size")), _text(largest.get("method"))
            lines.append(f"<h3>Best schedule at {size} ({method}): links by class</h3>")
            lines += _link_class_table(link_class_summary(instance, schedule, largest.get("makespan_slots")))
            if plt is not None and n <= MAX_PICTURE_GPUS:
                for kind, data in _schedule_pictures(instance, schedule):
                    lines.append(_img(data, f"{coll} {largest.get('size')}: {kind}", scroll=True))
            elif plt is not None:
                lines.append(
                    f"<p>{n} GPUs: no Gantt or per-link picture beyond {MAX_PICTURE_GPUS} GPUs "
                    "(one row per link would be unreadable); the table above summarises the links.</p>"
                )
        lines.append(f"<details><summary>Every cell of {html.escape(coll)}</summary>")
        lines += _cells_table(rows)
        lines.append("</details>")
    lines += ["</body>", "</html>", ""]
    return "\n".join(lines)
