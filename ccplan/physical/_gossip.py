"""In-capacities of GPU groups for the AllReduce gossip part of the physical bound.

Without in-switch reduction, the receptions the gossip argument counts into a group ``G``
(docs/model.md, "Gossip (AllReduce)") are distinct messages, each made by a node outside ``G``
that can create bytes (a GPU, or a switch that may reduce) and carried to ``G`` by nodes that
only copy. So they form a flow from those *creators* to ``G``, and ``G`` receives them no
faster than the max-flow ``F_G`` from the creators outside ``G`` into ``G``, the other switches
free to lie on either side of the cut. ``F_G`` is at most ``G``'s in-links; it is smaller when
a switch feeding ``G`` is itself fed by less (a NIC switch behind one thin uplink).

Cost: only groups with a relaying in-neighbour can fall below their in-links. For those, two
closed forms bracket ``F_G``: a feasible flow (each relaying in-neighbour forwards what the
creators outside ``G`` send it directly) and a cut (each relaying in-neighbour on the side of
``G`` or not, whichever is cheaper, counted alone). A partition's bound from the cut side is
valid as it stands; exact max-flows run only for partitions whose bound from the flow side
could still beat the best valid one, within a budget of flows (past it the cut side stands,
weaker but valid, and a note says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_flow

from ccplan.physical._flow import Net

EXACT_FLOW_BUDGET = 128
"""Exact group max-flows per bound, at most (each well under a millisecond on a few hundred
switches)."""

_SCALE_UNITS = 1_000_000_000  # integer units of a group's in-links (int32 leaves 2x headroom)


def group_inflow(net: Net, group: np.ndarray, creators: np.ndarray, ceiling: float) -> float:
    """Max-flow in bytes/us from the ``creators`` outside ``group`` into ``group`` (node masks),
    rounded up; ``ceiling`` is a known upper bound on it (a cut's capacity) and caps the answer.

    The max-flow runs on integers (:func:`scipy.sparse.csgraph.maximum_flow`): each link's
    capacity, capped at ``ceiling`` (no minimum cut below it uses a larger link), is scaled so
    ``ceiling`` is ``_SCALE_UNITS`` units and rounded to the nearest unit. The integer minimum
    cut's real capacity is at most its integer value plus half a unit per link, so
    ``(flow + links / 2) / scale`` is never below the real max-flow (a bound built on it stays
    valid) and above it by at most ``links / (2 _SCALE_UNITS)`` times ``ceiling``. Links that
    become one arc (several creators into one switch) are added in 64 bits and the arc capped
    at ``ceiling`` again, for the same reason: summed in 32 bits, three such links could wrap
    to a negative capacity and the flow, and the bound's denominator, would come out too small.
    """
    if ceiling <= 0:
        return 0.0
    sources = creators & ~group
    relays = np.flatnonzero(~group & ~creators)
    node = np.full(net.n, -1, dtype=np.int64)
    node[sources] = 0  # all creators outside the group are one source
    node[group] = 1  # the group is one sink
    node[relays] = 2 + np.arange(len(relays))
    a, b = node[net.src], node[net.dst]
    keep = (a != 1) & (b != 0) & (a != b)  # links out of the sink or into the source carry nothing
    scale = _SCALE_UNITS / ceiling
    units = np.floor(np.minimum(net.bw[keep], ceiling) * scale + 0.5).astype(np.int64)
    size = 2 + len(relays)
    arcs = sp.coo_array((units, (a[keep], b[keep])), shape=(size, size)).tocsr()
    arcs.sum_duplicates()
    arcs.data = np.minimum(arcs.data, _SCALE_UNITS)
    graph = sp.csr_array((arcs.data.astype(np.int32), arcs.indices, arcs.indptr), shape=(size, size))
    flow = int(maximum_flow(graph, 0, 1).flow_value)
    return min(ceiling, (flow + 0.5 * int(keep.sum())) / scale)


@dataclass
class GroupBrackets:
    """Per group of one partition (``names[i]``: the label of group ``i``): ``low <= F_G <=
    high <= cut`` (``cut``: the group's in-links), in bytes/us."""

    names: np.ndarray
    cut: np.ndarray
    low: np.ndarray
    high: np.ndarray


def group_brackets(net: Net, labels: np.ndarray, creators: np.ndarray) -> GroupBrackets:
    """Closed-form brackets of ``F_G`` for every group of ``labels`` (``labels[v] >= 0``:
    ``v``'s group; ``-1``: in none).

    For a relaying in-neighbour ``s`` of ``G`` sending ``x`` into ``G``: a flow may route
    ``min(x, f)`` through ``s``, ``f`` being what creators outside ``G`` send ``s`` directly
    (distinct ``(s, G)`` use distinct links); and putting ``s`` on ``G``'s side of the cut
    replaces ``x`` by at most ``s``'s in-links from outside ``G`` (``i``), so ``F_G <= cut -
    sum_s (x - min(x, i))`` (links between such ``s`` counted twice: still a cut's upper bound).
    """
    size = int(labels.max()) + 1
    names = np.unique(labels[labels >= 0])
    head, tail = labels[net.dst], labels[net.src]
    into = (head >= 0) & (tail != head)
    cut = np.bincount(head[into], weights=net.bw[into], minlength=size)
    short_low: np.ndarray = np.zeros(size)  # per group: in-links the feasible flow leaves out
    short_high: np.ndarray = np.zeros(size)  # per group: in-links the cut replaces by less
    relayed = into & ~creators[net.src]
    if relayed.any():
        key = net.src[relayed] * size + head[relayed]
        pairs, inverse = np.unique(key, return_inverse=True)
        x = np.bincount(inverse, weights=net.bw[relayed], minlength=len(pairs))
        relay, group = pairs // size, pairs % size

        def from_group(mask: np.ndarray) -> np.ndarray:
            """Per pair (s, G): bandwidth of the links in ``mask`` from G's nodes into s."""
            own = mask & (tail >= 0)
            own_key = net.dst[own] * size + tail[own]
            pos = np.minimum(np.searchsorted(pairs, own_key), len(pairs) - 1)
            hit = pairs[pos] == own_key
            return np.bincount(pos[hit], weights=net.bw[own][hit], minlength=len(pairs))

        made = creators[net.src]
        fed = np.bincount(net.dst[made], weights=net.bw[made], minlength=net.n)[relay] - from_group(made)
        every = np.ones(len(net.src), dtype=bool)
        inn = net.bw_in[relay] - from_group(every)
        short_low = np.bincount(group, weights=x - np.minimum(x, fed), minlength=size)
        short_high = np.bincount(group, weights=x - np.minimum(x, inn), minlength=size)
    c = cut[names]
    return GroupBrackets(names, c, np.maximum(0.0, c - short_low[names]), c - short_high[names])


def gossip_value(
    net: Net, partitions: list[np.ndarray], creators: np.ndarray, total: float, notes: list[str]
) -> float:
    """``max over partitions of 2 (g - 1) total / sum_G F_G`` (``g >= 2`` groups), with ``F_G``
    exact where it can matter (module docstring); partitions listed twice count once."""
    entries: list[tuple[float, float, int, np.ndarray, GroupBrackets]] = []
    seen: set[bytes] = set()
    best = 0.0
    for labels in partitions:
        present, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
        canon = np.where(labels >= 0, first[inverse], -1)  # each group named by its first node
        if canon.tobytes() in seen:
            continue
        seen.add(canon.tobytes())
        groups = int((present >= 0).sum())
        if groups < 2:
            continue
        br = group_brackets(net, labels, creators)
        need = 2 * (groups - 1) * total
        high = float(br.high.sum())
        if high > 0:
            best = max(best, need / high)  # valid: every high is at least F_G
        low = float(br.low.sum())
        hope = need / low if low > 0 else float("inf")
        if low < high:
            entries.append((hope, need, groups, labels, br))
    cache: dict[bytes, float] = {}
    flows = 0
    for hope, need, _, labels, br in sorted(entries, key=lambda e: -e[0]):
        if hope <= best:
            break
        open_ = np.flatnonzero(br.low < br.high)
        if flows + len(open_) > EXACT_FLOW_BUDGET:
            notes.append(
                f"gossip: group max-flows past the budget of {EXACT_FLOW_BUDGET}; "
                "the rest use cut estimates (valid, maybe weaker)"
            )
            break
        exact = br.high.copy()
        for i in open_.tolist():
            group = labels == br.names[i]
            k = group.tobytes()
            if k not in cache:
                cache[k] = group_inflow(net, group, creators, float(br.high[i]))
                flows += 1
            exact[i] = cache[k]
        cap = float(exact.sum())
        if cap > 0:
            best = max(best, need / cap)
    return best
