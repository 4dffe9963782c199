"""Benchmark of the heuristic engines: mteg (faithful MTEGCCA), layered, heuristic (portfolio).

Prints, per instance and size (AllGather, C = 1): the cut lower bound
(:func:`ccplan.bounds.compute_bounds`), the makespan in slots and the seconds of each engine
(median over ``--repeat`` runs), the winning portfolio variant, the gap of ``heuristic``
to the bound ((makespan - bound) / makespan, as the CLI reports it), optionally the exact
optimum (``--milp``), and the peak traced memory of one mteg run (tracemalloc, measured in a
separate untimed run).

Usage::

    python benchmarks/heuristics.py                       # all instances, 64KB 1MB 1GB
    python benchmarks/heuristics.py --instances ndv2-4 amd-2 --sizes 1GB --repeat 3
    python benchmarks/heuristics.py --instances dgx1 amd-1 --sizes 1GB --milp 300

Targets (2 cores): mteg NDv2 x4 < 0.5 s, AMD x2 < 2 s, NDv2 x10 < 10 s (paper: 3.79 s,
18.7 s, 170.82 s); heuristic within 15 % of the cut bound at 1 GB.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ccplan.bounds import compute_bounds
from ccplan.heuristics.layered import layered_schedule
from ccplan.heuristics.mteg import mteg_schedule
from ccplan.heuristics.search import heuristic_search
from ccplan.instances import builtin as bt
from ccplan.instances import make_collective, make_instance
from ccplan.instances.instance import Instance
from ccplan.instances.topology import Topology
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import verify

INSTANCES: dict[str, Callable[[], Topology]] = {
    "dgx1": bt.dgx1,
    "ndv2-2": lambda: bt.ndv2(2),
    "ndv2-4": lambda: bt.ndv2(4),
    "ndv2-10": lambda: bt.ndv2(10),
    "dgx2": lambda: bt.dgx2(2),
    "amd-1": lambda: bt.amd(1),
    "amd-2": lambda: bt.amd(2),
}
SIZES = ("64KB", "1MB", "1GB")


def _timed(make: Callable[[], Schedule], inst: Instance, repeat: int) -> tuple[int, float]:
    spans, secs = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        schedule = make()
        secs.append(time.perf_counter() - t0)
        report = verify(inst, schedule)
        if not report.ok or report.makespan_slots is None:
            raise SystemExit(f"invalid schedule on {inst.describe()}: {report.violations[:1]}")
        spans.append(report.makespan_slots)
    return int(statistics.median(spans)), statistics.median(secs)


def _mteg(inst: Instance) -> Schedule:
    return mteg_schedule(inst).schedule


def _peak_mb(make: Callable[[], object]) -> float:
    tracemalloc.start()
    make()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1e6


def _milp(inst: Instance, limit: float) -> str:
    import ccplan.model.exact  # noqa: F401  registers "milp"
    from ccplan.contract import SolveOptions
    from ccplan.pipeline.solve import solve

    res = solve(inst, "milp", SolveOptions(time_limit=limit))
    if res.makespan_slots is None:
        return "-"
    mark = "" if res.status == "optimal" else f"<= (lb {res.lower_bound_slots})"
    return f"{res.makespan_slots}{mark}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", nargs="+", default=list(INSTANCES), choices=list(INSTANCES))
    ap.add_argument("--sizes", nargs="+", default=list(SIZES))
    ap.add_argument("--repeat", type=int, default=1, help="runs per engine; medians are printed")
    ap.add_argument("--time-limit", type=float, default=5.0, help="budget of the heuristic portfolio (s)")
    ap.add_argument("--effort", default="normal", choices=["quick", "normal", "thorough"])
    ap.add_argument("--milp", type=float, default=None, metavar="SECONDS",
                    help="also run the exact engine with this time limit")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc run")
    args = ap.parse_args(argv)

    head = (f"{'instance':8} {'size':5} {'cut':>5} {'mteg':>5} {'mteg_s':>7} {'layer':>5} {'lay_s':>6} "
            f"{'heur':>5} {'heur_s':>6} {'gap%':>5} {'mteg_MB':>7} {'opt':>10}  heuristic variant")
    print(head)
    print("-" * len(head))
    for name in args.instances:
        topo = INSTANCES[name]()
        for size in args.sizes:
            inst = make_instance(topo, make_collective("allgather", topo), size)
            bound = compute_bounds(inst).best_slots
            m_span, m_sec = _timed(partial(_mteg, inst), inst, args.repeat)
            l_span, l_sec = _timed(partial(layered_schedule, inst), inst, args.repeat)
            variant = ""

            def heur(inst: Instance = inst) -> Schedule:
                nonlocal variant
                best, _, _ = heuristic_search(inst, args.time_limit, args.effort)
                variant = best.label
                return best.schedule

            h_span, h_sec = _timed(heur, inst, args.repeat)
            gap = 100.0 * (h_span - bound) / h_span if h_span else 0.0
            mem = "" if args.no_memory else f"{_peak_mb(partial(_mteg, inst)):.1f}"
            opt = _milp(inst, args.milp) if args.milp else ""
            print(f"{name:8} {size:5} {bound:5d} {m_span:5d} {m_sec:7.3f} {l_span:5d} {l_sec:6.2f} "
                  f"{h_span:5d} {h_sec:6.2f} {gap:5.1f} {mem:>7} {opt:>10}  {variant}", flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident memory of the process: {rss:.0f} MB")


if __name__ == "__main__":
    main()
