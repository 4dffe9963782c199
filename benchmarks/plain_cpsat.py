"""Reference for time to proof: a plain CP-SAT model of the slot semantics (no Pyomo, no
heuristic), against the ``milp`` engine, on random small instances whose optimum lies
above ``ccplan.bounds``.

Run by hand (never as a timed test)::

    python benchmarks/plain_cpsat.py                    # 24 instances, medians of 3
    python benchmarks/plain_cpsat.py --count 6 --repeat 1 --time-limit 60
    python benchmarks/plain_cpsat.py --set set24.json   # draw once, keep the set in a file

Drawing the set solves every candidate with the plain model (minutes on a shared machine);
``--set FILE`` writes the drawn instances there (``Instance.to_dict``) on the first run and
reads them back on later runs, so two versions of the engine can be timed on the same set.
The milp rows also give the engine's phases (medians): warm start, model build, Pyomo ->
CP-SAT translation and CP-SAT search seconds, from ``Outcome.details``.

The plain model is written directly with ``cp_model`` and differs from the paper's
(2)-(14) on purpose, so it doubles as a cross-check of the optimum:

- ``x[k, e, t]`` (send of chunk k on link e starting in slot t, arriving by H) and
  ``y[k, v, t]`` (v holds k at the start of slot t), no ``z``;
- ``y[k, v, 0]`` from the precondition; ``y[k, v, t] = y[k, v, t-1] + sum_e x[k, e, t-L_e]``
  over the links e into v (so a node receives a chunk at most once);
- a send needs ``y`` at its start slot; link capacity over the occupancy window
  ``t-l_e+1 .. t`` against ``omega(e, t)``; one send and one receive per node and slot
  with ``single_port``;
- every demand holds its chunk at H, and ``D >= H - sum_{t<H} y[k, v, t]`` (the arrival
  slot of a monotone ``y``); minimise D.

Its horizon H is the makespan of ``ccplan.model.exact.greedy_schedule`` (shortest-latency
trees, milliseconds; no hint is given). The ``milp`` engine runs as ``ccplan solve --method
milp`` does (defaults, no time limit). Both schedules go through ``ccplan.schedule.verify``.

Random instances (seeded): 4-6 nodes, random duplex links with mixed bandwidths (25, 50,
100 GB/s), alpha 0.3-0.7 us, sizes 1 MB-1 GB, some with a switch, AllGather with 1-2 chunks
and Broadcast with 2-4 chunks (pipelining); only those whose optimum (plain model) is above
``ccplan.bounds.lower_bound_slots`` are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.instances.collectives import Chunk
from ccplan.model.exact import greedy_schedule
from ccplan.pipeline.solve import solve
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify


@dataclass(frozen=True)
class PlainResult:
    status: str
    makespan: int | None
    bound: int
    seconds: float


def plain_solve(inst: Instance, time_limit: float | None = None, workers: int = 2) -> PlainResult:
    """Build and solve the plain model; the schedule is verified before it is reported."""
    t0 = time.perf_counter()
    greedy = verify(inst, greedy_schedule(inst))
    assert greedy.ok and greedy.makespan_slots is not None
    H = max(1, greedy.makespan_slots)
    topo = inst.topology
    coll = inst.collective
    lat = [int(v) for v in inst.latency]
    occ = [int(v) for v in inst.occupancy]
    m = cp_model.CpModel()
    x: dict[tuple[Chunk, int, int], Any] = {}
    y: dict[tuple[Chunk, int, int], Any] = {}
    for k in coll.chunk_ids:
        held = coll.holders[k]
        for v in topo.node_ids:
            for t in range(H + 1):
                y[(k, v, t)] = m.new_bool_var("")
            m.add(y[(k, v, 0)] == int(v in held))
        for e, link in enumerate(topo.links):
            if link.dst in held:
                continue
            for t in range(H - lat[e] + 1):
                var = m.new_bool_var("")
                x[(k, e, t)] = var
                m.add_implication(var, y[(k, link.src, t)])
                if any(inst.omega(e, q) == 0 for q in range(t, t + occ[e])):
                    m.add(var == 0)
        for v in topo.node_ids:
            for t in range(1, H + 1):
                arriving = [x[(k, e, t - lat[e])] for e in topo.in_links[v] if (k, e, t - lat[e]) in x]
                m.add(y[(k, v, t)] == y[(k, v, t - 1)] + sum(arriving))
    for e in range(topo.num_links):
        for t in range(H):
            window = [x[(k, e, q)] for k in coll.chunk_ids for q in range(max(0, t - occ[e] + 1), t + 1)
                      if (k, e, q) in x]
            if len(window) > inst.omega(e, t):
                m.add(sum(window) <= inst.omega(e, t))
    if inst.single_port:
        for v in topo.node_ids:
            for links in (topo.out_links[v], topo.in_links[v]):
                for t in range(H):
                    window = [x[(k, e, q)] for e in links for k in coll.chunk_ids
                              for q in range(max(0, t - occ[e] + 1), t + 1) if (k, e, q) in x]
                    if len(window) > 1:
                        m.add(sum(window) <= 1)
    D = m.new_int_var(0, H, "D")
    for k, v in coll.demands:
        m.add(y[(k, v, H)] == 1)
        m.add(H - sum(y[(k, v, t)] for t in range(H)) <= D)
    m.minimize(D)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = time_limit
    status = solver.solve(m)
    seconds = time.perf_counter() - t0
    name = solver.status_name(status)
    if name not in ("OPTIMAL", "FEASIBLE"):
        return PlainResult(name.lower(), None, int(solver.best_objective_bound), seconds)
    sends = [Send(t, k, topo.links[e].src, topo.links[e].dst) for (k, e, t), var in x.items()
             if solver.value(var)]
    report = verify(inst, Schedule.of(sends, method="plain-cpsat"))
    if not report.ok:
        raise AssertionError(f"plain model schedule fails verification: {report.violations[0]}")
    makespan = report.makespan_slots
    assert makespan is not None and makespan <= solver.objective_value + 1e-9
    return PlainResult(name.lower(), makespan, round(solver.best_objective_bound), seconds)


def random_instance(rng: random.Random, index: int) -> Instance:
    """One random small instance (see the module docstring)."""
    n = rng.randint(4, 6)
    switch = rng.random() < 0.3
    gpus = list(range(n - 1 if switch else n))
    cables: list[tuple[int, int, float, float]] = []
    order = gpus[:]
    rng.shuffle(order)
    for a, b in zip(order, order[1:] + order[:1], strict=True):  # a ring keeps it connected
        cables.append((a, b, rng.choice([25.0, 50.0, 100.0]), rng.uniform(0.3, 0.7)))
    for _ in range(rng.randint(0, 2)):
        a, b = rng.sample(gpus, 2)
        if not any({a, b} == {c[0], c[1]} for c in cables):
            cables.append((a, b, rng.choice([25.0, 50.0, 100.0]), rng.uniform(0.3, 0.7)))
    switches = []
    if switch:
        sw = n - 1
        switches = [sw]
        for g in rng.sample(gpus, min(3, len(gpus))):
            cables.append((g, sw, rng.choice([50.0, 100.0]), rng.uniform(0.3, 0.7)))
    topo = make_topology(f"rand{index}", gpus=gpus, duplex_links=cables, switches=switches)
    if rng.random() < 0.5:
        coll = make_collective("allgather", topo, chunks=rng.randint(1, 2))
    else:
        coll = make_collective("broadcast", topo, chunks=rng.randint(2, 4), root=gpus[0])
    size = rng.choice(["1MB", "16MB", "256MB", "1GB"])
    return make_instance(topo, coll, size, single_port=rng.random() < 0.2)


def instances_above_bound(
    count: int, seed: int, time_limit: float
) -> list[tuple[str, Instance, PlainResult]]:
    """Draw random instances until ``count`` have a proven optimum above ccplan.bounds."""
    rng = random.Random(seed)
    found: list[tuple[str, Instance, PlainResult]] = []
    index = 0
    while len(found) < count and index < 50 * count:
        inst = random_instance(rng, index)
        index += 1
        if len(greedy_schedule(inst).sends) > 400:
            continue  # keep the set small enough for repeated proofs
        ref = plain_solve(inst, time_limit)
        if ref.status == "optimal" and ref.makespan is not None and ref.makespan > lower_bound_slots(inst):
            found.append((f"rand{index - 1}", inst, ref))
    return found


def load_or_draw(path: str | None, count: int, seed: int, time_limit: float) -> list[tuple[str, Instance]]:
    """The instance set: read from ``path`` when it exists, else drawn (and written there)."""
    if path is not None and os.path.exists(path):
        with open(path) as fh:
            data = json.load(fh)
        return [(item["name"], Instance.from_dict(item["instance"])) for item in data][:count]
    chosen = [(name, inst) for name, inst, _ in instances_above_bound(count, seed, time_limit)]
    if path is not None:
        with open(path, "w") as fh:
            json.dump([{"name": name, "instance": inst.to_dict()} for name, inst in chosen], fh)
    return chosen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=24)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--time-limit", type=float, default=120.0)
    p.add_argument("--prove", action="store_true", help="run milp with --prove")
    p.add_argument("--set", help="JSON file of the instance set (written if missing, else read)")
    args = p.parse_args(argv)
    print(f"# load average {os.getloadavg()}, 2 CP-SAT workers, shared machine", flush=True)
    chosen = load_or_draw(args.set, args.count, args.seed, args.time_limit)
    if chosen:
        # Import Pyomo and the heuristics once before timing, as ortools was imported above.
        solve(chosen[0][1], "milp", SolveOptions(time_limit=args.time_limit))
    print("instance,method,makespan,bound,gap,seconds,warm,build,translate,search,describe", flush=True)
    ratios = []
    for name, inst in chosen:
        times: dict[str, list[float]] = {"plain-cpsat": [], "milp": []}
        phases: dict[str, list[float]] = {"warm": [], "build": [], "translate": [], "search": []}
        last: dict[str, tuple[int | None, int]] = {}
        for _ in range(args.repeat):
            # a fresh copy: nothing computed for the instance (its bound) carries over
            inst = Instance.from_dict(inst.to_dict())
            ref = plain_solve(inst, args.time_limit)
            times["plain-cpsat"].append(ref.seconds)
            last["plain-cpsat"] = (ref.makespan, ref.bound)
            extra = {"prove": True} if args.prove else {}
            t0 = time.perf_counter()
            res = solve(inst, "milp", SolveOptions(time_limit=args.time_limit, extra=extra))
            times["milp"].append(time.perf_counter() - t0)
            for phase, key in (("warm", "warm_start_seconds"), ("build", "build_seconds"),
                               ("translate", "translate_seconds"), ("search", "solve_seconds")):
                phases[phase].append(float(res.details.get(key, 0.0)))
            assert res.verified
            last["milp"] = (res.makespan_slots, res.lower_bound_slots)
            if res.status == "optimal" and ref.status == "optimal":
                assert res.makespan_slots == ref.makespan, (name, res.makespan_slots, ref.makespan)
        for method, (mk, bd) in last.items():
            gap = "" if mk is None else f"{(mk - bd) / mk:.3f}"
            cols = ",,," if method != "milp" else ",".join(
                f"{statistics.median(phases[k]):.3f}" for k in ("warm", "build", "translate", "search"))
            print(f"{name},{method},{mk},{bd},{gap},{statistics.median(times[method]):.3f},{cols},"
                  f"{inst.describe()}", flush=True)
        ratios.append(statistics.median(times["milp"]) / statistics.median(times["plain-cpsat"]))
    if ratios:
        print(f"# {len(ratios)} instances; milp/plain time ratio: median {statistics.median(ratios):.2f}, "
              f"max {max(ratios):.2f}, within 2x: {sum(r <= 2 for r in ratios)}/{len(ratios)}")
        print(f"# load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
