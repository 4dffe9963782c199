"""In-switch reduction as a declared capability, off by default (issue 24, item 4).

A switch adds partial sums only when the instance says every switch may
(``switch_reduce``, ``--switch-reduce``) or its node says so (``"reduce": true``); otherwise it
relays them. The verifier, the engines, ``exact-combining``, the physical bound and the MSCCL
export honour the one set ``Instance.reducing_switches``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ccplan.cli.entry import main
from ccplan.contract import SolveOptions
from ccplan.errors import CCPlanError, ValidationError
from ccplan.instances import make_instance
from ccplan.instances.builtin import dgx2, leaf_spine, star_switch
from ccplan.instances.combining import make_combining
from ccplan.instances.topology import Node, Topology
from ccplan.model.combining import solve_exact_combining
from ccplan.physical import physical_bound
from ccplan.pipeline.solve import solve
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.relays import tree_relays, unfold_switch_sums
from ccplan.schedule.verify import verify
from tests.switch_sums import in_switch_sums


def _with_reducing_switch(topo: Topology, switch: int) -> Topology:
    nodes = tuple(Node(n.id, n.kind, reduce=n.id == switch) for n in topo.nodes)
    return replace(topo, nodes=nodes)


# --------------------------------------------------------------------------- declaring it
def test_node_reduce_is_for_switches_and_survives_json() -> None:
    """``reduce`` on a GPU is refused naming the node; on a switch it round-trips, and a
    switch without it writes no key (old files stay as they were)."""
    with pytest.raises(ValidationError, match="node 3: reduce is only valid on a switch"):
        Node(3, "gpu", reduce=True)
    with pytest.raises(ValidationError, match="nodes\\[0\\]"):
        Topology.from_dict({"name": "t", "nodes": [{"id": 0, "reduce": True}], "links": []})
    topo = _with_reducing_switch(star_switch(3), 3)
    data = topo.to_dict()
    assert data["nodes"][3] == {"id": 3, "kind": "switch", "reduce": True}
    assert data["nodes"][0] == {"id": 0, "kind": "gpu"}
    assert Topology.from_dict(json.loads(json.dumps(data))) == topo


def test_instance_reducing_switches_from_flag_or_nodes() -> None:
    """Off by default; ``switch_reduce`` makes every switch reduce; otherwise exactly the
    switches whose node declares it. The flag survives to_dict / from_dict and describe() and
    the claim name it."""
    topo = leaf_spine(2, 2, 2)
    coll = make_combining("allreduce", topo, chunks=1)
    inst = make_instance(topo, coll, "1MB")
    assert inst.reducing_switches == frozenset()
    assert "switches reduce" not in inst.describe()
    on = replace(inst, switch_reduce=True)
    assert on.reducing_switches == frozenset(topo.switches)
    assert "switches reduce" in on.describe()
    assert type(inst).from_dict(on.to_dict()) == on
    assert "switch_reduce" not in inst.to_dict()
    one = topo.switches[0]
    partial = make_instance(_with_reducing_switch(topo, one), coll, "1MB")
    assert partial.reducing_switches == frozenset({one})
    result = solve(on, "ring", SolveOptions(time_limit=5, workers=1))
    assert "switches reduce" in result.claim(on)


# --------------------------------------------------------------------------- the verifier
def test_verifier_switch_reduce_follows_the_declared_set() -> None:
    """Star of 3 GPUs around switch 3, Reduce to 0: 1 and 2 send into the switch in slot 0,
    it sends their sum on in slot 1. Rejected by default (``switch-reduce``, naming the
    switch), accepted when the flag is on or the switch node declares ``reduce``. The relayed
    version (1's part through the switch, then 2's, landing after the switch sent 1's on) is
    valid either way."""
    topo = star_switch(3, alpha_us=0.0)
    coll = make_combining("reduce", topo, chunks=1, root=0)
    inst = make_instance(topo, coll, "1MB")
    summed = Schedule(
        (Send(0, (0, 0), 1, 3, True), Send(0, (0, 0), 2, 3, True), Send(1, (0, 0), 3, 0, True))
    )
    off = verify(inst, summed)
    assert [v.kind for v in off.violations] == ["switch-reduce"]
    assert "switch 3" in off.violations[0].message
    assert verify(replace(inst, switch_reduce=True), summed).ok
    declared = make_instance(_with_reducing_switch(topo, 3), coll, "1MB")
    assert verify(declared, summed).ok
    relayed = Schedule(
        (Send(0, (0, 0), 1, 3, False), Send(1, (0, 0), 3, 0, True),
         Send(1, (0, 0), 2, 3, False), Send(2, (0, 0), 3, 0, True))
    )
    assert verify(inst, relayed).ok
    assert verify(replace(inst, switch_reduce=True), relayed).ok


# --------------------------------------------------------------------------- relays
@pytest.mark.parametrize("chain", [False, True])
def test_unfolded_switch_sum_relays_each_part(chain: bool) -> None:
    """The in-switch sum of the verifier test, unfolded. Star: both parts go 1 -> 3 -> 0 and
    2 -> 3 -> 0, one after the other through the switch (the second lands after the first left):
    makespan 3. Chain: 1 -> 3 -> 2 (2 adds it), then 2 -> 3 -> 0: makespan 4 (two relays in a
    row). Both verify without switch reduction; the tree's sum is gone."""
    topo = star_switch(3, alpha_us=0.0)
    inst = make_instance(topo, make_combining("reduce", topo, chunks=1, root=0), "1MB")
    summed = Schedule(
        (Send(0, (0, 0), 1, 3, True), Send(0, (0, 0), 2, 3, True), Send(1, (0, 0), 3, 0, True))
    )
    found = tree_relays(inst, summed, chain)
    assert found is not None
    out = unfold_switch_sums(inst, summed, chain)
    assert out is not None
    report = verify(inst, out)
    assert report.ok, report.violations[:2]
    assert report.makespan_slots == (4 if chain else 3)
    assert in_switch_sums(inst, out) == 0
    # with the flag on, nothing is relayed: the sum stays
    assert unfold_switch_sums(replace(inst, switch_reduce=True), summed) is summed


COMBINING_ENGINES = (
    "heuristic", "mteg", "layered", "cut-aware", "trees", "ring", "multitree", "hierarchical",
    "recursive-halving-doubling", "recursive-doubling", "tree", "double-binary-tree",
)
REVERSED = frozenset({"heuristic", "mteg", "layered", "cut-aware", "trees"})


@pytest.mark.slow  # 12 engines x 2 topologies x 3 collectives, about 40 s
@pytest.mark.parametrize("kind", ["reducescatter", "allreduce", "reduce"])
@pytest.mark.parametrize("topo", [star_switch(4), leaf_spine(2, 2, 2)], ids=["star4", "leafspine"])
def test_combining_engines_do_not_reduce_in_switches(topo: Topology, kind: str) -> None:
    """Every combining engine, flag off, on a star and a leaf-spine (switches that cannot
    reduce): a schedule the verifier accepts (no ``switch-reduce``; counted again here on a
    separate replay) or a clean refusal; the time-reversal engines always find one. With the
    flag on, the reversal's schedule is no longer than without (more schedules allowed)."""
    kwargs = {"root": 0} if kind == "reduce" else {}
    inst = make_instance(topo, make_combining(kind, topo, chunks=2, **kwargs), "1MB")
    for engine in COMBINING_ENGINES:
        try:
            result = solve(inst, engine, SolveOptions(time_limit=5, workers=1, seed=0))
        except CCPlanError:
            assert engine not in REVERSED, engine
            continue
        assert result.verified, (engine, result.report.violations[:2] if result.report else None)
        assert result.schedule is not None
        assert in_switch_sums(inst, result.schedule) == 0, engine
    on = replace(inst, switch_reduce=True)
    with_sums = solve(on, "heuristic", SolveOptions(time_limit=5, workers=1, seed=0))
    assert with_sums.verified


def test_cluster_allreduce_chains_through_an_nvswitch() -> None:
    """DGX2 x2 (V100 NVSwitch, which cannot reduce), C = 1: cluster-allreduce verifies with
    no sum in either switch (before, its reduction trees summed 15 inputs in each switch and
    the engine refused the schedule the verifier rejected). With the flag on it verifies too."""
    topo = dgx2(2)
    inst = make_instance(topo, make_combining("allreduce", topo, chunks=1), "1GB")
    result = solve(inst, "cluster-allreduce", SolveOptions(time_limit=10, workers=1))
    assert result.verified and result.schedule is not None
    assert in_switch_sums(inst, result.schedule) == 0
    assert solve(replace(inst, switch_reduce=True), "cluster-allreduce", SolveOptions(workers=1)).verified


# --------------------------------------------------------------------------- exact and bounds
def test_exact_combining_star3_reduce_optimum_with_and_without_switch_reduction() -> None:
    """Reduce to GPU 0 on a star of 3 GPUs around switch 3, C = 1, every hop L = 1, omega = 1.

    Hand derivation. With in-switch reduction: 1 and 2 send into the switch in slot 0, the sum
    leaves in slot 1 and lands at 0 in slot 2; nothing from 1 reaches 0 sooner (two hops):
    optimum 2. Without: the only link into 0 is 3 -> 0, one send per slot, and a send carries
    the switch's one buffer, which holds one GPU's part (the switch holds something only from
    slot 1); so by slot 2 at most one of the two parts has arrived: at least 3, and 3 is
    reached (1 -> 3 -> 0 in slots 0, 1; 2 -> 3 -> 0 in slots 1, 2). Optimum 3."""
    topo = star_switch(3, alpha_us=0.0)
    inst = make_instance(topo, make_combining("reduce", topo, chunks=1, root=0), "1MB")
    options = SolveOptions(time_limit=30, workers=1, seed=0)
    off = solve_exact_combining(inst, options)
    on = solve_exact_combining(replace(inst, switch_reduce=True), options)
    assert (off.status, off.makespan, off.bound) == ("optimal", 3, 3)
    assert (on.status, on.makespan, on.bound) == ("optimal", 2, 2)
    assert off.schedule is not None and verify(inst, off.schedule).ok


@pytest.mark.slow  # five exact solves, about 35 s
@pytest.mark.parametrize(
    ("kind", "chunks", "tau_rule"),
    [("allreduce", 1, "fastest"), ("allreduce", 2, "fastest"), ("reducescatter", 1, "fastest"),
     ("reducescatter", 2, "slowest"), ("reduce", 3, "fastest")],
)
def test_physical_bound_below_exact_optima_without_switch_reduction(
    kind: str, chunks: int, tau_rule: str
) -> None:
    """On a 3-GPU star (switch cannot reduce, unequal links so tau matters), the physical
    bound of the instance's own capability is at most the exact slot optimum in microseconds
    (the exact optimum is certified; without a certificate the model's proven bound, itself
    at most the optimum, is what is compared)."""
    from ccplan.instances.topology import make_topology

    topo = make_topology(
        "star3u", gpus=range(3), switches=[3],
        duplex_links=[(0, 3, 50.0, 0.0), (1, 3, 50.0, 0.0), (2, 3, 25.0, 0.0)],
    )
    kwargs = {"root": 0} if kind == "reduce" else {}
    inst = make_instance(topo, make_combining(kind, topo, chunks=chunks, **kwargs), "1MB", tau_rule=tau_rule)
    answer = solve_exact_combining(inst, SolveOptions(time_limit=30, workers=1, seed=0))
    assert answer.bound is not None
    bound = physical_bound(inst)
    assert bound.us <= inst.slots_to_us(answer.bound) * (1 + 1e-9)


def test_physical_bound_of_a_partial_set() -> None:
    """The AllReduce gossip part without in-switch reduction (2 (N - 1) M / sum B_in = 2 x 3 x
    1 MB / (4 x 50 GB/s) = 30 us on a 4-GPU star) applies only when no switch reduces: when the
    one switch declares ``reduce``, the bound is the flag-on bound (M / B = 20 us)."""
    topo = star_switch(4, alpha_us=0.0)
    coll = make_combining("allreduce", topo, chunks=1)
    off = physical_bound(make_instance(topo, coll, "1MB"))
    declared = physical_bound(make_instance(_with_reducing_switch(topo, 4), coll, "1MB"))
    flag = physical_bound(make_instance(topo, coll, "1MB"), switch_reduce=True)
    assert off.us == pytest.approx(30.0)
    assert declared.us == pytest.approx(flag.us) == pytest.approx(20.0)


# --------------------------------------------------------------------------- the CLI
def test_cli_switch_reduce_and_msccl_refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--switch-reduce`` reaches the instance (the schedule file says so); the MSCCL export of
    a schedule that sums in the switch is refused in one line with exit 2, and the default
    schedule (relays) exports."""
    out = tmp_path / "on.json"
    args = ["solve", "--topology", "star_switch", "--topo-arg", "n=4", "--collective", "reduce",
            "--size", "1MB", "--method", "heuristic", "--quiet"]
    assert main([*args, "--switch-reduce", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["instance"]["switch_reduce"] is True
    capsys.readouterr()
    code = main(["export", str(out), "--format", "msccl-xml", "--out", str(tmp_path / "on.xml")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert "cannot reduce in a switch" in err and "\n" not in err
    plain = tmp_path / "off.json"
    assert main([*args, "--out", str(plain)]) == 0
    assert main(["export", str(plain), "--format", "msccl-xml", "--out", str(tmp_path / "off.xml")]) == 0


def test_relay_placement_stops_at_its_deadline() -> None:
    """Unfolding many switch sums is a slot-by-slot search that grows fast with C, so it takes a
    deadline: Reduce of 300 chunks on a star of 4 GPUs, every chunk summed in the switch (3
    inputs each, 900 relays). With a deadline already past it raises OutOfTimeError (within its
    first 256 relays); without one the unfolded schedule verifies with no switch sum."""
    from ccplan.limits import Deadline, OutOfTimeError

    topo = star_switch(4, alpha_us=0.0)
    c = 300
    inst = make_instance(topo, make_combining("reduce", topo, chunks=c, root=0), "64MB")
    chunks = sorted({ch for ch, _ in inst.collective.post})
    sends = []
    for t, ch in enumerate(chunks):
        sends += [Send(t, ch, g, 4, True) for g in (1, 2, 3)]
        sends.append(Send(t + 1, ch, 4, 0, True))
    summed = Schedule(tuple(sends))
    with pytest.raises(OutOfTimeError):
        unfold_switch_sums(inst, summed, False, Deadline.after(0.0))
    out = unfold_switch_sums(inst, summed, False)
    assert out is not None and verify(inst, out).ok
    assert in_switch_sums(inst, out) == 0
