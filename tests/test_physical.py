"""The physical lower bound (ccplan.physical): closed forms, exact cuts, independence from the
slot model, and validity against exact slot optima and their alpha-beta replays.

Validity tests compare with ``D * tau`` at ``alpha_threshold = 0`` (docs/model.md, "The
physical bound": a positive threshold drops small alphas from the slots) and with the
simulated alpha-beta time of the same schedules; cut-through is compared where every hop out
of a switch fits one slot (``l = 1``), the condition under which TE-CCL's cut-through slot
model stays physical.
"""

from __future__ import annotations

import itertools
import math
import random
import time

import numpy as np
import pytest

from ccplan.contract import SolveOptions
from ccplan.instances import Instance, Topology, make_collective, make_instance, make_topology
from ccplan.instances.builtin import amd, dgx1, dgx2, hypercube, ndv2, star_switch, torus2d
from ccplan.physical import PhysicalBound, physical_bound
from ccplan.pipeline.solve import solve
from ccplan.schedule.simulate import simulate
from tests.helpers import full_topology, ring_topology, star_topology

GB = 1e9
KBUS = 1e3  # bytes per microsecond per GB/s


def _inst(topo: Topology, kind: str, size: str | float = "1GB", chunks: int = 1, **kw) -> Instance:  # type: ignore[no-untyped-def]
    root = kw.pop("root", None)
    dests = kw.pop("dests", None)
    return make_instance(topo, make_collective(kind, topo, chunks=chunks, root=root, dests=dests), size, **kw)


def _close(a: float, b: float, rel: float = 1e-6) -> bool:
    return math.isclose(a, b, rel_tol=rel)


# --------------------------------------------------------------------------- (a) closed forms
@pytest.mark.parametrize("n", [3, 5, 8])
def test_unidirectional_ring_allgather(n: int) -> None:
    """Ring i -> i+1 at b = 50 GB/s, alpha 0. The cut S = V \\ {v} has one in-link: N-1
    shards of M/N through b, so T* = (N-1)/N * M / b (NCCL's ring). No larger cut exists: any
    S that leaves v out has |S| shards and at least... the ring's arc leaving the run of S
    before v carries at most those shards, and the formula's max is over S = V \\ {v}."""
    inst = _inst(ring_topology(n, bidirectional=False, alpha=0.0), "allgather")
    pb = physical_bound(inst)
    assert _close(pb.parts["throughput"], (n - 1) / n * GB / (50 * KBUS))
    assert _close(pb.us, pb.parts["throughput"])  # alpha = 0: windows change nothing


@pytest.mark.parametrize("n", [3, 6])
def test_bidirectional_ring_allgather(n: int) -> None:
    """Both directions at b: V \\ {v} receives on two links, T* = (N-1)/N * M / (2b)."""
    inst = _inst(ring_topology(n, bidirectional=True, alpha=0.0), "allgather")
    assert _close(physical_bound(inst).us, (n - 1) / n * GB / (2 * 50 * KBUS))


def test_full_mesh_allgather() -> None:
    """N = 5 GPUs, b per ordered pair: V \\ {v} receives on N-1 links, (N-1) M/N / ((N-1) b)
    = M / (N b)."""
    inst = _inst(full_topology(5, alpha=0.0), "allgather")
    assert _close(physical_bound(inst).us, GB / (5 * 50 * KBUS))


@pytest.mark.parametrize("n", [4, 8])
def test_star_through_one_switch(n: int) -> None:
    """Per-GPU up/down b to one switch: V \\ {v} (switch included) enters v on one link:
    T* = (N-1)/N * M / b, the nccl-tests busBw definition; Broadcast M / b; AllToAll the
    same as AllGather ((N-1) shards of M/N into each GPU)."""
    topo = star_topology(n, alpha=0.0)
    ag = (n - 1) / n * GB / (50 * KBUS)
    assert _close(physical_bound(_inst(topo, "allgather")).us, ag)
    assert _close(physical_bound(_inst(topo, "alltoall")).us, ag)
    assert _close(physical_bound(_inst(topo, "broadcast", root=0)).us, GB / (50 * KBUS))


