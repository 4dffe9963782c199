"""The method registry and the one solve pipeline every engine goes through.

An engine is a function ``(instance, options) -> Outcome``. It is registered by name with
:func:`register` in its own module; :data:`METHOD_MODULES` says which module to import for a
name, so that ``ccplan solve --method ring`` never imports Pyomo. :func:`solve` runs the
engine, then verifies its schedule independently and attaches the lower bound, so every
:class:`Result` a user sees has been checked.
"""

from __future__ import annotations

import importlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccplan.errors import SolveInterrupted, ValidationError
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import Report, verify

log = logging.getLogger(__name__)

STATUSES: tuple[str, ...] = ("optimal", "feasible", "infeasible", "unknown")


@dataclass(frozen=True)
class SolveOptions:
    """Options shared by all engines; each engine reads what applies to it.

    Parameters
    ----------
    time_limit : float, optional
        Wall-clock seconds for the engine (solver or heuristic search).
    workers : int
        CP-SAT ``num_workers``; 2 matches the 2-core machines this is developed on.
    seed : int
        Random seed (CP-SAT ``random_seed``, heuristic restarts).
    horizon : int, optional
        Slot horizon H for time-indexed engines; None lets the engine choose a safe one.
    warm_start : bool
        Let the exact engine start from the heuristic's schedule.
    log_path, progress_path, dump_model : Path, optional
        Solver log, incumbent/bound CSV, LP/MPS export of the model.
    extra : mapping
        Engine-specific settings (e.g. CP-SAT parameters as text under ``"cpsat_params"``).
    """

    time_limit: float | None = None
    workers: int = 2
    seed: int = 0
    horizon: int | None = None
    warm_start: bool = True
    log_path: Path | None = None
    progress_path: Path | None = None
    dump_model: Path | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.time_limit is not None and not self.time_limit > 0:
            raise ValidationError(f"time_limit must be positive, got {self.time_limit!r}")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ValidationError(f"workers must be a positive integer, got {self.workers!r}")
        if self.horizon is not None and (not isinstance(self.horizon, int) or self.horizon < 1):
            raise ValidationError(f"horizon must be a positive integer, got {self.horizon!r}")


@dataclass(frozen=True)
class Outcome:
    """What an engine returns.

    Parameters
    ----------
    schedule : Schedule or None
        None when the engine found none (infeasible horizon, time out).
    status : str
        One of :data:`STATUSES`; ``optimal`` only with a proof.
    bound_slots : float, optional
        The engine's own lower bound on the makespan (e.g. CP-SAT's best bound).
    details : mapping
        Anything else worth reporting (model size, trajectory, variant, hint status ...).
    """

    schedule: Schedule | None
    status: str
    bound_slots: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


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
        }
        if self.report is not None and not self.report.ok:
            out["violations"] = [str(v) for v in self.report.violations[:20]]
        out["details"] = _jsonable(dict(self.details))
        return out


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


Engine = Callable[[Instance, SolveOptions], Outcome]

_ENGINES: dict[str, Engine] = {}

METHOD_MODULES: dict[str, str] = {}
"""Method name -> module that registers it (imported on first use)."""


def run_constructor(
    build: Callable[[Any], Any], time_limit: float | None, variant: str
) -> tuple[Any, Outcome | None]:
    """Run a one-shot schedule constructor (``build(deadline)``) under ``time_limit``.

    Returns ``(its result, None)``, or ``(None, the Outcome that says why there is none)``
    when the deadline passed or Ctrl-C came: such a constructor has nothing complete to
    hand out before it ends (the Ctrl-C contract of :mod:`ccplan.errors`).
    """
    from ccplan.limits import Deadline, OutOfTimeError

    try:
        return build(Deadline.after(time_limit)), None
    except OutOfTimeError:
        reason = f"time limit of {time_limit:g} s reached" if time_limit is not None else "out of time"
        return None, Outcome(schedule=None, status="unknown", details={"variant": variant, "reason": reason})
    except KeyboardInterrupt:
        return None, Outcome(schedule=None, status="unknown", details={"interrupted": True})


def constructor_outcome(build: Callable[[Any], Schedule], time_limit: float | None, variant: str) -> Outcome:
    """:func:`run_constructor` for a constructor that returns a :class:`Schedule`: its
    ``feasible`` Outcome with ``details`` ``variant`` and ``seconds``, or the Outcome that
    says why there is none."""
    start = time.perf_counter()
    schedule, failed = run_constructor(build, time_limit, variant)
    if failed is not None:
        return failed
    return Outcome(
        schedule=schedule,
        status="feasible",
        details={"variant": variant, "seconds": time.perf_counter() - start},
    )


def register(name: str) -> Callable[[Engine], Engine]:
    """Decorator: register an engine under ``name``."""

    def deco(func: Engine) -> Engine:
        _ENGINES[name] = func
        return func

    return deco


def declare(name: str, module: str) -> None:
    """Tell the registry that ``module`` registers method ``name`` (lazy import)."""
    METHOD_MODULES[name] = module


