"""A plain per-row statement of the MILP's rows, for checking the vectorised builder.

This is the row generation ``ccplan.model.milp.build_model`` used before its index sets and
rows were built with numpy: one Python loop per equation, written straight from the
equations (2)-(14) of ``000_*.txt``, the single-port rows and the cuts. Variables are named
by their keys (``("x", s, c, e, t)``, ``("y", s, c, v, t)``, ``("z", s, c, v, t)``,
``("D",)``), so the rows can be compared with any build without Pyomo.
"""

from __future__ import annotations

from collections import defaultdict

from ccplan.instances import Instance
from ccplan.model.size import reach_windows, y_window

VarKey = tuple[object, ...]
Row = tuple[tuple[tuple[VarKey, int], ...], int | None, int | None]


def reference_rows(instance: Instance, horizon: int, dense: bool = False, cuts: bool = True,
                   lower_bound: int | None = None) -> dict[str, dict[object, Row]]:
    """``component name -> {row key: (sorted (variable, coefficient) terms, lb, ub)}``."""
    topo = instance.topology
    coll = instance.collective
    lat = [int(v) for v in instance.latency]
    occ = [int(v) for v in instance.occupancy]
    H = horizon
    holders = coll.holders
    earliest, latest, demanders = reach_windows(instance, H, dense)

    x_keys = []
    for chunk in coll.chunk_ids:
        s, c = chunk
        for e, link in enumerate(topo.links):
            last = H - lat[e]
            if dense:
                x_keys.extend((s, c, e, t) for t in range(0, last + 1))
                continue
            if link.dst in holders[chunk]:
                continue
            first = earliest[(chunk, link.src)]
            last = min(last, latest[(chunk, link.dst)] - lat[e])
            for t in range(first, last + 1):
                if all(instance.omega(e, q) > 0 for q in range(t, t + occ[e])):
                    x_keys.append((s, c, e, t))
    y_ranges = {}
    for chunk in coll.chunk_ids:
        dem = demanders.get(chunk, set())
        for v in topo.node_ids:
            lo, hi = y_window(H, dense, v in holders[chunk], v in dem, earliest[(chunk, v)],
                              latest[(chunk, v)])
            if lo <= hi:
                y_ranges[(chunk, v)] = (lo, hi)

    def y(chunk, v, t):  # type: ignore[no-untyped-def]
        rng = y_ranges.get((chunk, v))
        return None if rng is None or not rng[0] <= t <= rng[1] else ("y", chunk[0], chunk[1], v, t)

    out: dict[str, dict[object, Row]] = defaultdict(dict)

    def add(name, key, terms, lb, ub):  # type: ignore[no-untyped-def]
        out[name][key] = (tuple(sorted(terms)), lb, ub)

    inflow = defaultdict(list)
    into = defaultdict(list)
    from_holders = defaultdict(list)
    on_link = defaultdict(list)
    for s, c, e, t in x_keys:
        var = ("x", s, c, e, t)
        link = topo.links[e]
        inflow[((s, c), link.dst, t + lat[e])].append(var)
        into[((s, c), link.dst)].append((t + lat[e], var))
        if link.src in holders[(s, c)]:
            from_holders[(s, c)].append(var)
        on_link[(e, t)].append(var)

    for chunk in coll.chunk_ids:
        for v in topo.node_ids:
            var = y(chunk, v, 0)
            if var is not None:
                name = "c2_initial_hold" if v in holders[chunk] else "c3_initial_empty"
                rhs = int(v in holders[chunk])
                add(name, (chunk[0], chunk[1], v), [(var, 1)], rhs, rhs)
    for chunk in sorted({chunk for chunk, _ in coll.demands}):
        if from_holders.get(chunk):
            add("c4_source_sends", chunk, [(v, 1) for v in from_holders[chunk]], 1, None)
    for s, c, e, t in x_keys:
        add("c5_causality", (s, c, e, t), [(("x", s, c, e, t), 1), (y((s, c), topo.links[e].src, t), -1)],
            None, 0)
    for (chunk, v), (lo, hi) in y_ranges.items():
        # a cut-through switch that does not hold the chunk carries nothing to the next slot
        passing = v in instance.bufferless and v not in holders[chunk]
        for t in range(max(lo, 1), hi + 1):
            terms = [(("y", chunk[0], chunk[1], v, t), 1)]
            if not passing and y(chunk, v, t - 1) is not None:
                terms.append((y(chunk, v, t - 1), -1))
            terms.extend((var, -1) for var in inflow.get((chunk, v, t), ()))
            name = "c6_buffer_cut_through" if passing else "c6_buffer"
            add(name, (chunk[0], chunk[1], v, t), terms, 0, 0)
    # a send starts by H - L_e and occupies l_e slots: past H only for a cut-through hop
    span = max([H] + [H - lat[e] + occ[e] for e in range(topo.num_links)])
    for e in range(topo.num_links):
        for t in range(span):
            terms = [(var, 1) for q in range(max(0, t - occ[e] + 1), t + 1)
                     for var in on_link.get((e, q), ())]
            if len(terms) > instance.omega(e, t):
                add("c7_capacity", (e, t), terms, None, instance.omega(e, t))
    for chunk, v in coll.demands:
        s, c = chunk
        lo, hi = y_ranges[(chunk, v)]
        add("c8_receive", (s, c, v), [(("y", s, c, v, t), 1) for t in range(lo, hi + 1)], 1, None)
        add("c9_first_receive_once", (s, c, v),
            [(("z", s, c, v, t), 1) for t in range(max(lo, 1), hi + 1)], 1, 1)
        for t in range(max(lo, 1), hi + 1):
            zv, yv, prev = ("z", s, c, v, t), ("y", s, c, v, t), y(chunk, v, t - 1)
            add("c10_first_receive_held", (s, c, v, t), [(zv, 1), (yv, -1)], None, 0)
            if prev is not None:
                add("c11_first_receive_new", (s, c, v, t), [(zv, 1), (prev, 1)], None, 1)
            add("c12_first_receive_mark", (s, c, v, t),
                [(zv, 1), (yv, -1)] + ([(prev, 1)] if prev is not None else []), 0, None)
        if lo == 0:
            add("c13_first_receive_initial", (s, c, v),
                [(("z", s, c, v, 0), 1), (("y", s, c, v, 0), -1)], 0, 0)
        add("c14_makespan", (s, c, v),
            [(("D",), 1)] + [(("z", s, c, v, t), -t) for t in range(max(lo, 1), hi + 1)], 0, None)
    if instance.single_port:
        for node in topo.node_ids:
            for name, links in (("single_port_send", topo.out_links[node]),
                                ("single_port_receive", topo.in_links[node])):
                for t in range(span):
                    terms = [(var, 1) for e in links for q in range(max(0, t - occ[e] + 1), t + 1)
                             for var in on_link.get((e, q), ())]
                    if len(terms) > 1:
                        add(name, (node, t), terms, None, 1)
    if cuts:
        if lower_bound is not None and lower_bound > 0:
            add("cut_lower_bound", None, [(("D",), 1)], lower_bound, None)
        for chunk, v in coll.demands:
            sends = into.get((chunk, v), [])
            if sends:
                key = (chunk[0], chunk[1], v)
                add("cut_receive_once", key, [(var, 1) for _, var in sends], 1, 1)
                add("cut_arrival_by_send", key, [(("D",), 1)] + [(var, -arr) for arr, var in sends], 0, None)
    return dict(out)