def test_d_regular_hypercube() -> None:
    """Hypercube of dimension 3 (d = 3, b = 50 GB/s), alpha 0: T* = (N-1)/N * M / (d b)
    (the cut V \\ {v}); ReduceScatter the same on the reversed (identical) graph."""
    topo = hypercube(3, alpha_us=0.0)
    expected = 7 / 8 * GB / (3 * 50 * KBUS)
    assert _close(physical_bound(_inst(topo, "allgather")).us, expected)
    assert _close(physical_bound(_inst(topo, "reducescatter")).us, expected)


def test_allreduce_nvswitch_h100() -> None:
    """8 GPUs, 450 GB/s up and down to one switch, 1 GB. Without in-switch reduction every
    byte needs 2 (N-1) receptions at GPUs whose in-links total 8 x 450 GB/s:
    2 x 7 x 1 GB / 3600 GB/s = 2 x 7/8 x 1 GB / 450 GB/s = 3,888.9 us. With in-switch
    reduction only the cuts remain: every GPU receives the whole buffer once, M / 450 GB/s =
    2,222.2 us (plus the alphas of one path in the windowed part)."""
    topo = star_switch(8, bandwidth_GBps=450.0)
    inst = _inst(topo, "allreduce")
    pb = physical_bound(inst)
    assert pb.binding == "gossip"
    assert _close(pb.us, 2 * 7 / 8 * GB / (450 * KBUS))
    assert abs(pb.us - 3888.89) < 0.01
    reduced = physical_bound(inst, switch_reduce=True)
    assert "gossip" not in reduced.parts or reduced.parts["gossip"] < pb.us
    assert GB / (450 * KBUS) <= reduced.us < GB / (450 * KBUS) + 2


def test_rooted_and_reduce_closed_forms() -> None:
    """Line 0 - 1 - 2 at b = 50 GB/s both ways, alpha 0, 1 GB.
    Broadcast from 0: every byte crosses 0->1: M / b. Reduce to 0: every byte of 2's and 1's
    contributions enters 0 on its one in-link: M / b. Gather to 0: shards of 1 and 2
    (2 x M/3) enter 0 on one link: 2/3 M / b. Scatter from 0: 2 x M/3 leave 0 on one link."""
    topo = make_topology("line3", range(3), duplex_links=[(0, 1, 50.0, 0.0), (1, 2, 50.0, 0.0)])
    b = 50 * KBUS
    assert _close(physical_bound(_inst(topo, "broadcast", root=0)).us, GB / b)
    assert _close(physical_bound(_inst(topo, "reduce", root=0)).us, GB / b)
    assert _close(physical_bound(_inst(topo, "gather", root=0)).us, 2 / 3 * GB / b)
    assert _close(physical_bound(_inst(topo, "scatter", root=0)).us, 2 / 3 * GB / b)


def test_latency_part_is_alpha_plus_transfer() -> None:
    """Unidirectional ring of 4 with alpha 5 us at 1 KB: GPU 1's shard (250 B) reaches GPU 0
    over 3 hops, dist = 15 us, plus 250 B / 50 GB/s = 0.005 us on the one path (maxflow 50):
    latency = 15.005 us; the windowed part is at least that much for the destination."""
    inst = _inst(ring_topology(4, alpha=5.0), "allgather", size="1KB")
    pb = physical_bound(inst)
    assert _close(pb.parts["latency"], 15.0 + 250 / (50 * KBUS))
    assert pb.us >= pb.parts["latency"]


# --------------------------------------------------------------------------- exact cuts
def _brute_allgather(topo: Topology, size: float) -> float:
    """ForestColl's formula by enumerating every node set S that leaves a GPU out."""
    ids = list(topo.node_ids)
    gpus = set(topo.gpus)
    n = len(gpus)
    best = 0.0
    for r in range(1, len(ids)):
        for s in itertools.combinations(ids, r):
            inside = set(s)
            k = len(inside & gpus)
            if k == 0 or gpus <= inside:
                continue
            out = sum(lk.bandwidth_GBps for lk in topo.links if lk.src in inside and lk.dst not in inside)
            best = max(best, math.inf if out == 0 else size / n * k / (out * KBUS))
    return best


