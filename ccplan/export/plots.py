"""Pictures of schedules and solver runs (matplotlib, Agg backend, imported lazily).

- :func:`gantt`: one row per link that carries something, one bar per send over its occupancy
  window ``t .. t+l-1`` (canonical slot semantics), coloured by the chunk's source; the
  propagation delay ``delta`` (chunk in flight, link free) is drawn as a faint tail.
- :func:`utilization`: busy slots / makespan for every link.
- :func:`plot_progress`: the incumbent and bound of a solver run from its progress CSV
  (columns ``seconds, objective, bound``).

The output format follows the file suffix (``.png``, ``.svg``, ``.pdf``).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from ccplan.errors import CCPlanError, ValidationError
from ccplan.instances.instance import Instance
from ccplan.parsing import plain_number
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import verify

FORMATS: tuple[str, ...] = (".png", ".svg", ".pdf")


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or a one-line error naming the install."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CCPlanError(
            "plotting needs matplotlib, which is not installed: pip install matplotlib"
        ) from None
    return plt


def _target(path: str | Path) -> Path:
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise ValidationError(f"plot path {str(p)!r}: suffix must be one of {', '.join(FORMATS)}")
    return p


def _makespan(instance: Instance, schedule: Schedule) -> int:
    report = verify(instance, schedule)
    if report.makespan_slots is not None:
        return max(1, report.makespan_slots)
    latency = instance.latency
    index = instance.topology.link_index
    return max(
        (s.slot + int(latency[index[(s.src, s.dst)]]) for s in schedule.sends if (s.src, s.dst) in index),
        default=1,
    )


def _source_colors(plt: Any, sources: list[int]) -> dict[int, Any]:
    cmap = plt.get_cmap("tab20" if len(sources) > 10 else "tab10")
    return {s: cmap(i % cmap.N) for i, s in enumerate(sources)}


def gantt(instance: Instance, schedule: Schedule, path: str | Path, *, title: str | None = None) -> Path:
    """Link-by-slot Gantt chart of ``schedule``.

    Parameters
    ----------
    instance, schedule
    path : str or Path
        Output file; ``.png``, ``.svg`` or ``.pdf``.
    title : str, optional
        Defaults to the instance description, method and makespan.

    Returns
    -------
    Path
        The file written.
    """
    target = _target(path)
    plt = _pyplot()
    topo = instance.topology
    index = topo.link_index
    occupancy, latency = instance.occupancy, instance.latency
    used = sorted({(s.src, s.dst) for s in schedule.sends if (s.src, s.dst) in index}, key=lambda k: index[k])
    row = {key: i for i, key in enumerate(used)}
    makespan = _makespan(instance, schedule)
    sources = sorted({s.chunk[0] for s in schedule.sends})
    colors = _source_colors(plt, sources)

    width = min(40.0, max(8.0, 2.0 + 0.45 * makespan))
    height = min(60.0, max(3.0, 1.2 + 0.32 * max(1, len(used))))
    fig, ax = plt.subplots(figsize=(width, height))
    label_chunks = width / max(1, makespan) >= 0.4
    # One collection per link row, not one per send: matplotlib re-scales the view on every
    # collection added, which made a 64-GPU ring's 4000 sends take over a minute.
    bars: dict[int, tuple[list[tuple[int, int]], list[Any]]] = {}
    tails: dict[int, tuple[list[tuple[int, int]], list[Any]]] = {}
    for s in schedule.sends:
        key = (s.src, s.dst)
        if key not in row:
            continue
        li = index[key]
        y = row[key]
        occ, lat = int(occupancy[li]), int(latency[li])
        color = colors[s.chunk[0]]
        spans, fills = bars.setdefault(y, ([], []))
        spans.append((s.slot, occ))
        fills.append(color)
        if lat > occ:
            spans, fills = tails.setdefault(y, ([], []))
            spans.append((s.slot + occ, lat - occ))
            fills.append(color)
        if label_chunks:
            ax.text(s.slot + occ / 2, y, f"{s.chunk[0]}.{s.chunk[1]}", ha="center", va="center", fontsize=7)
    # the faint tails first: a link is free while a chunk is in flight, so a later send's bar
    # may start inside a tail and is drawn over it
    for y, (spans, fills) in tails.items():
        ax.broken_barh(spans, (y - 0.15, 0.3), facecolors=fills, alpha=0.3)
    for y, (spans, fills) in bars.items():
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=fills, edgecolors="black", linewidth=0.5)
    ax.set_yticks(range(len(used)))
    ax.set_yticklabels([f"{u}\u2192{v}" for u, v in used], fontsize=8)
    ax.set_ylim(-0.7, len(used) - 0.3)
    ax.invert_yaxis()
    ax.set_xlim(0, makespan)
    ax.set_xlabel(f"slot (tau = {plain_number(instance.tau_us)} us)")
    ax.set_ylabel("link")
    step = max(1, math.ceil(makespan / 40))
    ax.set_xticks(range(0, makespan + 1, step))
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    ax.axvline(makespan, color="red", linewidth=1)
    if len(sources) <= 20:
        handles = [plt.Rectangle((0, 0), 1, 1, color=colors[s]) for s in sources]
        ax.legend(
            handles,
            [f"src {s}" for s in sources],
            title="chunk source",
            fontsize=7,
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.005, 1.0),
            borderaxespad=0,
        )
    method = f" [{schedule.method}]" if schedule.method else ""
    ax.set_title(title or f"{instance.describe()}{method}: makespan {makespan} slots", fontsize=10)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def utilization(
    instance: Instance, schedule: Schedule, path: str | Path, *, title: str | None = None
) -> Path:
    """Per-link utilisation (occupied slots / makespan) as a bar plot, one bar per link.

    Returns
    -------
    Path
        The file written.
    """
    target = _target(path)
    plt = _pyplot()
    topo = instance.topology
    index = topo.link_index
    occupancy = instance.occupancy
    makespan = _makespan(instance, schedule)
    busy = [0] * topo.num_links
    for s in schedule.sends:
        li = index.get((s.src, s.dst))
        if li is not None:
            busy[li] += int(occupancy[li])
    share = [b / makespan for b in busy]
    labels = [f"{lk.src}\u2192{lk.dst}" for lk in topo.links]
    n = len(labels)
    fig, ax = plt.subplots(figsize=(min(40.0, max(6.0, 0.22 * n + 1.5)), 4.0))
    bw = topo.bandwidth
    levels = sorted(set(bw.tolist()))
    cmap = plt.get_cmap("viridis")
    color_of = {b: cmap(0.15 + 0.7 * i / max(1, len(levels) - 1)) for i, b in enumerate(levels)}
    ax.bar(range(n), share, color=[color_of[b] for b in bw.tolist()], edgecolor="black", linewidth=0.3)
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("busy slots / makespan")
    ax.set_xlim(-0.6, n - 0.4)
    handles = [plt.Rectangle((0, 0), 1, 1, color=color_of[b]) for b in levels]
    ax.legend(
        handles,
        [f"{b:g} GB/s" for b in levels],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
        borderaxespad=0,
    )
    mean = sum(share) / max(1, n)
    ax.axhline(mean, color="red", linewidth=0.8, linestyle="--")
    ax.set_title(
        title or f"{instance.describe()}: link utilisation (mean {mean:.2f}, makespan {makespan})",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def _read_progress(csv_path: str | Path) -> tuple[list[float], list[float | None], list[float | None]]:
    p = Path(csv_path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ValidationError(f"progress file {str(p)!r}: {exc.strerror or exc}") from None
    reader = csv.DictReader(text.splitlines())
    fields = reader.fieldnames or []
    for column in ("seconds", "objective", "bound"):
        if column not in fields:
            raise ValidationError(f"progress file {str(p)!r}: missing column {column!r} (has {fields})")
    secs: list[float] = []
    obj: list[float | None] = []
    bnd: list[float | None] = []

    def num(raw: str | None, line: int, column: str) -> float | None:
        if raw is None or raw.strip() in ("", "nan", "None", "inf", "-inf"):
            return None
        try:
            return float(raw)
        except ValueError:
            raise ValidationError(
                f"progress file {str(p)!r} line {line}: {column}={raw!r} is not a number"
            ) from None

    for line, rec in enumerate(reader, start=2):
        t = num(rec["seconds"], line, "seconds")
        if t is None:
            raise ValidationError(f"progress file {str(p)!r} line {line}: seconds is empty")
        secs.append(t)
        obj.append(num(rec["objective"], line, "objective"))
        bnd.append(num(rec["bound"], line, "bound"))
    if not secs:
        raise ValidationError(f"progress file {str(p)!r}: no data rows")
    return secs, obj, bnd


def plot_progress(csv_path: str | Path, path: str | Path, *, title: str | None = None) -> Path:
    """Incumbent (objective) and bound over time from a solver progress CSV, as step lines.

    Returns
    -------
    Path
        The file written.
    """
    target = _target(path)
    secs, obj, bnd = _read_progress(csv_path)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    for values, label, color in ((obj, "incumbent (objective)", "tab:blue"), (bnd, "bound", "tab:orange")):
        xs = [t for t, v in zip(secs, values, strict=True) if v is not None]
        ys = [v for v in values if v is not None]
        if xs:
            ax.step(xs, ys, where="post", label=label, color=color, marker="o", markersize=3)
    last_obj = next((v for v in reversed(obj) if v is not None), None)
    last_bnd = next((v for v in reversed(bnd) if v is not None), None)
    ax.set_xlabel("seconds")
    ax.set_ylabel("makespan (slots)")
    ax.grid(linestyle=":", linewidth=0.5)
    ax.legend(fontsize=8)
    gap = ""
    if last_obj is not None and last_bnd is not None and last_obj:
        gap = f", final gap {(last_obj - last_bnd) / abs(last_obj):.1%}"
    ax.set_title(title or f"solver progress ({Path(csv_path).name}{gap})", fontsize=10)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target
