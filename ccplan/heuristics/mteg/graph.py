"""The MTEG of Algorithm 1: built explicitly (:func:`build_mteg`, small instances and
documentation) and kept implicitly as the table of occupied link-slots and ports
(:class:`Reservations`, the edges Step 4 removes), which is what the scheduler searches."""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import Any

from ccplan.errors import ValidationError
from ccplan.instances.instance import Instance


# --------------------------------------------------------------------------- Algorithm 1
def build_mteg(instance: Instance, horizon: int) -> Any:
    """Materialise the MTEG of Algorithm 1 as a ``networkx.DiGraph`` (small instances only).

    Vertices are ``("slot", u, t)`` for ``t = 0..H`` (lines 2-4), and ``("virtual", u, chunk)``
    for every node ``u`` and chunk not held by ``u`` (lines 15-18; the paper indexes them by
    source ``s != u``, i.e. chunks of other nodes). Edges carry ``cost`` and ``kind``: storage
    ``(u_t, u_{t+1})`` cost 1 for ``t <= H-1`` (lines 5-6), transmission
    ``(u_t, v_{t+L})`` cost ``L`` when ``t + L <= H`` (lines 9-11), virtual ``(u_t, U)`` cost 0
    (lines 19-20). The scheduler itself works on the implicit form (module docstring).

    Parameters
    ----------
    instance : Instance
    horizon : int
        H of Algorithm 1 (slots ``0..H``).
    """
    import networkx as nx

    if not isinstance(horizon, int) or horizon < 0:
        raise ValidationError(f"horizon must be a non-negative integer, got {horizon!r}")
    topo = instance.topology
    lat = [int(x) for x in instance.latency]
    g = nx.DiGraph()
    for t in range(horizon + 1):
        for v in topo.node_ids:
            g.add_node(("slot", v, t))
            if t <= horizon - 1:
                g.add_edge(("slot", v, t), ("slot", v, t + 1), cost=1, kind="storage")
        for j, link in enumerate(topo.links):
            if t + lat[j] <= horizon:
                g.add_edge(("slot", link.src, t), ("slot", link.dst, t + lat[j]), cost=lat[j],
                           kind="transmission", link=j)
    holders = instance.collective.holders
    for u in topo.node_ids:
        for chunk in instance.collective.chunk_ids:
            if u in holders[chunk]:
                continue
            terminal = ("virtual", u, chunk)
            g.add_node(terminal)
            for t in range(horizon + 1):
                g.add_edge(("slot", u, t), terminal, cost=0, kind="virtual")
    return g


