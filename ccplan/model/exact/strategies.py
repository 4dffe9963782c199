"""The exact engine's search strategies (:data:`STRATEGIES`: ``direct``, ``descending``,
``ascending``, ``auto``, ``lns``), the fallbacks when the whole model is refused (LNS, else
the heuristic with the solver's time), and the flow-over-time bound that raises the run's lower
bound before the search on large models (:func:`_flow_bound`, keyed to ``auto``'s threshold)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ccplan.contract import SolveOptions, sub_engine
from ccplan.errors import ValidationError
from ccplan.model.exact.solves import _ask, _bound_from, _build, _hint, _solve
from ccplan.model.run import _RefusedError, _Run

log = logging.getLogger(__name__)


DEFAULT_STRATEGY = "auto"
"""``direct`` for small models, ``ascending`` for large ones (:func:`_auto`); measured in
docs/exact.md."""

AUTO_DIRECT_NONZEROS = 200_000
"""``auto`` solves one ``min D`` model (``direct``) up to this many estimated nonzeros at the
warm start's horizon: below it one build beats one build per question of ``ascending``."""


def _direct(run: _Run, horizon: int) -> None:
    """One solve: min D over the horizon (the paper's objective)."""
    model = _build(run, horizon)
    hint = _hint(run, model, horizon)
    res = _solve(run, model, horizon, hint, feasibility=False)
    _bound_from(run, res, horizon)


def _next_below(run: _Run, h: int) -> int:
    return h if run.incumbent_makespan is None else min(h, run.incumbent_makespan - 1)


def _descending(run: _Run, horizon: int) -> None:
    """Feasibility questions "D <= h?" for decreasing h, each on a model built for horizon h.

    The first h is one below the warm start (or ``horizon`` without one); a schedule with
    makespan m moves h to m - 1; "infeasible" at h proves the incumbent (makespan h + 1)
    optimal. A model for a smaller h has fewer slots and its infeasibility proof is
    shorter than closing the gap of the full model.
    """
    h = _next_below(run, horizon)
    while h >= run.global_bound:
        res = _ask(run, h)
        if res is None:
            return
        if not res.has_solution:
            return
        if run.incumbent_makespan is None or run.incumbent_makespan > h:
            log.error("feasibility answer at h=%d did not yield a schedule with makespan <= h", h)
            return
        h = _next_below(run, h)


def _ascending(run: _Run, horizon: int) -> None:
    """Feasibility questions "D <= h?" for h = lower bound, +1, ...: the first yes is optimal."""
    h = run.global_bound
    run.question_top = horizon if run.incumbent_makespan is None else min(horizon, run.incumbent_makespan - 1)
    while run.incumbent_makespan is None or h < run.incumbent_makespan:
        if h > horizon:
            return
        res = _ask(run, h)
        if res is None:
            return
        if res.status != "infeasible":
            return  # a schedule with makespan <= h (optimal, as h is a bound) or a time out
        h += 1


def _auto(run: _Run, horizon: int) -> None:
    """``direct`` when the model over the horizon is small (:data:`AUTO_DIRECT_NONZEROS`),
    else ``ascending`` (many small models instead of one large one)."""
    from ccplan.model.size import estimate_size

    est = estimate_size(run.instance, horizon, dense=bool(run.options.extra.get("dense", False)))
    chosen = "direct" if est.nonzeros <= AUTO_DIRECT_NONZEROS else "ascending"
    run.auto_choice = chosen
    if chosen == "direct" or run.options.time_limit is None or not run.options.extra.get("lns", True):
        STRATEGIES[chosen](run, horizon)
        return
    _ascending_then_lns(run, horizon)


AUTO_ASCENDING_SHARE = 0.5
"""Under ``auto`` on a large model with a time limit, the ascending questions get this share
of the time left; a question still open then is a stalled search, and LNS gets the rest."""

