"""The reversal construction of combining collectives under single-port, unequal delays,
outages and ``l > 1`` (``ccplan/pipeline/combining.py``), and where ReduceScatter's optimum
equals the reversed AllGather's (docs/collectives.md, "Duality").

The reversal reflects a send in slot ``t`` on a reversed link with ``L = delta + l`` to slot
``D - t - L``: one constant per link (``D - delta - 1`` for the occupied slots). Links of one
node with different ``delta`` are shifted by different constants, so two sends of a node in
different slots could land in the same one (single-port broken); outages sit at fixed slots
and were not carried over at all. Before the fix `heuristic` returned invalid ReduceScatter,
AllReduce and Reduce schedules on 20 of the 60 instances of :func:`random_instance`.

Every schedule below goes through the verifier and the numeric replay of
``tests/test_combining.py`` (random integers added up for real).
"""

from __future__ import annotations

import random

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError
from ccplan.instances.collectives import allgather, broadcast
from ccplan.instances.combining import allreduce, reduce, reducescatter
from ccplan.instances.instance import Instance, make_instance
from ccplan.instances.topology import Topology, make_topology
from ccplan.pipeline.combining import ports_reflect, reflect_outages, retime, reverse_schedule
from ccplan.pipeline.solve import solve
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.verify import verify
from tests.helpers import greedy_schedule
from tests.test_combining import numeric_replay

KINDS = {"reducescatter": reducescatter, "allreduce": allreduce, "reduce": reduce}
QUICK = SolveOptions(workers=1, extra={"effort": "quick", "flow_bound": False})


def random_topology(rng: random.Random, name: str, alphas: tuple[float, ...]) -> Topology:
    """3-5 GPUs, sometimes a switch; a directed cycle through every node (strongly connected),
    most of it both ways, plus random one-way links; 12.5 / 25 / 50 GB/s (``l`` up to 4)."""
    n_gpu = rng.choice((3, 3, 4, 4, 5))
    n = n_gpu + rng.choice((0, 0, 0, 1))
    order = list(range(n))
    rng.shuffle(order)
    pairs = set()
    for i in range(n):
        a, b = order[i], order[(i + 1) % n]
        pairs.add((a, b))
        if rng.random() < 0.7:
            pairs.add((b, a))
    for _ in range(rng.randint(0, n)):
        a, b = rng.sample(range(n), 2)
        pairs.add((a, b))
    links = [(a, b, rng.choice((12.5, 25.0, 50.0, 50.0)), rng.choice(alphas)) for a, b in sorted(pairs)]
    return make_topology(name, range(n_gpu), directed_links=links, switches=range(n_gpu, n))


def random_instance(seed: int, kind: str) -> Instance:
    """Seed mod 3: single-port; outages (1-6 random (link, slot < 9)); both. Alphas 0 / 0.7 /
    2.1 / 3 us and sizes 1 MB / 256 KB give ``delta`` from 0 to 3 on one topology."""
    rng = random.Random(seed)
    topo = random_topology(rng, f"rev{seed}", (0.0, 0.7, 2.1, 3.0))
    mode = seed % 3
    outages = []
    if mode:
        links = [lk.key for lk in topo.links]
        for _ in range(rng.randint(1, 6)):
            outages.append((*rng.choice(links), rng.randint(0, 8)))
    size = rng.choice(("1MB", "256KB"))
    return make_instance(topo, KINDS[kind](topo, chunks=1), size, single_port=mode != 1, outages=outages)


def _check(inst: Instance, result_schedule: Schedule | None) -> int:
    assert result_schedule is not None
    report = verify(inst, result_schedule)
    assert report.ok, report.violations[:2]
    assert numeric_replay(inst, result_schedule)
    assert report.makespan_slots is not None and report.makespan_slots >= lower_bound_slots(inst)
    return report.makespan_slots


def test_the_random_instances_have_what_broke_the_reversal() -> None:
    """The sample holds single-port with unequal delays at a node, outages, ``l > 1`` and
    ``delta > 1``, so the test below exercises every repair."""
    insts = [random_instance(seed, "reducescatter") for seed in range(60)]
    assert sum(not ports_reflect(i) for i in insts) >= 15
    assert sum(bool(i.outages) for i in insts) == 40
    assert sum(int(i.occupancy.max()) > 1 for i in insts) >= 40
    assert sum(int(i.delay.max()) > 1 for i in insts) >= 10


