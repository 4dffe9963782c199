"""The Pyomo MILP (1)-(14) of 000_*.txt, solved with HiGHS.

Every expected optimum below is derived by hand in the test's docstring (a lower bound
argument plus a schedule meeting it); the solver's schedule must pass the independent
verifier with makespan equal to the objective. All links have alpha = 0 and the slot is the
fastest link's transfer time, so a 50 GB/s link has l = L = 1 and a 25 GB/s link l = L = 2.
"""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import pyomo.environ as pyo
import pytest

from ccplan.errors import ValidationError
from ccplan.instances import Instance, make_collective, make_instance, make_topology
from ccplan.model.highs import HighsOutcome, solve_with_highs
from ccplan.model.milp import (
    CUT_COMPONENTS,
    PAPER_COMPONENTS,
    SINGLE_PORT_COMPONENTS,
    build_model,
    hint_from_schedule,
    model_index,
    model_size,
    schedule_from_model,
    write_model,
)
from ccplan.schedule import Schedule, verify

# --------------------------------------------------------------------------- instances


def line3(kind: str = "allgather", chunks: int = 1, root: int = 0, **options: object) -> Instance:
    """GPUs 0 - 1 - 2, full duplex, 50 GB/s (L = 1)."""
    topo = make_topology("line3", [0, 1, 2], duplex_links=[(0, 1, 50, 0), (1, 2, 50, 0)])
    coll = make_collective(kind, topo, chunks=chunks, root=root)
    return make_instance(topo, coll, "1MB", **options)  # type: ignore[arg-type]


def ring4() -> Instance:
    """Unidirectional ring 0 -> 1 -> 2 -> 3 -> 0, AllGather C = 1."""
    topo = make_topology("ring4", range(4), directed_links=[(i, (i + 1) % 4, 50, 0) for i in range(4)])
    return make_instance(topo, make_collective("allgather", topo), "1MB")


def star3() -> Instance:
    """GPUs 0, 1, 2 each with a duplex link to switch 3 (store and forward)."""
    topo = make_topology(
        "star3", [0, 1, 2], duplex_links=[(g, 3, 50, 0) for g in range(3)], switches=[3]
    )
    return make_instance(topo, make_collective("allgather", topo), "1MB")


def hetero_line(chunks: int = 2) -> Instance:
    """0 -(50 GB/s, L=1)- 1 -(25 GB/s, l=L=2)- 2, Broadcast from 0."""
    topo = make_topology("hetero", [0, 1, 2], duplex_links=[(0, 1, 50, 0), (1, 2, 25, 0)])
    return make_instance(topo, make_collective("broadcast", topo, chunks=chunks, root=0), "1MB")


DGX1_FAST = [(0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7)]
DGX1_SLOW = [(0, 2), (0, 3), (1, 2), (1, 5), (3, 7), (4, 6), (4, 7), (5, 6)]


def dgx1() -> Instance:
    """DGX1 hybrid cube-mesh (reference/teccl.md 1.1): 50 and 25 GB/s NVLinks, AllGather C=1."""
    links = [(a, b, 50, 0) for a, b in DGX1_FAST] + [(a, b, 25, 0) for a, b in DGX1_SLOW]
    topo = make_topology("dgx1", range(8), duplex_links=links)
    return make_instance(topo, make_collective("allgather", topo), "1MB")


def solve(instance: Instance, horizon: int, **kwargs: object) -> tuple[HighsOutcome, pyo.ConcreteModel]:
    model = build_model(instance, horizon, **kwargs)  # type: ignore[arg-type]
    return solve_with_highs(model, time_limit=60), model


def check_solution(instance: Instance, model: pyo.ConcreteModel, out: HighsOutcome) -> int:
    """The model's schedule verifies and its makespan equals the objective."""
    assert out.status == "optimal"
    assert out.objective is not None
    report = verify(instance, schedule_from_model(model, instance))
    assert report.ok, report.violations
    assert report.makespan_slots == round(out.objective)
    return round(out.objective)


# --------------------------------------------------------------------------- hand optima


def test_line3_allgather() -> None:
    """Chunk of 0 needs two hops to reach 2, so D >= 2. Slot 0: 0->1 c0, 2->1 c2, 1->0 c1,
    1->2 c1; slot 1: 1->2 c0, 1->0 c2 completes at 2. Optimum 2."""
    inst = line3()
    out, model = solve(inst, 4)
    assert check_solution(inst, model, out) == 2


def test_ring4_allgather() -> None:
    """Unidirectional ring: chunk s reaches s-1 only after 3 hops, D >= 3. The ring algorithm
    (slot t: node i sends chunk (i - t) mod 4 to i+1, one chunk per link per slot) completes
    at 3. Optimum 3."""
    inst = ring4()
    out, model = solve(inst, 5)
    assert check_solution(inst, model, out) == 3


