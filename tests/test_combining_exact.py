"""The exact combining model (``ccplan/model/combining.py``) and the combining bounds against it.

The model is a relaxation of what the verifier accepts (contributions as commodities, see its
module docstring): its proven optimum ``D*`` is a lower bound on the true optimum, and when the
replay of its sends verifies with makespan ``D*`` that value *is* the true optimum (status
``optimal``). Every bound of ``ccplan.bounds`` must stay at or below ``D*`` on every instance;
the random instances below include switches (which the verifier lets reduce), mixed bandwidths,
alpha > 0, one-way links, ``tau`` from the slowest link and single-port.
"""

from __future__ import annotations

import random

import pytest

from ccplan.bounds import compute_bounds
from ccplan.contract import SolveOptions
from ccplan.instances.builtin import fully_connected, line, ring, star_switch
from ccplan.instances.combining import allreduce, reduce, reducescatter
from ccplan.instances.instance import Instance, make_instance
from ccplan.instances.topology import make_topology
from ccplan.model.combining import build_combining_model, realise, solve_exact_combining
from ccplan.pipeline.solve import solve
from ccplan.schedule.verify import verify

FACTORIES = {"allreduce": allreduce, "reducescatter": reducescatter, "reduce": reduce}


def random_combining(seed: int) -> Instance:
    """A small random combining instance: 2-4 GPUs, maybe one switch, a directed cycle through
    every node (strong connectivity) plus random extra links, bandwidths 12.5/25/50 GB/s, alpha
    0/0.7/3 us."""
    rng = random.Random(seed)
    n_gpu = rng.choice((2, 3, 3, 4))
    n_switch = rng.choice((0, 0, 1))
    n = n_gpu + n_switch
    order = list(range(n))
    rng.shuffle(order)
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    for _ in range(rng.randint(0, n)):
        a, b = rng.sample(range(n), 2)
        pairs.add((a, b))
        if rng.random() < 0.5:
            pairs.add((b, a))
    links = [(a, b, rng.choice((12.5, 25.0, 50.0)), rng.choice((0.0, 0.7, 3.0))) for a, b in sorted(pairs)]
    topo = make_topology(f"rand{seed}", range(n_gpu), directed_links=links, switches=range(n_gpu, n))
    kind = rng.choice(("allreduce", "allreduce", "reducescatter", "reduce"))
    coll = FACTORIES[kind](topo, chunks=1 if kind != "reduce" else rng.choice((1, 2)))
    return make_instance(
        topo,
        coll,
        rng.choice(("256KB", "1MB")),
        tau_rule=rng.choice(("fastest", "fastest", "slowest")),
        alpha_threshold=rng.choice((0.0, 0.1)),
        single_port=rng.random() < 0.15,
    )


# Seeds of random_combining whose exact solve is certified (the replay meets the proven
# optimum) in about a second on 2 cores; the coverage test below checks that the selection
# keeps switches, mixed bandwidths, alpha > 0 and every combining collective.
CERTIFIED_SEEDS = (2, 4, 5, 6, 8, 10, 11, 13, 14, 15, 19, 20, 21, 22, 23, 24, 28, 29, 31, 32, 34,
                   35, 36, 37, 38, 42, 43, 44, 46, 49, 53, 56, 66, 70, 71)


@pytest.fixture(scope="module")
def exact_answers():
    out = {}
    for seed in CERTIFIED_SEEDS:
        inst = random_combining(seed)
        out[seed] = (inst, solve_exact_combining(inst, SolveOptions(time_limit=10, workers=2)))
    return out


def test_selection_covers_the_model_options(exact_answers):
    """The certified seeds keep every feature the bounds must stay valid for."""
    insts = [inst for inst, _ in exact_answers.values()]
    assert len(insts) >= 20
    assert sum(bool(i.topology.switches) for i in insts) >= 5
    assert sum(bool((i.latency > i.occupancy).any()) for i in insts) >= 10  # alpha > 0 in slots
    assert sum(len(set(i.topology.bandwidth)) > 1 for i in insts) >= 10
    assert sum(i.single_port for i in insts) >= 2
    kinds = [i.collective.kind for i in insts]
    assert min(kinds.count(k) for k in ("allreduce", "reducescatter", "reduce")) >= 5


