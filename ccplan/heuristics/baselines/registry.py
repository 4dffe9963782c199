"""The baseline methods as registered engines: method name -> schedule builder, each run
under the engine's time limit (the placer checks the deadline once per hop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ccplan.contract import Outcome, SolveOptions, register
from ccplan.heuristics.baselines.doubling import (
    recursive_doubling_schedule,
    recursive_halving_doubling_schedule,
)
from ccplan.heuristics.baselines.hierarchical import hierarchical_schedule, pairwise_schedule
from ccplan.heuristics.baselines.placer import _DEADLINE, _DETAILS
from ccplan.heuristics.baselines.rings import ring1_schedule, ring_schedule
from ccplan.heuristics.baselines.supported import SUPPORTED, _unsupported
from ccplan.heuristics.baselines.trees import double_binary_tree_schedule, tree_schedule
from ccplan.instances.instance import Instance
from ccplan.limits import Deadline, OutOfTimeError
from ccplan.schedule.core import Schedule

Builder = Callable[[Instance, SolveOptions], Schedule]

BASELINES: dict[str, Builder] = {
    "ring": ring_schedule,
    "ring-1": ring1_schedule,
    "tree": tree_schedule,
    "double-binary-tree": double_binary_tree_schedule,
    "recursive-doubling": recursive_doubling_schedule,
    "recursive-halving-doubling": recursive_halving_doubling_schedule,
    "hierarchical": hierarchical_schedule,
    "pairwise": pairwise_schedule,
}
"""Method name -> schedule builder."""


def _make_engine(name: str, builder: Builder) -> Callable[[Instance, SolveOptions], Outcome]:
    def engine(instance: Instance, options: SolveOptions) -> Outcome:
        kind = instance.collective.kind
        if kind not in SUPPORTED[name]:
            _unsupported(name, kind)
        token = _DEADLINE.set(Deadline.after(options.time_limit))
        chosen: dict[str, Any] = {}
        noted = _DETAILS.set(chosen)
        try:
            schedule = builder(instance, options)
        except OutOfTimeError:
            reason = f"time limit of {options.time_limit:g} s reached"
            return Outcome(schedule=None, status="unknown", details={"algorithm": name, "reason": reason})
        except KeyboardInterrupt:
            # One construction builds one schedule: nothing complete to hand out before it ends.
            return Outcome(schedule=None, status="unknown", details={"algorithm": name, "interrupted": True})
        finally:
            _DEADLINE.reset(token)
            _DETAILS.reset(noted)
        return Outcome(schedule=schedule, status="feasible", details={"algorithm": name, **chosen})

    engine.__name__ = f"{name.replace('-', '_')}_engine"
    first = builder.__doc__.splitlines()[0] if builder.__doc__ else ""
    engine.__doc__ = f"Registered engine {name!r}: {first}"
    return engine


for _name, _builder in BASELINES.items():
    register(_name)(_make_engine(_name, _builder))
