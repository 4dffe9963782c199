"""Figs. 3 and 5 of the paper: AllGather collective time and algbw vs size on NDv2 (2 chassis).

    python scripts/fig3_fig5_ndv2_time_algbw.py [--results sweeps/results/paper_ndv2.csv]

Reads the sweep table of ``sweeps/paper_ndv2.toml`` and the published TE-CCL / TACCL values,
prints the plotted table and writes ``docs/img/results_fig3_ndv2_time.png`` and
``docs/img/results_fig5_ndv2_algbw.png``.
"""

from __future__ import annotations

from typing import Any

import _common as cm

TOPOLOGY = "ndv2-2"


def main() -> None:
    args = cm.parse_args(__doc__.splitlines()[0], ["paper_ndv2.csv"])
    pub = cm.load_published()
    rows = cm.by(cm.load(args.results), topology=TOPOLOGY)
    good = cm.ok_rows(rows)
    sizes = pub["sizes"]
    x = {s: cm.size_key(s) for s in sizes}
    labels = [m for m in cm.OURS if any(r["method_label"] == m for r in good)]
    ours: dict[str, dict[str, dict[str, Any]]] = {
        m: {r["size"]: r for r in cm.by(good, method_label=m)} for m in labels
    }
    cut = cm.bound_per_size(rows, "cut_bound_us")
    lb = cm.bound_per_size(rows, "lower_bound_us")
    cont = cm.bound_per_size(rows, "bound_us_continuous")
    published = cm.published_series(pub, "ndv2", 2, field="finish_us")
    pub_bw = cm.published_series(pub, "ndv2", 2, field="algbw_GBps")

    # ---- table (time in us, algbw in GB/s)
    header = [
        "size",
        *[f"{m} us" for m in labels],
        *[f"{s['label']} us" for s in published],
        "LB us",
        "cut us",
        "cont. bound us",
    ]
    table = []
    for s in sizes:
        table.append(
            [
                s,
                *[ours[m].get(s, {}).get("makespan_us") for m in labels],
                *[p["points"].get(s) for p in published],
                lb.get(s),
                cut.get(s),
                cont.get(s),
            ]
        )
    cm.print_table("Fig. 3 - NDv2 2 chassis AllGather, collective time (us)", header, table)
    header = ["size", *[f"{m}" for m in labels], *[p["label"] for p in pub_bw]]
    table = [
        [s, *[ours[m].get(s, {}).get("algbw_GBps") for m in labels], *[p["points"].get(s) for p in pub_bw]]
        for s in sizes
    ]
    cm.print_table("Fig. 5 - NDv2 2 chassis AllGather, algbw (GB/s)", header, table)
    fast = next((p for p in published if p["variant"] == "fast"), None)
    if fast is not None:
        header = ["size", *labels]
        table = [
            [
                s,
                *[
                    (ours[m][s]["makespan_us"] / fast["points"][s])
                    if s in ours[m] and s in fast["points"]
                    else None
                    for m in labels
                ],
            ]
            for s in sizes
        ]
        cm.print_table("ratio of our collective time to TECCL_fast (< 1: faster)", header, table)

    # ---- Fig. 3: time, and time relative to TECCL_fast
    fig, (ax, axr) = cm.plt.subplots(2, 1, figsize=(9, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for m in labels:
        name, color, marker = cm.OURS[m]
        pts = sorted((x[s], r["makespan_us"]) for s, r in ours[m].items() if s in x)
        ax.plot(*cm.xy(pts), color=color, marker=marker, label=name, lw=1.5)
        if fast is not None:
            rel = sorted(
                (x[s], r["makespan_us"] / fast["points"][s])
                for s, r in ours[m].items()
                if s in fast["points"]
            )
            if rel:
                axr.plot(*cm.xy(rel), color=color, marker=marker, lw=1.2)
    for p in published:
        color, marker = cm.PUBLISHED_STYLE[p["variant"]]
        pts = sorted((x[s], v) for s, v in p["points"].items())
        ax.plot(
            *cm.xy(pts), color=color, marker=marker, ls="--", mfc="none", label=f"{p['label']} (published)"
        )
        if fast is not None and p is not fast:
            rel = sorted((x[s], v / fast["points"][s]) for s, v in p["points"].items() if s in fast["points"])
            axr.plot(*cm.xy(rel), color=color, marker=marker, ls="--", mfc="none")
    if cut:
        pts = sorted((x[s], v) for s, v in cut.items())
        ax.plot(*cm.xy(pts), color="k", ls=":", lw=1, label="cut bound (slotted, ours)")
    if cont:
        pts = sorted((x[s], v) for s, v in cont.items())
        ax.plot(*cm.xy(pts), color="0.5", ls=":", lw=1, label="lower bound (continuous time)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylabel("collective time (us)")
    ax.set_title("Fig. 3 (reproduced): AllGather on NDv2, 2 chassis")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    axr.axhline(1.0, color="k", lw=0.8)
    axr.set_ylabel("time / TECCL_fast")
    axr.set_xlabel("output buffer size (bytes)")
    axr.grid(True, which="both", alpha=0.3)
    axr.set_xticks([x[s] for s in sizes], sizes, rotation=45)
    fig.text(
        0.01,
        -0.01,
        f"{cm.NOTE_NDV2_2}\n{cm.machine_note(rows)}; published: TE-CCL repo outputs (Gurobi, their machine).",
        fontsize=7,
        va="top",
    )
    cm.save(fig, "results_fig3_ndv2_time.png", args.out_dir)

    # ---- Fig. 5: algbw
    fig, ax = cm.plt.subplots(figsize=(9, 5.5))
    for m in labels:
        name, color, marker = cm.OURS[m]
        pts = sorted((x[s], r["algbw_GBps"]) for s, r in ours[m].items() if r.get("algbw_GBps"))
        ax.plot(*cm.xy(pts), color=color, marker=marker, label=name, lw=1.5)
    for p in pub_bw:
        color, marker = cm.PUBLISHED_STYLE[p["variant"]]
        pts = sorted((x[s], v) for s, v in p["points"].items())
        ax.plot(
            *cm.xy(pts), color=color, marker=marker, ls="--", mfc="none", label=f"{p['label']} (published)"
        )
    if cont:
        pts = sorted((x[s], cm.size_key(s) / (v * 1e3)) for s, v in cont.items() if v > 0)
        ax.plot(
            *cm.xy(pts),
            color="0.5",
            ls=":",
            lw=1,
            label="size / continuous-time lower bound (counts alpha, which slots drop)",
        )
    ax.set_xscale("log")
    ax.set_xticks([x[s] for s in sizes], sizes, rotation=45)
    ax.set_ylabel("algorithmic bandwidth (GB/s)")
    ax.set_xlabel("output buffer size")
    ax.set_title("Fig. 5 (reproduced): AllGather algbw on NDv2, 2 chassis")
    ax.grid(True, which="both", alpha=0.3)
    # Outside the axes: every corner of this plot holds curves that an inside legend hid.
    ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.text(0.01, -0.02, f"{cm.NOTE_NDV2_2}\n{cm.machine_note(rows)}", fontsize=7, va="top")
    cm.save(fig, "results_fig5_ndv2_algbw.png", args.out_dir)


if __name__ == "__main__":
    main()
