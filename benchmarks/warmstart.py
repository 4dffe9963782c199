"""Cold vs warm CP-SAT on the exact benchmark set: time to first incumbent and time to proof.

Run by hand (never as a timed test)::

    python benchmarks/warmstart.py                       # medians of 3 runs, 120 s limit
    python benchmarks/warmstart.py --instances amd1-c1 --repeat 5

Each instance is solved by CP-SAT on the paper's MILP with the same horizon H (the larger of
the ``mteg`` and ``heuristic`` makespans, as the paper suggests MTEGCCA's makespan for H;
computed once outside the timing) and the same ``D >= LB`` row
(``ccplan.bounds``), so the only difference between the scenarios is the hint:

- ``cold``: no hint;
- ``warm-mteg``: the faithful MTEGCCA schedule as a complete hint;
- ``warm-heuristic``: the ``heuristic`` schedule as a complete hint.

Columns: seconds from the start of CP-SAT's solve to its first incumbent and to the proof of
optimality (``-`` when not proven within the limit), the makespan found, the hint's makespan and
whether CP-SAT accepted the hint. Build and translation time is reported separately (it is the
same for every scenario). Medians over ``--repeat`` runs with seeds 0, 1, ...
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exact import INSTANCES as EXACT_INSTANCES

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.instances import Instance, make_collective, make_instance
from ccplan.instances.builtin import amd
from ccplan.model.cpsat import CpSatOptions, solve_with_cpsat
from ccplan.model.exact import DEFAULT_CPSAT_PARAMS
from ccplan.model.milp import build_model, hint_from_schedule, schedule_from_model
from ccplan.pipeline.solve import solve
from ccplan.schedule import Schedule, verify


def _amd_1gb() -> Instance:
    topo = amd(chassis=1)
    return make_instance(topo, make_collective("allgather", topo), "1GB")


INSTANCES: dict[str, Callable[[], Instance]] = {
    **EXACT_INSTANCES,
    # the heuristic is one slot above the optimum here, so the solver has real work to do
    "amd1-c1": _amd_1gb,
}


def _one_run(
    inst: Instance, horizon: int, lb: int, hint_schedule: Schedule | None, time_limit: float, seed: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    model = build_model(inst, horizon, lower_bound=lb)
    hint = hint_from_schedule(model, inst, hint_schedule) if hint_schedule is not None else None
    build = time.perf_counter() - t0
    first: list[float] = []

    def on_progress(elapsed: float, incumbent: float | None, bound: float | None, gap: float | None) -> None:
        if incumbent is not None and not first:
            first.append(elapsed)

    opts = CpSatOptions(
        time_limit=time_limit,
        workers=2,
        seed=seed,
        params_text=DEFAULT_CPSAT_PARAMS,
        progress_callback=on_progress,
    )
    out = solve_with_cpsat(model, opts, hint=hint)
    first_inc = first[0] if first else (out.trajectory[0][0] if out.trajectory else None)
    makespan = None
    if out.status in ("optimal", "feasible"):
        sched = schedule_from_model(model, inst)
        report = verify(inst, sched)
        assert report.ok, report.violations[:3]
        makespan = report.makespan_slots
    return {
        "build": build,
        "first": first_inc,
        "proof": out.wall_seconds if out.status == "optimal" else None,
        "status": out.status,
        "makespan": makespan,
        "hint_status": out.hint_status,
    }


def _median(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if len(known) < len(values):
        return "-"
    return f"{statistics.median(known):.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default=",".join(INSTANCES), help="comma-separated names")
    parser.add_argument("--time-limit", type=float, default=120.0, help="CP-SAT seconds per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell (median)")
    args = parser.parse_args(argv)
    print(
        "| instance | scenario | hint D | H | LB | build s | first incumbent s | proof s | D | status"
        " | hint |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.instances.split(","):
        inst = INSTANCES[name]()
        lb = lower_bound_slots(inst)
        hints = {
            "cold": None,
            "warm-mteg": solve(inst, "mteg").schedule,
            "warm-heuristic": solve(inst, "heuristic", SolveOptions(time_limit=10, seed=0)).schedule,
        }
        horizon = max(verify(inst, h).makespan_slots or 0 for h in hints.values() if h is not None)
        for scenario, hint in hints.items():
            runs = [_one_run(inst, horizon, lb, hint, args.time_limit, seed) for seed in range(args.repeat)]
            hint_d: int | None = None if hint is None else verify(inst, hint).makespan_slots
            statuses = sorted({r["status"] for r in runs})
            makespans = sorted({r["makespan"] for r in runs}, key=lambda v: (v is None, v))
            print(
                f"| {name} | {scenario} | {hint_d if hint_d is not None else '-'} | {horizon} | {lb} | "
                f"{_median([r['build'] for r in runs])} | {_median([r['first'] for r in runs])} | "
                f"{_median([r['proof'] for r in runs])} | {'/'.join(str(m) for m in makespans)} | "
                f"{'/'.join(statuses)} | {runs[0]['hint_status']} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