@pytest.mark.parametrize("seed", CERTIFIED_SEEDS)
def test_bounds_never_exceed_the_true_optimum(exact_answers, seed):
    """Every slot bound (with and without time windows) is at most the certified optimum; the
    microsecond bound is at most ``D* tau`` when no alpha is rounded away (threshold 0)."""
    inst, answer = exact_answers[seed]
    assert answer.status == "optimal", "the selection lists certified seeds only"
    assert answer.schedule is not None and answer.makespan == answer.bound
    report = verify(inst, answer.schedule)
    assert report.ok and report.makespan_slots == answer.makespan
    for windows in (True, False):
        b = compute_bounds(inst, time_windows=windows)
        assert b.best_slots <= answer.makespan, (windows, b)
    if inst.alpha_threshold == 0:
        assert compute_bounds(inst).best_us <= answer.makespan * inst.tau_us * (1 + 1e-9)


def test_bounds_are_tight_on_some_and_below_on_others(exact_answers):
    """Not a validity check (that is above) but a guard against a bound that is trivially low:
    it meets the optimum on at least half of the certified instances, and the solver still had
    work to do on some (bound < optimum)."""
    pairs = [(compute_bounds(i).best_slots, a.makespan) for i, a in exact_answers.values()]
    assert sum(b == m for b, m in pairs) >= len(pairs) // 2
    assert any(b < m for b, m in pairs)


@pytest.mark.parametrize("method", ["ring", "multitree", "mteg"])
def test_heuristics_never_beat_the_optimum(exact_answers, method):
    """Verified heuristic schedules are at least the certified optimum, which is at least the
    bound (ring may find no route on some random digraphs: skipped then)."""
    checked = 0
    for inst, answer in exact_answers.values():
        try:
            result = solve(inst, method, SolveOptions(workers=2))
        except Exception as exc:
            if type(exc).__name__ not in ("ValidationError", "SolverUnavailableError"):
                raise
            continue
        assert result.verified
        assert result.makespan_slots >= answer.makespan >= result.lower_bound_slots
        checked += 1
    assert checked >= 10


def test_line_of_three_optimum_by_hand():
    """AllReduce on the duplex line 0-1-2 (50 GB/s, alpha 0, C=1: 3 chunks, l = L = 1).

    Lower: node 2 needs node 0's contribution of each of the 3 chunks; it crosses 1->2 in 3
    different sends (one chunk each), the first can leave node 1 at slot 1 (it reaches 1 at
    slot 1 at the earliest), so the last leaves at slot >= 3 and lands at >= 4. Upper: both
    ends send chunk k to node 1 at slot k (k = 0, 1, 2); node 1 holds the full sum of chunk k
    at slot k + 1 and copies it to both ends, landing at k + 2 <= 4. Optimum 4, while the
    bounds give 3 (the cut cannot see that the first crossing carries only node 1's part): the
    solver has to prove 4 itself.
    """
    topo = make_topology("line3", range(3), duplex_links=[(0, 1, 50.0, 0.0), (1, 2, 50.0, 0.0)])
    inst = make_instance(topo, allreduce(topo), "1MB")
    answer = solve_exact_combining(inst, SolveOptions(time_limit=30))
    assert answer.status == "optimal" and answer.makespan == 4
    assert compute_bounds(inst).best_slots == 3


def test_one_way_ring_gossip_count_by_hand():
    """AllReduce on the one-way ring 0->1->2->3->0 (C=1: 4 chunks, l = L = 1).

    Gossip count (docs/collectives.md): every chunk needs 2 (N - 1) = 6 sends, 24 in all, on 4
    links that carry one send per slot each: ``D >= 6``; ingress alone gives 4 (4 chunks into
    every node over one link). The ring algorithm (reduce-scatter then all-gather, 2 (N - 1)
    steps of one chunk per link) reaches 6: optimum 6 = bound.
    """
    topo = make_topology("oneway4", range(4), directed_links=[(i, (i + 1) % 4, 50.0, 0.0) for i in range(4)])
    inst = make_instance(topo, allreduce(topo), "1MB")
    b = compute_bounds(inst)
    assert b.ingress_slots == 4 and b.cut_slots == 6
    answer = solve_exact_combining(inst, SolveOptions(time_limit=30))
    assert answer.status == "optimal" and answer.makespan == 6
    ring_result = solve(inst, "ring")
    assert ring_result.verified and ring_result.makespan_slots == 6 and ring_result.status == "optimal"


