"""``ccplan simulate``: replay a schedule in continuous alpha-beta time.
"""

from __future__ import annotations

import argparse

from ccplan.cli.args import _nonneg_float
from ccplan.cli.output import EXIT_OK, _fmt
from ccplan.parsing import plain_number


def cmd_simulate(args: argparse.Namespace) -> int:
    from ccplan.schedule import load_schedule
    from ccplan.schedule.simulate import simulate

    instance, schedule = load_schedule(args.schedule)
    sim = simulate(instance, schedule, reduce_cost_us_per_byte=args.reduce_cost)
    print(f"instance    {instance.describe()}")
    print(f"completion  {plain_number(sim.completion_us, 6)} us (alpha-beta, continuous time)")
    if sim.slotted_us is not None:
        diff = sim.rounding_us or 0.0
        rounding = f"{'+' if diff >= 0 else ''}{plain_number(diff, 6)}"
        print(f"slotted     {plain_number(sim.slotted_us, 6)} us (makespan * tau; rounding {rounding} us)")
    print(f"algbw       {_fmt(sim.algbw_GBps)} GB/s")
    return EXIT_OK


def _add_simulate(p: argparse.ArgumentParser) -> None:
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument(
        "--reduce-cost", type=_nonneg_float, default=0.0, help="reduce cost in us per byte (default 0)"
    )
