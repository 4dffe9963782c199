"""``ccplan bounds``: the lower bounds of an instance and a heuristic upper bound.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ccplan.cli.args import _add_instance_args, _instance, _method_name, _positive_float, _size_line
from ccplan.cli.output import EXIT_OK, _fmt
from ccplan.parsing import plain_number


def cmd_bounds(args: argparse.Namespace) -> int:
    from ccplan.bounds import compute_bounds
    from ccplan.pipeline.estimate import estimate_solve
    from ccplan.pipeline.solve import physical_of

    if not args.no_upper:
        args.upper_method = _method_name(args.upper_method, "--upper-method")
    instance = _instance(args)
    estimate_solve(instance).check()
    res = None
    if not args.no_upper:
        from ccplan.contract import SolveOptions
        from ccplan.pipeline.solve import solve

        extra = {"flow_bound": False} if args.no_flow else {}
        options = SolveOptions(time_limit=args.time_limit, seed=0, extra=extra)
        res = solve(instance, args.upper_method, options)
    # With a verified upper bound, the flow-over-time LP bound where the gap is open (its LPs
    # were solved by `solve` on this instance and are not solved again).
    upper = res.makespan_slots if res is not None and res.verified else None
    bounds = compute_bounds(instance, upper=upper, flow=False if args.no_flow else "auto")
    data: dict[str, Any] = {"instance": instance.describe(), "tau_us": instance.tau_us, **bounds.to_dict()}
    # the bound of the physics: any chunking, continuous alpha-beta time, any switch model
    physical = physical_of(instance)
    data["physical_us"] = None if physical is None else physical.us
    data["physical_binding"] = None if physical is None else physical.binding
    if res is not None:
        data["upper_bound_method"] = args.upper_method
        data["upper_bound_slots"] = res.makespan_slots
        data["upper_bound_us"] = res.makespan_us
        data["upper_bound_verified"] = res.verified
        if res.schedule is not None and res.makespan_slots:
            # against the best bound here (the flow bound may have risen past solve's)
            best_lower = max(bounds.best_slots, res.lower_bound_slots)
            data["upper_bound_gap"] = (res.makespan_slots - best_lower) / res.makespan_slots
    if args.json:
        print(json.dumps(data, indent=1))
        return EXIT_OK
    print(f"instance  {data['instance']}")
    print(f"size      {_size_line(args)}")
    print(f"tau       {plain_number(instance.tau_us, 6)} us")
    for key, value in data.items():
        if key in ("instance", "tau_us"):
            continue
        print(f"{key:<22} {_fmt(value)}")
    best = bounds.best_slots
    print(
        f"=> makespan >= {best} slots = {_fmt(instance.slots_to_us(best))} us; "
        f"algbw <= {_fmt(instance.algbw_GBps(instance.slots_to_us(best)))} GB/s "
        f"(slot model: C = {instance.collective.chunks}, {instance.switch_model} switches)"
    )
    if physical is not None:
        print(
            f"=> any schedule takes >= {_fmt(physical.us)} us (physical: any chunking, alpha-beta time; "
            f"{physical.binding} part)"
        )
    return EXIT_OK


def _add_bounds(p: argparse.ArgumentParser) -> None:
    _add_instance_args(p)
    p.add_argument("--no-upper", action="store_true", help="skip the heuristic upper bound")
    p.add_argument(
        "--upper-method", default="heuristic", help="method giving the upper bound (default heuristic)"
    )
    p.add_argument("--time-limit", type=_positive_float, help="seconds for the upper-bound heuristic")
    p.add_argument(
        "--no-flow",
        action="store_true",
        help="skip the flow-over-time LP bound (flow_slots), which otherwise runs when the upper "
        "bound is above the others, on small store-and-forward data-movement instances",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
