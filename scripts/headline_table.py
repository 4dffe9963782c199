"""Headline numbers of docs/results.md: our best schedule per case against the published ones.

    python scripts/headline_table.py

Reads all sweep tables in ``sweeps/results/`` and ``ccplan/data/published.json``; prints
markdown tables (no figure).
"""

from __future__ import annotations

from typing import Any

import _common as cm

# (topology label, published topology, chassis, size)
CASES = [
    ("ndv2-2", "ndv2", 2, "1KB"),
    ("ndv2-2", "ndv2", 2, "64KB"),
    ("ndv2-2", "ndv2", 2, "1MB"),
    ("ndv2-2", "ndv2", 2, "16MB"),
    ("ndv2-2", "ndv2", 2, "1GB"),
    ("ndv2-4", "ndv2", 4, "1MB"),
    ("ndv2-4", "ndv2", 4, "1GB"),
    ("dgx2-2", "dgx2", 2, "1MB"),
    ("dgx2-2", "dgx2", 2, "1GB"),
    ("dgx1", "dgx1", None, "1GB"),
    ("amd-1", "amd", 1, "1GB"),
    ("amd-2", "amd", 2, "1MB"),
    ("amd-2", "amd", 2, "1GB"),
    ("ndv2-10", "ndv2", 10, "1GB"),
]


def main() -> None:
    args = cm.parse_args(
        __doc__.splitlines()[0], ["paper_ndv2.csv", "paper_topologies.csv", "mteg_scaling.csv"]
    )
    pub = cm.load_published()
    rows = cm.load(args.results)
    good = [r for r in cm.ok_rows(rows) if r.get("tau_rule") == "fastest"]
    header = [
        "case",
        "best ours (us)",
        "by",
        "its solve s",
        "MTEGCCA (ours) us / s",
        "exact warm us / s / status",
        "lower bound us",
        "TECCL_fast us / s",
        "ours / TECCL_fast",
    ]
    table: list[list[Any]] = []
    for label, topo, chassis, size in CASES:
        sel = [r for r in good if r["topology"] == label and r["size"] == size]
        if not sel:
            continue
        best = min(sel, key=lambda r: (r["makespan_us"], r["solve_seconds"]))
        mteg = min(
            (r for r in sel if r["method_label"] == "mteg"), key=lambda r: r["makespan_us"], default=None
        )
        warm = min(
            (r for r in sel if r["method_label"] == "milp-warm"), key=lambda r: r["makespan_us"], default=None
        )
        lb = max(
            r["lower_bound_us"]
            for r in rows
            if r["topology"] == label
            and r["size"] == size
            and r.get("lower_bound_us") is not None
            and r.get("tau_rule") == "fastest"
        )
        fast = None
        if chassis is not None:
            fast = next(
                (
                    p
                    for p in cm.published_series(
                        pub, topo, chassis, field="finish_us", source="teccl-provided"
                    )
                    if p["variant"] == "fast"
                ),
                None,
            )
        f_us = fast["points"].get(size) if fast else None
        f_s = None
        if fast is not None:
            i = pub["sizes"].index(size)
            f_s = fast["solver_s"][i]
        table.append(
            [
                f"{label} {size}",
                best["makespan_us"],
                best["method_label"],
                best["solve_seconds"],
                "-"
                if mteg is None
                else f"{cm.fmt(mteg['makespan_us'])} / {cm.fmt(mteg['solve_seconds'], '.3g')}",
                "-"
                if warm is None
                else f"{cm.fmt(warm['makespan_us'])} / {cm.fmt(warm['solve_seconds'], '.3g')} / "
                f"{warm['status']}",
                lb,
                "-" if f_us is None else f"{cm.fmt(f_us)} / {cm.fmt(f_s)}",
                None if f_us is None else best["makespan_us"] / f_us,
            ]
        )
    cm.print_table("Headline numbers (AllGather; ours: 2-core machine)", header, table)
    quoted = [c for c in pub["claims"] if "value" in c and c["method"] == "MTEGCCA"]
    out = []
    for c in quoted:
        label = f"{c['topology']}-{c['chassis']}"
        ours = [
            r for r in rows if r["topology"] == label and r["size"] == "1GB" and r["method_label"] == "mteg"
        ]
        col = "makespan_us" if c["quantity"] == "finish_us" else "solve_seconds"
        out.append([c["id"], label, c["quantity"], c["value"], ours[0].get(col) if ours else None])
    cm.print_table(
        "MTEGCCA paper's quoted numbers vs our MTEGCCA at 1GB",
        ["claim", "case", "quantity", "paper", "ours"],
        out,
    )


if __name__ == "__main__":
    main()
