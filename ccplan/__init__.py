"""ccplan: topology-aware schedules for collective communication on GPU networks.

The public API is importable from the package itself (``ccplan.solve``, ``ccplan.Topology``,
...); see ``docs/api.md``. Names are resolved on first use, so ``import ccplan`` stays cheap
and never imports a solver.
"""

from __future__ import annotations

import importlib
import logging
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
    "COLLECTIVES": "ccplan.instances.collectives",
    "make_collective": "ccplan.instances.collectives",
    "Instance": "ccplan.instances.instance",
    "make_instance": "ccplan.instances.instance",
    "parse_size": "ccplan.instances.instance",
    # solving
    "solve": "ccplan.methods",
    "SolveOptions": "ccplan.methods",
    "Result": "ccplan.methods",
    "Outcome": "ccplan.methods",
    "method_names": "ccplan.methods",
    "compute_bounds": "ccplan.bounds",
    "lower_bound_slots": "ccplan.bounds",
    # schedules
    "Schedule": "ccplan.schedule.core",
    "Send": "ccplan.schedule.core",
    "load_schedule": "ccplan.schedule.core",
    "save_schedule": "ccplan.schedule.core",
    "verify": "ccplan.schedule.verify",
    "Report": "ccplan.schedule.verify",
    "simulate": "ccplan.schedule.simulate",
    # errors and limits
    "CCPlanError": "ccplan.errors",
    "ValidationError": "ccplan.errors",
    "ResourceLimitError": "ccplan.errors",
    "SolveInterrupted": "ccplan.errors",
    "set_memory_budget": "ccplan.limits",
}

__all__ = [
    "COLLECTIVES",
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
    from ccplan.errors import CCPlanError, ResourceLimitError, SolveInterrupted, ValidationError
    from ccplan.instances.builtin import resolve_topology
    from ccplan.instances.collectives import COLLECTIVES, Collective, make_collective
    from ccplan.instances.instance import Instance, make_instance, parse_size
    from ccplan.instances.topology import Link, Node, Topology, make_topology
    from ccplan.limits import set_memory_budget
    from ccplan.methods import Outcome, Result, SolveOptions, method_names, solve
    from ccplan.schedule.core import Schedule, Send, load_schedule, save_schedule
    from ccplan.schedule.simulate import simulate
    from ccplan.schedule.verify import Report, verify


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ccplan' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
