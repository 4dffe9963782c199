"""Figs. 6, 7, 8 of the paper: AllGather time, solve time and algbw across topologies.

    python scripts/fig6_8_topologies.py [--results sweeps/results/paper_topologies.csv]

DGX1, DGX2 (2 chassis), NDv2 (2 and 4 chassis), AMD MI250 (1 and 2 chassis), one panel per
size in the table (the sweep has 1 MB and 1 GB). Published values exist only for NDv2 2/4 and
DGX2 (TE-CCL's repository outputs, TACCL) and, as single numbers quoted in the MTEGCCA paper's
text, for AMD 2 chassis and NDv2 4 chassis (size not stated there; drawn in the 1 GB panel).
Writes ``docs/img/results_fig6_topologies_time.png``, ``..._fig7_topologies_solve_time.png``
and ``..._fig8_topologies_algbw.png``.
"""

from __future__ import annotations

from typing import Any

import _common as cm
import numpy as np

ORDER = ["dgx1", "dgx2-2", "ndv2-2", "ndv2-4", "amd-1", "amd-2"]

METRICS = {
    # key: (our column, published field, claim quantity, y label, log scale, file)
    "time": (
        "makespan_us",
        "finish_us",
        "finish_us",
        "collective time (us)",
        True,
        "results_fig6_topologies_time.png",
    ),
    "solve": (
        "solve_seconds",
        "solver_s",
        "solver_s",
        "solve time (s)",
        True,
        "results_fig7_topologies_solve_time.png",
    ),
    "algbw": ("algbw_GBps", "algbw_GBps", None, "algbw (GB/s)", False, "results_fig8_topologies_algbw.png"),
}
FIG = {"time": 6, "solve": 7, "algbw": 8}


def _topo_key(rows: list[dict[str, Any]], label: str) -> tuple[str, int | None]:
    for r in rows:
        if r["topology"] == label:
            params = r.get("topology_params") or {}
            chassis = params.get("chassis")
            if chassis is None and r["topology_name"] == "dgx2":
                chassis = 2
            return r["topology_name"], chassis
    return label, None


def main() -> None:
    args = cm.parse_args(__doc__.splitlines()[0], ["paper_topologies.csv"])
    pub = cm.load_published()
    rows = cm.load(args.results)
    topos = [t for t in ORDER if any(r["topology"] == t for r in rows)]
    topos += sorted({r["topology"] for r in rows} - set(topos))
    sizes = sorted({r["size"] for r in rows}, key=cm.size_key)
    labels = [m for m in cm.OURS if any(r["method_label"] == m for r in rows)]
    keys = {t: _topo_key(rows, t) for t in topos}

    for metric, (col, pfield, qty, ylabel, log, fname) in METRICS.items():
        ok = [
            r
            for r in rows
            if r.get(col) is not None
            and r.get("status") != "error"
            and (metric == "solve" or r.get("verified"))
        ]
        fig, axes = cm.plt.subplots(len(sizes), 1, figsize=(12, 4.2 * max(1, len(sizes))), squeeze=False)
        for ax, size in zip(axes[:, 0], sizes, strict=True):
            series: list[tuple[str, str, str, dict[str, float]]] = []  # (label, colour, hatch, topo->value)
            for m in labels:
                vals = {r["topology"]: r[col] for r in ok if r["method_label"] == m and r["size"] == size}
                series.append((cm.OURS[m][0], cm.OURS[m][1], "", vals))
            variants: dict[str, tuple[str, dict[str, float]]] = {}
            for t in topos:
                name, chassis = keys[t]
                if chassis is None:
                    continue
                for p in (
                    cm.published_series(pub, name, chassis, field=pfield, source="teccl-provided")
                    + cm.published_series(pub, name, chassis, field=pfield, source="taccl-shipped")
                    + (
                        []
                        if metric != "algbw"
                        else [
                            p
                            for p in cm.published_series(
                                pub, name, chassis, field=pfield, source="teccl-figures"
                            )
                        ]
                    )
                ):
                    if size in p["points"]:
                        # One series per published variant; DGX2's early stop solved 2x the data.
                        dgx2_es = p["variant"] == "early_stop" and any(keys[u][0] == "dgx2" for u in topos)
                        key = p["label"] + " (published)" + (" [DGX2: 2x size]" if dgx2_es else "")
                        variants.setdefault(key, (p["variant"], {}))[1][t] = p["points"][size]
            for vlabel, (variant, vals) in variants.items():
                series.append((vlabel, cm.PUBLISHED_STYLE[variant][0], "//", vals))
            if qty is not None and size == "1GB":
                vals = {}
                for c in cm.claims(pub, FIG[metric]) + cm.claims(pub, 9):
                    if c["quantity"] == qty and c["method"] == "MTEGCCA" and "value" in c:
                        t = f"{c['topology']}-{c['chassis']}"
                        if t in topos:
                            vals[t] = c["value"]
                if vals:
                    series.append(("MTEGCCA paper (text)", "#1f77b4", "xx", vals))
            n = max(1, len(series))
            width = 0.85 / n
            xs = np.arange(len(topos))
            for i, (lab, color, hatch, vals) in enumerate(series):
                ys = [vals.get(t, np.nan) for t in topos]
                ax.bar(
                    xs - 0.425 + (i + 0.5) * width,
                    ys,
                    width,
                    label=lab,
                    color="white" if hatch else color,
                    edgecolor=color,
                    hatch=hatch,
                    lw=0.8,
                )
            if metric == "time":
                for bound_col, style, blabel in (
                    ("cut_bound_us", "k_", "cut bound (slotted)"),
                    ("bound_us_continuous", "k.", "lower bound (continuous)"),
                ):
                    bvals = cm.bound_per_size([r for r in rows if r["size"] == size], bound_col)
                    per_topo = [
                        max(
                            (
                                r[bound_col]
                                for r in rows
                                if r["topology"] == t
                                and r["size"] == size
                                and r.get(bound_col) is not None
                                and r.get("tau_rule") == "fastest"
                            ),
                            default=np.nan,
                        )
                        for t in topos
                    ]
                    if bvals:
                        ax.plot(xs, per_topo, style, ms=14 if style == "k_" else 6, label=blabel)
            ax.set_xticks(xs, topos)
            if log:
                ax.set_yscale("log")
            ax.set_ylabel(ylabel)
            ax.set_title(f"Fig. {FIG[metric]} (reproduced): AllGather {size}")
            ax.grid(True, axis="y", which="both", alpha=0.3)
            ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0))

            header = ["method", *topos]
            table = [[lab, *[vals.get(t) for t in topos]] for lab, _, _, vals in series]
            cm.print_table(f"Fig. {FIG[metric]} - {ylabel}, AllGather {size}", header, table)
        notes = [cm.NOTE_NDV2_2, cm.NOTE_DGX2_ES, cm.NOTE_SWITCH, cm.machine_note(rows)]
        fig.text(0.01, -0.005, "\n".join(notes), fontsize=7, va="top")
        fig.tight_layout()
        cm.save(fig, fname, args.out_dir)


if __name__ == "__main__":
    main()