def test_star_through_switch() -> None:
    """Each GPU receives 2 chunks over its single in-link from the switch; the switch holds
    nothing before slot 1, so sends on switch->g start at >= 1 and the second arrives at
    >= 3: D >= 3. Slot 0 all GPUs send to the switch; slots 1 and 2 the switch sends each
    GPU one missing chunk per slot: completes at 3. Optimum 3."""
    inst = star3()
    out, model = solve(inst, 5)
    assert check_solution(inst, model, out) == 3


def test_dgx1_allgather_one_chunk() -> None:
    """Lower bound 3 twice: (a) latency: 0 -> 6 has no path shorter than 3 (0->2->6 is 2+1,
    0->4->6 is 1+2, via 1 or 3 needs three 1-hops 0->1->3->7->6 = 4); (b) ingress: a GPU
    needs 7 chunks over 2 fast in-links (1 chunk/slot, arrivals from slot 1) and 2 slow ones
    (l = 2, arrivals at 2, 4, ...): by D = 2 at most 2*2 + 2*1 = 6 < 7. The model's schedule
    meets 3 and is checked by the verifier, so the optimum is 3."""
    inst = dgx1()
    out, model = solve(inst, 4)
    assert check_solution(inst, model, out) == 3


def test_broadcast_pipeline() -> None:
    """Broadcast of 3 chunks from 0 on the line: link 0->1 carries one chunk per slot, so the
    last one leaves 0 at >= 2, reaches 1 at >= 3 and 2 at >= 4: D >= 4. Pipelining (chunk i:
    0->1 at slot i, 1->2 at i+1) completes at 4; store-and-forward of the whole block would
    need 6. Optimum 4."""
    inst = line3("broadcast", chunks=3)
    out, model = solve(inst, 7)
    assert check_solution(inst, model, out) == 4


def test_sliding_window_capacity_for_slow_link() -> None:
    """(7) with l > 1: 1->2 has l = 2, so its two sends occupy disjoint 2-slot windows. The
    first can start at 1 (chunk reaches 1 at 1), the second at >= 3, arriving at 5: D >= 5,
    met by 0->1 at 0 and 1, 1->2 at 1 and 3. (The typeset per-start-slot (7) would allow
    1->2 at 1 and 2 and give 4, overloading the link.) Optimum 5."""
    inst = hetero_line()
    out, model = solve(inst, 7)
    assert check_solution(inst, model, out) == 5


@pytest.mark.parametrize(("single_port", "expected"), [(False, 1), (True, 2)])
def test_single_port(single_port: bool, expected: int) -> None:
    """Broadcast from the middle GPU 1 of the line: sending to 0 and 2 in slot 0 gives 1; with
    single_port (001_*.txt) node 1 sends one chunk per slot, so the second send leaves at
    >= 1 and arrives at 2."""
    inst = line3("broadcast", root=1, single_port=single_port)
    out, model = solve(inst, 3)
    assert check_solution(inst, model, out) == expected
    assert hasattr(model, "single_port_send") == single_port


def test_outage_delays_the_first_hop() -> None:
    """Broadcast from 0 on the line with link 0->1 down in slot 0 (omega = 0): 0->1 starts at
    >= 1, reaches 1 at 2 and 2 at 3 (without the outage: 2). Optimum 3, in both builds."""
    inst = line3("broadcast", outages=[(0, 1, 0)])
    for dense in (False, True):
        out, model = solve(inst, 4, dense=dense)
        assert check_solution(inst, model, out) == 3


def test_capacity_two() -> None:
    """Broadcast of 3 chunks from 0 with omega = 2: one chunk must start on 0->1 at >= 1, so it
    reaches 2 at >= 3; slot 0 sends two chunks, slot 1 the third plus the two onward. 3."""
    inst = line3("broadcast", chunks=3, capacity=2)
    out, model = solve(inst, 5)
    assert check_solution(inst, model, out) == 3


# --------------------------------------------------------------------------- build variants

VARIANTS = [
    pytest.param(line3, 4, id="line3-allgather"),
    pytest.param(ring4, 5, id="ring4"),
    pytest.param(star3, 5, id="star3"),
    pytest.param(lambda: line3("broadcast", chunks=3), 6, id="broadcast-pipeline"),
    pytest.param(hetero_line, 7, id="hetero-l2"),
]


@pytest.mark.parametrize(("make", "horizon"), VARIANTS)
def test_sparse_and_dense_agree(make: object, horizon: int) -> None:
    """The sparse build only leaves out variables reachability fixes to zero: same optimum,
    and strictly fewer variables than the dense build."""
    inst = make()  # type: ignore[operator]
    sparse, m_sparse = solve(inst, horizon, dense=False, cuts=False)
    dense, m_dense = solve(inst, horizon, dense=True, cuts=False)
    assert check_solution(inst, m_sparse, sparse) == check_solution(inst, m_dense, dense)
    assert model_size(m_sparse)["variables"] < model_size(m_dense)["variables"]