def method_names() -> list[str]:
    """All declared or registered method names, sorted."""
    return sorted(set(METHOD_MODULES) | set(_ENGINES))


def get_engine(name: str) -> Engine:
    """The engine registered as ``name``; imports its module on first use."""
    if name not in _ENGINES and name in METHOD_MODULES:
        importlib.import_module(METHOD_MODULES[name])
    try:
        engine = _ENGINES[name]
    except KeyError:
        raise ValidationError(
            f"method {name!r} is unknown (choose from {', '.join(method_names())})"
        ) from None
    return _cut_through_aware(name, engine)


def _cut_through_aware(name: str, engine: Engine) -> Engine:
    """``engine`` for any switch model: an engine that schedules switches as store-and-forward
    nodes is run on the store-and-forward twin of a cut-through instance and its schedule
    re-timed (:mod:`ccplan.heuristics.cut_through`), in this one place for every heuristic."""

    def run(instance: Instance, options: SolveOptions) -> Outcome:
        if not instance.bufferless:
            return engine(instance, options)
        from ccplan.heuristics.cut_through import CUT_THROUGH_NATIVE, solve_on_twin

        if name in CUT_THROUGH_NATIVE:
            return engine(instance, options)
        return solve_on_twin(engine, instance, options)  # type: ignore[no-any-return]

    return run


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
        The instance would not fit the memory budget (:func:`ccplan.limits.estimate_solve`).
    SolveInterrupted
        Ctrl-C reached the engine; it carries the verified best schedule so far as a
        :class:`Result` (or None), per the contract in :mod:`ccplan.errors`.
    """
    from ccplan.limits import estimate_solve

    opts = options or SolveOptions()
    engine = get_engine(method)
    estimate_solve(instance, method).check()
    start = time.perf_counter()
    if instance.collective.combining:
        from ccplan.heuristics.combine import NATIVE_COMBINING, solve_combining

        if method not in NATIVE_COMBINING:
            # Data-movement engines solve the reversed twin; the combine module reverses it.
            outcome = solve_combining(instance, method, opts)
        else:
            outcome = engine(instance, opts)
    else:
        outcome = engine(instance, opts)
    seconds = time.perf_counter() - start
    result = _verified_result(instance, method, outcome, seconds, opts)
    if outcome.details.get("interrupted"):
        what = (
            "no schedule yet"
            if result.schedule is None
            else f"best schedule so far: {result.makespan_slots} slots, verified={result.verified}"
        )
        raise SolveInterrupted(f"{method} interrupted ({what})", result)
    return result


def _verified_result(
    instance: Instance, method: str, outcome: Outcome, seconds: float, options: SolveOptions | None = None
) -> Result:
    """Verify an engine's outcome and attach the lower bound (the second half of :func:`solve`).

    The bound is the analytic one (:func:`ccplan.bounds.lower_bound_slots`), the engine's
    own, and where the gap is still open the flow-over-time LP bound
    (:func:`ccplan.model.relax.gated_flow_bound`: small store-and-forward data-movement
    instances, within a share of the engine's time; ``options.extra["flow_bound"]`` False
    turns it off, True lifts its size limit), reported under ``details["flow_bound"]``.
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
        flow = _flow_bound(instance, bound, makespan, seconds, report, outcome, options)
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


def _flow_bound(
    instance: Instance, bound: int, makespan: int, seconds: float, report: Report | None, outcome: Outcome,
    options: SolveOptions | None,
) -> Any:
    """The gated flow-over-time bound of a verified schedule (None when it did not run).

    Not again after an engine that ran it (the exact engine reports ``details["bounds"]
    ["flow"]``); an LP HiGHS cannot solve leaves the bound as it was.
    """
    ran = outcome.details.get("bounds")
    if isinstance(ran, Mapping) and ran.get("flow") is not None:
        return None
    mode = "auto" if options is None else options.extra.get("flow_bound", "auto")
    from ccplan.model.relax import gated_flow_bound

    try:
        return gated_flow_bound(
            instance, bound, makespan, engine_seconds=seconds,
            arrivals=None if report is None else report.arrivals, mode=mode,
        )
    except (RuntimeError, ValueError, MemoryError) as exc:
        log.warning("flow-over-time bound skipped: %s", exc)
        return None


# Built-in engines, imported on first use so that light methods never import Pyomo.
for _name, _module in {
    "milp": "ccplan.model.exact",
    "mteg": "ccplan.heuristics.mteg",
    "layered": "ccplan.heuristics.layered",
    "cut-aware": "ccplan.heuristics.cutaware",
    "heuristic": "ccplan.heuristics.search",
    "multitree": "ccplan.heuristics.multitree",
    "cluster-allreduce": "ccplan.heuristics.multitree",
    "exact-combining": "ccplan.model.combining",
    "trees": "ccplan.heuristics.trees",
    **{
        name: "ccplan.heuristics.baselines"
        for name in (
            "ring",
            "tree",
            "double-binary-tree",
            "recursive-doubling",
            "recursive-halving-doubling",
            "hierarchical",
            "pairwise",
        )
    },
}.items():
    declare(_name, _module)
