"""Fig. 9 of the paper: MTEGCCA solve time on NDv2 with 2 .. 10 chassis (AllGather).

    python scripts/fig9_mteg_scaling.py [--results sweeps/results/mteg_scaling.csv]

Left: solve time of our engines vs chassis, with the MTEGCCA paper's quoted times (4 and 10
chassis) and TE-CCL's 4-chassis times. Right: the collective time the schedules achieve, with
our lower bounds and TE-CCL's 4-chassis results. Writes ``docs/img/results_fig9_mteg_scaling.png``.
"""

from __future__ import annotations

import _common as cm

VARIANT_OF = {"TECCL_fast": "fast", "TECCL_early stop": "early_stop", "TECCL_slow": "slow"}


def main() -> None:
    args = cm.parse_args(
        __doc__.splitlines()[0],
        ["mteg_scaling.csv"],
        [("--size", {"default": "1GB", "help": "size to plot (default 1GB)"})],
    )
    pub = cm.load_published()
    rows = [r for r in cm.load(args.results) if r["topology_name"] == "ndv2" and r["size"] == args.size]
    for r in rows:
        r["chassis"] = (r.get("topology_params") or {}).get("chassis")
    chassis = sorted({r["chassis"] for r in rows if r["chassis"] is not None})
    labels = [m for m in cm.OURS if any(r["method_label"] == m for r in rows)]
    timed = [r for r in rows if r.get("solve_seconds") is not None and r.get("status") != "error"]
    good = cm.ok_rows(rows)

    header = [
        "chassis",
        "GPUs",
        *[f"{m} s" for m in labels],
        *[f"{m} ms" for m in labels],
        "LB ms",
        "cont. bound ms",
    ]
    table = []
    for c in chassis:
        sel = [r for r in rows if r["chassis"] == c]
        gpus = next((r["gpus"] for r in sel if r.get("gpus")), None)
        solve = [
            next((r["solve_seconds"] for r in timed if r["chassis"] == c and r["method_label"] == m), None)
            for m in labels
        ]
        ms = [
            next((r["makespan_us"] / 1e3 for r in good if r["chassis"] == c and r["method_label"] == m), None)
            for m in labels
        ]
        lb = max((r["lower_bound_us"] for r in sel if r.get("lower_bound_us") is not None), default=None)
        cont = max(
            (r["bound_us_continuous"] for r in sel if r.get("bound_us_continuous") is not None), default=None
        )
        table.append(
            [c, gpus, *solve, *ms, None if lb is None else lb / 1e3, None if cont is None else cont / 1e3]
        )
    cm.print_table(
        f"Fig. 9 - NDv2 AllGather {args.size}: solve time (s) and collective time (ms)", header, table
    )
    quoted = [c for c in cm.claims(pub, 9) if c["quantity"] == "solver_s"]
    cm.print_table(
        "published (MTEGCCA paper text, Fig. 9)",
        ["chassis", "method", "solve s"],
        [[c["chassis"], c["method"], c["value"]] for c in quoted],
    )

    fig, (ax, ax2) = cm.plt.subplots(1, 2, figsize=(15, 5))
    for m in labels:
        name, color, marker = cm.OURS[m]
        pts = sorted((r["chassis"], max(r["solve_seconds"], 1e-3)) for r in timed if r["method_label"] == m)
        if pts:
            ax.plot(*cm.xy(pts), color=color, marker=marker, label=name)
        pts = sorted((r["chassis"], r["makespan_us"] / 1e3) for r in good if r["method_label"] == m)
        if pts:
            ax2.plot(*cm.xy(pts), color=color, marker=marker, label=name)
    mteg = sorted((c["chassis"], c["value"]) for c in quoted if c["method"] == "MTEGCCA")
    if mteg:
        ax.plot(
            *cm.xy(mteg),
            color="#1f77b4",
            marker="*",
            ms=12,
            ls="none",
            mfc="none",
            label="MTEGCCA (paper text)",
        )
    for c in quoted:
        if c["method"] in VARIANT_OF:
            color, marker = cm.PUBLISHED_STYLE[VARIANT_OF[c["method"]]]
            ax.plot(
                [c["chassis"]],
                [c["value"]],
                color=color,
                marker=marker,
                mfc="none",
                ls="none",
                ms=9,
                label=f"{c['method']} (published)",
            )
    for p in cm.published_series(pub, "ndv2", 4, field="finish_us", source="teccl-provided"):
        if args.size in p["points"]:
            color, marker = cm.PUBLISHED_STYLE[p["variant"]]
            ax2.plot(
                [4],
                [p["points"][args.size] / 1e3],
                color=color,
                marker=marker,
                mfc="none",
                ls="none",
                ms=9,
                label=f"{p['label']} (published)",
            )
    lb = sorted(
        {(r["chassis"], r["lower_bound_us"] / 1e3) for r in rows if r.get("lower_bound_us") is not None}
    )
    if lb:
        best: dict[int, float] = {}
        for c, v in lb:
            best[c] = max(best.get(c, 0.0), v)
        ax2.plot(list(best), list(best.values()), "k:", label="lower bound (slotted)")
    ax.set_yscale("log")
    ax.set_xlabel("NDv2 chassis (8 GPUs each)")
    ax.set_ylabel("solve time (s)")
    ax.set_title(f"Fig. 9 (reproduced): solve time, AllGather {args.size}")
    ax.grid(True, which="both", alpha=0.3)
    # Outside the axes: inside, the legend covered the published 4-chassis points.
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax2.set_xlabel("NDv2 chassis (8 GPUs each)")
    ax2.set_ylabel("collective time (ms)")
    ax2.set_title(f"collective time of the same schedules, AllGather {args.size}")
    ax2.grid(True, alpha=0.3)
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.text(
        0.01,
        -0.01,
        f"{cm.machine_note(rows)}. Published solve times: their machines (TE-CCL: Gurobi). {cm.NOTE_SWITCH}",
        fontsize=7,
        va="top",
    )
    cm.save(fig, "results_fig9_mteg_scaling.png", args.out_dir)


if __name__ == "__main__":
    main()