@pytest.mark.parametrize(("make", "horizon"), VARIANTS)
def test_cuts_do_not_change_the_optimum(make: object, horizon: int) -> None:
    """cut_* rows are valid redundant rows: the optimum is the same with and without them
    (the lower bound passed is the trivial latency bound 1, which is valid everywhere)."""
    inst = make()  # type: ignore[operator]
    with_cuts, m1 = solve(inst, horizon, cuts=True, lower_bound=1)
    without, m2 = solve(inst, horizon, cuts=False)
    assert check_solution(inst, m1, with_cuts) == check_solution(inst, m2, without)
    assert all(hasattr(m1, name) for name in CUT_COMPONENTS)
    assert not any(hasattr(m2, name) for name in CUT_COMPONENTS)


@pytest.mark.parametrize("dense", [False, True])
def test_infeasible_horizon(dense: bool) -> None:
    """Line AllGather needs 2 slots (chunk 0 to node 2 is two hops); with H = 1 no schedule
    exists."""
    out, _ = solve(line3(), 1, dense=dense)
    assert out.status == "infeasible"
    assert out.objective is None


def test_dense_size_formula() -> None:
    """Dense line AllGather, H = 2: K = 3 chunks, |E| = 4 links with L = 1, |V| = 3, 6 demands.
    x: K*|E|*(H-L+1) = 24, y: K*|V|*(H+1) = 27, z: 6*(H+1) = 18, plus D: 70 variables."""
    size = model_size(build_model(line3(), 2, dense=True, cuts=False))
    assert size["variables"] == 70
    assert size["binaries"] == 69
    assert size["integers"] == 1


# --------------------------------------------------------------------------- components


def test_named_components() -> None:
    """One named component per equation, each with its equation number in the doc."""
    model = build_model(line3(single_port=True), 3, dense=True, lower_bound=2)
    for name in PAPER_COMPONENTS:
        comp = getattr(model, name)
        number = re.search(r"\d+", name)
        assert number is not None and comp.doc.startswith(f"({number.group()})"), name
    for name in SINGLE_PORT_COMPONENTS + CUT_COMPONENTS:
        assert getattr(model, name).doc
    assert "001_" in model.single_port_send.doc
    assert model_index(model).lower_bound == 2


def test_write_model(tmp_path: Path) -> None:
    """LP and MPS export with symbolic names; other suffixes are refused."""
    model = build_model(line3(), 3)
    for suffix in (".lp", ".mps"):
        path = write_model(model, tmp_path / f"m{suffix}")
        text = path.read_text()
        assert "c6_buffer" in text and "x(0_0_" in text
    with pytest.raises(ValidationError, match="suffix"):
        write_model(model, tmp_path / "m.txt")


def test_bad_arguments() -> None:
    with pytest.raises(ValidationError, match="horizon"):
        build_model(line3(), 0)
    with pytest.raises(ValidationError, match="lower_bound"):
        build_model(line3(), 3, lower_bound=-1)


# --------------------------------------------------------------------------- hints


def violated_rows(model: pyo.ConcreteModel, values: pyo.ComponentMap) -> list[str]:
    """Load ``values`` and return the names of rows whose body is out of its bounds."""
    for var, val in values.items():
        var.set_value(val)
    bad = []
    for con in model.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(con.body)
        if (con.lb is not None and body < con.lb - 1e-9) or (con.ub is not None and body > con.ub + 1e-9):
            bad.append(con.name)
    return bad


HAND_SCHEDULES = [
    pytest.param(
        line3,
        [((1, 0), 1, 0, 0), ((1, 0), 1, 2, 0), ((0, 0), 0, 1, 0), ((2, 0), 2, 1, 0),
         ((0, 0), 1, 2, 1), ((2, 0), 1, 0, 1)],
        2,
        id="line3",
    ),
    pytest.param(
        star3,
        [((0, 0), 0, 3, 0), ((1, 0), 1, 3, 0), ((2, 0), 2, 3, 0),
         ((1, 0), 3, 0, 1), ((2, 0), 3, 1, 1), ((0, 0), 3, 2, 1),
         ((2, 0), 3, 0, 2), ((0, 0), 3, 1, 2), ((1, 0), 3, 2, 2)],
        3,
        id="star3",
    ),
    pytest.param(
        hetero_line,
        [((0, 0), 0, 1, 0), ((0, 1), 0, 1, 1), ((0, 0), 1, 2, 1), ((0, 1), 1, 2, 3)],
        5,
        id="hetero",
    ),
]


