"""An independent exact model of the slot semantics, for checking proofs and bounds.

Written straight from ``DESIGN.md``'s canonical slot semantics with the OR-tools CP-SAT API,
sharing no code with ``ccplan.model`` (no Pyomo, no reach windows, no horizon rule, no index
keys): for a horizon ``T`` it asks "is there a schedule whose makespan is at most ``T``?" and
walks ``T = 0, 1, ...`` up to the first yes. Only the instance's slotting (``occupancy`` ``l``,
``latency`` ``L``, ``link_capacity`` ``omega`` and the outage slots) is read from ccplan, as
the input every engine shares.

Variables (``T`` fixed): ``s[k, e, t]`` chunk ``k`` starts on link ``e`` in slot ``t``
(only where ``t + L_e <= T``: a later arrival cannot count for makespan ``T``); ``h[k, v, t]``
for ``t = 0 .. T``: ``v`` holds ``k`` at the start of slot ``t`` (for a bufferless switch:
``k`` passes it in slot ``t``). Rules:

- ``h[k, v, 0]`` is the precondition;
- store-and-forward node: ``h[k, v, t] = h[k, v, t-1] + arrivals(k, v, t)``, so a chunk
  arrives at most once and never at a node that holds it;
- bufferless switch (cut-through): ``h[k, w, t] = arrivals(k, w, t)`` (at most one arrival a
  slot; it may pass again later);
- a send needs the chunk: ``s[k, e, t] <= h[k, src(e), t]``;
- capacity: for every link and slot ``q``, the sends whose window ``t .. t + l_e - 1``
  covers ``q`` are at most ``omega(e, q)`` (0 in an outage);
- single port: at most one send occupying an out-link, and one occupying an in-link, of
  every node in every slot;
- postcondition: ``h[k, v, T] = 1`` for every demand.

Only data-movement collectives (no reduction).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ccplan.instances import Instance


def feasible(instance: Instance, T: int, time_limit: float = 30.0) -> bool:
    """Whether a schedule of makespan at most ``T`` exists (raises if CP-SAT cannot tell)."""
    topo = instance.topology
    coll = instance.collective
    occ = [int(v) for v in instance.occupancy]
    lat = [int(v) for v in instance.latency]
    cap = [int(v) for v in instance.link_capacity]
    down = {(int(e), int(q)) for e, q in instance.outage_set}
    bufferless = set(instance.bufferless)
    links = [(lk.src, lk.dst) for lk in topo.links]
    nodes = list(topo.node_ids)
    chunks = list(coll.chunk_ids)
    holders = coll.holders

    m = cp_model.CpModel()
    s = {
        (k, e, t): m.new_bool_var(f"s{k}_{e}_{t}")
        for k in range(len(chunks))
        for e in range(len(links))
        for t in range(T + 1)
        if t + lat[e] <= T
    }
    h = {(k, v, t): m.new_bool_var(f"h{k}_{v}_{t}") for k in range(len(chunks)) for v in nodes
         for t in range(T + 1)}
    for k, chunk in enumerate(chunks):
        for v in nodes:
            m.add(h[k, v, 0] == (1 if v in holders[chunk] and v not in bufferless else 0))
            for t in range(1, T + 1):
                arrivals = [s[k, e, t - lat[e]] for e, (_, b) in enumerate(links)
                            if b == v and (k, e, t - lat[e]) in s]
                if v in bufferless:
                    m.add(h[k, v, t] == sum(arrivals))
                else:
                    m.add(h[k, v, t] == h[k, v, t - 1] + sum(arrivals))
        for (kk, e, t), var in s.items():
            if kk == k:
                m.add_implication(var, h[k, links[e][0], t])
        for chunk_v in coll.wanted[chunk]:
            m.add(h[k, chunk_v, T] == 1)
    span = T + max(occ, default=1) + 1
    for e in range(len(links)):
        for q in range(span):
            busy = [var for (_, ee, t), var in s.items() if ee == e and t <= q < t + occ[e]]
            if busy:
                m.add(sum(busy) <= (0 if (e, q) in down else cap[e]))
    if instance.single_port:
        for v in nodes:
            for end in (0, 1):
                for q in range(span):
                    busy = [var for (_, e, t), var in s.items()
                            if links[e][end] == v and t <= q < t + occ[e]]
                    if len(busy) > 1:
                        m.add(sum(busy) <= 1)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = time_limit
    status = solver.solve(m)
    if status == cp_model.FEASIBLE or status == cp_model.OPTIMAL:
        return True
    if status == cp_model.INFEASIBLE:
        return False
    raise RuntimeError(f"independent model undecided at T={T} ({solver.status_name(status)})")


def optimum(instance: Instance, limit: int = 200) -> int:
    """The optimal makespan in slots: the least ``T`` with a schedule. A schedule of makespan
    at most ``T`` is one of makespan at most ``T + 1``, so feasibility is monotone in ``T``
    and a doubling search followed by bisection finds the least one."""
    if feasible(instance, 0):
        return 0
    lo, hi = 0, 1  # lo infeasible
    while not feasible(instance, hi):
        lo, hi = hi, 2 * hi
        if hi > limit:
            raise RuntimeError(f"no schedule within {limit} slots")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if feasible(instance, mid):
            hi = mid
        else:
            lo = mid
    return hi