@pytest.mark.parametrize("seed", range(60))
def test_heuristic_combining_schedules_verify(seed: int) -> None:
    """`heuristic` (through the reversal) gives a verified ReduceScatter, AllReduce and Reduce,
    each at or above the lower bound; AllReduce at or above the ReduceScatter it starts with
    (an AllReduce ends with every GPU holding every sum, a ReduceScatter's postcondition)."""
    got = {}
    for kind in KINDS:
        inst = random_instance(seed, kind)
        got[kind] = _check(inst, solve(inst, "heuristic", QUICK).schedule)
    assert got["allreduce"] >= lower_bound_slots(random_instance(seed, "reducescatter"))


@pytest.mark.parametrize("method", ["mteg", "ring", "multitree", "tree", "recursive-halving-doubling"])
def test_other_engines_return_only_verified_combining_schedules(method: str) -> None:
    """The other engines on every third instance: a data-movement one through the reversal
    (``mteg``) must always succeed; a native combining one may refuse a topology (no ring, a
    collective it does not implement), but what it returns must verify."""
    built = 0
    for seed in range(0, 60, 3):
        for kind in KINDS:
            inst = random_instance(seed, kind)
            try:
                result = solve(inst, method, QUICK)
            except CCPlanError:
                assert method != "mteg", (seed, kind)
                continue
            _check(inst, result.schedule)
            built += 1
    assert built >= (60 if method == "mteg" else 1)


# --------------------------------------------------------------------------- the reflection
def _uniform_delay_instance(seed: int, with_outages: bool) -> Instance:
    """Single-port ReduceScatter with every alpha 2.1 us (one ``delta`` >= 1 on every link)
    and mixed bandwidths (``l`` from 1 to 4)."""
    rng = random.Random(1000 + seed)
    topo = random_topology(rng, f"uni{seed}", (2.1,))
    outages = []
    if with_outages:
        links = [lk.key for lk in topo.links]
        outages = [(*rng.choice(links), rng.randint(0, 10)) for _ in range(4)]
    return make_instance(topo, reducescatter(topo), "256KB", single_port=True, outages=outages)


@pytest.mark.parametrize("seed", range(10))
def test_reflection_is_exact_when_a_nodes_links_share_their_delay(seed: int) -> None:
    """With one ``delta`` per node's in-links and per node's out-links the per-link reflection
    keeps single-port (docs/collectives.md, "Duality"): the reflection of a valid AllGather on
    the reversed topology (the test helpers' greedy, independent of the engines) is a valid
    ReduceScatter, no repair, and ends by the AllGather's makespan."""
    inst = _uniform_delay_instance(seed, with_outages=False)
    assert ports_reflect(inst) and int(inst.delay.min()) >= 1 and int(inst.occupancy.max()) > 1
    rev = inst.topology.reversed()
    twin = make_instance(rev, allgather(rev), inst.size_bytes, single_port=True)
    sched = greedy_schedule(twin, seed=seed)
    ag = verify(twin, sched)
    assert ag.ok and ag.makespan_slots is not None
    rs = verify(inst, reverse_schedule(twin, sched))
    assert rs.ok, rs.violations[:2]
    assert rs.makespan_slots is not None and rs.makespan_slots <= ag.makespan_slots


@pytest.mark.parametrize("seed", range(10))
def test_outages_reflected_about_the_horizon_give_a_valid_schedule(seed: int) -> None:
    """The outage of ``a -> b`` in slot ``x`` is one of ``b -> a`` in ``D - delta - 1 - x``
    (:func:`reflect_outages`). For the first horizon ``D`` at which the greedy AllGather on the
    reversed topology with the reflected outages ends by ``D``, its reflection about ``D``
    (no shift) respects every outage of the original instance, and ends by ``D``."""
    inst = _uniform_delay_instance(seed, with_outages=True)
    rev = inst.topology.reversed()
    twin = make_instance(rev, allgather(rev), inst.size_bytes, single_port=True)
    horizon = verify(twin, greedy_schedule(twin, seed=seed)).makespan_slots
    assert horizon is not None
    for _ in range(40):
        mapped = reflect_outages(inst, twin, horizon)
        sched = greedy_schedule(mapped, seed=seed)
        need = verify(mapped, sched).makespan_slots
        assert need is not None
        if need <= horizon:
            break
        horizon += 1
    else:
        pytest.fail("no horizon up to 40 slots beyond the first fits")
    report = verify(inst, reverse_schedule(mapped, sched, horizon))
    assert report.ok, report.violations[:2]
    assert report.makespan_slots is not None and report.makespan_slots <= horizon


