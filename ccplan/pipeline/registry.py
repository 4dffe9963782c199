"""The registry as the pipeline runs it: every registered engine adapted to every instance.

:func:`get_engine` wraps the registered function (:func:`ccplan.contract.registered`) in the
pipeline's problem transformations, and :func:`~ccplan.pipeline.solve` hands these adapted
engines down to engines that need another one (:func:`ccplan.contract.engines_from`), so the
exact engine's warm start sees the same problem as a solve:

- :func:`cut_through_twin`: an engine that schedules switches as store-and-forward nodes runs
  on the store-and-forward twin of a cut-through instance and its schedule is re-timed
  (:func:`ccplan.schedule.cut_through.retime`);
- :func:`time_reversal`: a data-movement engine asked for a combining collective solves the
  reversed data-movement twin (:func:`ccplan.pipeline.combining.solve_combining`); for
  cut-through switches on the store-and-forward twin, whose combining schedule is then re-timed
  (:func:`ccplan.schedule.cut_through.retime_combining`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ccplan.contract import Engine, Outcome, SolveOptions, method_names, registered
from ccplan.errors import ValidationError
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
    try:
        schedule = retime(instance, outcome.schedule)
    except ValidationError as exc:
        if not instance.collective.combining:
            raise
        # partial sums whose relays cannot be made rigid (module docstring of
        # ccplan.schedule.cut_through): no schedule from this engine, the others go on
        details = {**outcome.details, "reason": f"cut-through re-timing: {exc}"}
        return Outcome(schedule=None, status="unknown", bound_slots=None, details=details)
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


PORTFOLIOS: frozenset[str] = frozenset({"heuristic"})
"""Methods that are portfolios: on a cut-through combining instance they also try NCCL's rings
re-timed (:func:`_with_ring`)."""

RING_SHARE = 0.2
"""Share of the time limit the portfolio's ring candidate may take after the reversal."""


def _with_ring(instance: Instance, options: SolveOptions, outcome: Outcome) -> Outcome:
    """The shorter verified of ``outcome`` and the ``ring`` baseline (NCCL's k channels)
    re-timed for the cut-through ``instance``.

    The rings reduce at GPUs only, and through a cut-through switch each ring step is one
    transfer once re-timed, so they reach the classic ``2 (N-1)/N x M / B`` of an AllReduce
    where the reversal of a switch multicast pays for relays (docs/model.md, "Cut-through
    switches")."""
    limit = None if options.time_limit is None else max(1.0, RING_SHARE * options.time_limit)
    ring_options = replace(options, time_limit=limit)
    try:
        ring = solve_on_twin(registered("ring"), instance, ring_options)
    except ValidationError:
        return outcome  # the ring does not apply (e.g. no ring through this topology)
    if ring.schedule is None:
        return outcome
    mine = verify(instance, ring.schedule)
    if not mine.ok or mine.makespan_slots is None:
        return outcome
    if outcome.schedule is not None:
        theirs = verify(instance, outcome.schedule)
        if theirs.ok and theirs.makespan_slots is not None and theirs.makespan_slots <= mine.makespan_slots:
            return replace(outcome, details={**outcome.details, "ring_slots": mine.makespan_slots})
    details = {**ring.details, "portfolio": "NCCL-style ring re-timed for cut-through"}
    if outcome.schedule is not None:
        details["reversal"] = dict(outcome.details)
    return replace(ring, details=details)


def time_reversal(name: str, engine: Engine) -> Engine:
    """``engine`` for combining collectives too: a method that does not reduce natively
    (:data:`ccplan.pipeline.combining.NATIVE_COMBINING`) solves the reversed data-movement
    twin and its schedule is reversed in time (:mod:`ccplan.pipeline.combining`)."""

    def run(instance: Instance, options: SolveOptions) -> Outcome:
        if needs_reversal(name, instance):
            if instance.bufferless:
                # The reflection t -> D - t - L does not keep cut-through timing (the l of a
                # relay sits on the hop into the switch in both directions; docs/model.md):
                # reverse on the store-and-forward twin, then re-time the partial sums.
                outcome: Outcome = solve_on_twin(
                    lambda inst, opts: solve_combining(inst, name, opts), instance, options
                )
                if name in PORTFOLIOS:
                    outcome = _with_ring(instance, options, outcome)
                return outcome
            # Store-and-forward: no ring candidate here. At the chunk counts --chunks auto
            # reaches, NCCL's rings need thousands of steps per thread block, which no MSCCL
            # runtime loads (64, legacy 256); `plan` sets the ring baseline beside the best and
            # takes it where it is faster and exportable.
            return solve_combining(instance, name, options)
        return engine(instance, options)

    return run



def get_engine(name: str) -> Engine:
    """The engine ``name`` for any instance: the registered function behind the cut-through
    twin and the time reversal (raises :class:`~ccplan.errors.ValidationError` naming the
    known methods for an unknown one)."""
    return time_reversal(name, cut_through_twin(name, registered(name)))


__all__ = [
    "CUT_THROUGH_NATIVE", "PORTFOLIOS",
    "cut_through_twin", "get_engine", "method_names", "solve_on_twin", "time_reversal",
]
