"""The AllReduce candidates that build combining schedules themselves, as
:func:`ccplan.pipeline.combining.solve_combining` runs them before the reversal.

- ``trees-allreduce`` (:mod:`ccplan.heuristics.trees_allreduce`) for the methods of
  :data:`TREES_ALLREDUCE_METHODS`, first, unverified (:func:`trees_candidate`);
- ``hier-allreduce`` (:mod:`ccplan.heuristics.hier_allreduce`), which verifies its own
  (:func:`hierarchical`).

Each comes with its makespan in slots and its distance above the physical bound, by which
``solve_combining`` decides what else to run (its module docstring).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ccplan.contract import Outcome, SolveOptions, sub_engine
from ccplan.errors import ValidationError
from ccplan.instances.combining import reducescatter
from ccplan.instances.instance import Instance
from ccplan.limits import Deadline
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import verify

log = logging.getLogger(__name__)

HIER_SUFFICES = 0.10
"""An AllReduce whose ``hier-allreduce`` schedule is within this fraction above the physical
bound skips the reversal (module docstring)."""

TREES_ALLREDUCE_METHODS: frozenset[str] = frozenset({"trees", "heuristic"})
"""Methods whose ``"best"`` AllReduce tries ``trees-allreduce`` first
(:mod:`ccplan.heuristics.trees_allreduce`)."""

TREES_SUFFICES = 0.01
"""A ``trees-allreduce`` schedule within this fraction above the physical bound is kept
without running the other candidates (``--chunks auto`` stops there too). So is one built
for a candidate of ``--chunks auto`` (``extra["auto_probe"]``, set by
:mod:`ccplan.pipeline.chunks` for a portfolio at each C) or under a soft budget of 0
(``extra["soft_budget"]``: the first complete schedule only)."""

TREES_ONLY_ABOVE = 512
"""Chunks in all (C x GPUs) above which, once ``trees-allreduce`` gave a schedule, no other
candidate runs: the reversal's relays, the cluster's placement and ``hier-allreduce`` grow
faster than ``C`` (on AMD x2 the reversal finds nothing at C = 8 within 10 s, hier-allreduce
takes 12 s at C = 32 and 73 s at C = 128 for 2.8 times the bound) while the trees' fill, the
only thing they could win back, shrinks as ``1 / C``."""

OTHERS_SHARE = 0.5
"""Once ``trees-allreduce`` gave a schedule, the share of the time left that the other
candidates get (``--chunks auto`` tries C = 1, 2, 4, ...: a portfolio that spends its whole
limit at small C leaves nothing for the C at which the trees reach the bound)."""



def native(
    name: str, instance: Instance, options: SolveOptions
) -> tuple[Schedule, int, float] | None:
    """The schedule of the AllReduce engine ``name`` (which verifies its own, unless told not
    to, and raises :class:`ValidationError` where it does not apply), its makespan in slots
    and its distance above the physical bound (``makespan / bound - 1``); None where it does
    not apply or found nothing in its time."""
    try:
        outcome = sub_engine(name)(instance, options)
    except ValidationError as exc:
        log.debug("%s does not apply: %s", name, exc)
        return None
    if outcome.schedule is None:
        log.info("%s gave no schedule: %s", name, outcome.details.get("reason", outcome.status))
        return None
    return measured(instance, outcome.schedule)


def measured(instance: Instance, schedule: Schedule) -> tuple[Schedule, int, float]:
    """``schedule`` (built valid by its engine), its last arrival in slots and its distance
    above the physical bound (``makespan / bound - 1``)."""
    from ccplan.physical import physical_bound

    slots = schedule.last_arrival(instance)
    bound = physical_bound(instance, switch_reduce=instance.reducing_switches).us
    return schedule, slots, slots * instance.tau_us / bound - 1 if bound > 0 else float("inf")


def hierarchical(instance: Instance, options: SolveOptions) -> tuple[Schedule, int, float] | None:
    """``hier-allreduce``'s verified schedule of a ``"best"`` AllReduce (:func:`_native`), or
    None where it does not apply."""
    if allreduce_mode(options) != "best":
        return None
    return native("hier-allreduce", instance, options)


HIER_LOST_BY = 1.05
"""``hier-allreduce`` is not run again beside the trees AllReduce on a machine where, at the
last C both ran, its makespan was more than this factor above the trees' (AMD x2: 2 times at
C = 16, and 73 s at C = 128), unless the others run anyway (:func:`hier_lost`)."""

_HIER_RECORD: dict[tuple[Any, ...], bool] = {}


def _machine(instance: Instance) -> tuple[Any, ...]:
    topo = instance.topology
    return (topo.name, topo.num_links, tuple(sorted(instance.reducing_switches)), instance.single_port)


def note_hier(instance: Instance, trees_slots: int, hier_slots: int | None) -> None:
    """Record whether ``hier-allreduce`` (None: no schedule in its time) lost to the trees
    AllReduce by more than :data:`HIER_LOST_BY` on this machine."""
    lost = hier_slots is None or hier_slots > HIER_LOST_BY * trees_slots
    _HIER_RECORD.pop(_machine(instance), None)
    _HIER_RECORD[_machine(instance)] = lost
    while len(_HIER_RECORD) > 8:
        _HIER_RECORD.pop(next(iter(_HIER_RECORD)))


def hier_lost(instance: Instance) -> bool:
    """Whether ``hier-allreduce`` lost to the trees on this machine at the last C both ran
    (:func:`note_hier`): above :data:`TREES_ONLY_ABOVE` chunks it then does not run (on
    DGX-2 x2 it beats the trees from C = 2 on with alphas dropped, on AMD x2 it loses from
    C = 4 on; ``--chunks auto`` tries the small C first, where it always runs). Without a
    record it runs."""
    return _HIER_RECORD.get(_machine(instance), False)


def trees_candidate(
    instance: Instance, method: str, options: SolveOptions,
    relayed: Callable[[Instance], Schedule] | None = None,
) -> tuple[Schedule, int, float] | str | None:
    """The trees AllReduce of a ``"best"`` AllReduce of ``method`` (:data:`TREES_ALLREDUCE_METHODS`),
    unverified, its makespan and distance above the physical bound; None where it does not
    apply, and the reason where the trees reduction of
    :mod:`ccplan.heuristics.trees_reduce` declines (a tree's partial sums would queue in one
    relaying switch: DGX-2's NVSwitch, a leaf switch of a fat tree).

    ``relayed``: the ReduceScatter half from this function of the ReduceScatter instance (the
    reversal of the ``trees`` AllGather of :mod:`ccplan.pipeline.combining`, relays and all)
    instead of the trees reduction.

    Raises
    ------
    OutOfTimeError
        The time limit passed."""
    from ccplan.heuristics.trees_allreduce import allgather_part, applies, combine, trees_allreduce_schedule

    if allreduce_mode(options) != "best" or method not in TREES_ALLREDUCE_METHODS or not applies(instance):
        return None
    start = time.perf_counter()
    deadline = Deadline.after(options.time_limit)
    try:
        if relayed is not None:
            chunks = instance.collective.chunks
            rs = relayed(replace(instance, collective=reducescatter(instance.topology, chunks)))
            schedule = combine(instance, rs, allgather_part(instance, deadline, options.extra))
        else:
            try:
                schedule = trees_allreduce_schedule(instance, deadline, options.extra)
            except ValidationError as exc:
                return str(exc)
    except ValidationError as exc:
        log.info("trees-allreduce gave no schedule (%.1f s): %s", time.perf_counter() - start, exc)
        return None
    return measured(instance, schedule)


def checked(
    instance: Instance, found: tuple[Schedule, int, float] | None
) -> tuple[Schedule, int, float] | None:
    """``found`` when it verifies (with the verifier's makespan), else None (logged)."""
    if found is None:
        return None
    report = verify(instance, found[0])
    if not report.ok or report.makespan_slots is None:
        log.error("trees-allreduce fails verification: %s", report.violations[0])
        return None
    return found[0], report.makespan_slots, found[2]


def allreduce_mode(options: SolveOptions) -> str:
    return str(options.extra.get("allreduce", "best")) if options.extra else "best"


def native_outcome(
    name: str, schedule: Schedule, method: str, details: dict[str, Any], start: float, why: str
) -> Outcome:
    """The schedule of a native AllReduce candidate (``"trees"``, ``"hier"``) as the AllReduce
    of ``method`` (the reversal not run or not finished: ``why``)."""
    details.update(mode=name, reversal=why, seconds=time.perf_counter() - start)
    return Outcome(schedule=schedule.renamed(f"{method}+{name}"), status="feasible", details=details)


def left_options(options: SolveOptions, share: float, since: float | None = None) -> SolveOptions:
    """``options`` with ``share`` of its time limit, less the time spent since ``since``."""
    if options.time_limit is None:
        return options
    spent = 0.0 if since is None else time.perf_counter() - since
    return replace(options, time_limit=max(1e-3, share * (options.time_limit - spent)))
