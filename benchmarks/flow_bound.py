"""The flow-over-time bound (``ccplan/bounds/flow_lp.py``) on the issue's large instances (by hand).

::

    python benchmarks/flow_bound.py                     # all five, every symmetry class
    python benchmarks/flow_bound.py --instances dgx2-4ch-1GB --time-limit 60
    python benchmarks/flow_bound.py --search bisect     # flow_bound_between instead
    python benchmarks/flow_bound.py --methods cut-aware,layered,mteg   # what solve reports

``--methods``: ``ccplan.pipeline.solve`` per instance and method, as a user gets it (the
gated bound of :func:`ccplan.bounds.flow_lp.gated_flow_bound` included): makespan, the analytic
bound, the reported bound and gap, the LPs it solved (None: gated out) and the seconds of the
engine and of the whole solve.

For each instance: the analytic bound (``ccplan.bounds.lower_bound_slots``), then
:func:`ccplan.bounds.flow_lp.flow_bound` from it, over one destination per colour-refinement
class (:func:`ccplan.bounds.flow_lp.destination_order` without a schedule), capped at
``--upper`` (the best known makespan; its ``D`` needs no LP). Columns: instance, analytic,
flow bound, the destination that refuted the last horizon, LPs, seconds, whether every
class was checked, load average before/after (the machine may be shared: say so).
"""

from __future__ import annotations

import argparse
import os
import time

from ccplan.bounds import lower_bound_slots
from ccplan.bounds.flow_lp import destination_order, flow_bound, flow_bound_between
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import amd, dgx2, ndv2
from ccplan.pipeline.solve import solve

INSTANCES = {
    # name: (topology builder, chassis, size, best known makespan)
    "amd-2ch-1GB": (amd, 2, "1GB", 50),
    "dgx2-2ch-1MB": (dgx2, 2, "1MB", 44),
    "ndv2-2ch-64KB": (ndv2, 2, "64KB", 76),
    "dgx2-4ch-1GB": (dgx2, 4, "1GB", 69),
    "amd-4ch-1GB": (amd, 4, "1GB", 84),
}


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", default=",".join(INSTANCES))
    p.add_argument("--time-limit", type=float, default=None, help="seconds per instance")
    p.add_argument("--search", choices=("step", "bisect"), default="step",
                   help="flow_bound (one D at a time) or flow_bound_between (bisection)")
    p.add_argument("--methods", default="", help="run solve with these methods instead")
    args = p.parse_args(argv)
    if args.methods:
        return _methods(args)
    print("instance,analytic,flow,refuted_by,lps,seconds,all_classes,load_before,load_after")
    for name in [n for n in args.instances.split(",") if n]:
        build, chassis, size, best = INSTANCES[name]
        topo = build(chassis)
        inst = make_instance(topo, make_collective("allgather", topo), size)
        before = _load()
        t0 = time.perf_counter()
        lb = lower_bound_slots(inst)
        if args.search == "bisect":
            fb = flow_bound_between(inst, lb, best, time_limit=args.time_limit,
                                    destinations=destination_order(inst))
        else:
            fb = flow_bound(inst, lb, upper=best, time_limit=args.time_limit,
                            destinations=destination_order(inst))
        assert fb is not None
        print(f"{name},{lb},{fb.slots},{fb.destination},{fb.lps},{time.perf_counter() - t0:.1f},"
              f"{fb.complete},{before},{_load()}", flush=True)
    return 0


def _methods(args: argparse.Namespace) -> int:
    print("instance,method,makespan,analytic,reported,gap,flow_lps,engine_s,solve_s,load_before,load_after")
    for name in [n for n in args.instances.split(",") if n]:
        build, chassis, size, _best = INSTANCES[name]
        topo = build(chassis)
        for method in args.methods.split(","):
            inst = make_instance(topo, make_collective("allgather", topo), size)
            before = _load()
            t0 = time.perf_counter()
            res = solve(inst, method)
            total = time.perf_counter() - t0
            flow = res.details.get("flow_bound")
            print(f"{name},{method},{res.makespan_slots},{lower_bound_slots(inst)},{res.lower_bound_slots},"
                  f"{res.gap:.3f},{None if flow is None else flow['lps']},{res.solve_seconds:.1f},"
                  f"{total:.1f},{before},{_load()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