def _random_topology(rng: random.Random, switches: int = 1, alpha: bool = True) -> Topology:
    n_gpu = rng.randint(2, 4)
    n = n_gpu + rng.randint(0, switches)
    order = list(range(n))
    rng.shuffle(order)
    pairs = {(order[i], order[(i + 1) % n]) for i in range(n)}
    for _ in range(rng.randint(0, 2 * n)):
        a, b = rng.sample(range(n), 2)
        pairs.add((a, b))
    alphas = (0.0, 0.3, 1.5, 4.0) if alpha else (0.0,)
    links = [(a, b, rng.choice((12.5, 25.0, 50.0)), rng.choice(alphas)) for a, b in sorted(pairs)]
    return make_topology("rand", range(n_gpu), directed_links=links, switches=range(n_gpu, n))


@pytest.mark.parametrize("seed", range(12))
def test_throughput_equals_cut_enumeration(seed: int) -> None:
    """The parametric max-flow finds the maximum over all cuts (enumerated here)."""
    rng = random.Random(seed)
    topo = _random_topology(rng, switches=2)
    inst = _inst(topo, "allgather", size="1MB")
    expected = _brute_allgather(topo, 1e6)
    assert _close(physical_bound(inst).parts["throughput"], expected, rel=1e-6)


# --------------------------------------------------------------------------- (c) independence
def test_independent_of_chunks_tau_and_switch_model() -> None:
    """Same value for C in 1..4, every tau rule, both switch models and any alpha threshold:
    only topology, collective and size enter the bound."""
    rng = random.Random(7)
    for kind in ("allgather", "alltoall", "broadcast", "scatter", "gather"):
        topo = star_topology(4, alpha=0.7) if kind != "gather" else _random_topology(rng)
        values = set()
        for chunks, (rule, tau), model, thr in itertools.product(
            (1, 2, 3, 4),
            (("fastest", None), ("slowest", None), ("explicit", 0.37)),
            ("store-and-forward", "cut-through"),
            (0.0, 0.1),
        ):
            inst = _inst(
                topo,
                kind,
                "12MB",
                chunks=chunks,
                root=0,
                tau_rule=rule,
                tau_us=tau,
                alpha_threshold=thr,
                switch_model=model,
            )
            values.add(physical_bound(inst).us)
        assert len(values) == 1, (kind, values)
    for kind in ("allreduce", "reducescatter", "reduce"):
        topo = _random_topology(rng)
        got = {
            physical_bound(_inst(topo, kind, "12MB", chunks=c, root=0, tau_rule=rule)).us
            for c in (1, 2, 3, 4)
            for rule in ("fastest", "slowest")
        }
        assert len(got) == 1, (kind, got)


def test_symmetry_gives_the_same_value() -> None:
    """8 x 8 torus (64 GPUs: symmetry is used) with and without the orbit shortcut."""
    topo = torus2d(8, 8)
    for kind in ("allgather", "reducescatter"):
        inst = _inst(topo, kind)
        fast = physical_bound(inst)
        slow = physical_bound(inst, symmetry=False)
        assert any("1 GPU orbit" in n for n in fast.notes)
        assert _close(fast.us, slow.us, rel=1e-9)
        assert _close(fast.parts["throughput"], 63 / 64 * GB / (4 * 50 * KBUS))


# --------------------------------------------------------------------------- (b) validity
def _cut_through_is_physical(inst: Instance) -> bool:
    """Every hop out of a cut-through switch fits one slot (``l = 1``)."""
    if inst.switch_model != "cut-through":
        return True
    return bool(np.all(inst.occupancy[inst.cut_through_links] == 1))


_MOVEMENT = ("allgather", "alltoall", "broadcast", "multicast", "gather", "scatter")