def test_retime_repairs_a_reflection_that_breaks_single_port_and_an_outage() -> None:
    """Reduce to 0 on the star 1 -> 0 (alpha 0), 2 -> 0 (alpha 2.1 us: ``delta`` 1 at 256 KB),
    single-port. Reversed Broadcast from 0: 0->2 in slot 0, 0->1 in slot 1, makespan 2 (0->2
    has ``L = 2``). Reflected about D = 2: 2->0 in slot 2-0-2 = 0 and 1->0 in 2-1-1 = 0: node 0
    receives twice in slot 0. With an outage of 2->0 in slot 1 as well, :func:`retime` (slot
    order, ties by sender) keeps 1->0 in slot 0 and moves 2->0 past slot 0 (0's receive port)
    and slot 1 (the outage) to slot 2, landing at 4: makespan 4."""
    topo = make_topology("star-in", range(3), directed_links=[(1, 0, 50.0, 0.0), (2, 0, 50.0, 2.1),
                                                               (0, 1, 50.0, 0.0), (0, 2, 50.0, 2.1)])
    inst = make_instance(topo, reduce(topo, root=0), "256KB", single_port=True, outages=[(2, 0, 1)])
    assert inst.delay.tolist() == [0, 1, 0, 1] and not ports_reflect(inst)
    rev = topo.reversed()
    twin = make_instance(rev, broadcast(rev, root=0), "256KB", single_port=True)
    bc = Schedule((Send(0, (0, 0), 0, 2), Send(1, (0, 0), 0, 1)))
    assert verify(twin, bc).makespan_slots == 2
    reflected = reverse_schedule(twin, bc)
    assert set(reflected.sends) == {Send(0, (0, 0), 2, 0, True), Send(0, (0, 0), 1, 0, True)}
    assert {v.kind for v in verify(inst, reflected).violations} == {"single-port-receive"}
    fixed = retime(inst, reflected)
    assert set(fixed.sends) == {Send(0, (0, 0), 1, 0, True), Send(2, (0, 0), 2, 0, True)}
    assert verify(inst, fixed).makespan_slots == 4 and numeric_replay(inst, fixed)
    _check(inst, solve(inst, "heuristic", QUICK).schedule)


# --------------------------------------------------------------------------- duality
def three_gpus() -> Topology:
    """0->1 and 1->0 at 50 GB/s, 0->2 at 25 GB/s with alpha 5 us, 1->2 at 25 GB/s, 2->0 at
    50 GB/s with alpha 5 us (no 2->1, no 2<-1 the other way)."""
    return make_topology("three-sp", range(3), directed_links=[
        (0, 1, 50.0, 0.0), (0, 2, 25.0, 5.0), (1, 0, 50.0, 0.0), (1, 2, 25.0, 0.0), (2, 0, 50.0, 5.0)])


