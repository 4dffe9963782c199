"""Shared helpers of the reproduction scripts (``scripts/fig*.py``).

The scripts read OUR sweep tables (``sweeps/results/*.csv``, written by ``ccplan sweep``) and
the published reference values (``ccplan/data/published.json``, the only typed-in numbers),
print the table they plot and write a PNG into ``docs/img/``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as `python scripts/figN.py` from a checkout
    sys.path.insert(0, str(REPO))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ccplan.instances.instance import parse_size  # noqa: E402
from ccplan.sweep import load_results  # noqa: E402

PUBLISHED = REPO / "ccplan" / "data" / "published.json"
RESULTS = REPO / "sweeps" / "results"
IMG = REPO / "docs" / "img"

# Our methods: label -> (display name, colour, marker). Solid lines.
OURS: dict[str, tuple[str, str, str]] = {
    "milp-warm": ("ccplan exact (warm start)", "#d62728", "o"),
    "milp-cold": ("ccplan exact (cold)", "#ff9896", "s"),
    "milp-slow": ("ccplan exact, slow tau", "#8c564b", "D"),
    "mteg": ("ccplan MTEGCCA", "#1f77b4", "^"),
    "layered": ("ccplan layered", "#2ca02c", "v"),
    "heuristic": ("ccplan heuristic search", "#17becf", "P"),
    "hierarchical": ("baseline hierarchical", "#7f7f7f", "x"),
    "ring": ("baseline ring", "#bcbd22", "+"),
    "recursive-doubling": ("baseline recursive doubling", "#e377c2", "1"),
}

# Published series: variant -> (colour, marker). Dashed lines, hollow markers.
PUBLISHED_STYLE: dict[str, tuple[str, str]] = {
    "fast": ("#000000", "o"),
    "early_stop": ("#9467bd", "s"),
    "slow": ("#8c564b", "D"),
    "taccl": ("#ff7f0e", "^"),
}

NOTE_NDV2_2 = "TE-CCL's NDv2 2-chassis runs serve 15 GPUs (GPU 0 modelled as a switch); ours serve all 16."
NOTE_DGX2_ES = (
    "TE-CCL's DGX2 early-stop sizes are 2x their labels (plotted at the label, legend: [DGX2: 2x size])."
)
NOTE_SWITCH = (
    "TE-CCL's switches are cut-through (no buffer); ours store and forward (one extra slot per switch hop)."
)


def parse_args(
    description: str, default_csv: Sequence[str], extra: Iterable[tuple[str, dict[str, Any]]] = ()
) -> argparse.Namespace:
    """``--results CSV ... --out-dir DIR`` plus script-specific options."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--results",
        nargs="+",
        default=[str(RESULTS / c) for c in default_csv],
        help="sweep result tables (CSV) to read",
    )
    p.add_argument("--out-dir", default=str(IMG), help="where the PNGs go (default docs/img)")
    for flag, kwargs in extra:
        p.add_argument(flag, **kwargs)
    return p.parse_args()


def load_published() -> dict[str, Any]:
    """The published reference values (``ccplan/data/published.json``)."""
    data: dict[str, Any] = json.loads(PUBLISHED.read_text())
    return data


def published_series(
    pub: Mapping[str, Any], topology: str, chassis: int, *, field: str, source: str | None = None
) -> list[dict[str, Any]]:
    """Series for one topology/chassis that have ``field``; each gets ``points`` {size: value}."""
    out = []
    for s in pub["series"]:
        if s["topology"] != topology or s["chassis"] != chassis or field not in s:
            continue
        if source is not None and s["source"] != source:
            continue
        points = {size: v for size, v in zip(pub["sizes"], s[field], strict=True) if v is not None}
        out.append({**s, "points": points})
    return out


def claims(pub: Mapping[str, Any], figure: int) -> list[dict[str, Any]]:
    """The paper-text claims quoted for one figure."""
    return [c for c in pub["claims"] if c.get("figure") == figure]


def ok_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows with a verified schedule."""
    return [dict(r) for r in rows if r.get("verified") and r.get("makespan_us") is not None]


def load(paths: Sequence[str]) -> list[dict[str, Any]]:
    rows = load_results(paths)
    if not rows:
        print(f"warning: no rows in {', '.join(paths)} (run the sweep first)", file=sys.stderr)
    return rows


def size_key(size: str) -> float:
    return parse_size(size)


def by(rows: Iterable[Mapping[str, Any]], **match: Any) -> list[dict[str, Any]]:
    """Rows whose columns equal ``match``."""
    return [dict(r) for r in rows if all(r.get(k) == v for k, v in match.items())]


def bound_per_size(rows: Iterable[Mapping[str, Any]], column: str) -> dict[str, float]:
    """Largest value of a bound column per size (rows of the fastest slot rule only)."""
    out: dict[str, float] = {}
    for r in rows:
        if r.get("tau_rule") != "fastest" or r.get(column) is None:
            continue
        out[r["size"]] = max(out.get(r["size"], 0.0), float(r[column]))
    return out


def xy(points: Iterable[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Split ``[(x, y), ...]`` into the x and y lists ``plot`` wants."""
    pts = list(points)
    return [p[0] for p in pts], [p[1] for p in pts]


def fmt(value: Any, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "-"
    if isinstance(value, (int, float)):
        return format(value, spec)
    return str(value)


def print_table(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A markdown table on stdout."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(fmt(v) for v in r) + " |")


def save(fig: Any, name: str, out_dir: str) -> Path:
    path = Path(out_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print(f"\nwrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return path


def machine_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """The machine and exact time limits, for figure footers."""
    cores = sorted({int(r["host_cores"]) for r in rows if r.get("host_cores")})
    limits = sorted(
        {float(r["time_limit"]) for r in rows if str(r.get("method")) == "milp" and r.get("time_limit")}
    )
    lim = f", exact {'/'.join(fmt(x, 'g') for x in limits)} s per cell" if limits else ""
    return f"ccplan runs: {'/'.join(str(c) for c in cores) or '?'}-core machine{lim}"
