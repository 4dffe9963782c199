"""``--chunks auto``: the chunk count chosen against the physical bound.

``C`` is doubled from 1 (C = 1, 2, 4, ...) until a schedule is within :data:`AUTO_CLOSE`
(0.5 %) of the physical bound (:func:`ccplan.physical.physical_bound`: any chunking, continuous
alpha-beta time), and otherwise for as long as the slot model at ``C`` can still lose more than
1 % to the physics (its own lower bound in microseconds, the slot bound at ``C`` times ``tau``,
is more than 1 % above the physical bound, or it drops alphas and so bounds nothing the
machine does) or one of the last :data:`AUTO_PATIENCE` doublings
still gained more than 1 %, and time remains (under a time limit: for twice the last
candidate's time, :data:`AUTO_GROWTH`). There is no fixed cap on ``C``:
the memory budget refuses what would not fit, and that ends the search with the best
schedule so far. The verified schedule with the shortest time in microseconds wins (a slot's
length changes with ``C``, so slots would not compare): its slot time, or its continuous
alpha-beta replay if longer where the slot model at that ``C`` drops alphas (:func:`_candidate_us`;
``details["auto_chunks"]`` lists these times). Under a time limit a portfolio method
may build one schedule per candidate and run its improvement search at the chosen ``C`` only
(:data:`AUTO_PROBE`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ccplan.contract import SolveOptions
from ccplan.errors import ResourceLimitError, ValidationError
from ccplan.instances.instance import Instance
from ccplan.pipeline.solve import Result, solve

log = logging.getLogger(__name__)

AUTO_TOLERANCE = 0.01
"""How far above the physical bound the slot model's own bound at ``C`` may stay before
``--chunks auto`` stops doubling ``C`` (with :data:`AUTO_PATIENCE` doublings that gain less
than this), and how close the best schedule must be for no second run (:func:`_improve`)."""

AUTO_CLOSE = 0.005
"""How close to the physical bound a schedule must come to end the doubling at once. Half of
:data:`AUTO_TOLERANCE`: at 1 % the doubling ended at 0.990-0.991 of the physical bound, under
0.99 of a throughput limit that lies a little below it (AMD x2 ReduceScatter 1 GB: C = 512,
2,914.7 us, 0.9901 of the physical bound's 2,886.0 us and 0.9897 of the limit's 2,884.6 us,
where C = 2,048 reaches 0.9921); the other rules still end it after doublings that gain under
1 %."""

AUTO_PATIENCE = 2
"""``--chunks auto`` stops doubling ``C`` after this many candidates in a row that gave no
verified schedule; once the slot model's bound is within 1 % of the physical bound, after this
many doublings in a row that gained less than 1 %; and, without a physical bound (it could not
be computed), after this many in a row that were not faster than the best so far."""

AUTO_DEFAULT_SECONDS = 60.0
"""Without a time limit, how long ``--chunks auto`` keeps doubling ``C`` (the candidates'
engines run with their own default budgets; a candidate started before this passes ends)."""

AUTO_SHARE = 0.5
"""Under a time limit, the share of the time left that candidate ``C`` may use (the rest is
kept for ``2C``, ``4C``, ...: an engine's work grows about linearly with ``C``)."""

AUTO_PROBE = "auto_probe"
"""Under a time limit, the ``extra`` flag of a portfolio method's candidates: the ``heuristic``
portfolio then builds an AllGather's tree packing only, on instances where its constructors
are slow (``ccplan.heuristics.search``, ``PROBE_GPUS``) and says so in
``details["auto_probe"]``. Otherwise it spends every candidate's whole share on its
improvement search (AMD x2 AllGather 1 GB: 30 s at C = 1, and C = 2 was the last candidate,
0.54 of the throughput limit); the search runs in full once, at the chosen ``C``, in the time
the doubling leaves (:func:`_improve`)."""


AUTO_REPLAY_SENDS = 500_000
"""Largest schedule :func:`_candidate_us` replays in alpha-beta time (about 5 s per million
sends); a larger one is ranked by its slot time."""

AUTO_GROWTH = 2.0
"""Under a time limit, the doubling stops when this many times the last candidate's time (its
engine, verification and bounds: about linear in C) is more than the time left."""


IMPROVE_MARGIN = 0.1
"""The share of the time left that the second run at the chosen ``C`` (:func:`_improve`) leaves
unused, so that the whole command ends within the time limit (5 % left AMD x3 AllGather 64 MB
at 60.6 s of wall time for a 60 s limit: the second run's verification and bounds took longer
than the probe's at the same ``C``)."""

def solve_auto_chunks(
    build: Callable[[int], Instance], method: str, options: SolveOptions | None = None
) -> tuple[Instance, Result]:
    """Pick the chunk count for the size (module docstring) and return the fastest verified
    schedule in microseconds.

    Parameters
    ----------
    build : callable
        ``C -> Instance`` (same topology, collective and size).
    method : str
    options : SolveOptions, optional
        A time limit is shared among the candidates: each gets :data:`AUTO_SHARE` of the time
        left; time a candidate leaves unused goes to the next ones. Without one, no new
        candidate starts after :data:`AUTO_DEFAULT_SECONDS`.

    Returns
    -------
    (Instance, Result)
        The chosen instance and its result; ``details["auto_chunks"]`` maps every ``C`` tried
        to its makespan in microseconds (None when it failed or did not verify), and
        ``details["auto_stop"]`` says why the doubling stopped.

        When no candidate gave a verified schedule but some ran to a result (no schedule in
        time, or one the verifier rejects), the last such result is returned as it is.

    Raises
    ------
    ValidationError
        No candidate ran to a result: the method refused every one (the first refusal is named).
    ResourceLimitError
        Not even ``C = 1`` fits the memory budget.
    """
    opts = options or SolveOptions()
    start = time.perf_counter()
    horizon = opts.time_limit if opts.time_limit is not None else AUTO_DEFAULT_SECONDS
    tried: dict[str, float | None] = {}
    best: tuple[float, Instance, Result] | None = None
    failure: str | None = None
    misses = failures = stale = 0
    physical: float | None = None
    stop = ""
    probe_extra = _probe_extra(method, opts)
    walls: dict[int, float] = {}
    last: tuple[Instance, Result] | None = None  # the last candidate that ran to a result
    probed: dict[int, float] = {}  # C of a probe that built the tree packing only -> its slot bound in us
    c = 1
    while True:
        left = horizon - (time.perf_counter() - start)
        if left <= 0 and best is not None:
            stop = "time limit reached" if opts.time_limit is not None else (
                f"{AUTO_DEFAULT_SECONDS:g} s of doubling without a time limit")
            break
        share = opts
        if opts.time_limit is not None:
            limit = max(1e-3, left * AUTO_SHARE if best is not None else left / 2)
            share = replace(opts, time_limit=limit, extra=probe_extra)
        result: Result | None = None
        try:
            # building the collective and solve() check their memory estimates first
            instance = build(c)
            try:
                began = time.perf_counter()
                result = solve(instance, method, share)
                walls[c] = time.perf_counter() - began
            except ValidationError as exc:
                failure = failure or f"C={c}: {exc}"
        except ResourceLimitError as exc:
            if best is None:
                raise
            stop = f"C={c} refused by the memory budget ({exc})"
            break
        if result is not None:
            last = (instance, result)
        us = _candidate_us(instance, result) if result is not None and result.verified else None
        tried[str(c)] = us
        if us is not None and result is not None and result.details.get(AUTO_PROBE):
            probed[c] = result.lower_bound_slots * instance.tau_us
        failures = failures + 1 if us is None else 0
        if failures >= AUTO_PATIENCE:
            stop = f"{AUTO_PATIENCE} chunk counts in a row gave no verified schedule"
            break
        if result is not None and physical is None:
            physical = result.physical_bound_us
        gained = us is not None and (best is None or us < (1 - AUTO_TOLERANCE) * best[0])
        # one doubling that gains little is not the end: a weak slot bound (e.g. one that lets
        # switches reduce) says nothing about larger C, and the next doubling may gain again
        stale = 0 if gained else stale + 1
        if us is not None and result is not None and (best is None or us < best[0]):
            best = (us, instance, result)
            misses = 0
        else:
            misses += 1
        if physical is not None and physical > 0:
            if best is not None and best[0] <= (1 + AUTO_CLOSE) * physical:
                stop = f"C={best[1].collective.chunks} within {AUTO_CLOSE:.1%} of the physical bound"
                break
            slot_bound = None if result is None else result.lower_bound_slots * instance.tau_us
            # a slot model that drops alphas bounds its slot time, not the alpha-beta time the
            # candidates are ranked by: DGX-2 x2 AllReduce 1 GB stopped at C = 32 (slot bound
            # within 1 %), where C = 128, which counts them, is 3 % faster replayed
            close = (
                slot_bound is not None
                and slot_bound <= (1 + AUTO_TOLERANCE) * physical
                and not instance.drops_alphas
            )
            if close and stale >= AUTO_PATIENCE:
                stop = (
                    f"the slot model's bound at C={c} is within {AUTO_TOLERANCE:.0%} of the physical bound "
                    f"and {AUTO_PATIENCE} doublings in a row gained less than {AUTO_TOLERANCE:.0%}"
                )
                break
        elif misses >= AUTO_PATIENCE and best is not None:
            stop = f"{AUTO_PATIENCE} larger C in a row were not faster (no physical bound)"
            break
        now = time.perf_counter() - start
        took, left = now - (horizon - left), horizon - now  # this candidate's time, the time left
        if opts.time_limit is not None and best is not None and AUTO_GROWTH * took > left:
            # its engine would stop at its share, but the verification and the bounds after it
            # would not: starting it would overrun the limit (AMD x2 AllReduce at C = 512: 74 s)
            stop = (f"C={2 * c} would take about {AUTO_GROWTH * took:.0f} s ({AUTO_GROWTH:g} times C={c}'s), "
                    f"more than the {max(left, 0.0):.0f} s left")
            break
        c *= 2
    if best is None:
        if last is not None:
            # the engine ran but found nothing in time (or nothing the verifier accepts): that
            # is the engine's answer, not bad input, so the caller reports it as such (CLI exit 3
            # or 1), with every C tried
            instance, result = last
            log.info("--chunks auto: no verified schedule at any C of %s: %s", tried, stop)
            return instance, replace(result, details={**dict(result.details), "auto_chunks": tried,
                                                      "auto_stop": stop})
        raise ValidationError(f"--chunks auto: no chunk count gave a verified schedule ({failure})")
    best_us, instance, result = best
    # The full portfolio once, at the probed C whose slot bound leaves the most room below the
    # best time (the chosen C itself unless its schedule meets its bound: a torus of 6 x 10
    # chose C = 2, slot-optimal at 0.983, where C = 8 reaches the limit)
    room = {k: v for k, v in probed.items() if v < best_us * (1 - 1e-9)}
    if opts.time_limit is not None and room and not opts.extra.get(AUTO_PROBE) and not (
        physical is not None and best_us <= (1 + AUTO_TOLERANCE) * physical
    ):
        at = min(room, key=lambda k: (room[k], k))
        left = horizon - (time.perf_counter() - start)
        at_instance = instance if at == instance.collective.chunks else build(at)
        again = _improve(at_instance, method, opts, result, left, walls.get(at, 0.0), best_us)
        if again is not result:
            instance, result = at_instance, again
    log.info("--chunks auto chose C=%d of %s: %s", instance.collective.chunks, tried, stop)
    details = {**dict(result.details), "auto_chunks": tried, "auto_stop": stop}
    return instance, replace(result, details=details)


def _candidate_us(instance: Instance, result: Result) -> float | None:
    """The time ``--chunks auto`` ranks a verified candidate by: its slot time, or, where the
    slot model drops alphas (:attr:`~ccplan.instances.instance.Instance.drops_alphas`) and the
    schedule has at most :data:`AUTO_REPLAY_SENDS` sends, the larger of it and the schedule's
    continuous alpha-beta time (:func:`ccplan.schedule.simulate.simulate`), which counts them
    (so every candidate is ranked by a time its alpha-beta replay does not exceed). Otherwise a
    small ``C``
    whose slots are longer than ten alphas is ranked by a time the machine cannot reach: a
    torus 6 x 6 AllGather 64 MB chose C = 4 at 311.1 us in slots, under the physical bound's
    311.8 us, and 319.5 us replayed."""
    us = result.makespan_us
    schedule = getattr(result, "schedule", None)
    if us is None or schedule is None or len(schedule) > AUTO_REPLAY_SENDS or not instance.drops_alphas:
        return us
    from ccplan.schedule.simulate import simulate

    return max(us, simulate(instance, schedule).completion_us)


def _probe_extra(method: str, opts: SolveOptions) -> Any:
    """The candidates' ``extra`` under a time limit: a portfolio's :data:`AUTO_PROBE` flag, and
    no flow-over-time bound (it only feeds the stop rule, which the physical bound drives, and
    it took as long as the engine: 9.5 of the 60 s of AMD x2 AllGather at C = 1), unless the
    options set them."""
    from ccplan.pipeline.registry import PORTFOLIOS

    extra = dict(opts.extra)
    if method in PORTFOLIOS:
        extra.setdefault(AUTO_PROBE, True)
    extra.setdefault("flow_bound", False)
    return extra if extra != dict(opts.extra) else opts.extra


def _improve(
    instance: Instance, method: str, opts: SolveOptions, result: Result, left: float, wall: float,
    best_us: float,
) -> Result:
    """``result`` (the best candidate, ranked at ``best_us``) or, when the time ``left``
    is more than twice the ``wall`` seconds the candidate at ``instance`` took, the method run
    on ``instance`` with the options as given (a portfolio's improvement search), within
    ``left`` less what ``result``'s run spent outside its engine (verification, bounds),
    whichever is faster by :func:`_candidate_us`."""
    # kept back: the process's own start and the result's output come after the limit too
    # (AMD x2 AllGather 64 MB: 61.4 s of wall time for a 60 s limit without it)
    limit = left - max(0.0, wall - result.solve_seconds) - IMPROVE_MARGIN * left
    if left <= 2 * wall or result.makespan_us is None or limit <= 0:
        return result
    try:
        again = solve(instance, method, replace(opts, time_limit=limit))
    except ValidationError as exc:  # pragma: no cover - the candidate itself was solved
        log.warning("--chunks auto: the second run at C=%d failed: %s", instance.collective.chunks, exc)
        return result
    if not again.verified or again.makespan_us is None:
        return result
    # ranked as the candidates were (the best one's instance may be another C)
    now = _candidate_us(instance, again)
    if now is not None and (
        now < best_us or (now == best_us and again.lower_bound_slots > result.lower_bound_slots)
    ):
        return again
    return result
