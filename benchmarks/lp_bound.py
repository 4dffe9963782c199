"""Does the LP relaxation of the time-indexed model (2)-(14) pay as a lower bound? (run by hand)

::

    python benchmarks/lp_bound.py                 # HiGHS, 120 s per LP

For each instance: the horizon H of ``greedy_schedule``, the analytic bound of
``ccplan.bounds.lower_bound_slots``, and the LP optimum of the model over H with every
binary relaxed to [0, 1] (``core.relax_integer_vars``), without and with the valid cuts of
``build_model`` (``cuts=True``), solved by HiGHS; ``ceil(LP)`` is the bound it proves.
Columns: instance, method, makespan (the greedy horizon), bound, gap, seconds, analytic.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable

from ccplan.bounds import lower_bound_slots
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.instances.builtin import dgx1
from ccplan.model.exact import greedy_schedule
from ccplan.schedule.verify import verify


def _instances() -> dict[str, Callable[[], Instance]]:
    def dgx1_c(c: int) -> Callable[[], Instance]:
        return lambda: make_instance(dgx1(), make_collective("allgather", dgx1(), chunks=c), "1GB")

    def ring4() -> Instance:
        t = make_topology("r4", gpus=range(4), duplex_links=[(1, 3, 25, 0.65), (3, 0, 50, 0.31),
                                                              (0, 2, 50, 0.4), (2, 1, 25, 0.62)])
        return make_instance(t, make_collective("allgather", t), "16MB", single_port=True)

    def bc4() -> Instance:
        t = make_topology("b4", gpus=range(4), duplex_links=[(3, 2, 25, 0.6), (2, 0, 25, 0.51),
                                                              (0, 1, 50, 0.53), (1, 3, 100, 0.43),
                                                              (1, 2, 100, 0.5)])
        return make_instance(t, make_collective("broadcast", t, chunks=4, root=0), "1GB", single_port=True)

    return {"dgx1-c2": dgx1_c(2), "dgx1-c4": dgx1_c(4), "ring4-single-port": ring4,
            "bc4-broadcast-C4-single-port": bc4}


def main(argv: list[str] | None = None) -> int:
    import pyomo.environ as pyo

    from ccplan.model.highs import solve_with_highs
    from ccplan.model.milp import build_model

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--time-limit", type=float, default=120.0)
    args = p.parse_args(argv)
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"# load average {load}; HiGHS, {args.time_limit:g} s per LP")
    print("instance,method,makespan,bound,gap,seconds,analytic")
    for name, make in _instances().items():
        inst = make()
        horizon = verify(inst, greedy_schedule(inst)).makespan_slots
        assert horizon is not None
        analytic = int(lower_bound_slots(inst))
        for cuts in (False, True):
            model = build_model(inst, horizon, cuts=cuts)
            pyo.TransformationFactory("core.relax_integer_vars").apply_to(model)
            t0 = time.perf_counter()
            out = solve_with_highs(model, time_limit=args.time_limit)
            secs = time.perf_counter() - t0
            method = "lp-relaxation" + ("+cuts" if cuts else "")
            if out.status != "optimal" or out.objective is None:
                print(f"{name},{method},{horizon},,,{secs:.2f},{analytic}  # {out.status}")
                continue
            bound = math.ceil(out.objective - 1e-6)
            print(f"{name},{method},{horizon},{bound} (LP {out.objective:.3f}),"
                  f"{100 * (horizon - bound) / horizon:.1f}%,{secs:.2f},{analytic}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
