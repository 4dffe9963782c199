"""The registry as the pipeline runs it: every registered engine adapted to every instance.

:func:`get_engine` wraps the registered function (:func:`ccplan.contract.registered`) in the
pipeline's problem transformations, and :func:`~ccplan.pipeline.solve` hands these adapted
engines down to engines that need another one (:func:`ccplan.contract.engines_from`), so the
exact engine's warm start sees the same problem as a solve:

- :func:`cut_through_twin`: an engine that schedules switches as store-and-forward nodes runs
  on the store-and-forward twin of a cut-through instance and its schedule is re-timed
  (:func:`ccplan.schedule.cut_through.retime`);
- :func:`time_reversal`: a data-movement engine asked for a combining collective solves the
  reversed data-movement twin (:func:`ccplan.pipeline.combining.solve_combining`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ccplan.contract import Engine, Outcome, SolveOptions, method_names, registered
from ccplan.instances.instance import Instance
from ccplan.pipeline.combining import needs_reversal, solve_combining
from ccplan.schedule.cut_through import retime
from ccplan.schedule.verify import verify

CUT_THROUGH_NATIVE: frozenset[str] = frozenset({"milp"})
"""Methods that model cut-through switches themselves (the MILP's ``c6_buffer_cut_through``);
every other engine is run on the store-and-forward twin and re-timed by :func:`retime`."""


def solve_on_twin(engine: Callable[[Instance, Any], Any], instance: Instance, options: Any) -> Any:
    """Run a store-and-forward ``engine`` on the twin of a cut-through ``instance`` and
    re-time its schedule (:func:`retime`).

    The engine's ``optimal`` status and its own bound are about the twin, not about
    ``instance`` (cut-through can only be faster), so the status becomes ``feasible`` and the
    bound is dropped; ``details["cut_through"]`` records the twin's makespan.
    """
    outcome = engine(instance.with_switch_model("store-and-forward"), options)
    if outcome.schedule is None:
        status = "unknown" if outcome.status == "optimal" else outcome.status
        return replace(outcome, bound_slots=None, status=status)
    twin_ms = verify(instance.with_switch_model("store-and-forward"), outcome.schedule).makespan_slots
    schedule = retime(instance, outcome.schedule)
    details = dict(outcome.details)
    details["cut_through"] = {"retimed_from": "store-and-forward", "twin_makespan_slots": twin_ms}
    status = "feasible" if outcome.status in ("optimal", "feasible") else outcome.status
    return Outcome(schedule=schedule, status=status, bound_slots=None, details=details)


def cut_through_twin(name: str, engine: Engine) -> Engine:
    """``engine`` for any switch model: an engine that schedules switches as store-and-forward
    nodes is run on the store-and-forward twin of a cut-through instance and its schedule
    re-timed (:mod:`ccplan.schedule.cut_through`), in this one place for every heuristic."""

    def run(instance: Instance, options: SolveOptions) -> Outcome:
        if not instance.bufferless or name in CUT_THROUGH_NATIVE:
            return engine(instance, options)
        return solve_on_twin(engine, instance, options)  # type: ignore[no-any-return]

    return run


def time_reversal(name: str, engine: Engine) -> Engine:
    """``engine`` for combining collectives too: a method that does not reduce natively
    (:data:`ccplan.pipeline.combining.NATIVE_COMBINING`) solves the reversed data-movement
    twin and its schedule is reversed in time (:mod:`ccplan.pipeline.combining`)."""

    def run(instance: Instance, options: SolveOptions) -> Outcome:
        if needs_reversal(name, instance):
            return solve_combining(instance, name, options)
        return engine(instance, options)

    return run



def get_engine(name: str) -> Engine:
    """The engine ``name`` for any instance: the registered function behind the cut-through
    twin and the time reversal (raises :class:`~ccplan.errors.ValidationError` naming the
    known methods for an unknown one)."""
    return time_reversal(name, cut_through_twin(name, registered(name)))


__all__ = [
    "CUT_THROUGH_NATIVE", "cut_through_twin", "get_engine", "method_names", "solve_on_twin", "time_reversal",
]
