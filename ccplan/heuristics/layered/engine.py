"""The registered engine ``layered``; under a time limit it falls back to the
shortest-path trees of :mod:`ccplan.heuristics.tree_fallback` when the construction cannot
finish in time."""

from __future__ import annotations

import logging
import time

from ccplan.contract import Outcome, SolveOptions, constructor_outcome, register
from ccplan.heuristics.layered.construct import LayeredOptions, layered_schedule
from ccplan.instances.instance import Instance

log = logging.getLogger(__name__)


@register("layered")
def layered_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``layered``: the draft's layer-by-layer constructor (``extra``: ``slack``)."""
    seed = options.extra.get("layered_seed")
    opts = LayeredOptions(slack=int(options.extra.get("slack", 0)), seed=None if seed is None else int(seed))
    limit = options.time_limit
    if limit is None:
        return constructor_outcome(
            lambda deadline: layered_schedule(instance, opts, deadline), None, opts.label()
        )
    return _within_time_limit(instance, opts, limit)


def _within_time_limit(instance: Instance, opts: LayeredOptions, limit: float) -> Outcome:
    """``layered`` under a time limit that always ends with a schedule where one is cheap.

    The construction gets the limit less what the shortest-path-tree fallback
    (:mod:`ccplan.heuristics.tree_fallback`) may need on this many deliveries; when the
    construction does not finish by then, the fallback's schedule is the answer (status
    ``feasible``, ``details["fallback"]`` says why). A limit too short for any of the
    construction goes straight to the fallback.
    """
    from ccplan.heuristics import tree_fallback as fb

    start = time.perf_counter()
    usable = fb.applies(instance)
    reserve = fb.reserve_seconds(instance.deliveries) if usable else 0.0
    own = limit - reserve
    why = ""
    if own >= 0.1 * limit or not usable:
        outcome = constructor_outcome(
            lambda deadline: layered_schedule(instance, opts, deadline), max(own, 1e-3), opts.label()
        )
        if outcome.schedule is not None or not usable or outcome.details.get("interrupted"):
            return outcome
        why = f"layered did not finish within {own:.3g} s of the {limit:g} s time limit"
    else:
        why = f"the {limit:g} s time limit leaves layered no time next to the fallback's {reserve:.3g} s"
    schedule = fb.tree_fallback(instance, method="layered")
    if schedule is None:
        reason = f"time limit of {limit:g} s reached"
        return Outcome(schedule=None, status="unknown", details={"variant": opts.label(), "reason": reason})
    log.info("layered: %s; shortest-path trees instead", why)
    details = {
        "variant": opts.label(),
        "seconds": time.perf_counter() - start,
        "fallback": f"{why}: shortest-path trees",
    }
    return Outcome(schedule=schedule, status="feasible", details=details)
