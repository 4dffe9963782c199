"""Build, translation and search seconds of the exact engine on the paper's largest models.

Run by hand (never as a timed test)::

    python benchmarks/model_path.py                       # one "D <= LB ?" question each
    python benchmarks/model_path.py --mode engine --time-limit 600

``--mode phases``: for each instance (AllGather, 1 chunk per GPU) the model of the first
question of the ``ascending`` strategy (horizon = ``ccplan.bounds``' bound LB, ``D >= LB``
row) is built (``build_model``), translated (``compile_model``) and solved as the engine
asks it (stop at the first schedule, CP-SAT limit ``--time-limit``); wall and CPU seconds
of each phase. ``--mode engine``: the whole ``milp`` engine as ``ccplan solve --method milp
--time-limit T`` runs it; the phases come from ``Outcome.details`` and ``build+translate
share`` is their sum over the run's wall time.

Both modes print one table row per instance: instance, method, makespan, bound, gap,
seconds (the columns of every benchmark here), then the phases.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

from ccplan.bounds import lower_bound_slots
from ccplan.instances import Instance, make_collective, make_instance
from ccplan.instances.builtin import amd, dgx2, ndv2


def _allgather(factory: Callable[..., object], size: str) -> Callable[[], Instance]:
    def make() -> Instance:
        topo = factory(chassis=2)
        return make_instance(topo, make_collective("allgather", topo), size)  # type: ignore[arg-type]

    return make


INSTANCES: dict[str, Callable[[], Instance]] = {
    "ndv2-2ch-64KB": _allgather(ndv2, "64KB"),
    "dgx2-2ch-1MB": _allgather(dgx2, "1MB"),
    "amd-2ch-1GB": _allgather(amd, "1GB"),
}


def phases(name: str, inst: Instance, time_limit: float, workers: int) -> str:
    from ccplan.model.cpsat import compile_model
    from ccplan.model.exact import DEFAULT_CPSAT_PARAMS, solve_model_with
    from ccplan.model.milp import build_model

    lb = lower_bound_slots(inst)
    w0, c0 = time.perf_counter(), time.process_time()
    model = build_model(inst, lb, lower_bound=lb)
    w1, c1 = time.perf_counter(), time.process_time()
    compiled = compile_model(model)
    w2, c2 = time.perf_counter(), time.process_time()
    del compiled  # the solve below translates again, as the engine's first question does
    res = solve_model_with("cpsat", model, time_limit=time_limit, workers=workers,
                           params_text=DEFAULT_CPSAT_PARAMS, stop_after_first_solution=True)
    answer = {"infeasible": "no", "optimal": "yes", "feasible": "yes"}.get(res.status, "unknown")
    total = (w2 - w0) + res.wall_seconds
    return (f"{name},milp-question,,{lb},,{total:.2f},D<={lb}? {answer},{w1 - w0:.2f},{c1 - c0:.2f},"
            f"{w2 - w1:.2f},{c2 - c1:.2f},{res.wall_seconds:.2f},{(w2 - w0) / total:.3f}")


def engine(name: str, inst: Instance, time_limit: float, workers: int) -> str:
    from ccplan.contract import SolveOptions
    from ccplan.pipeline.solve import solve

    t0 = time.perf_counter()
    res = solve(inst, "milp", SolveOptions(time_limit=time_limit, workers=workers))
    wall = time.perf_counter() - t0
    d = res.details
    b, tr, s = float(d["build_seconds"]), float(d["translate_seconds"]), float(d["solve_seconds"])
    questions = sum(1 for st in d["steps"] if "question" in st)
    gap = "" if res.gap is None else f"{res.gap:.3f}"
    return (f"{name},milp,{res.makespan_slots},{res.lower_bound_slots},{gap},{wall:.1f},{res.status},"
            f"{d['strategy']},{questions},{float(d['warm_start_seconds']):.1f},{b:.1f},{tr:.1f},{s:.1f},"
            f"{(b + tr) / wall:.3f}")


HEADERS = {
    "phases": "instance,method,makespan,bound,gap,seconds,answer,build_s,build_cpu_s,translate_s,"
              "translate_cpu_s,search_s,build+translate share",
    "engine": "instance,method,makespan,bound,gap,seconds,status,strategy,questions,warm_s,build_s,"
              "translate_s,search_s,build+translate share",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", default=",".join(INSTANCES))
    p.add_argument("--mode", choices=sorted(HEADERS), default="phases")
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    import pyomo.environ  # noqa: F401  (imported before timing, as ortools is by the engine)

    print(f"# load average {os.getloadavg()}, {args.workers} CP-SAT workers, shared machine", flush=True)
    print(HEADERS[args.mode], flush=True)
    run = phases if args.mode == "phases" else engine
    for name in args.instances.split(","):
        print(run(name, INSTANCES[name](), args.time_limit, args.workers), flush=True)
    print(f"# load average {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
