"""AllGather and AllReduce: classic baselines vs MTEGCCA, the heuristic portfolio and the exact
engine, next to the lower bound. Run by hand (never a timed test)::

    python benchmarks/collectives.py                       # all topologies, 1MB and 1GB
    python benchmarks/collectives.py --topologies ndv2 --sizes 1GB --exact-limit 60

Every schedule is verified (``ccplan.pipeline.solve``); a method that fails or does not apply
prints ``-``. algbw = size / (makespan_slots * tau), TE-CCL's definition. ``bound`` is the
algbw of the lower bound (an upper limit on any schedule's algbw); for AllReduce the bound is
weak (bounds.py, "Combining collectives"). Combining collectives go through
``ccplan.pipeline.combining.solve_combining`` for engines that only move data.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError
from ccplan.instances import builtin
from ccplan.instances.collectives import allgather
from ccplan.instances.combining import allreduce
from ccplan.instances.instance import Instance, make_instance
from ccplan.instances.topology import Topology
from ccplan.pipeline import get_engine
from ccplan.pipeline.combining import needs_reversal, solve_combining
from ccplan.schedule.verify import verify

TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "dgx1": builtin.dgx1,
    "ndv2": lambda: builtin.ndv2(2),
    "dgx2": lambda: builtin.dgx2(2),
    "amd": lambda: builtin.amd(1),
}
COLLECTIVES = {"allgather": allgather, "allreduce": allreduce}
METHODS = ("ring", "tree", "hierarchical", "multitree", "mteg", "heuristic", "milp")
BASELINES = ("ring", "tree", "hierarchical", "multitree")


def run(instance: Instance, method: str, time_limit: float) -> tuple[float | None, float, str]:
    """(algbw GB/s or None, seconds, status)."""
    opts = SolveOptions(time_limit=time_limit, workers=2)
    start = time.perf_counter()
    try:
        if needs_reversal(method, instance):
            outcome = solve_combining(instance, method, opts)
        else:
            outcome = get_engine(method)(instance, opts)
    except CCPlanError as exc:
        logging.getLogger("bench").info("%s on %s: %s", method, instance.describe(), exc)
        return None, time.perf_counter() - start, "error"
    seconds = time.perf_counter() - start
    if outcome.schedule is None:
        return None, seconds, outcome.status
    rep = verify(instance, outcome.schedule)
    if not rep.ok or rep.makespan_slots is None:
        print(f"  !! {method} produced an invalid schedule: {rep.violations[0]}", file=sys.stderr)
        return None, seconds, "invalid"
    return instance.algbw_GBps(rep.makespan_slots * instance.tau_us), seconds, outcome.status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topologies", default=",".join(TOPOLOGIES))
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--sizes", default="1MB,1GB")
    parser.add_argument("--chunks", type=int, default=1, help="C, chunks per GPU shard")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--heuristic-limit", type=float, default=20.0, help="seconds for mteg/heuristic")
    parser.add_argument("--exact-limit", type=float, default=30.0, help="seconds for milp")
    args = parser.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    header = f"{'topology':8} {'coll':10} {'size':5} " + " ".join(f"{m:>13}" for m in methods)
    header += f" {'bound':>9}"
    print(header)
    print("-" * len(header))
    for tname in args.topologies.split(","):
        topo = TOPOLOGIES[tname]()
        for cname in args.collectives.split(","):
            for size in args.sizes.split(","):
                inst = make_instance(topo, COLLECTIVES[cname](topo, args.chunks), size)
                cells = []
                for m in methods:
                    limit = args.exact_limit if m == "milp" else args.heuristic_limit
                    bw, secs, status = run(inst, m, limit)
                    # "*": proven optimal; for milp, no mark = time limit hit with an incumbent.
                    mark = "*" if status == "optimal" else " "
                    cells.append(f"{bw:7.2f}{mark}({secs:3.0f}s)" if bw is not None else f"{'-':>13}")
                bound = lower_bound_slots(inst)
                bbw = inst.algbw_GBps(bound * inst.tau_us)
                row = f"{tname:8} {cname:10} {size:5} " + " ".join(f"{c:>13}" for c in cells)
                print(row + f" {bbw:9.2f}")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