def test_two_clusters_cut_by_hand():
    """AllReduce on two fast pairs 0-1 and 2-3 (50 GB/s) joined by a 25 GB/s duplex link 1-2
    (alpha 0, C=1: 4 chunks, l = 1 on the fast links, l = L = 2 on the slow one).

    Combining cut of ``S = {0, 1}``: every one of the 4 chunks has a contributor in S and a
    receiver outside, so 4 sends cross 1->2, 2 slots apart, the last landing by ``D``:
    ``starts 0, 2, 4, 6`` and ``D >= 6 + 2 = 8``. Ingress and latency see only 4 and 4.
    """
    links = [(0, 1, 50.0, 0.0), (2, 3, 50.0, 0.0), (1, 2, 25.0, 0.0)]
    topo = make_topology("pairs", range(4), duplex_links=links)
    inst = make_instance(topo, allreduce(topo), "1MB")
    b = compute_bounds(inst)
    assert (b.latency_slots, b.ingress_slots, b.cut_slots) == (4, 4, 8)
    # In microseconds: 4 chunks of 250 KB through 25 GB/s = 40 us; latency-free (alpha 0).
    assert b.cut_us == pytest.approx(40.0)


def test_highs_agrees_with_cpsat_on_the_model():
    """The same Pyomo model solved by HiGHS has the same optimum as with CP-SAT."""
    highs = pytest.importorskip("ccplan.model.highs")
    if not highs.highs_available():
        pytest.skip("highspy is not installed")
    for seed in (4, 13, 21, 24):
        inst = random_combining(seed)
        horizon = solve_exact_combining(inst, SolveOptions(time_limit=10)).makespan
        a = solve_exact_combining(inst, SolveOptions(time_limit=10, horizon=horizon))
        b = solve_exact_combining(inst, SolveOptions(time_limit=20, horizon=horizon), backend="highs")
        assert a.bound == b.bound == horizon


def test_model_has_one_named_component_per_constraint():
    import pyomo.environ as pyo

    topo = ring(3)
    inst = make_instance(topo, allreduce(topo), "1MB", single_port=True)
    built = build_combining_model(inst, 6)
    names = {c.local_name for c in built.model.component_objects(pyo.Constraint)}
    assert names == {"carry_send", "carry_held", "nonempty", "arrival", "monotone", "capacity",
                     "send_port", "recv_port", "finish", "done_monotone", "makespan"}


def test_realise_rejects_nothing_silently():
    """The replay of an impossible send list (node 1 folds node 0's partial sum in twice) is
    handed back as is for the verifier to reject: the engine never reports it as a schedule."""
    topo = line(3, alpha_us=0.0)
    inst = make_instance(topo, allreduce(topo), "1MB")
    c = (0, 0)
    sends = [(c, 0, 1, 0), (c, 1, 2, 1), (c, 0, 1, 1)]
    # The second 0->1 send carries {0} again into node 1's set {0, 1}, which it has sent on:
    # a copy over it is allowed, but it loses node 1's own contribution at node 1.
    schedule = realise(inst, sends)
    assert not verify(inst, schedule).ok


def test_exact_engine_through_solve():
    """``--method exact-combining`` through the one pipeline: verified, optimal, bound = makespan."""
    topo = fully_connected(3, alpha_us=0.0)
    inst = make_instance(topo, reducescatter(topo), "1MB")
    result = solve(inst, "exact-combining", SolveOptions(time_limit=20))
    assert result.verified and result.status == "optimal"
    assert result.lower_bound_slots == result.makespan_slots