AUTO_QUESTION_SHARE = 0.2
"""Under ``auto`` (as :data:`AUTO_ASCENDING_SHARE`), one question open longer than this share
of the time left at the start is a stalled search too. Measured in 10-minute runs (2
workers, load 6-8): DGX2 2 chassis 1 MB answers "no" to 37..40 in 45-74 s each; AMD 2
chassis 1 GB leaves its first question, "D <= 49?", open for the whole share (258 s), while
LNS alone over the same 600 s reaches 50 slots where ``auto`` ended at 51."""

AUTO_FIRST_QUESTION_SHARE = 0.1
"""The first question's cap (instead of :data:`AUTO_QUESTION_SHARE`): until one "no" shows
that CP-SAT answers this instance's questions, a question that stays open is more likely to
stay open for good. On AMD 2 chassis 1 GB "D <= 49?" never got an answer (111-273 s
tried), and each second it takes is one LNS does not get (``--strategy lns`` reached 50 at
407 s, ``auto`` with a 111 s first question ended at 51); NDv2 2 chassis 64 KB answers its
questions in about 20 s each (load 7)."""


def _ascending_then_lns(run: _Run, horizon: int) -> None:
    """``ascending`` until :data:`AUTO_ASCENDING_SHARE` of the time left is used, then LNS
    on the incumbent with the rest when the gap is still open (docs/exact.md, LNS section)."""
    remaining = run.remaining()
    assert remaining is not None
    run.soft_deadline = time.perf_counter() + AUTO_ASCENDING_SHARE * remaining
    run.question_cap = AUTO_FIRST_QUESTION_SHARE * remaining
    run.later_question_cap = AUTO_QUESTION_SHARE * remaining
    try:
        _ascending(run, horizon)
    except _RefusedError as exc:
        # A question's model does not fit the memory budget or the ascending share of the
        # time: the refusal path (LNS, else the heuristic) with the whole time left.
        run.soft_deadline = run.question_cap = None
        run.fallback = str(exc)
        run.steps.append({"horizon": run.estimate.get("horizon"), "status": "refused", "reason": str(exc)})
        run.auto_choice = "ascending+lns"
        if not _lns_instead(run):
            _heuristic_instead(run)
        return
    finally:
        run.soft_deadline = None
        run.question_cap = run.later_question_cap = None
        run.question_model = None  # the questions' shared model is not LNS's: free it
    if run.incumbent_makespan is not None and run.incumbent_makespan > run.global_bound:
        run.auto_choice = "ascending+lns"
        _lns(run, horizon)


def _lns(run: _Run, horizon: int) -> None:
    """Large neighbourhood search on the incumbent (:mod:`ccplan.model.lns`)."""
    from ccplan.model.lns import lns_search

    lns_search(run, horizon)


Strategy = Callable[[_Run, int], None]

STRATEGIES: dict[str, Strategy] = {
    "direct": _direct, "descending": _descending, "ascending": _ascending, "auto": _auto,
    "lns": _lns,
}
"""Search strategies of the ``milp`` engine (``extra["strategy"]``)."""


HEURISTIC_INSTEAD_FACTOR = 4.0
"""See :func:`_heuristic_instead`. Measured with ``--time-limit 20`` on a shared machine:
DGX2 4 chassis 1 MB C=8 has an 8.5 s first round and a 7 s heuristic budget ran about 20 s;
NDv2 10 chassis 1 KB has a 0.8 s first round and kept its 13 s budget."""