def _validity_cases() -> list[tuple[int, Instance]]:
    cases = []
    rng = random.Random(2024)
    while len(cases) < 18:
        seed = len(cases)
        topo = _random_topology(rng)
        kind = rng.choice(_MOVEMENT)
        gpus = list(topo.gpus)
        rule = rng.choice(("fastest", "slowest", "explicit"))
        inst = _inst(
            topo,
            kind,
            rng.choice(("64KB", "1MB")),
            chunks=rng.choice((1, 2, 3, 4)) if kind in ("broadcast", "multicast") else rng.choice((1, 2)),
            root=rng.choice(gpus),
            dests=rng.sample(gpus, rng.randint(1, len(gpus))) if kind == "multicast" else None,
            tau_rule=rule,
            tau_us=None if rule != "explicit" else rng.choice((2.0, 7.5, 20.0)),
            alpha_threshold=0.0,
            switch_model=rng.choice(("store-and-forward", "cut-through"))
            if topo.switches
            else "store-and-forward",
        )
        if _cut_through_is_physical(inst):
            cases.append((seed, inst))
    return cases


@pytest.mark.parametrize("case", _validity_cases(), ids=lambda c: str(c[0]))
def test_bound_below_exact_optima_and_their_replays(case: tuple[int, Instance]) -> None:
    """physical_bound <= D* tau (proven optimum, alpha_threshold 0) and <= the alpha-beta
    replay of the optimal schedule; the schedule passes the verifier."""
    _, inst = case
    result = solve(inst, "milp", SolveOptions(time_limit=20, workers=1))
    assert result.verified
    pb = physical_bound(inst)
    assert pb.us <= result.makespan_slots * inst.tau_us * (1 + 1e-9), (
        inst.describe(),
        pb,
        result.makespan_slots,
    )
    sim = simulate(inst, result.schedule)
    assert pb.us <= sim.completion_us * (1 + 1e-9) + 1e-9, (inst.describe(), pb, sim.completion_us)
    if result.status != "optimal":
        pytest.skip("not proven optimal within the time limit (still checked against the schedule)")


def _combining_cases() -> list[tuple[int, Instance, bool]]:
    cases = []
    rng = random.Random(99)
    for seed in range(12):
        topo = _random_topology(rng, switches=1)
        kind = rng.choice(("allreduce", "allreduce", "reducescatter", "reduce"))
        rule = rng.choice(("fastest", "slowest", "explicit"))
        inst = _inst(
            topo,
            kind,
            rng.choice(("256KB", "1MB")),
            chunks=1 if kind != "reduce" else rng.choice((1, 2, 3)),
            root=0,
            tau_rule=rule,
            tau_us=None if rule != "explicit" else rng.choice((5.0, 20.0)),
            alpha_threshold=0.0,
        )
        cases.append((seed, inst, bool(topo.switches)))
    return cases


@pytest.mark.parametrize("case", _combining_cases(), ids=lambda c: str(c[0]))
def test_combining_bound_below_exact_optima(case: tuple[int, Instance, bool]) -> None:
    """The same for ReduceScatter / Reduce / AllReduce with ``exact-combining``. The slot
    model lets switches reduce, so topologies with a switch are held to the
    ``switch_reduce=True`` bound; switchless ones to both."""
    _, inst, has_switch = case
    result = solve(inst, "exact-combining", SolveOptions(time_limit=20, workers=1))
    assert result.verified
    slotted = result.makespan_slots * inst.tau_us
    for flag in (True,) if has_switch else (True, False):
        pb = physical_bound(inst, switch_reduce=flag)
        assert pb.us <= slotted * (1 + 1e-9), (inst.describe(), flag, pb, result.makespan_slots)
        sim = simulate(inst, result.schedule)
        assert pb.us <= sim.completion_us * (1 + 1e-9) + 1e-9
    if result.status != "optimal":
        pytest.skip("not proven optimal within the time limit (still checked against the schedule)")


