"""AllReduce / ReduceScatter / AllGather at one size on the four machines of the AllReduce targets.

Prints one row per (topology, collective, chunks, method): makespan and bound (slots), gap,
algbw and busbw (GB/s), seconds. Run by hand (never in the tests), e.g.::

    python benchmarks/allreduce.py --size 1GB --time-limit 20
    python benchmarks/allreduce.py --bounds-only

The machine's load average is printed first: on a shared machine, seconds are inflated.
"""

from __future__ import annotations

import argparse
import os
import time

from ccplan.bounds import compute_bounds
from ccplan.contract import SolveOptions
from ccplan.instances import make_collective, make_instance
from ccplan.instances.builtin import resolve_topology
from ccplan.pipeline.chunks import solve_auto_chunks
from ccplan.pipeline.solve import solve

TOPOLOGIES = {
    "dgx1": {},
    "ndv2": {"chassis": 2},
    "dgx2": {"chassis": 2},
    "amd": {"chassis": 1},
}
METHODS = {
    "allreduce": ("ring", "double-binary-tree", "recursive-halving-doubling", "multitree", "heuristic"),
    "reducescatter": ("ring", "multitree", "heuristic"),
    "allgather": ("ring", "multitree", "heuristic"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1GB")
    parser.add_argument("--chunks", nargs="+", default=["1"], help="chunk counts, or auto")
    parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES))
    parser.add_argument("--collectives", nargs="+", default=list(METHODS))
    parser.add_argument("--methods", nargs="+", help="override the method list")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--bounds-only", action="store_true")
    args = parser.parse_args()

    print(f"load average {os.getloadavg()}  (shared machine: seconds are wall time under that load)")
    if args.bounds_only:
        print(f"{'instance':<44} {'latency':>7} {'ingress':>7} {'cut':>5} {'best_us':>10} {'seconds':>7}")
    else:
        print(f"{'instance':<44} {'method':<27} {'makespan':>8} {'bound':>6} {'gap':>6} "
              f"{'algbw':>7} {'busbw':>7} {'seconds':>7}")
    for name in args.topologies:
        topo = resolve_topology(name, **TOPOLOGIES[name])
        for kind in args.collectives:
            for chunks in args.chunks:
                def build(c: int, kind: str = kind, topo: object = topo) -> object:
                    return make_instance(topo, make_collective(kind, topo, chunks=c), args.size)

                inst = build(1 if chunks == "auto" else int(chunks))
                label = f"{name} {kind} {args.size} C={chunks}"
                if args.bounds_only:
                    t0 = time.perf_counter()
                    b = compute_bounds(inst)
                    print(f"{label:<44} {b.latency_slots:>7} {b.ingress_slots:>7} {b.cut_slots:>5} "
                          f"{b.best_us:>10.1f} {time.perf_counter() - t0:>7.1f}")
                    continue
                for method in args.methods or METHODS[kind]:
                    opts = SolveOptions(time_limit=args.time_limit, workers=args.workers)
                    try:
                        if chunks == "auto":
                            inst, r = solve_auto_chunks(build, method, opts)
                            label = f"{name} {kind} {args.size} C=auto:{inst.collective.chunks}"
                        else:
                            r = solve(inst, method, opts)
                    except Exception as exc:  # a baseline that cannot route this machine
                        print(f"{label:<44} {method:<27} failed: {str(exc)[:60]}")
                        continue
                    if not r.verified or r.makespan_slots is None:
                        print(f"{label:<44} {method:<27} not verified")
                        continue
                    gap = r.gap if r.gap is not None else 0.0
                    algbw = r.algbw_GBps(inst) or 0.0
                    busbw = r.busbw_GBps(inst) or 0.0
                    print(f"{label:<44} {method:<27} {r.makespan_slots:>8} {r.lower_bound_slots:>6} "
                          f"{gap:>6.1%} {algbw:>7.2f} {busbw:>7.2f} {r.solve_seconds:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
