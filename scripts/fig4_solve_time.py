"""Fig. 4 of the paper: solve time vs size for AllGather on NDv2 (2 chassis).

    python scripts/fig4_solve_time.py [--results sweeps/results/paper_ndv2.csv]

Our solve times (wall clock of one ``solve`` call on the 2-core development machine) against
TE-CCL's (Gurobi, their machine: the repository's provided outputs and the paper-era arrays
that the MTEGCCA paper's Fig. 4 quotes) and TACCL's. Writes
``docs/img/results_fig4_ndv2_solve_time.png``.
"""

from __future__ import annotations

import _common as cm

TOPOLOGY = "ndv2-2"


def main() -> None:
    args = cm.parse_args(__doc__.splitlines()[0], ["paper_ndv2.csv"])
    pub = cm.load_published()
    rows = cm.by(cm.load(args.results), topology=TOPOLOGY)
    # A solve that ended in an error has no meaningful time; a feasible/optimal one does.
    timed = [r for r in rows if r.get("solve_seconds") is not None and r.get("status") != "error"]
    sizes = pub["sizes"]
    x = {s: cm.size_key(s) for s in sizes}
    labels = [m for m in cm.OURS if any(r["method_label"] == m for r in timed)]
    ours = {m: {r["size"]: r for r in cm.by(timed, method_label=m)} for m in labels}
    published = cm.published_series(pub, "ndv2", 2, field="solver_s")

    header = ["size", *labels, *[p["label"] for p in published]]
    table = [
        [
            s,
            *[ours[m].get(s, {}).get("solve_seconds") for m in labels],
            *[p["points"].get(s) for p in published],
        ]
        for s in sizes
    ]
    cm.print_table("Fig. 4 - NDv2 2 chassis AllGather, solve time (s)", header, table)
    exact = [r for r in timed if r["method"] == "milp"]
    if exact:
        header = ["size", "method", "status", "makespan", "LB", "solve s", "incumbent from", "cpsat status"]
        table = [
            [
                r["size"],
                r["method_label"],
                r["status"],
                r["makespan_slots"],
                r["lower_bound_slots"],
                r["solve_seconds"],
                (r.get("details") or {}).get("incumbent_source"),
                (r.get("details") or {}).get("cpsat_status"),
            ]
            for r in sorted(exact, key=lambda r: (cm.size_key(r["size"]), r["method_label"]))
        ]
        cm.print_table("exact engine cells", header, table)

    fig, ax = cm.plt.subplots(figsize=(9, 5.5))
    for m in labels:
        name, color, marker = cm.OURS[m]
        pts = sorted((x[s], max(r["solve_seconds"], 1e-3)) for s, r in ours[m].items() if s in x)
        ax.plot(*cm.xy(pts), color=color, marker=marker, label=name, lw=1.5)
    for p in published:
        color, marker = cm.PUBLISHED_STYLE[p["variant"]]
        paper_era = p["source"] == "teccl-figures"
        pts = sorted((x[s], v) for s, v in p["points"].items())
        ax.plot(
            *cm.xy(pts),
            color=color,
            marker=marker,
            ls=":" if paper_era else "--",
            mfc="none",
            lw=1,
            label=f"{p['label']} (published)",
        )
    limits = sorted({r["time_limit"] for r in timed if r["method"] == "milp" and r.get("time_limit")})
    for lim in limits:
        ax.axhline(lim, color="#d62728", lw=0.6, alpha=0.5)
        ax.text(x[sizes[0]], lim * 1.1, f"our exact time limit {lim:g} s", fontsize=7, color="#d62728")
    ax.axhline(7200, color="k", lw=0.6, alpha=0.4)
    ax.text(x[sizes[0]], 7200 * 1.1, "TE-CCL time limit 2 h", fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([x[s] for s in sizes], sizes, rotation=45)
    ax.set_ylabel("solve time (s)")
    ax.set_xlabel("output buffer size")
    ax.set_title("Fig. 4 (reproduced): solve time, AllGather on NDv2, 2 chassis")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.text(
        0.01,
        -0.02,
        f"{cm.NOTE_NDV2_2}\n{cm.machine_note(rows)}; published solve times are Gurobi on "
        "TE-CCL's machine (dashed: repository outputs, dotted: paper-era arrays).",
        fontsize=7,
        va="top",
    )
    cm.save(fig, "results_fig4_ndv2_solve_time.png", args.out_dir)


if __name__ == "__main__":
    main()
