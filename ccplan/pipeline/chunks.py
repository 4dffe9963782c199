"""``--chunks auto``: the chunk count chosen against the physical bound.

``C`` is doubled from 1 (C = 1, 2, 4, ...) until a schedule is within :data:`AUTO_TOLERANCE`
(1 %) of the physical bound (:func:`ccplan.physical.physical_bound`: any chunking, continuous
alpha-beta time), and otherwise for as long as the slot model at ``C`` can still lose more than
1 % to the physics (its own lower bound in microseconds, the slot bound at ``C`` times ``tau``,
is more than 1 % above the physical bound) or one of the last :data:`AUTO_PATIENCE` doublings
still gained more than 1 %, and time remains (under a time limit: for twice the last
candidate's time, :data:`AUTO_GROWTH`). There is no fixed cap on ``C``:
the memory budget refuses what would not fit, and that ends the search with the best
schedule so far. The verified schedule with the shortest time in microseconds wins (a slot's
length changes with ``C``, so slots would not compare).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from ccplan.contract import SolveOptions
from ccplan.errors import ResourceLimitError, ValidationError
from ccplan.instances.instance import Instance
from ccplan.pipeline.solve import Result, solve

log = logging.getLogger(__name__)

AUTO_TOLERANCE = 0.01
"""How far above the physical bound the slot model's own bound at ``C`` may stay before
``--chunks auto`` stops doubling ``C`` (and how close a schedule must come to stop early)."""

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


AUTO_GROWTH = 2.0
"""Under a time limit, the doubling stops when this many times the last candidate's time (its
engine, verification and bounds: about linear in C) is more than the time left."""


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

    Raises
    ------
    ValidationError
        No candidate gave a verified schedule (the first failure is named).
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
    c = 1
    while True:
        left = horizon - (time.perf_counter() - start)
        if left <= 0 and best is not None:
            stop = "time limit reached" if opts.time_limit is not None else (
                f"{AUTO_DEFAULT_SECONDS:g} s of doubling without a time limit")
            break
        share = opts
        if opts.time_limit is not None:
            share = replace(opts, time_limit=max(1e-3, left * AUTO_SHARE if best is not None else left / 2))
        result: Result | None = None
        try:
            # building the collective and solve() check their memory estimates first
            instance = build(c)
            try:
                result = solve(instance, method, share)
            except ValidationError as exc:
                failure = failure or f"C={c}: {exc}"
        except ResourceLimitError as exc:
            if best is None:
                raise
            stop = f"C={c} refused by the memory budget ({exc})"
            break
        us = result.makespan_us if result is not None and result.verified else None
        tried[str(c)] = us
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
            if best is not None and best[0] <= (1 + AUTO_TOLERANCE) * physical:
                stop = f"C={best[1].collective.chunks} within {AUTO_TOLERANCE:.0%} of the physical bound"
                break
            slot_bound = None if result is None else result.lower_bound_slots * instance.tau_us
            close = slot_bound is not None and slot_bound <= (1 + AUTO_TOLERANCE) * physical
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
        raise ValidationError(f"--chunks auto: no chunk count gave a verified schedule ({failure})")
    _, instance, result = best
    log.info("--chunks auto chose C=%d of %s: %s", instance.collective.chunks, tried, stop)
    details = {**dict(result.details), "auto_chunks": tried, "auto_stop": stop}
    return instance, replace(result, details=details)
