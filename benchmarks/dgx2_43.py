"""Cross-check of the flow bound on DGX2 2 chassis 1 MB: ask CP-SAT alone "D <= 43?" (run by hand).

::

    python benchmarks/dgx2_43.py --time-limit 600      # 2 CP-SAT workers

The flow-over-time bound (docs/exact.md section 7.1) says 43 slots are infeasible (GPU 1's LP
carries 30 of its 31 chunks by slot 43). This asks the solver the same question without it:
the ``milp`` engine with ``strategy="descending"`` from a 44-slot schedule (the warm start),
``flow_bound=False`` and without the ``D >= LB`` row (``prove``-like: a "no" is CP-SAT's own
proof), and prints what CP-SAT answered and when.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from ccplan.contract import SolveOptions
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import dgx2
from ccplan.pipeline.solve import solve


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--time-limit", type=float, default=600.0)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    topo = dgx2(2)
    inst = make_instance(topo, make_collective("allgather", topo), "1MB")
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    t0 = time.perf_counter()
    res = solve(inst, "milp", SolveOptions(time_limit=args.time_limit, workers=args.workers, extra={
        "strategy": "descending", "flow_bound": False, "lower_bound_cut": False}))
    wall = time.perf_counter() - t0
    det = res.details
    questions = [{k: st.get(k) for k in ("horizon", "question", "status", "seconds")}
                 for st in det["steps"] if "question" in st]
    print(json.dumps({"status": res.status, "makespan": res.makespan_slots, "bound": res.lower_bound_slots,
                      "warm_start": det.get("heuristic_makespan"), "proof": det.get("proof"),
                      "questions": questions, "wall_s": round(wall, 1), "load_before": load,
                      "load_after": "/".join(f"{x:.1f}" for x in os.getloadavg())}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
