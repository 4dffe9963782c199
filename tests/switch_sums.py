"""Shared test helper: count in-switch sums on a plain replay, apart from the verifier."""

from __future__ import annotations

from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule


def in_switch_sums(instance: Instance, schedule: Schedule) -> int:
    """Sends that reduce into a switch already holding part of the chunk (replayed on plain
    holder sets in arrival order, apart from the verifier)."""
    lat = instance.latency
    index = instance.topology.link_index
    held: dict[tuple[int, tuple[int, int]], bool] = {}
    count = 0
    for s in sorted(schedule.sends, key=lambda x: x.slot + int(lat[index[(x.src, x.dst)]])):
        if instance.topology.kind[s.dst] == "switch":
            if s.reduce and held.get((s.dst, s.chunk), False):
                count += 1
            held[(s.dst, s.chunk)] = True
    return count
