"""Solve time and gap to the lower bound against GPUs (AllGather, C = 1), per family and method.

    python benchmarks/scale.py --instances dgx2-2 dgx2-4 amd-2 amd-4 \\
        --methods mteg layered cut-aware --csv sweeps/results/scale.csv
    python benchmarks/scale.py --instances torus8 torus16 ndv2-8 ndv2-16 \\
        --methods mteg layered --csv sweeps/results/scale.csv
    python scripts/fig_scale.py [--results sweeps/results/scale.csv]

Reads the rows ``benchmarks/scale.py --csv`` appended (one per instance and method; the
makespan was accepted by the verifier there), prints them and writes
``docs/img/scale_time_gap.png``: left, the engine's seconds against GPUs (log-log); right, the
gap ``(makespan - bound) / makespan`` in percent (as ``Result.gap`` and the CLI). A family is
the instance name without its size (``torus32`` -> torus, ``ndv2-32`` -> ndv2).
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

import _common as cm

COLOURS = {"layered": "#2ca02c", "mteg": "#1f77b4", "cut-aware": "#d62728"}
MARKERS = {
    "torus": "o", "mesh": "s", "ndv2": "^", "dgx2": "D", "amd": "v", "leaf-spine": "P", "fat-tree": "X",
}


def family(instance: str) -> str:
    """``torus32`` -> ``torus``, ``ndv2-32`` -> ``ndv2``, ``leaf-spine-16x16`` -> ``leaf-spine``."""
    return re.sub(r"-?[0-9x]+$", "", instance)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(cm.RESULTS / "scale.csv"))
    ap.add_argument("--out-dir", default=str(cm.IMG))
    args = ap.parse_args()
    with Path(args.results).open() as fh:
        rows = list(csv.DictReader(fh))
    table = []
    series: dict[tuple[str, str], list[tuple[int, float, float | None]]] = {}
    for r in rows:
        gpus, secs, span = int(r["gpus"]), float(r["seconds"]), int(r["makespan"])
        bound = int(r["bound"]) if r.get("bound") else None
        gap = None if not bound else 100.0 * (span - bound) / span
        series.setdefault((family(r["instance"]), r["method"]), []).append((gpus, secs, gap))
        table.append([r["instance"], r["method"], gpus, span, bound, gap, secs, float(r["peak_mb"]),
                      float(r["load"])])
    cm.print_table("AllGather at scale (benchmarks/scale.py)",
                   ["instance", "method", "GPUs", "makespan", "bound", "gap %", "seconds", "peak MB", "load"],
                   table)
    fig, (left, right) = cm.plt.subplots(1, 2, figsize=(11, 4.2))
    for (fam, method), pts in sorted(series.items()):
        pts.sort()
        style = {"color": COLOURS.get(method, "grey"), "marker": MARKERS.get(fam, "."),
                 "label": f"{fam} {method}"}
        left.plot([p[0] for p in pts], [p[1] for p in pts], **style)
        with_gap = [p for p in pts if p[2] is not None]
        right.plot([p[0] for p in with_gap], [p[2] for p in with_gap], **style)
    left.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="engine seconds (shared 2-core machine)",
             title="solve time")
    right.set(xscale="log", xlabel="GPUs", ylabel="gap to the lower bound (%)", title="gap")
    right.axhline(10, color="grey", lw=0.8, ls=":")
    left.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    print(cm.save(fig, "scale_time_gap.png", args.out_dir))


if __name__ == "__main__":
    main()
