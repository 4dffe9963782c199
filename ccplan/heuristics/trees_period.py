r"""Periodic tree schedules: one period placed once, copied for every group of chunks.

With integer chunk counts ``n_T`` per tree (``sum n_T = n`` per root) whose link loads fit a
period of ``P`` slots (:func:`~ccplan.heuristics.trees_pack.integral_counts`), the chunks of a
root are cut into groups of ``n`` (group ``g`` holds its chunks ``g n .. g n + n - 1``; chunk
``g n + j`` rides *lane* ``j``, and lane ``j`` rides a tree chosen by stride scheduling over the
counts). One group's sends are placed once in a *modulo* reservation table: a send of ``l``
slots on link ``e`` at slot ``t`` takes the residues ``t mod P .. t mod P + l - 1``, which must
stay below ``omega`` (and, under single-port, free at both ports); residues are multiples of
``l`` with ``t mod P + l <= P``, so a link's ``floor(P / l) omega`` positions are never
fragmented. Lane ``j`` is released at slot ``floor(j P / n)`` (the root's chunks leave at the
period's rate, as they do in the full table), and the lanes are placed in the order (lane,
root), each send at the first free residue after its chunk arrived. Group ``g`` is that pattern
shifted by ``g P``: no send of the pattern crosses a residue boundary of the period, so the
sends of all copies on a link in slot ``x`` are the pattern's sends on residue ``x mod P``, at
most ``omega`` (the same for the ports), and each copy is causal as the pattern is. With ``G =
ceil(C / n)`` groups and ``D_1`` the pattern's span, the makespan is at most ``(G - 1) P + D_1``
(the last group may be partial): the cost of placing is that of one group, whatever ``C``, and
the copies are array arithmetic.

Outages are not periodic: instances with outages are not scheduled here (the caller places every
chunk in the full reservation table instead).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ccplan.instances.instance import Instance

log = logging.getLogger(__name__)


@dataclass
class Pattern:
    """One group's sends, relative to the group's start: ``slot``, ``root`` (node id), ``lane``
    and ``link`` per send; ``period`` and ``lanes`` (``n``); ``span`` is ``D_1``; ``latency``
    the instance's ``L`` per link."""

    slot: np.ndarray
    root: np.ndarray
    lane: np.ndarray
    link: np.ndarray
    period: int
    lanes: int
    span: int
    latency: np.ndarray

    def makespan(self, chunks: int) -> int:
        """Makespan in slots of ``chunks`` chunks per root (module docstring)."""
        groups = -(-chunks // self.lanes)
        last = chunks - (groups - 1) * self.lanes
        if last == self.lanes:
            return (groups - 1) * self.period + self.span
        # a partial last group can end before the full group ahead of it (late lanes queue)
        tail = (groups - 1) * self.period + self._partial_span(last)
        return max(tail, (groups - 2) * self.period + self.span) if groups >= 2 else tail

    def _partial_span(self, lanes: int) -> int:
        keep = self.lane < lanes
        return int((self.slot[keep] + self.latency[self.link[keep]]).max()) if keep.any() else 0


def min_period(instance: Instance, counts_per_link: np.ndarray) -> int:
    """The shortest period in which every link fits its sends per group: ``l`` times
    ``ceil(count / omega)`` slots (aligned, unfragmented positions; module docstring)."""
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    omega = np.asarray(instance.link_capacity, dtype=np.int64)
    need = occ * -(-counts_per_link.astype(np.int64) // np.maximum(omega, 1))
    return max(1, int(need.max(initial=0)))


def place_pattern(
    instance: Instance,
    lanes: dict[int, list[list[tuple[int, int]]]],
    period: int,
) -> Pattern | None:
    """Place one group in the modulo table (module docstring).

    Parameters
    ----------
    instance : Instance
    lanes : dict
        Per root id, per lane: the lane's tree as ``(link, position of its tail)`` steps in
        tree order (the root holds position 0, the head of step ``j`` position ``j + 1``).
    period : int

    Returns
    -------
    Pattern or None
        None when a send finds no free residue (single-port can fragment the table).
    """
    topo = instance.topology
    occ = [int(x) for x in instance.occupancy]
    lat = [int(x) for x in instance.latency]
    omega = [int(x) for x in instance.link_capacity]
    load = np.zeros((topo.num_links, period), dtype=np.int32)
    single = bool(instance.single_port)
    pos = topo.node_index
    ends = [(pos[lk.src], pos[lk.dst]) for lk in topo.links]
    # port residues (single-port only; one row when unused)
    sport = np.zeros((topo.num_nodes if single else 1, period), dtype=bool)
    rport = np.zeros((topo.num_nodes if single else 1, period), dtype=bool)
    slots: list[int] = []
    roots: list[int] = []
    lane_ids: list[int] = []
    links: list[int] = []
    n = max(len(v) for v in lanes.values())
    order = [(j, r) for j in range(n) for r in sorted(lanes) if j < len(lanes[r])]
    span = 0
    for j, r in order:
        steps = lanes[r][j]
        hold = [0] * (len(steps) + 1)
        hold[0] = j * period // n  # lanes released at the steady rate, as in the full table
        for k, (e, tail) in enumerate(steps, start=1):
            step = occ[e]
            usable = (period // step) * step
            row = load[e]
            t = hold[tail]
            t += (-(t % period)) % step  # first aligned residue at or after the ready slot
            found = False
            for _ in range(usable // step + 1):
                res = t % period
                if res >= usable:
                    t += period - res
                    continue
                a, b = ends[e]
                busy = single and (sport[a, res:res + step].any() or rport[b, res:res + step].any())
                if np.all(row[res:res + step] < omega[e]) and not busy:
                    found = True
                    break
                t += step
            if not found:
                return None
            res = t % period
            row[res:res + step] += 1
            if single:
                sport[ends[e][0], res:res + step] = True
                rport[ends[e][1], res:res + step] = True
            hold[k] = t + lat[e]
            span = max(span, hold[k])
            slots.append(t)
            links.append(e)
        roots.extend([r] * len(steps))
        lane_ids.extend([j] * len(steps))
    pattern = Pattern(
        np.asarray(slots, dtype=np.int64), np.asarray(roots, dtype=np.int64),
        np.asarray(lane_ids, dtype=np.int64), np.asarray(links, dtype=np.int64), period, n, span,
        np.asarray(lat, dtype=np.int64),
    )
    return pattern


def copy_pattern(
    pattern: Pattern, chunks_of: Mapping[int, Sequence[int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The sends of every group: ``(slot, chunk source, chunk index, link)`` columns.

    ``chunks_of[r]`` lists root ``r``'s chunk indices; its ``k``-th chunk is group
    ``k // n``, lane ``k % n``.
    """
    n = pattern.lanes
    counts = {r: len(v) for r, v in chunks_of.items()}
    groups = max(-(-c // n) for c in counts.values()) if counts else 0
    g = np.repeat(np.arange(groups, dtype=np.int64), len(pattern.slot))
    slot = np.tile(pattern.slot, groups) + g * pattern.period
    root = np.tile(pattern.root, groups)
    lane = np.tile(pattern.lane, groups)
    link = np.tile(pattern.link, groups)
    k = g * n + lane
    have = np.zeros(len(k), dtype=bool)
    index = np.zeros(len(k), dtype=np.int64)
    for r, idx in chunks_of.items():
        mine = root == r
        ok = mine & (k < len(idx))
        have |= ok
        index[ok] = np.asarray(idx, dtype=np.int64)[k[ok]]
    return slot[have], root[have], index[have], link[have]