def _heuristic_instead(run: _Run) -> None:
    """No model fits: spend the time the solver would have had on the heuristic (70 % of
    what is left, its default effort without a limit) and keep what it improves.

    Skipped when less than :data:`HEURISTIC_INSTEAD_FACTOR` times the warm start's first
    round is left: the portfolio's fixed variants each cost about one such round and do
    not stop on the clock, so a shorter budget would overrun the limit."""
    if run.options.horizon is not None or run.warm_method not in ("heuristic", "greedy"):
        return
    remaining = run.remaining()
    first = run.warm_facts.get("first_round_seconds", 0.0)
    if remaining is not None and (remaining < 1.0 or remaining < HEURISTIC_INSTEAD_FACTOR * first):
        return
    try:
        engine = sub_engine("heuristic")
    except (ValidationError, ImportError):
        return
    limit = None if remaining is None else 0.7 * remaining
    out = engine(run.instance, SolveOptions(time_limit=limit, workers=run.options.workers,
                                            seed=run.options.seed + 1))
    if out.schedule is not None:
        run.offer(out.schedule, "heuristic (model refused)")


def _lns_instead(run: _Run) -> bool:
    """The whole model was refused: LNS re-optimises parts of the incumbent instead.
    False when no neighbourhood model fits (the heuristic then gets the time)."""
    from ccplan.model.lns import lns_search

    if run.incumbent_makespan is None:
        return False
    return lns_search(run, run.incumbent_makespan)


RELAX_SHARE = 0.2
"""The flow-over-time bound (:mod:`ccplan.bounds.flow_lp`) gets at most this share of the time
left after the warm start (at most :data:`RELAX_CAP` s)."""

RELAX_CAP = 60.0
"""Most seconds of the flow-over-time bound (also without a time limit)."""

RELAX_DESTINATIONS = 4
"""Destinations the flow-over-time bound checks (one per symmetry class, those the
incumbent serves last first: ``relax.destination_order``). The bound only needs the
destination that refutes a horizon; on the issue's instances that is the first (DGX2: an
odd GPU; AMD 4 chassis: GCD 5), and each LP costs 1-15 s there."""

RELAX_MAX_ARCS = 100_000
"""No flow-over-time bound when links x horizon exceeds this (the LP's size, built in Python
at ~20 us per arc; AMD 4 chassis 1 GB: 54,000; NDv2 10
chassis 1 KB has a horizon of 21,614 slots)."""


def _flow_bound(run: _Run, horizon: int) -> None:
    """Raise the run's bound with the flow-over-time relaxation (:mod:`ccplan.bounds.flow_lp`)
    when the model is large (``auto``'s threshold, :data:`AUTO_DIRECT_NONZEROS`; small
    models are proven faster by CP-SAT itself) and the gap is open. ``extra["flow_bound"]``:
    ``"auto"`` (default), True (always), False (never); never under ``--prove``."""
    from ccplan.bounds.flow_lp import applies, destination_order, flow_bound
    from ccplan.model.lns import arrivals
    from ccplan.model.size import estimate_size

    mode = run.options.extra.get("flow_bound", "auto")
    if mode is False or run.options.extra.get("prove", False):
        return
    m = run.incumbent_makespan
    if m is None or m <= run.global_bound or not applies(run.instance):
        return
    if mode == "auto":
        if run.instance.topology.num_links * horizon > RELAX_MAX_ARCS:
            return
        est = estimate_size(run.instance, horizon, dense=bool(run.options.extra.get("dense", False)))
        if est.nonzeros <= AUTO_DIRECT_NONZEROS:
            return
    remaining = run.remaining()
    budget = RELAX_CAP if remaining is None else min(RELAX_CAP, RELAX_SHARE * remaining)
    if budget <= 0.05:
        return
    per: dict[int, list[int]] = {}
    if run.incumbent is not None:
        for (_chunk, v), t in arrivals(run.instance, run.incumbent).items():
            per.setdefault(v, []).append(t)
    try:
        fb = flow_bound(run.instance, run.global_bound, upper=m, time_limit=budget,
                        destinations=destination_order(run.instance, per)[:RELAX_DESTINATIONS])
    except (RuntimeError, ValueError, MemoryError) as exc:
        # an LP HiGHS could not solve: the run goes on with the bound it has
        log.warning("flow-over-time bound skipped: %s", exc)
        return
    if fb is None:
        return
    run.flow = fb.as_dict()
    run.raise_bound(fb.slots)
