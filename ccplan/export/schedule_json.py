"""A derived, self-describing JSON view of a schedule for external tools (plotting, dashboards).

:func:`ccplan.schedule.save_schedule` writes the canonical, round-trippable schedule file.
This module adds what a reader would otherwise recompute from the slot semantics of
DESIGN.md: each send's occupancy window ``[t, t+l)`` and arrival slot ``t+L``, the makespan,
and per-link busy slots. It is an export only (there is no loader); its ``"schedule"`` member
is exactly the canonical schedule document, so ``Schedule.from_dict(doc["schedule"])`` reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule
from ccplan.schedule.verify import verify

TIMELINE_FORMAT = "ccplan-timeline/1"


def schedule_timeline(instance: Instance, schedule: Schedule) -> dict[str, Any]:
    """The timeline document (see module doc) as a plain dict.

    Keys: ``format``, ``schedule`` (canonical document), ``verified``, ``makespan_slots``,
    ``tau_us``, ``makespan_us``, ``sends`` (``chunk, src, dst, slot, busy_until, arrival`` and
    ``reduce`` when set) and ``links`` (``src, dst, bandwidth_GBps, occupancy, delay, busy_slots``).
    """
    topo = instance.topology
    index = topo.link_index
    report = verify(instance, schedule)
    busy = [0] * topo.num_links
    sends = []
    for s in schedule.sends:
        li = index.get((s.src, s.dst))
        row: dict[str, Any] = s.to_dict()
        if li is not None:
            occ = int(instance.occupancy[li])
            busy[li] += occ
            row["busy_until"] = s.slot + occ
            row["arrival"] = s.slot + int(instance.latency[li])
        sends.append(row)
    links = [
        {
            "src": lk.src,
            "dst": lk.dst,
            "bandwidth_GBps": lk.bandwidth_GBps,
            "occupancy": int(instance.occupancy[i]),
            "delay": int(instance.delay[i]),
            "busy_slots": busy[i],
        }
        for i, lk in enumerate(topo.links)
    ]
    return {
        "format": TIMELINE_FORMAT,
        "schedule": schedule.to_dict(instance),
        "verified": report.ok,
        "makespan_slots": report.makespan_slots,
        "tau_us": instance.tau_us,
        "makespan_us": report.makespan_us,
        "sends": sends,
        "links": links,
    }


def write_timeline(path: str | Path, instance: Instance, schedule: Schedule) -> Path:
    """Write :func:`schedule_timeline` as indented JSON; returns the path."""
    target = Path(path)
    target.write_text(json.dumps(schedule_timeline(instance, schedule), indent=1) + "\n")
    return target