@pytest.mark.parametrize(("make", "sends", "makespan"), HAND_SCHEDULES)
@pytest.mark.parametrize("dense", [False, True])
def test_hint_satisfies_every_row(make: object, sends: list, makespan: int, dense: bool) -> None:
    """The schedules of the hand derivations above, turned into complete assignments, satisfy
    every row (paper, cuts) of a model with a horizon two slots longer than needed."""
    inst = make()  # type: ignore[operator]
    schedule = Schedule.of(sends)
    assert verify(inst, schedule).makespan_slots == makespan
    model = build_model(inst, makespan + 2, dense=dense, cuts=True, lower_bound=makespan)
    values = hint_from_schedule(model, inst, schedule)
    all_vars = list(model.component_data_objects(pyo.Var))
    assert len(values) == len(all_vars) and all(v in values for v in all_vars)
    assert values[model.D] == makespan
    assert violated_rows(model, values) == []
    assert schedule_from_model(model, inst) == Schedule(schedule.sends, method="milp")


def test_hint_drops_sends_that_help_no_demand() -> None:
    """Multicast from 0 to {1} on the line: the extra copy 1 -> 2 helps no demand; the sparse
    build has no variable for it (2 is not a demander and forwards nowhere useful), the hint
    leaves it out and still satisfies every row."""
    topo = make_topology("line3", [0, 1, 2], duplex_links=[(0, 1, 50, 0), (1, 2, 50, 0)])
    coll = make_collective("multicast", topo, root=0, dests=[1])
    inst = make_instance(topo, coll, "1MB")
    schedule = Schedule.of([((0, 0), 0, 1, 0), ((0, 0), 1, 2, 1)])
    assert verify(inst, schedule).ok
    model = build_model(inst, 3)
    values = hint_from_schedule(model, inst, schedule)
    assert values[model.D] == 1
    assert violated_rows(model, values) == []
    assert len(schedule_from_model(model, inst)) == 1


def test_hint_rejects_bad_schedules() -> None:
    """A schedule longer than the horizon, or one that fails verification, is refused."""
    inst = line3("broadcast")
    late = Schedule.of([((0, 0), 0, 1, 0), ((0, 0), 1, 2, 3)])
    with pytest.raises(ValidationError, match="horizon"):
        hint_from_schedule(build_model(inst, 3), inst, late)
    broken = Schedule.of([((0, 0), 1, 2, 0), ((0, 0), 0, 1, 0)])
    with pytest.raises(ValidationError, match="verification"):
        hint_from_schedule(build_model(inst, 3), inst, broken)


# --------------------------------------------------------------------------- random cross-check


def random_instance(rng: random.Random) -> tuple[Instance, int]:
    """A small connected network (maybe a switch, mixed 50/25 GB/s links), a random
    collective, capacity, single-port option, outage and horizon (possibly too short)."""
    n = rng.randint(2, 4)
    switches = [n] if rng.random() < 0.3 else []
    nodes = list(range(n)) + switches
    order = nodes[:]
    rng.shuffle(order)
    pairs = {(min(a, b), max(a, b)) for a, b in itertools.pairwise(order)}
    pairs |= {(a, b) for a in nodes for b in nodes if a < b and rng.random() < 0.3}
    links = [(a, b, rng.choice([50, 50, 25]), 0) for a, b in sorted(pairs)]
    topo = make_topology("random", range(n), duplex_links=links, switches=switches)
    kind = rng.choice(["allgather", "broadcast", "gather", "scatter", "alltoall"])
    coll = make_collective(kind, topo, chunks=rng.randint(1, 2), root=0)
    outages = []
    if rng.random() < 0.3:
        link = rng.choice(topo.links)
        outages = [(link.src, link.dst, rng.randint(0, 2))]
    inst = make_instance(
        topo, coll, "1MB", single_port=rng.random() < 0.3, capacity=rng.choice([1, 1, 2]), outages=outages
    )
    return inst, rng.randint(1, 7)


@pytest.mark.parametrize("seed", range(8))
def test_random_instances_builds_agree(seed: int) -> None:
    """Sparse/dense and cuts on/off are the same program up to variables fixed at zero and
    redundant rows, so all four builds must report the same status and optimum; every
    optimal schedule verifies and, as a hint, satisfies every row of the sparse model."""
    inst, horizon = random_instance(random.Random(seed))
    answers = set()
    for dense in (False, True):
        for cuts in (False, True):
            out, model = solve(inst, horizon, dense=dense, cuts=cuts)
            answers.add((out.status, out.objective))
            if out.status == "infeasible":
                continue
            check_solution(inst, model, out)
            sparse = build_model(inst, horizon)
            values = hint_from_schedule(sparse, inst, schedule_from_model(model, inst))
            assert violated_rows(sparse, values) == []
    assert len(answers) == 1, answers
