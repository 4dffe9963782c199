"""ccplan: topology-aware schedules for collective communication on GPU networks.

The public API is importable from the package itself (``ccplan.solve``, ``ccplan.Topology``,
...); see ``docs/api.md``. Names are resolved on first use, so ``import ccplan`` stays cheap
and never imports a solver.
"""

from __future__ import annotations

import importlib
import logging
import numbers
import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

_EXPORTS: dict[str, str] = {
    # building an instance
    "Node": "ccplan.instances.topology",
    "Link": "ccplan.instances.topology",
    "Topology": "ccplan.instances.topology",
    "make_topology": "ccplan.instances.topology",
    "resolve_topology": "ccplan.instances.builtin",
    "Collective": "ccplan.instances.collectives",
    "COLLECTIVES": "ccplan.instances.catalog",
    "make_collective": "ccplan.instances.catalog",
    "Instance": "ccplan.instances.instance",
    "make_instance": "ccplan.instances.instance",
    "parse_size": "ccplan.instances.instance",
    # solving
    "solve": "ccplan.pipeline.solve",
    "SolveOptions": "ccplan.contract",
    "Result": "ccplan.pipeline.solve",
    "Outcome": "ccplan.contract",
    "method_names": "ccplan.contract",
    "compute_bounds": "ccplan.bounds",
    "lower_bound_slots": "ccplan.bounds",
    # schedules
    "Schedule": "ccplan.schedule.core",
    "Send": "ccplan.schedule.core",
    "load_schedule": "ccplan.schedule.io",
    "save_schedule": "ccplan.schedule.io",
    "verify": "ccplan.schedule.verify",
    "Report": "ccplan.schedule.verify",
    "simulate": "ccplan.schedule.simulate",
    # errors and limits
    "CCPlanError": "ccplan.errors",
    "ValidationError": "ccplan.errors",
    "ArgumentError": "ccplan.errors",
    "ResourceLimitError": "ccplan.errors",
    "SolveInterrupted": "ccplan.errors",
    "set_memory_budget": "ccplan.limits",
}

__all__ = [
    "COLLECTIVES",
    "ArgumentError",
    "CCPlanError",
    "Collective",
    "Instance",
    "Link",
    "Node",
    "Outcome",
    "Report",
    "ResourceLimitError",
    "Result",
    "Schedule",
    "Send",
    "SolveInterrupted",
    "SolveOptions",
    "Topology",
    "ValidationError",
    "compute_bounds",
    "load_schedule",
    "lower_bound_slots",
    "make_collective",
    "make_instance",
    "make_topology",
    "method_names",
    "parse_size",
    "resolve_topology",
    "save_schedule",
    "set_memory_budget",
    "simulate",
    "solve",
    "verify",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from ccplan.bounds import compute_bounds, lower_bound_slots
    from ccplan.contract import Outcome, SolveOptions, method_names
    from ccplan.errors import (
        ArgumentError,
        CCPlanError,
        ResourceLimitError,
        SolveInterrupted,
        ValidationError,
    )
    from ccplan.instances.builtin import resolve_topology
    from ccplan.instances.catalog import COLLECTIVES, make_collective
    from ccplan.instances.collectives import Collective
    from ccplan.instances.instance import Instance, make_instance, parse_size
    from ccplan.instances.topology import Link, Node, Topology, make_topology
    from ccplan.limits import set_memory_budget
    from ccplan.pipeline.solve import Result, solve
    from ccplan.schedule.core import Schedule, Send
    from ccplan.schedule.io import load_schedule, save_schedule
    from ccplan.schedule.simulate import simulate
    from ccplan.schedule.verify import Report, verify


_PATH = (str, os.PathLike)
_NUMBER = (numbers.Real,)
_INT = (numbers.Integral,)

# The arguments each public function checks before it runs, as (module, class name) pairs or
# builtin types: a wrong type is an ArgumentError naming the argument, not an AttributeError
# from deep inside. None is allowed where the parameter's default is None.
_ARGUMENTS: dict[str, dict[str, tuple[Any, ...]]] = {
    "solve": {"instance": (("ccplan.instances.instance", "Instance"),), "method": (str,),
              "options": (("ccplan.contract", "SolveOptions"),)},
    "verify": {"instance": (("ccplan.instances.instance", "Instance"),),
               "schedule": (("ccplan.schedule.core", "Schedule"),)},
    "simulate": {"instance": (("ccplan.instances.instance", "Instance"),),
                 "schedule": (("ccplan.schedule.core", "Schedule"),), "reduce_cost_us_per_byte": _NUMBER},
    "lower_bound_slots": {"instance": (("ccplan.instances.instance", "Instance"),)},
    "compute_bounds": {"instance": (("ccplan.instances.instance", "Instance"),)},
    "save_schedule": {"path": _PATH, "instance": (("ccplan.instances.instance", "Instance"),),
                      "schedule": (("ccplan.schedule.core", "Schedule"),)},
    "load_schedule": {"path": _PATH},
    "resolve_topology": {"spec": _PATH},
    "make_collective": {"kind": (str,), "topology": (("ccplan.instances.topology", "Topology"),),
                        "chunks": _INT, "root": _INT},
    "make_instance": {"topology": (("ccplan.instances.topology", "Topology"),),
                      "collective": (("ccplan.instances.collectives", "Collective"),),
                      "size": (str, numbers.Real)},
    "make_topology": {"name": (str,)},
}


_READABLE = {"Integral": "int", "Real": "a number"}


def _types(spec: tuple[Any, ...]) -> tuple[type, ...]:
    return tuple(getattr(importlib.import_module(t[0]), t[1]) if isinstance(t, tuple) else t for t in spec)


def _checked(name: str, func: Any) -> Any:
    """``func`` with its arguments' types checked first (see :data:`_ARGUMENTS`)."""
    import functools
    import inspect

    from ccplan.errors import ArgumentError

    signature = inspect.signature(func)
    spec = _ARGUMENTS[name]

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return func(*args, **kwargs)  # a wrong number of arguments: Python's own message
        for arg, value in bound.arguments.items():
            if arg not in spec or (value is None and signature.parameters[arg].default is None):
                continue
            wanted = _types(spec[arg])
            if (isinstance(value, bool) and bool not in wanted) or not isinstance(value, wanted):
                names = " or ".join(_READABLE.get(t.__name__, t.__name__) for t in wanted)
                raise ArgumentError(
                    f"ccplan.{name}(): argument {arg!r} must be {names}, got {type(value).__name__}"
                )
        return func(*args, **kwargs)

    return call


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ccplan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    if name in _ARGUMENTS:
        value = _checked(name, value)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
