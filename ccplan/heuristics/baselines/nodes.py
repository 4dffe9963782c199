r"""NCCL's rings on a machine of several nodes: per channel, one chain through each node, the
nodes joined through their NICs.

NCCL searches the graph of one node with the network as the chain's two ends
(``src/graph/search.cc``, search patterns: "Inter-node Ring: NET n -> GPU a -> GPU b -> .. ->
GPU x -> NET n (or m if crossNic)"); ``ncclTopoSearchRecNet`` takes the channel's speed off the
NIC it starts from, so a node with one NIC of bandwidth ``B`` gets channels worth ``B`` in all,
a node with eight NICs eight channels at the NIC speed. ``connectRings``
(``src/graph/connect.cc``) then joins the last GPU of node ``n`` to the first GPU of node
``n+1`` through the network: one ring per channel over all GPUs, leaving and entering each node
once.

Here, on a :class:`~ccplan.instances.topology.Topology`:

- the nodes are the GPU clusters the slowest links separate
  (:func:`~ccplan.instances.clusters.has_chassis`): the chassis of NDv2, DGX-2, AMD x k and of
  imported multi-node machines; taken in order of their first GPU;
- a channel chooses, node by node, the hop that leaves node ``c`` for node ``c+1`` (an exit GPU
  of ``c``, an entry GPU of ``c+1`` and a route through switches only between them: a NIC link,
  or NIC, fabric, NIC), and then a path through all GPUs of node ``c`` from its entry to its
  exit. Hops with the most capacity left come first, then the fewest links, then the exit
  nearest the node's entry in GPU order (NCCL tries the channel's own NIC for the way out
  before another one, ``crossNic``), then ids. Paths are searched depth first, most capacity
  left, fewest onward choices, then the next GPU in order (NCCL tries a GPU's index neighbours
  first on NVSwitch, ``ncclTopoSearchNextGpuSort``), backtracking over paths and hops within
  the expansion budget;
- channels follow one another at one speed, each first replaying the one before (NCCL's
  ``FORCED_ORDER_REPLAY``); speeds and the choice among them are those of
  :mod:`~ccplan.heuristics.baselines.channels`, and no speed is tried whose channels could not
  beat the best set: every ring leaves and enters every node, so ``k x s`` is at most the
  smallest bandwidth out of or into a node (:func:`node_ceiling`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from ccplan.heuristics.baselines.placer import _DEADLINE
from ccplan.heuristics.baselines.routes import EPS, Channels, HopCapacity, Route, routes_from
from ccplan.instances.clusters import _clusters_above, has_chassis
from ccplan.instances.topology import Topology

_SPEED_DIVISORS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Nodes:
    """The nodes (chassis) of a machine.

    Parameters
    ----------
    groups : tuple of tuple of int
        The GPUs of each node, by id; nodes in order of their first GPU.
    label : dict
        Node id (GPU or switch) -> index of its node in ``groups``; -1 for a switch outside
        every node (a fabric between them).
    """

    groups: tuple[tuple[int, ...], ...]
    label: dict[int, int]


def node_groups(topo: Topology) -> Nodes | None:
    """The nodes of ``topo`` when it has chassis (:func:`~ccplan.instances.clusters.has_chassis`),
    else ``None``."""
    if not has_chassis(topo):
        return None
    bw = np.array([lk.bandwidth_GBps for lk in topo.links])
    labels = _clusters_above(topo, bw > bw.min())
    kind = topo.kind
    members: dict[int, list[int]] = {}
    for i, v in enumerate(topo.node_ids):
        if kind[v] == "gpu":
            members.setdefault(int(labels[i]), []).append(v)
    ordered = sorted(members, key=lambda lab: min(members[lab]))
    rank = {lab: c for c, lab in enumerate(ordered)}
    return Nodes(
        groups=tuple(tuple(sorted(members[lab])) for lab in ordered),
        label={v: rank.get(int(labels[i]), -1) for i, v in enumerate(topo.node_ids)},
    )


def node_ceiling(topo: Topology, nodes: Nodes) -> float:
    """GB/s no set of rings exceeds: each ring leaves and enters every node at least once, so
    ``k x s`` is at most the smallest total bandwidth of the links out of or into a node."""
    k = len(nodes.groups)
    out = [0.0] * k
    inn = [0.0] * k
    for lk in topo.links:
        a, b = nodes.label[lk.src], nodes.label[lk.dst]
        if a != b:
            if a >= 0:
                out[a] += lk.bandwidth_GBps
            if b >= 0:
                inn[b] += lk.bandwidth_GBps
    return min(min(out), min(inn))


# ====================================================================== one speed
class _NodePacker(HopCapacity):
    """Channels at one per-channel speed on the residual link capacities."""

    def __init__(
        self,
        topo: Topology,
        nodes: Nodes,
        intra: list[dict[int, dict[int, Route]]],
        inter: list[dict[int, dict[int, Route]]],
        speed: float,
        budget: int,
    ) -> None:
        self.groups = nodes.groups
        self.intra = intra
        self.inter = inter
        self.speed = speed
        self.budget = budget
        self.residual = [float(lk.bandwidth_GBps) for lk in topo.links]
        index = topo.link_index
        self.hop_links: dict[tuple[int, int], tuple[int, ...]] = {}
        self.paths: dict[tuple[int, int], tuple[int, ...]] = {}
        for table in (*intra, *inter):
            for g, targets in table.items():
                for h, (path, _) in targets.items():
                    self.paths[(g, h)] = path
                    self.hop_links[(g, h)] = tuple(index[(a, b)] for a, b in pairwise(path))
        self.pos = {g: i for group in self.groups for i, g in enumerate(group)}

    # ----------------------------------------------------------------- capacity
    def _take_chain(self, chain: list[int], sign: float) -> None:
        for a, b in pairwise(chain):
            self._take(a, b, sign)

    def _spend(self) -> bool:
        self.budget -= 1
        if self.budget % 1024 == 0:
            _DEADLINE.get().check()
        return self.budget >= 0

    # ----------------------------------------------------------------- through one node
    def _steps(self, c: int, a: int, used: set[int], last: int) -> Iterator[int]:
        """Next GPUs after ``a`` in node ``c``: ``last`` only once all others are in."""
        group = self.groups[c]
        table = self.intra[c]
        if len(used) == len(group) - 1:
            return iter([last] if self._fits(a, last) else [])
        nxt = [h for h in table.get(a, {}) if h not in used and h != last and self._fits(a, h)]
        n = len(group)
        pos = self.pos

        def onward(h: int) -> int:
            return sum(1 for x in table.get(h, {}) if x not in used)

        nxt.sort(key=lambda h: (-self._room(a, h), onward(h), (pos[h] - pos[a]) % n, h))
        return iter(nxt)

    def _chain(self, c: int, entry: int, exit_: int) -> list[int] | None:
        """A path through every GPU of node ``c`` from ``entry`` to ``exit_`` with its capacity
        taken, or ``None`` (nothing taken)."""
        n = len(self.groups[c])
        if n == 1:
            return [entry] if entry == exit_ else None
        if entry == exit_:
            return None
        path = [entry]
        used = {entry}
        frames = [self._steps(c, entry, used, exit_)]
        while frames:
            h = next(frames[-1], None)
            if h is None:
                frames.pop()
                if len(path) > 1:
                    b = path.pop()
                    used.discard(b)
                    self._take(path[-1], b, -1.0)
                continue
            if not self._spend():
                break
            self._take(path[-1], h, 1.0)
            path.append(h)
            used.add(h)
            if len(path) == n:
                return path
            frames.append(self._steps(c, h, used, exit_))
        self._take_chain(path, -1.0)
        return None

    # ----------------------------------------------------------------- one channel
    def _hops(self, c: int, entries: list[int | None], exits: list[int | None]) -> Iterator[tuple[int, int]]:
        """Candidate hops out of node ``c`` (exit of ``c``, entry of ``c+1``), best first."""
        k = len(self.groups)
        entry = entries[c]
        first_exit = exits[0] if c == k - 1 else None
        pos = self.pos
        out = []
        for x in self.groups[c]:
            if x == entry and len(self.groups[c]) > 1:
                continue
            for e, (path, _) in self.inter[c].get(x, {}).items():
                if e == first_exit and len(self.groups[0]) > 1:
                    continue
                if self._fits(x, e):
                    near_x = abs(pos[x] - pos[entry]) if entry is not None else abs(pos[x] - pos[e])
                    near_e = abs(pos[e] - pos[first_exit]) if first_exit is not None else 0
                    out.append(((-self._room(x, e), len(path), near_x, near_e, pos[x], pos[e]), x, e))
        out.sort()
        return iter([(x, e) for _, x, e in out])

    def channel(self) -> tuple[int, ...] | None:
        """One ring over all nodes with its capacity taken, or ``None``."""
        k = len(self.groups)
        entries: list[int | None] = [None] * k
        exits: list[int | None] = [None] * k
        chains: list[list[int] | None] = [None] * k
        levels: list[Iterator[tuple[int, int]]] = [self._hops(0, entries, exits)]
        applied: list[tuple[int, int, list[int]] | None] = [None]

        def undo(c: int) -> None:
            done = applied[c]
            if done is None:
                return
            x, e, solved = done
            for d in solved:
                chain = chains[d]
                assert chain is not None
                self._take_chain(chain, -1.0)
                chains[d] = None
            self._take(x, e, -1.0)
            exits[c] = None
            entries[(c + 1) % k] = None
            applied[c] = None

        while levels:
            c = len(levels) - 1
            undo(c)
            hop = next(levels[c], None)
            if hop is None or not self._spend():
                if hop is not None:  # budget spent: give everything back
                    for d in range(c, -1, -1):
                        undo(d)
                    return None
                levels.pop()
                applied.pop()
                continue
            x, e = hop
            self._take(x, e, 1.0)
            exits[c] = x
            entries[(c + 1) % k] = e
            solved: list[int] = []
            applied[c] = (x, e, solved)
            ok = True
            for d in ([c] if c >= 1 else []) + ([0] if c == k - 1 else []):
                entry, exit_ = entries[d], exits[d]
                assert entry is not None and exit_ is not None
                chain = self._chain(d, entry, exit_)
                if chain is None:
                    ok = False
                    break
                chains[d] = chain
                solved.append(d)
            if not ok:
                continue  # undone at the top of the loop
            if c == k - 1:
                return tuple(g for chain in chains for g in (chain or ()))
            levels.append(self._hops(c + 1, entries, exits))
            applied.append(None)
        return None

    def _ring_fits(self, ring: tuple[int, ...]) -> bool:
        hops = list(zip(ring, [*ring[1:], ring[0]], strict=True))
        for a, b in hops:
            self._take(a, b, 1.0)
        ok = all(r >= -EPS for r in self.residual)
        for a, b in hops:
            self._take(a, b, -1.0)
        return ok

    def pack(self, kmax: int) -> list[tuple[int, ...]]:
        """Up to ``kmax`` channels, each after the first replaying the one before if it fits."""
        rings: list[tuple[int, ...]] = []
        while len(rings) < kmax:
            ring = rings[-1] if rings and self._ring_fits(rings[-1]) else None
            if ring is not None:
                for a, b in zip(ring, [*ring[1:], ring[0]], strict=True):
                    self._take(a, b, 1.0)
            else:
                ring = self.channel()
            if ring is None:
                break
            rings.append(ring)
        return rings


# ====================================================================== all speeds
def _inside(label: dict[int, int], allowed: set[int]) -> Callable[[int], bool]:
    return lambda v: label[v] in allowed


def _among(routes: dict[int, Route], wanted: set[int]) -> dict[int, Route]:
    return {h: r for h, r in routes.items() if h in wanted}


def node_channels(
    topo: Topology,
    nodes: Nodes,
    max_channels: int,
    budget: int,
    on_speed: Callable[[float, int], None] | None = None,
) -> Channels | None:
    """NCCL's inter-node ring channels of ``topo`` (module docstring), ``None`` if none found.

    Parameters
    ----------
    topo : Topology
        The machine.
    nodes : Nodes
        Its nodes (:func:`node_groups`).
    max_channels : int
        Cap on the number of rings (``NCCL_MAX_NCHANNELS``).
    budget : int
        Search expansions per speed (a hop tried or a GPU appended to a path).
    on_speed : callable, optional
        Called with ``(speed, rings found)`` for every speed searched.
    """
    groups = nodes.groups
    k = len(groups)
    label = nodes.label
    intra: list[dict[int, dict[int, Route]]] = []
    inter: list[dict[int, dict[int, Route]]] = []
    for c, group in enumerate(groups):
        members = set(group)
        # a hop inside a node stays inside it (no detour through the NICs the channels need)
        inside = _inside(label, {c})
        intra.append({g: _among(routes_from(topo, g, members, inside), members) for g in group})
        # to the next node through either node's switches or the fabric, not through a third node
        ahead = set(groups[(c + 1) % k])
        between = _inside(label, {c, (c + 1) % k, -1})
        inter.append({g: _among(routes_from(topo, g, ahead, between), ahead) for g in group})
    if any(not any(table.values()) for table in inter):
        return None
    ceiling = node_ceiling(topo, nodes)
    for g in topo.gpus:
        out = sum(topo.links[li].bandwidth_GBps for li in topo.out_links[g])
        inn = sum(topo.links[li].bandwidth_GBps for li in topo.in_links[g])
        ceiling = min(ceiling, out, inn)
    tables = (*intra, *inter)
    widths = {round(bw, 9) for table in tables for targets in table.values() for _, bw in targets.values()}
    speeds = sorted({round(w / d, 9) for w in widths for d in _SPEED_DIVISORS}, reverse=True)
    best: tuple[list[tuple[int, ...]], float] | None = None
    for s in speeds:
        if best is not None and s < 0.49 * best[1]:
            break  # NCCL lowers the speed only to about half the best one found
        kmax = min(max_channels, math.floor(ceiling / s + EPS))
        if kmax < 1 or (best is not None and kmax * s <= len(best[0]) * best[1] * (1 + 1e-6)):
            continue
        if any(all(bw < s - EPS for t in table.values() for _, bw in t.values()) for table in inter):
            continue  # some node has no way out at this speed
        packer = _NodePacker(topo, nodes, intra, inter, s, budget)
        rings = packer.pack(kmax)
        if on_speed is not None:
            on_speed(s, len(rings))
        if rings and (best is None or len(rings) * s > len(best[0]) * best[1] * (1 + 1e-6)):
            best = (rings, s)
            if len(rings) * s >= ceiling * (1 - 1e-6):
                break
    if best is None:
        return None
    rings, s = best
    used = {(a, b) for ring in rings for a, b in zip(ring, [*ring[1:], ring[0]], strict=True)}
    paths = {(g, h): r[0] for table in tables for g, t in table.items() for h, r in t.items()}
    return Channels(rings=tuple(rings), speed_GBps=s, routes={hop: paths[hop] for hop in used})