def test_cut_through_slot_model_can_beat_physics_when_a_switch_hop_spans_slots() -> None:
    """Why cut-through comparisons need ``l = 1`` out of switches. Star of 3 GPUs, up-links
    50 GB/s, down-links 25 GB/s, alpha 0, C = 1, tau from the fastest link (l = 2 down).
    Each GPU must receive 2 chunks of mu on its 25 GB/s down-link: physically >= 4 mu / 50.
    The cut-through slot model starts them at slots 1 and 3 (usable at 1 + 0 and 3 + 0,
    delta = 0), i.e. D = 3 slots = 3 mu / 50: a slot-model artefact, not a bound violation."""
    links = [(g, 3, 50.0, 0.0) for g in range(3)] + [(3, g, 25.0, 0.0) for g in range(3)]
    topo = make_topology("star-asym", range(3), directed_links=links, switches=[3])
    inst = _inst(topo, "allgather", "3MB", alpha_threshold=0.0, switch_model="cut-through")
    assert not _cut_through_is_physical(inst)
    result = solve(inst, "milp", SolveOptions(time_limit=20, workers=1))
    assert result.status == "optimal" and result.verified
    pb = physical_bound(inst)
    assert _close(pb.us, 2e6 / (25 * KBUS))  # 2 shards of 1 MB through 25 GB/s
    assert result.makespan_slots * inst.tau_us < pb.us
    assert simulate(inst, result.schedule).completion_us >= pb.us * (1 - 1e-9)


# --------------------------------------------------------------------------- (d) built-in targets
def _ag(topo: Topology) -> PhysicalBound:
    return physical_bound(_inst(topo, "allgather"))


@pytest.mark.parametrize(
    ("topo", "expected"),
    [
        # V \ {v}: 7 shards of 125 MB into 150 GB/s (2 x 50 + 2 x 25 ... = 6 NVLinks): 5,833.3 us
        (dgx1(), 7 * 125e6 / (150 * KBUS)),
        # one chassis' 8 shards of 62.5 MB leave through its one 12.5 GB/s NIC link
        (ndv2(2), 8 * 62.5e6 / (12.5 * KBUS)),
        # three chassis and the switch: 24 shards of 31.25 MB enter the fourth chassis on one
        # 12.5 GB/s link (switch -> its GPU 1)
        (ndv2(4), 24 * 31.25e6 / (12.5 * KBUS)),
        # an odd GPU (no NIC in-link): 31 shards of 31.25 MB through its 125 GB/s switch port
        (dgx2(2), 31 * 31.25e6 / (125 * KBUS)),
        # all but a 200 GB/s xGMI pair: 14 shards of 62.5 MB into the pair's other links,
        # 2 x (350 - 200) GB/s
        (amd(1), 14 * 62.5e6 / (2 * 150 * KBUS)),
        # all but such a pair and its NIC switch: 30 shards of 31.25 MB through 2 x 150 GB/s
        # xGMI and the 25 GB/s uplink of the NIC switch
        (amd(2), 30 * 31.25e6 / (325 * KBUS)),
    ],
    ids=["dgx1", "ndv2x2", "ndv2x4", "dgx2x2", "amdx1", "amdx2"],
)
def test_builtin_allgather_targets(topo: Topology, expected: float) -> None:
    """AllGather 1 GB: the bound is the exact cut optimum (hand-derived cut) within 0.5 %
    and takes well under a second (budget 20 s here: the CI machine is shared)."""
    start = time.perf_counter()
    pb = _ag(topo)
    seconds = time.perf_counter() - start
    assert _close(pb.parts["throughput"], expected, rel=1e-6)
    assert expected <= pb.us <= expected * 1.005
    assert seconds < 20


@pytest.mark.slow
def test_torus_64x64_allgather_within_a_minute() -> None:
    """64 x 64 torus, 50 GB/s per link, 4 links in: (N-1)/N * M / (4 b) = 4,998.8 us."""
    inst = _inst(torus2d(64, 64), "allgather")
    start = time.perf_counter()
    pb = physical_bound(inst)
    assert time.perf_counter() - start < 60
    expected = 4095 / 4096 * GB / (4 * 50 * KBUS)
    assert _close(pb.parts["throughput"], expected)
    assert expected <= pb.us <= expected * 1.005


def test_physical_bound_validates() -> None:
    with pytest.raises(Exception, match="maximum"):
        PhysicalBound(us=2.0, parts={"latency": 1.0}, binding="latency")
    with pytest.raises(Exception, match="unknown part"):
        PhysicalBound(us=1.0, parts={"nope": 1.0}, binding="nope")
    pb = PhysicalBound(us=1.0, parts={"latency": 1.0}, binding="latency")
    assert pb.to_dict() == {"us": 1.0, "parts": {"latency": 1.0}, "binding": "latency", "notes": []}
