"""Benchmark of the exact engine ``milp`` (Pyomo model + CP-SAT) on 2 cores.

Run by hand (never as a timed test)::

    python benchmarks/exact.py                          # default scenario/settings, 60 s limit
    python benchmarks/exact.py --scenario cold --settings cpsat-default,lin2,lin2-desc,lin2-asc
    python benchmarks/exact.py --instances ndv2-c2 --time-limit 600 --repeat 1

Instances: AllGather, 1 GB output buffer, on DGX1 with 1, 2, 4 chunks per GPU and on NDv2
with 2 chassis (16 GPUs) with 1 and 2 chunks per GPU.

Scenarios (what the solver is given):

- ``pipeline``: the engine's defaults (heuristic warm start and horizon, lower bound as
  ``D >= LB``, no solve when the warm start already meets the bound);
- ``warm``: the same but CP-SAT always runs, with the ``direct`` strategy whatever the
  setting says (one solve over the heuristic's horizon, hint = heuristic schedule);
- ``cold``: horizon from plain MTEGCCA (``mteg``), no hint, ``D >= LB`` in the model;
- ``cold-nolb``: as ``cold`` without the ``D >= LB`` row: CP-SAT must prove on its own.

Settings: CP-SAT parameters and search strategy (see :data:`SETTINGS`). Columns: model size
of the last model built, build and solve seconds (medians over ``--repeat`` runs with seeds
0, 1, ...), status, makespan D, the engine's bound LB, CP-SAT's own bound of its last solve
(cpLB; with the ``D >= LB`` row it includes that row), gap, and who proved the bound (``solver`` = CP-SAT
closed its own gap or proved a horizon infeasible, ``LB`` = the warm start or incumbent met
``ccplan.bounds``).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ccplan.contract import SolveOptions
from ccplan.instances import Instance, make_collective, make_instance
from ccplan.instances.builtin import dgx1, ndv2
from ccplan.pipeline import get_engine
from ccplan.schedule.verify import verify


def _allgather(topology_factory: Callable[[], Any], chunks: int) -> Callable[[], Instance]:
    def make() -> Instance:
        topo = topology_factory()
        return make_instance(topo, make_collective("allgather", topo, chunks=chunks), "1GB")

    return make


INSTANCES: dict[str, Callable[[], Instance]] = {
    "dgx1-c1": _allgather(dgx1, 1),
    "dgx1-c2": _allgather(dgx1, 2),
    "dgx1-c4": _allgather(dgx1, 4),
    "ndv2-c1": _allgather(lambda: ndv2(chassis=2), 1),
    "ndv2-c2": _allgather(lambda: ndv2(chassis=2), 2),
}


# The engine's default adds a light presolve; these undo it to measure CP-SAT's own presolve.
_FULL_PRESOLVE = "max_presolve_iterations: 3 cp_model_probing_level: 2"
_CPSAT_OWN = "linearization_level: 1 " + _FULL_PRESOLVE


@dataclass(frozen=True)
class Setting:
    """CP-SAT parameters (added to the engine default) and the search strategy."""

    params: str
    strategy: str | None = None  # None: the engine's DEFAULT_STRATEGY


SETTINGS: dict[str, Setting] = {
    "default": Setting(""),  # the engine's DEFAULT_CPSAT_PARAMS and DEFAULT_STRATEGY
    "cpsat-default": Setting(_CPSAT_OWN, "direct"),  # CP-SAT's own defaults, one solve
    "lin0": Setting("linearization_level: 0 " + _FULL_PRESOLVE, "direct"),
    "lin2": Setting("linearization_level: 2 " + _FULL_PRESOLVE, "direct"),
    "lin2-light": Setting("linearization_level: 2", "direct"),
    "lin2-nosym": Setting("linearization_level: 2 symmetry_level: 0 " + _FULL_PRESOLVE, "direct"),
    "lin2-core": Setting("linearization_level: 2 optimize_with_core: true " + _FULL_PRESOLVE, "direct"),
    "lin2-desc": Setting("linearization_level: 2 " + _FULL_PRESOLVE, "descending"),
    "lin2-asc": Setting("linearization_level: 2 " + _FULL_PRESOLVE, "ascending"),
    "lin1-asc": Setting(_CPSAT_OWN, "ascending"),
    "lin0-asc": Setting("linearization_level: 0 " + _FULL_PRESOLVE, "ascending"),
    "lin2-light-asc": Setting("linearization_level: 2", "ascending"),
    "lin2-light-desc": Setting("linearization_level: 2", "descending"),
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "pipeline": {"warm_start": True, "extra": {}},
    "warm": {"warm_start": True, "extra": {"always_solve": True, "strategy": "direct"}},
    "cold": {"warm_start": False, "extra": {"always_solve": True, "warm_start_method": "mteg"}},
    "cold-nolb": {
        "warm_start": False,
        "extra": {"always_solve": True, "warm_start_method": "mteg", "lower_bound_cut": False},
    },
}


def run_one(
    instance: Instance, scenario: str, setting: Setting, time_limit: float, seed: int
) -> dict[str, Any]:
    """One engine run; returns the row fields."""
    sc = SCENARIOS[scenario]
    extra: dict[str, Any] = {}
    if setting.strategy is not None:
        extra["strategy"] = setting.strategy
    extra.update(sc["extra"])  # a scenario may fix the strategy (warm: direct, to use the hint)
    if setting.params:
        extra["cpsat_params"] = setting.params
    options = SolveOptions(
        time_limit=time_limit, workers=2, seed=seed, warm_start=sc["warm_start"], extra=extra
    )
    t0 = time.perf_counter()
    out = get_engine("milp")(instance, options)
    wall = time.perf_counter() - t0
    d = out.details
    makespan = None
    if out.schedule is not None:
        report = verify(instance, out.schedule)
        assert report.ok, report.violations[:1]
        makespan = report.makespan_slots
    bound = out.bound_slots
    solver_proof = any(s.get("status") in ("optimal", "infeasible") for s in d["steps"])
    proof = "-"
    if out.status == "optimal":
        proof = "solver" if solver_proof else "LB"
    return {
        "status": out.status,
        "makespan": makespan,
        "bound": bound,
        "gap": None if makespan in (None, 0) or bound is None else (makespan - bound) / makespan,
        "build": float(d["build_seconds"]),
        "solve": float(d["solve_seconds"]),
        "wall": wall,
        "size": d.get("model_size", {}),
        "horizon": d["horizon"],
        "steps": len(d["steps"]),
        "proof": proof,
        "cp_bound": next(
            (st.get("bound") for st in reversed(d["steps"]) if st.get("bound") is not None), None
        ),
        "hint": d["hint_status"],
        "params": d["cpsat_params"],
    }


def _fmt(value: Any, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--instances", default=",".join(INSTANCES), help="comma list of " + ", ".join(INSTANCES)
    )
    parser.add_argument("--scenario", default="pipeline", help="comma list of " + ", ".join(SCENARIOS))
    parser.add_argument("--settings", default="default", help="comma list of " + ", ".join(SETTINGS))
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per engine run")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell (seeds 0..n-1); medians shown")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    names = args.instances.split(",")
    scenarios = args.scenario.split(",")
    settings = args.settings.split(",")
    for key, table in ((names, INSTANCES), (scenarios, SCENARIOS), (settings, SETTINGS)):
        unknown = [k for k in key if k not in table]
        if unknown:
            parser.error(f"unknown name(s) {unknown}; choose from {', '.join(table)}")
    header = (
        f"{'instance':<9} {'scenario':<9} {'setting':<15} {'H':>4} {'vars':>7} {'rows':>7} "
        f"{'build_s':>7} {'solve_s':>7} {'wall_s':>7} {'status':<8} {'D':>4} {'LB':>4} {'cpLB':>5} "
        f"{'gap':>6} {'proof':<6} {'steps':>5} {'hint':<8} params"
    )
    print(f"# time limit {args.time_limit:g} s, repeat {args.repeat}, 2 workers", flush=True)
    print(header)
    print("-" * len(header), flush=True)
    for name in names:
        instance = INSTANCES[name]()
        for scenario in scenarios:
            for setting_name in settings:
                runs = [
                    run_one(instance, scenario, SETTINGS[setting_name], args.time_limit, seed)
                    for seed in range(args.repeat)
                ]
                r = runs[len(runs) // 2]
                med = {k: statistics.median(x[k] for x in runs) for k in ("build", "solve", "wall")}
                statuses = "/".join(sorted({x["status"] for x in runs}))
                size = r["size"] or {}
                print(
                    f"{name:<9} {scenario:<9} {setting_name:<15} {r['horizon']:>4} "
                    f"{_fmt(size.get('variables')):>7} {_fmt(size.get('constraints')):>7} "
                    f"{med['build']:>7.2f} {med['solve']:>7.2f} {med['wall']:>7.2f} {statuses:<8} "
                    f"{_fmt(r['makespan']):>4} {_fmt(r['bound'], '.0f'):>4} {_fmt(r['cp_bound'], '.0f'):>5} "
                    f"{_fmt(r['gap'], '.1%'):>6} "
                    f"{r['proof']:<6} {r['steps']:>5} {r['hint']:<8} {r['params']}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
