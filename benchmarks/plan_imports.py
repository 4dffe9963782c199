"""``ccplan plan`` on every sample machine of ``tests/data/import`` (and two-machine clusters).
Run by hand (never a timed test)::

    python benchmarks/plan_imports.py                         # 1MB and 64MB, 10 s per cell
    python benchmarks/plan_imports.py --sizes 1GB --time-limit 60 --workers 2

Prints one row per cell: instance, method, makespan, bound, gap, seconds (the cell's own
solve time), then the total wall time and the load average (the machine may be shared).
Every schedule was verified by ``ccplan.pipeline.solve``; every XML written passed
``validate-xml`` (``ccplan.plan``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ccplan.instances.importers import Network, import_topology
from ccplan.plan import PlanRequest, run_plan

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "import"
MACHINES: dict[str, tuple[str, Network | None]] = {
    "dgx1-v100": ("nvsmi_dgx1_v100.txt", None),
    "dgx-h100": ("nvsmi_dgx_h100.txt", None),
    "pcie-8gpu": ("nvsmi_pcie_8gpu.txt", None),
    "dgx-a100(nccl)": ("nccl_topo_dgx_a100.xml", None),
    "mi250-8gcd": ("rocm_smi_mi250_8gcd.txt", None),
    "2x-dgx1-4nic-switch": ("nvsmi_dgx1_v100.txt", Network(nodes=2, nics_per_node=4)),
    "2x-h100-8nic-rail": ("nvsmi_dgx_h100.txt", Network(nodes=2, nics_per_node=8, fabric="rail")),
}


def _fmt(value: object, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machines", default=",".join(MACHINES), help="comma-separated subset")
    ap.add_argument("--collectives", default="allgather,allreduce")
    ap.add_argument("--sizes", default="1MB,64MB")
    ap.add_argument("--methods", default="heuristic,milp")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT workers per cell (default 2)")
    args = ap.parse_args()
    header = (
        f"{'instance':<26} {'coll':<10} {'size':>6} {'method':<10} {'makespan us':>12} "
        f"{'bound us':>10} {'gap':>6} {'seconds':>8}"
    )
    print(header)
    print("-" * len(header))
    start = time.perf_counter()
    for name in args.machines.split(","):
        file, network = MACHINES[name]
        topo = import_topology(DATA / file, network=network)
        req = PlanRequest(
            topo,
            tuple(args.collectives.split(",")),
            tuple(args.sizes.split(",")),
            methods=tuple(args.methods.split(",")),
            time_limit=args.time_limit,
            workers=args.workers,
        )
        with tempfile.TemporaryDirectory() as tmp:
            res = run_plan(req, tmp, plots=False)
        best = {(b["collective"], b["size"]): b for b in res.best}
        for r in res.rows:
            b = best.get((r["collective"], r["size"]), {})
            bound = b.get("lower_bound_us")
            gap = None
            if r.get("makespan_us") and bound is not None:
                gap = (r["makespan_us"] - bound) / r["makespan_us"]
            mark = "*" if b.get("method") == r["method"] and r["role"] == "candidate" else " "
            print(
                f"{name:<26} {r['collective']:<10} {r['size']:>6} {r['method'] + mark:<10} "
                f"{_fmt(r.get('makespan_us')):>12} {_fmt(bound):>10} {_fmt(gap, '.1%'):>6} "
                f"{_fmt(r.get('solve_seconds'), '.2f'):>8}"
            )
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\n* = best (kept, exported). total {time.perf_counter() - start:.1f} s; load average {load}")


if __name__ == "__main__":
    main()
