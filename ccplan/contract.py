"""The engine contract: what every engine is given and returns, and the registry.

An engine is a function ``(instance, options) -> Outcome`` registered by name with
:func:`register` in its own module; :data:`METHOD_MODULES` says which module to import for a
name, so that ``ccplan solve --method ring`` never imports Pyomo. Engines import this module
and nothing of the pipeline above them (:mod:`ccplan.pipeline`, which adapts each registered
engine to every instance: the cut-through twin, the time reversal of combining collectives).
An engine that needs another engine (the exact engine's warm start, the ``heuristic``
portfolio's safety net) asks :func:`sub_engine`: within a solve the pipeline hands its adapted
engines down (:func:`engines_from`), so no engine calls up into the pipeline by import.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule

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


def registered(name: str) -> Engine:
    """The engine function registered as ``name`` (imports its module on first use), as its
    module wrote it: for a store-and-forward instance of a data-movement collective. The
    pipeline (:func:`ccplan.pipeline.get_engine`) adapts it to every instance."""
    if name not in _ENGINES and name in METHOD_MODULES:
        importlib.import_module(METHOD_MODULES[name])
    try:
        return _ENGINES[name]
    except KeyError:
        raise ValidationError(
            f"method {name!r} is unknown (choose from {', '.join(method_names())})"
        ) from None


EngineSource = Callable[[str], Engine]
"""``method name -> engine``: where :func:`sub_engine` finds the engines it hands out."""

_ENGINE_SOURCE: ContextVar[EngineSource | None] = ContextVar("ccplan_engine_source", default=None)


@contextmanager
def engines_from(source: EngineSource) -> Iterator[None]:
    """Within the block, :func:`sub_engine` hands out ``source``'s engines (the pipeline sets
    its own, adapted ones, around every solve)."""
    token = _ENGINE_SOURCE.set(source)
    try:
        yield
    finally:
        _ENGINE_SOURCE.reset(token)


def sub_engine(name: str) -> Engine:
    """The engine ``name`` for an engine that needs another (the exact engine's warm start,
    the ``heuristic`` portfolio's safety net): within a solve, as the pipeline runs it (with
    its problem transformations, :func:`engines_from`); outside one, the registered function.
    Engines never import the pipeline; it hands its engines down this way."""
    source = _ENGINE_SOURCE.get()
    return registered(name) if source is None else source(name)


# Built-in engines, imported on first use so that light methods never import Pyomo.
for _name, _module in {
    "milp": "ccplan.model.exact",
    "mteg": "ccplan.heuristics.mteg",
    "layered": "ccplan.heuristics.layered",
    "cut-aware": "ccplan.heuristics.cutaware",
    "heuristic": "ccplan.heuristics.search",
    "multitree": "ccplan.heuristics.multitree",
    "cluster-allreduce": "ccplan.heuristics.multitree",
    "hier-allreduce": "ccplan.heuristics.hier_allreduce",
    "exact-combining": "ccplan.model.combining",
    "trees": "ccplan.heuristics.trees",
    "trees-allreduce": "ccplan.heuristics.trees_allreduce",
    **{
        name: "ccplan.heuristics.baselines"
        for name in (
            "ring",
            "ring-1",
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
