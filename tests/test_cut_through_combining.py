"""Cut-through switches for combining collectives, and the switch model a topology states.

A cut-through switch that does not reduce *relays* each partial sum: it forwards what arrives
in the slot it arrives, and its hop into a GPU costs only ``delta`` (docs/model.md). Expected
values come from hand derivations in the docstrings and from bounds; every schedule goes
through the independent verifier, with in-switch reduction refused where the test says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccplan.bounds import lower_bound_slots
from ccplan.cli import main
from ccplan.contract import SolveOptions
from ccplan.errors import ValidationError
from ccplan.instances import Instance, make_collective, make_instance
from ccplan.instances.builtin import star_switch
from ccplan.instances.importers import Network, import_topology
from ccplan.instances.topology import Topology
from ccplan.pipeline.solve import solve
from ccplan.schedule.combining import verify_combining
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.cut_through import retime_combining
from ccplan.schedule.verify import verify

CT = "cut-through"
SAF = "store-and-forward"
DATA = Path(__file__).parent / "data" / "import"


def _star(n: int, kind: str, chunks: int = 1, switch_model: str = CT) -> Instance:
    """n GPUs around switch n, 50 GB/s ports, alpha 0; output ``n * 250 MB`` split into
    ``n * chunks`` chunks: at C = 1 a chunk is 250 MB, tau = 5 ms and every link has l = 1,
    L = 1 into the switch and, cut-through, L = delta = 0 out of it."""
    topo = star_switch(n, 50.0, 0.0)
    coll = make_collective(kind, topo, chunks=chunks)
    return make_instance(topo, coll, f"{250 * n}MB", switch_model=switch_model)


def _rs_relay() -> Schedule:
    """ReduceScatter on the 3-GPU star by relays: GPU 1 sends its part of chunk 0 through the
    switch at slot 0 (at the switch in slot 1, which forwards it at once to GPU 0, there at
    slot 1 + 0); GPU 2's part follows one slot later (the port 3 -> 0 is busy in slot 1).
    Likewise for chunks 1 and 2, rotated."""
    sends = []
    for owner in range(3):
        a, b = (owner + 1) % 3, (owner + 2) % 3
        c = (owner, 0)
        sends += [Send(0, c, a, 3), Send(1, c, 3, owner, True), Send(1, c, b, 3), Send(2, c, 3, owner, True)]
    return Schedule(tuple(sends))


def test_cut_through_reducescatter_by_hand() -> None:
    """3-GPU star, ReduceScatter, C = 1, no in-switch reduction. Each owner needs two partial
    sums, or one that already holds both: either way through its one downlink, whose first
    send can leave the switch at slot 1 (L = 1 into the switch) and carries one chunk per
    slot, or through a GPU first (one more slot). So the optimum is 2 slots = 10 ms, which is
    also (N-1)/N x M / B = 2/3 x 750 MB / 50 GB/s. Store-and-forward the same routes take 3
    (every hop out of the switch costs l = 1 more). :func:`_rs_relay` reaches 2."""
    inst = _star(3, "reducescatter")
    report = verify_combining(inst, _rs_relay())
    assert report.ok, report.violations[:1]
    assert report.makespan_slots == 2
    assert lower_bound_slots(inst) <= 2
    # the same sends under store-and-forward: every hop out of the switch lands a slot later
    assert verify(inst.with_switch_model(SAF), _rs_relay()).makespan_slots == 3
    best = solve(inst, "ring", SolveOptions(time_limit=10, workers=1))
    assert best.verified and best.makespan_slots == 2
    assert verify_combining(inst, best.schedule).ok


def test_cut_through_switch_holds_nothing_between_slots() -> None:
    """The rules that make a switch bufferless for partial sums (each schedule below was
    accepted before, when the combining verifier ignored the switch model):

    - a relay one slot late (the sum arrives at the switch in slot 1, leaves in slot 2) is a
      causality violation;
    - a second partial sum through the switch later finds it empty: GPU 1's part, then GPU 2's,
      pass the switch in slots 1 and 2; each is its own relay and GPU 0 gets both (no
      double count, no in-switch reduction)."""
    inst = _star(3, "reducescatter")
    rest = [s for s in _rs_relay().sends if s.chunk != (0, 0)]
    late = [Send(0, (0, 0), 1, 3), Send(2, (0, 0), 3, 0, True),
            Send(2, (0, 0), 2, 3), Send(3, (0, 0), 3, 0, True)]
    report = verify(inst, Schedule(tuple(late + rest)))
    assert any(v.kind == "causality" and "cut-through switch 3" in v.message for v in report.violations)
    # both parts of chunk 0 through the switch into GPU 0, reduce=True into the switch too
    seq = [Send(0, (0, 0), 1, 3, True), Send(1, (0, 0), 3, 0, True),
           Send(1, (0, 0), 2, 3, True), Send(2, (0, 0), 3, 0, True)]
    report = verify_combining(inst, Schedule(tuple(seq + rest)))
    assert report.ok, report.violations[:1]


@pytest.mark.parametrize("kind", ["allreduce", "reducescatter", "reduce"])
@pytest.mark.parametrize("method", ["ring", "heuristic", "multitree", "tree", "double-binary-tree", "mteg"])
def test_cut_through_combining_from_every_engine(kind: str, method: str) -> None:
    """Every engine that builds combining schedules (natively or by the time reversal) gives a
    verified schedule on a 4-GPU cut-through star, C = 2, at or above the slot lower bound and
    the physical bound (any chunking), and never below what the hardware allows."""
    inst = _star(4, kind, chunks=2)
    try:
        result = solve(inst, method, SolveOptions(time_limit=10, workers=1, seed=0))
    except ValidationError as exc:
        assert "does not support" in str(exc)  # e.g. the ring has no Reduce on some machines
        return
    if result.schedule is None:
        pytest.skip(f"{method} gives no {kind} here: {result.details.get('reason')}")
    report = verify(inst, result.schedule)
    assert report.ok, report.violations[:1]
    assert report.makespan_slots == result.makespan_slots
    assert result.makespan_slots >= lower_bound_slots(inst)
    data = result.to_dict(inst)
    assert data["switch_model"] == CT
    assert data["makespan_us"] >= data["physical_bound_us"] * (1 - 1e-9)


@pytest.mark.parametrize("n,chunks", [(3, 1), (4, 2), (8, 2)])
def test_ring_allreduce_through_a_cut_through_switch(n: int, chunks: int) -> None:
    """The classic bound, reached: through a cut-through switch a ring step is one transfer,
    so the ring AllReduce sends 2 (N-1) C chunk-transfers down every GPU's downlink back to
    back, from slot 1 (the first sum reaches the switch then and leaves at once, L = 0) to
    slot 2 (N-1) C: makespan 2 (N-1) C slots of tau = M / (N C B), i.e. 2 (N-1)/N x M / B.
    Store-and-forward it needs at least one slot more (each relay costs an extra l). No
    switch reduces (the verifier with in-switch reduction refused agrees). The heuristic
    portfolio tries this ring, so it is never longer."""
    inst = _star(n, "allreduce", chunks=chunks)
    ring = solve(inst, "ring", SolveOptions(time_limit=20, workers=1, seed=0))
    assert ring.verified and ring.makespan_slots == 2 * (n - 1) * chunks
    assert verify_combining(inst, ring.schedule).ok
    portfolio = solve(inst, "heuristic", SolveOptions(time_limit=20, workers=1, seed=0))
    assert portfolio.verified and portfolio.makespan_slots <= 2 * (n - 1) * chunks
    saf = solve(inst.with_switch_model(SAF), "ring", SolveOptions(time_limit=20, workers=1))
    assert saf.makespan_slots > 2 * (n - 1) * chunks


def test_retime_combining_keeps_contributions() -> None:
    """The re-timer turns the ring's store-and-forward AllReduce into a cut-through one that
    sends the same partial sums (the same sends at other slots, a GPU's send into the switch
    perhaps repeated for a multicast split by slot), verified; a schedule that is not
    valid on the store-and-forward twin is refused in one line."""
    inst = _star(4, "allreduce", chunks=1)
    twin = solve(inst.with_switch_model(SAF), "ring", SolveOptions(time_limit=10, workers=1)).schedule
    out = retime_combining(inst, twin)
    assert verify(inst, out).ok
    key = lambda s: (s.chunk, s.src, s.dst, s.reduce)  # noqa: E731
    assert set(map(key, out.sends)) == set(map(key, twin.sends))
    with pytest.raises(ValidationError, match="needs a valid schedule"):
        retime_combining(inst, Schedule(twin.sends[1:]))


# ----------------------------------------------------------------- the topology's switch model
def test_topology_switch_model_json() -> None:
    """A topology may state its switch model: it round-trips, a file without it loads as not
    stated (None) and is written back without the key, a bad value is refused in one line."""
    topo = star_switch(3, 50.0, 0.0)
    assert topo.switch_model is None and "switch_model" not in topo.to_dict()
    data = {**topo.to_dict(), "switch_model": CT}
    again = Topology.from_dict(json.loads(json.dumps(data)))
    assert again.switch_model == CT and again.to_dict() == data
    assert again.reversed().switch_model == CT
    with pytest.raises(ValidationError, match="switch_model must be one of"):
        Topology.from_dict({**data, "switch_model": "wormhole"})


@pytest.mark.parametrize(
    "name",
    ["nvsmi_dgx_h100.txt", "nccl_topo_pcie_2gpu.xml", "nvsmi_pcie_8gpu.txt", "rocm_smi_mi250_8gcd.txt"],
)
def test_importers_mark_switches_cut_through(name: str) -> None:
    """Every switch an importer makes (NVSwitch, PCIe switch or host bridge, NIC, fabric) is
    cut-through; a machine imported without switches states no model."""
    topo = import_topology(DATA / name)
    assert topo.switch_model == (CT if topo.switches else None)
    joined = import_topology(DATA / name, network=Network(nodes=2))
    assert joined.switches and joined.switch_model == CT
    assert import_topology(DATA / "nvsmi_dgx_h100.txt").switch_model == CT


def test_pcie_2gpu_allgather_by_the_topology(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """2-GPU PCIe box (the NCCL dump: both GPUs on PCIe switch 3, which also links to host
    bridge 2; 12 GB/s links). AllGather 1 GB: each GPU sends its
    500 MB to the other. Cut-through, the copy streams through the switch: 500 MB / 12 GB/s =
    41,667 us, the physical bound. Store-and-forward the switch first receives all of it, then
    sends it: twice that, 83,333 us. ``solve`` takes the model the imported file states and
    says so; ``--switch-model`` overrides it."""
    out = tmp_path / "pcie.json"
    assert main(["import-topology", str(DATA / "nccl_topo_pcie_2gpu.xml"), "--out", str(out)]) == 0
    capsys.readouterr()
    base = ["solve", "--topology", str(out), "--collective", "allgather", "--size", "1GB",
            "--method", "heuristic", "--time-limit", "10"]
    assert main([*base, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["switch_model"] == CT
    assert data["makespan_us"] == pytest.approx(500e6 / 12e9 * 1e6)
    # the physical bound adds the two hops' alpha (1 us each), which the slot model rounds to 0
    assert data["makespan_us"] == pytest.approx(data["physical_bound_us"], rel=1e-3)
    assert main(base) == 0
    assert "cut-through switches, as the topology states" in capsys.readouterr().out
    assert main([*base, "--json", "--switch-model", SAF]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["switch_model"] == SAF
    assert data["makespan_us"] == pytest.approx(2 * 500e6 / 12e9 * 1e6)
    # a built-in states nothing: the paper's default, and the output says it is the default
    assert main(["solve", "--topology", "dgx1", "--size", "1MB", "--method", "ring"]) == 0
    assert "store-and-forward switches, the default" in capsys.readouterr().out


def test_plan_cell_uses_the_topologys_switch_model() -> None:
    """``plan`` builds every cell with the switch model its topology states (the row says it);
    a topology that states none gets the paper's store-and-forward."""
    from ccplan.plan import plan_cell

    topo = star_switch(3, 50.0, 0.0)
    payload = {"key": "k", "collective": "allreduce", "size": "750MB", "method": "ring", "role": "candidate",
               "root": None, "tau_rule": "fastest", "alpha_threshold": 0.1, "time_limit": 10.0,
               "workers": 1, "chunks": 1}
    stated = Topology.from_dict({**topo.to_dict(), "switch_model": CT})
    row = plan_cell({**payload, "topology": stated.to_dict()})
    assert row["switch_model"] == CT and row["verified"]
    assert row["makespan_slots"] == 4  # 2 (N-1) C, as in test_ring_allreduce_through_a_cut_through_switch
    row = plan_cell({**payload, "topology": topo.to_dict()})
    assert row["switch_model"] == SAF and row["makespan_slots"] > 4