def test_single_port_reducescatter_optimum_differs_from_the_reversed_allgather() -> None:
    r"""ReduceScatter, 1 MB on three GPUs, single-port: optimum 4 slots; AllGather on the
    reversed topology: 3. Without single-port both are 3.

    Slots: chunk 1e6/3 B, tau = chunk / 50 GB/s = 6.67 us; alpha 5 us is 0.75 slot, so
    ``delta = 1``; 25 GB/s links take ``l = 2``. (l, delta, L): 0->1 (1,0,1), 0->2 (2,1,3),
    1->0 (1,0,1), 1->2 (2,0,2), 2->0 (1,1,2).

    AllGather on the reversed links 1->0 (L 1), 2->0 (2,1,3), 0->1 (L 1), 2->1 (2,0,2), 0->2
    (1,1,2), in 3 slots: 0 sends chunk 0 to 2 in slot 0 and to 1 in slot 2, chunk 1 (from 1,
    1->0 in slot 0) to 2 in slot 1; 2 sends chunk 2 to 1 in slot 0 (slots 0-1), 1 forwards it
    to 0 in slot 2. 3 is optimal: 2 is reached only by 0->2, so 0 sends three chunks, one per
    slot, and the last (slot >= 2) lands at >= 3.

    Its reflection breaks single-port: 1->0 (delta 0) and 2->0 (delta 1) are reflected by
    different constants, and node 0 receives chunk 1 from 2 and chunk 0 from 1, both in slot 0.
    No ReduceScatter ends by slot 3: 2 leaves only by 2->0, so its parts of chunks 0 and 1 go
    there in two slots s0 != s1 (single-port); chunk 1 then needs 0->1 after s1 + 2, landing by
    3 only if s1 = 0, so s0 = 1 (lands at 3). 1's part of chunk 0 must reach 0 by 3: 1->0 in
    slots 0..2, not in 0 or 1 (0 receives from 2 then), so in slot 2 (1->2->0 takes 4). Chunk 2
    needs 0's and 1's parts at 2: direct 0->2 (slots 0-1) and 1->2 (slots 0-1 or 1-2) overlap
    at 2's receive port, 1->0->2 takes 4, so 0->1 in slot 0 and 1->2 in slots 1-2, while 1
    must send on 1->0 in slot 2: a port conflict. So 4; the combining model proves the same
    (certified), the paper's MILP proves 3 on the twin.
    """
    from ccplan.model.combining import solve_exact_combining

    topo = three_gpus()
    rev = topo.reversed()
    for single_port, rs_opt in ((True, 4), (False, 3)):
        inst = make_instance(topo, reducescatter(topo), "1MB", single_port=single_port)
        assert inst.occupancy.tolist() == [1, 2, 1, 2, 1]
        assert inst.latency.tolist() == [1, 3, 1, 2, 2]
        twin = make_instance(rev, allgather(rev), "1MB", single_port=single_port)
        ag = solve(twin, "milp", SolveOptions(time_limit=30, workers=1))
        assert ag.status == "optimal" and ag.verified and ag.makespan_slots == 3
        exact = solve_exact_combining(inst, SolveOptions(time_limit=30, workers=1))
        assert exact.status == "optimal" and exact.makespan == rs_opt
        assert exact.schedule is not None and verify(inst, exact.schedule).makespan_slots == rs_opt
        assert ports_reflect(inst) == (not single_port)
        assert _check(inst, solve(inst, "heuristic", QUICK).schedule) >= rs_opt

    hand = Schedule((
        Send(0, (0, 0), 0, 2), Send(2, (0, 0), 0, 1), Send(0, (1, 0), 1, 0), Send(1, (1, 0), 0, 2),
        Send(0, (2, 0), 2, 1), Send(2, (2, 0), 1, 0),
    ))
    twin = make_instance(rev, allgather(rev), "1MB", single_port=True)
    assert verify(twin, hand).ok and verify(twin, hand).makespan_slots == 3
    inst = make_instance(topo, reducescatter(topo), "1MB", single_port=True)
    broken = verify(inst, reverse_schedule(twin, hand))
    assert [(v.kind, v.slot) for v in broken.violations] == [("single-port-receive", 0)]


@pytest.mark.parametrize("kind", list(KINDS))
def test_five_gpu_single_port_topology_combining(kind: str) -> None:
    """The 5-GPU topology of tests/data/five_gpu_single_port.json (2<->3 with alpha 2.1 us,
    the others 0: unequal delays at hub 3), single-port, 1 MB: a verified schedule from
    `heuristic`. ReduceScatter needs at least 36 slots of hub 3's receive port (l = 4 on the
    16 GB/s links, 2 on 1->3): 0 sends its parts of chunks 1-4 over 0->3 (4 x 4), 1 over 1->3
    (4 x 2), and the parts of chunks 0, 1, 3 from 2 and 4 enter 3 by 2->3 or 4->3 (3 x 4,
    at best summed at 2 first); the analytic bounds ignore ports (17 slots)."""
    from tests.test_cutaware_reach import _five

    topo = _five()
    inst = make_instance(topo, KINDS[kind](topo, chunks=1), "1MB", single_port=True)
    assert not ports_reflect(inst)
    makespan = _check(inst, solve(inst, "heuristic", QUICK).schedule)
    if kind == "reducescatter":
        assert makespan >= 36