def test_busbw_factors():
    """nccl-tests: busbw = algbw * 2(N-1)/N for AllReduce, (N-1)/N for ReduceScatter, 1 for Reduce."""
    topo = star_switch(4, alpha_us=0.0)
    for kind, factor in (("allreduce", 1.5), ("reducescatter", 0.75), ("reduce", 1.0)):
        inst = make_instance(topo, FACTORIES[kind](topo), "1MB")
        result = solve(inst, "ring")
        assert result.busbw_GBps(inst) == pytest.approx(result.algbw_GBps(inst) * factor)
        assert result.to_dict(inst)["busbw_GBps"] == pytest.approx(result.algbw_GBps(inst) * factor)


@pytest.mark.parametrize("seed", range(12))
def test_relisted_reducescatter_and_pipelined_allreduce_verify(seed):
    """The shard-order re-placement keeps every partial sum's inputs (the verifier and the
    numeric replay agree it is still a valid ReduceScatter), and the AllReduce built from it
    (mode "pipelined") verifies and never beats the bound."""
    from ccplan.pipeline.combining import relist, solve_combining
    from tests.test_combining import numeric_replay

    inst = random_combining(seed)
    rs_inst = make_instance(inst.topology, reducescatter(inst.topology), inst.size_bytes,
                            tau_rule=inst.tau_rule, alpha_threshold=inst.alpha_threshold,
                            single_port=inst.single_port)
    rs = solve_combining(rs_inst, "mteg").schedule
    assert rs is not None and verify(rs_inst, rs).ok
    staggered = relist(rs_inst, rs)
    assert verify(rs_inst, staggered).ok and numeric_replay(rs_inst, staggered)
    ar_inst = make_instance(inst.topology, allreduce(inst.topology), inst.size_bytes,
                            tau_rule=inst.tau_rule, alpha_threshold=inst.alpha_threshold,
                            single_port=inst.single_port)
    result = solve(ar_inst, "mteg", SolveOptions(extra={"allreduce": "pipelined"}))
    assert result.verified and result.makespan_slots >= result.lower_bound_slots
    assert numeric_replay(ar_inst, result.schedule)


DUALITY_SEEDS = tuple(
    s for s in CERTIFIED_SEEDS if random_combining(s).collective.kind in ("reducescatter", "reduce")
)


def test_reversal_duality_on_certified_optima(exact_answers):
    """ReduceScatter / Reduce optimum = AllGather / Broadcast optimum on the reversed topology
    where docs/collectives.md §3a, "Duality", proves it (no outages; single-port only when the
    links into and out of each node share one ``delta``), checked here with two independent
    exact engines: the combining model on one side, the paper's MILP (``milp``) on the other.
    A single-port instance where it fails: tests/test_combining_reversal.py."""
    from ccplan.instances.collectives import allgather, broadcast
    from ccplan.pipeline.combining import ports_reflect

    seeds = [s for s in DUALITY_SEEDS if ports_reflect(random_combining(s))]
    assert len(seeds) >= 10 and any(random_combining(s).single_port for s in seeds)
    for seed in seeds:
        inst, answer = exact_answers[seed]
        rev = inst.topology.reversed()
        coll = inst.collective
        twin = (allgather(rev, chunks=coll.chunks) if coll.kind == "reducescatter"
                else broadcast(rev, chunks=coll.chunks, root=coll.root))
        twin_inst = make_instance(rev, twin, inst.size_bytes, tau_rule=inst.tau_rule,
                                  alpha_threshold=inst.alpha_threshold, single_port=inst.single_port)
        result = solve(twin_inst, "milp", SolveOptions(time_limit=30))
        assert result.status == "optimal" and result.makespan_slots == answer.makespan, seed


def test_estimates_never_exceed_the_true_optimum(exact_answers):
    """The sizing figures every engine starts from are lower bounds too: the horizon bound is
    at most the certified optimum, and the count of sends at most the optimal schedule's."""
    from ccplan.instances.estimate import count_deliveries, horizon_lower_bound

    for inst, answer in exact_answers.values():
        assert 1 <= horizon_lower_bound(inst) <= answer.makespan
        assert 1 <= count_deliveries(inst) <= len(answer.schedule)
