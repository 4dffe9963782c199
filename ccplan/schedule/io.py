"""Schedule files: JSON (``docs/formats.md``) or, for a path ending in ``.npz``, the compact
columnar file of :mod:`ccplan.schedule.columnar`; both written atomically."""

from __future__ import annotations

import json
from pathlib import Path

from ccplan.atomic import write_atomic
from ccplan.instances.instance import Instance
from ccplan.instances.topology import load_json
from ccplan.schedule.columnar import is_columnar, load_columnar, save_columnar
from ccplan.schedule.core import Schedule
from ccplan.schedule.estimate import estimate_schedule


def save_schedule(path: str | Path, instance: Instance, schedule: Schedule) -> None:
    """Write a schedule file atomically (a temporary file renamed into place).

    A path ending in ``.npz`` gets the compact columnar file of :mod:`ccplan.schedule.columnar`
    (for big schedules); any other path the JSON file.
    """
    if is_columnar(path):
        save_columnar(path, instance, schedule)
        return

    text = json.dumps(schedule.to_dict(instance), indent=None, separators=(",", ":"))
    write_atomic(path, text + "\n")


def load_schedule(path: str | Path, *, check_budget: bool = True) -> tuple[Instance, Schedule]:
    """Read a schedule file written by :func:`save_schedule` (JSON, or columnar for ``.npz``).

    Parameters
    ----------
    path : str or Path
    check_budget : bool
        Refuse (:class:`~ccplan.errors.ResourceLimitError`) a schedule whose replay by the
        verifier, simulator or exporters would not fit the memory budget
        (:func:`ccplan.schedule.estimate.estimate_schedule`).
    """
    if is_columnar(path):
        instance, schedule = load_columnar(path)
    else:
        instance, schedule = Schedule.from_dict(load_json(path, "schedule"))
    if check_budget:
        estimate_schedule(instance, schedule, f"schedule file {str(path)!r}").check()
    return instance, schedule
