"""AllReduce against size on four machines: busbw of every method and of the lower bound.

    python scripts/fig_allreduce.py [--results sweeps/results/allreduce.csv]

One panel per machine (DGX1, NDv2 2 chassis, DGX2 2 chassis, AMD MI250 1 chassis); for every
method and size the fastest verified row over the chunk counts the sweep tried (what
``--chunks auto`` picks for one run). The bound curve is the best continuous-time lower bound
over those chunk counts, taken as the *smallest* over C (``bound_us_continuous``; each bound
holds for its own chunk count only): no plotted schedule's busbw can lie above it.
busbw follows nccl-tests (algbw x 2(N-1)/N). Prints the table it plots (with the slot gap of
the plotted row) and writes ``docs/img/allreduce_busbw.png``.
"""

from __future__ import annotations

from typing import Any

import _common as cm

ORDER = ["dgx1", "ndv2-2", "dgx2-2", "amd-1"]
METHODS: dict[str, tuple[str, str, str]] = {
    "ring": ("ring", "#bcbd22", "+"),
    "double-binary-tree": ("double binary tree", "#9467bd", "x"),
    "recursive-halving-doubling": ("recursive halving-doubling", "#e377c2", "1"),
    "multitree": ("multitree", "#2ca02c", "v"),
    "heuristic": ("ccplan heuristic", "#17becf", "P"),
}


def _best(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(topology, method, size) -> the verified row with the smallest time over chunk counts."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in cm.ok_rows(rows):
        key = (r["topology"], r["method_label"], r["size"])
        if key not in out or r["makespan_us"] < out[key]["makespan_us"]:
            out[key] = r
    return out


def main() -> None:
    args = cm.parse_args(__doc__.splitlines()[0], ["allreduce.csv"])
    rows = cm.load(args.results)
    best = _best(rows)
    topos = [t for t in ORDER if any(r["topology"] == t for r in rows)]
    sizes = sorted({r["size"] for r in rows}, key=cm.size_key)
    table = []
    fig, axes = cm.plt.subplots(1, max(1, len(topos)), figsize=(4.5 * max(1, len(topos)), 4.2), squeeze=False)
    for ax, topo in zip(axes[0], topos, strict=True):
        factor = None
        for label, (name, colour, marker) in METHODS.items():
            pts = []
            for size in sizes:
                r = best.get((topo, label, size))
                if r is None or r.get("busbw_GBps") is None:
                    continue
                factor = r["busbw_GBps"] / r["algbw_GBps"]
                pts.append((cm.size_key(size), r["busbw_GBps"]))
                table.append((topo, size, label, r["chunks"], r["makespan_slots"], r["lower_bound_slots"],
                              f"{r['gap']:.1%}" if r.get("gap") is not None else "-",
                              r["makespan_us"], r["busbw_GBps"]))
            if pts:
                ax.plot(*cm.xy(pts), marker=marker, color=colour, label=name)
        bound = {}
        for r in rows:
            if r["topology"] == topo and r.get("bound_us_continuous"):
                size = r["size"]
                bound[size] = min(bound.get(size, float("inf")), float(r["bound_us_continuous"]))
        if bound and factor is not None:
            pts = [(cm.size_key(s), cm.size_key(s) / (us * 1e3) * factor) for s, us in sorted(
                bound.items(), key=lambda kv: cm.size_key(kv[0]))]
            ax.plot(*cm.xy(pts), linestyle="--", color="black", label="lower bound (busbw ceiling)")
        ax.set_xscale("log")
        ax.set_title(topo)
        ax.set_xlabel("AllReduce size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("AllReduce busbw vs size (" + cm.machine_note(rows) + ")", fontsize=9)
    cm.print_table(
        "AllReduce: fastest chunk count per method and size",
        ["topology", "size", "method", "C", "makespan (slots)", "bound (slots)", "gap", "time (us)", "busbw"],
        table,
    )
    cm.save(fig, "allreduce_busbw.png", args.out_dir)


if __name__ == "__main__":
    main()
