"""The one solve pipeline every engine goes through.

:func:`solve` checks the memory estimate, runs the engine as the registry hands it out
(:func:`ccplan.pipeline.registry.get_engine`: the cut-through twin, the time
reversal), then verifies its schedule independently and attaches the lower bound, so every
:class:`Result` a user sees has been checked.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ccplan.contract import Outcome, SolveOptions, engines_from
from ccplan.errors import SolveInterrupted, ValidationError
from ccplan.instances.instance import Instance
from ccplan.parsing import plain_number
from ccplan.physical import PhysicalBound
from ccplan.pipeline.registry import get_engine
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import Report, verify

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    """A verified answer, as written by ``ccplan solve --report``.

    Parameters
    ----------
    method, status : str
        The engine's name and one of :data:`STATUSES` (after verification).
    schedule : Schedule or None
        None when the engine found none.
    makespan_slots : int or None
        The verifier's makespan (None without a complete schedule).
    lower_bound_slots : int
        The best valid lower bound known (the bounds module's and the engine's own).
    tau_us, solve_seconds : float
    verified : bool
        The independent verifier's verdict.
    report : Report, optional
        The verifier's report.
    details : mapping
        The engine's details (plus ``optimality_proof`` when the bound proves it).
    instance : Instance, optional
        The instance solved; :func:`solve` always sets it, so :meth:`algbw_GBps` and
        :meth:`to_dict` need no argument.
    physical : PhysicalBound, optional
        The physical lower bound (:func:`ccplan.physical.physical_bound`: any chunking,
        continuous alpha-beta time); None when it was not computed.
    """

    method: str
    status: str
    schedule: Schedule | None
    makespan_slots: int | None
    lower_bound_slots: int
    tau_us: float
    solve_seconds: float
    verified: bool
    report: Report | None = field(default=None, repr=False)
    details: Mapping[str, Any] = field(default_factory=dict)
    instance: Instance | None = field(default=None, repr=False, compare=False)
    physical: PhysicalBound | None = field(default=None, repr=False, compare=False)

    @property
    def physical_bound_us(self) -> float | None:
        """The physical lower bound in microseconds (None when not computed)."""
        return None if self.physical is None else self.physical.us

    @property
    def physical_gap(self) -> float | None:
        """``1 - physical_bound_us / makespan_us``: how far the schedule is from what any
        schedule of the machine could do (negative when the slot model is more optimistic
        than the physics, see :meth:`claim`)."""
        if self.physical is None or not self.makespan_us:
            return None
        return 1.0 - self.physical.us / self.makespan_us

    def claim(self, instance: Instance | None = None) -> str:
        """What is proven, in words, naming the model it holds in (DESIGN.md, "Two kinds of
        truth"): the slot model's status at this C, tau and switch model, then the distance to
        the physical bound."""
        inst = self._instance(instance)
        model = (
            f"the slot model with C = {inst.collective.chunks}, tau = {plain_number(self.tau_us)} us, "
            f"{inst.switch_model} switches" + _reducing_words(inst)
        )
        if self.makespan_slots is None:
            text = f"no schedule ({self.status}) in {model}"
        elif self.status == "optimal":
            text = f"optimal in {model}"
        else:
            gap = self.gap
            within = "" if gap is None else f", at most {gap:.1%} above its optimum"
            text = f"{self.status} in {model}{within}"
        pgap = self.physical_gap
        if pgap is None or self.physical is None:
            return text
        bound = (
            f"the physical bound {plain_number(self.physical.us)} us "
            "(any chunking, continuous alpha-beta time)"
        )
        if pgap >= 0:
            if inst.drops_alphas:
                # above the bound in slots, but the slots leave alphas out: the schedule's
                # alpha-beta time may be longer than its slot time
                return (f"{text}; {pgap:.1%} above {bound} in slot time, which drops alphas below "
                        "alpha_threshold (`ccplan simulate` gives the alpha-beta time)")
            return f"{text}; {pgap:.1%} above {bound}"
        # the reasons the instance has (a threshold above 0 alone drops nothing where every
        # alpha is longer than it in slots)
        reasons = [
            *(["alphas below alpha_threshold are dropped from the slots"] if inst.drops_alphas else []),
            *(["the cut-through hop's last transfer is not counted in the slots"]
              if bool(inst.cut_through_links.any()) else []),
        ]
        why = f" ({'; '.join(reasons)})" if reasons else ""
        return f"{text}; {-pgap:.1%} below {bound}: the slot model is optimistic here{why}"

    def _instance(self, instance: Instance | None) -> Instance:
        inst = instance if instance is not None else self.instance
        if inst is None:
            raise ValidationError("this Result carries no instance; pass it as an argument")
        return inst

    @property
    def makespan_us(self) -> float | None:
        """Makespan in microseconds."""
        return None if self.makespan_slots is None else self.makespan_slots * self.tau_us

    def algbw_GBps(self, instance: Instance | None = None) -> float | None:
        """Output bytes / time, in GB/s (the result's own instance unless one is given)."""
        if self.makespan_us is None:
            return None
        return self._instance(instance).algbw_GBps(self.makespan_us)

    def busbw_GBps(self, instance: Instance | None = None) -> float | None:
        """Bus bandwidth (nccl-tests convention): algbw times :func:`busbw_factor`."""
        inst = self._instance(instance)
        algbw = self.algbw_GBps(inst)
        return None if algbw is None else algbw * busbw_factor(inst)

    @property
    def gap(self) -> float | None:
        """Relative gap ``(makespan - bound) / makespan``."""
        if self.makespan_slots is None or self.makespan_slots == 0:
            return None
        return (self.makespan_slots - self.lower_bound_slots) / self.makespan_slots

    def to_dict(self, instance: Instance | None = None) -> dict[str, Any]:
        """The result JSON of DESIGN.md (plus details)."""
        inst = self._instance(instance)
        algbw = self.algbw_GBps(inst)
        out: dict[str, Any] = {
            "instance": inst.describe(),
            "method": self.method,
            "status": self.status,
            "makespan_slots": self.makespan_slots,
            "lower_bound_slots": self.lower_bound_slots,
            "gap": self.gap,
            "tau_us": self.tau_us,
            "makespan_us": self.makespan_us,
            "algbw_GBps": None if algbw is None or math.isinf(algbw) else algbw,
            "busbw_GBps": None if algbw is None or math.isinf(algbw) else algbw * busbw_factor(inst),
            "solve_seconds": self.solve_seconds,
            "verified": self.verified,
            "num_sends": None if self.schedule is None else len(self.schedule),
            "chunks": inst.collective.chunks,
            "switch_model": inst.switch_model,
            "reducing_switches": sorted(inst.reducing_switches),
            "physical_bound_us": self.physical_bound_us,
            "physical_gap": self.physical_gap,
            "physical_binding": None if self.physical is None else self.physical.binding,
            "claim": self.claim(inst),
        }
        if self.report is not None and not self.report.ok:
            out["violations"] = [str(v) for v in self.report.violations[:20]]
        out["details"] = _jsonable(dict(self.details))
        return out


ROW_FIELDS: tuple[str, ...] = (
    "status",
    "makespan_slots",
    "lower_bound_slots",
    "gap",
    "tau_us",
    "makespan_us",
    "algbw_GBps",
    "busbw_GBps",
    "solve_seconds",
    "verified",
    "num_sends",
    "switch_model",
    "physical_bound_us",
    "physical_gap",
    "physical_binding",
    "claim",
)
"""The scalar fields of :meth:`Result.to_dict` that a table row (sweep, plan) carries."""


BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
}
"""Collective -> busbw / algbw as a function of the GPU count ``n`` (nccl-tests'
``PERFORMANCE.md``: the data each GPU's busiest link must carry, so the figure is comparable
with the hardware's link bandwidth whatever ``n``). Collectives not listed (Broadcast, Reduce,
...) have busbw = algbw."""


def busbw_factor(instance: Instance) -> float:
    """busbw / algbw for ``instance`` (:data:`BUSBW_FACTORS`, 1 when not listed)."""
    factor = BUSBW_FACTORS.get(instance.collective.kind)
    return 1.0 if factor is None else factor(len(instance.topology.gpus))


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def solve(instance: Instance, method: str, options: SolveOptions | None = None) -> Result:
    """Run ``method`` on ``instance``, verify its schedule and attach the lower bound.

    Returns
    -------
    Result
        ``verified`` is the verifier's verdict; a schedule that fails verification is kept
        (for inspection) but its status is downgraded to ``unknown``.

    Raises
    ------
    ResourceLimitError
        The instance would not fit the memory budget (:func:`ccplan.pipeline.estimate.estimate_solve`).
    SolveInterrupted
        Ctrl-C reached the engine; it carries the verified best schedule so far as a
        :class:`Result` (or None), per the contract in :mod:`ccplan.errors`.
    """
    from ccplan.pipeline.estimate import estimate_solve

    opts = options or SolveOptions()
    engine = get_engine(method)
    estimate_solve(instance, method).check()
    start = time.perf_counter()
    with engines_from(get_engine):  # engines that need another get the pipeline's
        outcome = engine(instance, _engine_options(instance, opts))
    seconds = time.perf_counter() - start
    result = _verified_result(instance, method, outcome, seconds, opts, start)
    if opts.extra.get("physical_bound", True):
        result = replace(result, physical=physical_of(instance))
    if outcome.details.get("interrupted"):
        what = (
            "no schedule yet"
            if result.schedule is None
            else f"best schedule so far: {result.makespan_slots} slots, verified={result.verified}"
        )
        raise SolveInterrupted(f"{method} interrupted ({what})", result)
    return result


POST_SECONDS_PER_DELIVERY = 2e-6
"""Under a time limit, the seconds per delivery that :func:`solve` keeps back from the engine for
what follows it (the verifier's replay, the slot model's bound, the physical bound): AMD x2
AllGather 1 GB at C = 1,024 (1.0 million deliveries) spent 1.9 s after the engine, and a
10 s limit took 11.8 s of wall time. At most :data:`POST_MOST_SHARE` of the limit."""

POST_MOST_SHARE = 0.25
"""The largest share of a time limit kept back from the engine (:data:`POST_SECONDS_PER_DELIVERY`)."""


def _engine_options(instance: Instance, options: SolveOptions) -> SolveOptions:
    """``options`` with the time limit less what the work after the engine is expected to take
    (:data:`POST_SECONDS_PER_DELIVERY`), so that :func:`solve` as a whole keeps the limit."""
    if options.time_limit is None:
        return options
    kept = min(POST_MOST_SHARE * options.time_limit, POST_SECONDS_PER_DELIVERY * instance.deliveries)
    return replace(options, time_limit=options.time_limit - kept)


def _reducing_words(instance: Instance) -> str:
    """", switches reduce" (or which do) when the instance lets switches add partial sums."""
    reducing = instance.reducing_switches
    if not reducing or not instance.collective.combining:
        return ""
    if reducing == frozenset(instance.topology.switches):
        return ", switches reduce"
    return f", switches {', '.join(map(str, sorted(reducing)))} reduce"


def physical_of(instance: Instance) -> PhysicalBound | None:
    """The physical bound of ``instance``, or None (logged) when it cannot be computed.

    Combining collectives get the bound of the instance's own capability: only the switches
    of :attr:`~ccplan.instances.instance.Instance.reducing_switches` may add partial sums,
    as in the verifier.
    """
    from ccplan.physical import physical_bound

    try:
        return physical_bound(instance, switch_reduce=instance.reducing_switches)
    except (ValidationError, ValueError, MemoryError) as exc:
        log.warning("physical bound skipped: %s", exc)
        return None


def _verified_result(
    instance: Instance, method: str, outcome: Outcome, seconds: float, options: SolveOptions | None = None,
    started: float | None = None,
) -> Result:
    """Verify an engine's outcome and attach the lower bound (the second half of :func:`solve`).

    The bound is the analytic one (:func:`ccplan.bounds.lower_bound_slots`), the engine's
    own, and where the gap is still open the flow-over-time LP bound
    (:func:`ccplan.bounds.flow_lp.gated_flow_bound`: small store-and-forward data-movement
    instances, within a share of the engine's time; ``options.extra["flow_bound"]`` False
    turns it off, True lifts its size limit), reported under ``details["flow_bound"]``.
    ``started``: when the solve began (``time.perf_counter``), so that the flow bound gets what
    is left of the time limit after the verification too (else the engine's ``seconds`` count).
    """
    from ccplan.bounds import lower_bound_slots

    report = None
    makespan = None
    verified = False
    status = outcome.status
    if outcome.schedule is not None:
        report = verify(instance, outcome.schedule)
        verified = report.ok
        makespan = report.makespan_slots
        if not report.ok:
            log.error(
                "method %s produced a schedule that fails verification: %s", method, report.violations[0]
            )
            status = "unknown"
    # A verified makespan lets the bound stop once it is reached (same value, cheaper).
    bound = lower_bound_slots(instance, stop_at=makespan if verified else None)
    if outcome.bound_slots is not None:
        bound = max(bound, math.ceil(outcome.bound_slots - 1e-9))
    details = dict(outcome.details)
    if verified and makespan is not None and makespan > bound and status != "optimal":
        spent = seconds if started is None else time.perf_counter() - started
        flow = _flow_bound(instance, bound, makespan, seconds, report, outcome, options, spent)
        if flow is not None:
            # without its seconds (logged): details are compared across runs (sweep tables)
            details["flow_bound"] = {k: v for k, v in flow.as_dict().items() if k != "seconds"}
            bound = max(bound, flow.slots)
    if status == "optimal" and makespan is not None:
        bound = max(bound, makespan)
    elif verified and makespan is not None and makespan <= bound:
        # A verified schedule that meets a valid lower bound is optimal, whoever produced it.
        status = "optimal"
        details["optimality_proof"] = "makespan equals the lower bound"
    return Result(
        method=method,
        status=status,
        schedule=outcome.schedule,
        makespan_slots=makespan,
        lower_bound_slots=bound,
        tau_us=instance.tau_us,
        solve_seconds=seconds,
        verified=verified,
        report=report,
        details=details,
        instance=instance,
    )


FLOW_LEAST_SECONDS = 0.5
"""Under a time limit, the flow-over-time bound runs only with at least this much of it left."""


def _flow_bound(
    instance: Instance, bound: int, makespan: int, seconds: float, report: Report | None, outcome: Outcome,
    options: SolveOptions | None, spent: float | None = None,
) -> Any:
    """The gated flow-over-time bound of a verified schedule (None when it did not run).

    Not again after an engine that ran it (the exact engine reports ``details["bounds"]
    ["flow"]``); an LP HiGHS cannot solve leaves the bound as it was.
    """
    ran = outcome.details.get("bounds")
    if isinstance(ran, Mapping) and ran.get("flow") is not None:
        return None
    mode = "auto" if options is None else options.extra.get("flow_bound", "auto")
    from ccplan.bounds.flow_lp import flow_budget, gated_flow_bound

    budget = None
    if options is not None and options.time_limit is not None:
        # within what the engine left of the time limit: its own budget (the engine's time, up
        # to 30 s) once took a 20 s Broadcast to 40 s of wall time
        budget = min(flow_budget(seconds), options.time_limit - (seconds if spent is None else spent))
        if budget < FLOW_LEAST_SECONDS:
            log.info("flow-over-time bound skipped: %.1f s of the time limit left", max(budget, 0.0))
            return None
    try:
        return gated_flow_bound(
            instance, bound, makespan, engine_seconds=seconds,
            arrivals=None if report is None else report.arrivals, mode=mode, time_limit=budget,
        )
    except (RuntimeError, ValueError, MemoryError) as exc:
        log.warning("flow-over-time bound skipped: %s", exc)
        return None