# --------------------------------------------------------------------------- Step 4 table
class Reservations:
    """Occupied link-slots (and ports): the MTEG edges removed by Step 4.

    Per resource a union-find over slots answers "first slot >= t that is not full" in
    amortised near-constant time; a slot is full when its count reaches the capacity
    ``omega`` (0 for outages). With ``single_port`` the send port of every node and the
    receive port of every node are resources of capacity 1 too.
    """

    def __init__(self, instance: Instance) -> None:
        topo = instance.topology
        self.num_links = topo.num_links
        self.capacity = instance.capacity
        self.single_port = instance.single_port
        self.occ = [int(x) for x in instance.occupancy]
        self.src = [lk.src for lk in topo.links]
        self.dst = [lk.dst for lk in topo.links]
        nodes = topo.node_ids
        self._node_pos = {v: i for i, v in enumerate(nodes)}
        # resource r: links 0..E-1, send ports E.., receive ports E+N..
        total = self.num_links + (2 * len(nodes) if self.single_port else 0)
        self._next: list[dict[int, int]] = [{} for _ in range(total)]
        self._count: list[dict[int, int]] = [{} for _ in range(total)]
        # per-link omega from the one helper (more than one chunk per slot on a link faster
        # than the slot); ports hold one
        self._cap: list[int] = [int(c) for c in instance.link_capacity] + [1] * (total - self.num_links)
        self._zero: list[set[int]] = [set() for _ in range(total)]
        self._full: list[list[int]] = [[] for _ in range(total)]
        for link, slot in sorted(instance.outage_set):
            self._zero[link].add(slot)
            self._next[link][slot] = slot + 1
            self._full[link].append(slot)
        self._res_of_link: list[tuple[int, ...]] = []
        for j in range(self.num_links):
            if self.single_port:
                send_port = self.num_links + self._node_pos[self.src[j]]
                recv_port = self.num_links + len(nodes) + self._node_pos[self.dst[j]]
                self._res_of_link.append((j, send_port, recv_port))
            else:
                self._res_of_link.append((j,))

    def _first_free(self, r: int, t: int) -> int:
        nxt = self._next[r]
        if t not in nxt:
            return t
        root = t
        while root in nxt:
            root = nxt[root]
        while t in nxt and nxt[t] != root:
            nxt[t], t = root, nxt[t]
        return root

    def free_start(self, link: int, t: int) -> int:
        """Earliest slot ``>= t`` at which a send on ``link`` fits its whole occupancy window."""
        res = self._res_of_link[link]
        occ = self.occ[link]
        first_free = self._first_free
        if len(res) == 1:
            # one resource (no single-port): its first non-full slot needs no second pass
            r = res[0]
            full = self._full[r]
            while True:
                t = first_free(r, t)
                if occ == 1:
                    return t
                i = bisect_left(full, t + 1)
                if i < len(full) and full[i] < t + occ:
                    t = full[i] + 1
                    continue
                return t
        while True:
            moved = False
            for r in res:
                f = first_free(r, t)
                if f != t:
                    t = f
                    moved = True
            if moved:
                continue
            if occ == 1:
                return t
            # the next full slot of any resource inside the window rules out every start up to it
            bad = -1
            for r in res:
                full = self._full[r]
                i = bisect_left(full, t + 1)
                if i < len(full) and full[i] < t + occ and full[i] > bad:
                    bad = full[i]
            if bad < 0:
                return t
            t = bad + 1

    def is_free(self, link: int, t: int) -> bool:
        """Whether a send on ``link`` may start in slot ``t``."""
        return self.free_start(link, t) == t

    def reserve(self, link: int, t: int) -> None:
        """Occupy ``link`` (and ports) during ``t .. t+l-1``; the caller checked :meth:`is_free`."""
        for k in range(self.occ[link]):
            slot = t + k
            for r in self._res_of_link[link]:
                cnt = self._count[r].get(slot, 0) + 1
                self._count[r][slot] = cnt
                if cnt >= self._cap[r] and slot not in self._next[r]:
                    self._next[r][slot] = slot + 1
                    insort(self._full[r], slot)

    def release(self, link: int, t: int) -> None:
        """Undo :meth:`reserve` of a send on ``link`` at ``t`` (rip-up in the improvement step)."""
        for k in range(self.occ[link]):
            slot = t + k
            for r in self._res_of_link[link]:
                cnt = self._count[r].get(slot, 0) - 1
                if cnt < 0:
                    raise ValueError(f"release of a free slot {slot} on resource {r}")
                if cnt:
                    self._count[r][slot] = cnt
                else:
                    del self._count[r][slot]
                nxt = self._next[r]
                if slot in nxt and cnt < self._cap[r] and slot not in self._zero[r]:
                    del nxt[slot]
                    full = self._full[r]
                    del full[bisect_left(full, slot)]
                    # pointers that jump over the freed slot start in the full run just before it
                    x = slot - 1
                    while x in nxt:
                        nxt[x] = x + 1
                        x -= 1

    def free_units(self, link: int, t: int) -> int:
        """How many more chunks may start on ``link`` in slot ``t`` (0 when it cannot)."""
        if not self.is_free(link, t):
            return 0
        units = self._cap[link]
        for k in range(self.occ[link]):
            for r in self._res_of_link[link]:
                units = min(units, self._cap[r] - self._count[r].get(t + k, 0))
        return units

    def load(self, link: int, t: int) -> int:
        """Chunks occupying ``link`` in slot ``t``."""
        return self._count[link].get(t, 0)


