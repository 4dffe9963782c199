"""``ccplan simulate``: replay a schedule in continuous alpha-beta time.
"""

from __future__ import annotations

import argparse

from ccplan.cli.args import _nonneg_float
from ccplan.cli.output import EXIT_OK, _fmt


def cmd_simulate(args: argparse.Namespace) -> int:
    from ccplan.schedule import load_schedule
    from ccplan.schedule.simulate import simulate

    instance, schedule = load_schedule(args.schedule)
    sim = simulate(instance, schedule, reduce_cost_us_per_byte=args.reduce_cost)
    print(f"instance    {instance.describe()}")
    print(f"completion  {sim.completion_us:.6g} us (alpha-beta, continuous time)")
    if sim.slotted_us is not None:
        print(f"slotted     {sim.slotted_us:.6g} us (makespan * tau; rounding {sim.rounding_us:+.6g} us)")
    print(f"algbw       {_fmt(sim.algbw_GBps)} GB/s")
    return EXIT_OK


def _add_simulate(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument(
        "--reduce-cost", type=_nonneg_float, default=0.0, help="reduce cost in us per byte (default 0)"
    )
