"""MSCCL XML export and its validator.

Schedules come from the engine-independent greedy of ``tests/helpers.py`` (and, where
registered, the ``heuristic`` engine) and are checked with :func:`ccplan.schedule.verify`
before they are exported. Topologies are the built-ins (facts of ``reference/teccl.md``). Expected XML
structure is derived by hand from ``reference/msccl_and_peers.md`` section 1.4.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import greedy_schedule, ring_topology, star_topology

from ccplan.errors import ValidationError
from ccplan.export.msccl import logical_transfers, to_msccl_xml
from ccplan.export.xml_validate import ERROR_KINDS, validate_xml
from ccplan.instances import Collective, Instance, Topology, make_collective, make_instance, make_topology
from ccplan.instances.builtin import amd, dgx1, ndv2
from ccplan.schedule import Schedule, Send, verify

DATA = Path(__file__).parent / "data" / "xml"

# --------------------------------------------------------------------------- topologies
TOPOLOGIES = {"dgx1": dgx1, "ndv2-2": lambda: ndv2(2), "amd": lambda: amd(1)}


def directed_ring(n: int) -> Topology:
    return ring_topology(n, bidirectional=False)


def star(n: int) -> Topology:
    """n GPUs on one switch (node n), 50 GB/s each way."""
    return star_topology(n)


def verified(instance: Instance) -> Schedule:
    """The engine-independent greedy of tests/helpers.py, checked by the verifier first."""
    schedule = greedy_schedule(instance)
    report = verify(instance, schedule)
    assert report.ok, report.violations[:3]
    return schedule


def _steps(gpu: ET.Element) -> list[list[ET.Element]]:
    return [list(tb.iter("step")) for tb in gpu.iter("tb")]


# --------------------------------------------------------------------------- structure
def test_ring_allgather_matches_reference_example() -> None:
    """Reference section 1.4: in-place AllGather on a 4-GPU ring, 1 channel, after rcs fusion.

    Hand derivation: GPU r holds chunk r at o[r]. Slot 0 it sends o[r] to r+1; slots 1 and 2
    it receives chunk r-1, r-2 and forwards each in the same step (rcs); slot 3 it only
    receives chunk r-3 (r). One thread block, send = r+1, recv = r-1. For GPU 1 this is exactly
    the reference: s o[1]; rcs o[0]; rcs o[3]; r o[2].
    """
    topo = directed_ring(4)
    inst = make_instance(topo, make_collective("allgather", topo), "4MB")
    root = ET.fromstring(to_msccl_xml(inst, verified(inst)))
    assert root.attrib["ngpus"] == "4"
    assert root.attrib["nchunksperloop"] == "4"
    assert root.attrib["coll"] == "allgather"
    assert (root.attrib["inplace"], root.attrib["outofplace"]) == ("1", "0")
    gpus = root.findall("gpu")
    assert [g.attrib["id"] for g in gpus] == ["0", "1", "2", "3"]
    for r, gpu in enumerate(gpus):
        assert (gpu.attrib["i_chunks"], gpu.attrib["o_chunks"], gpu.attrib["s_chunks"]) == ("0", "4", "0")
        (tb,) = gpu.findall("tb")
        assert (tb.attrib["send"], tb.attrib["recv"], tb.attrib["chan"]) == (
            str((r + 1) % 4),
            str((r - 1) % 4),
            "0",
        )
        steps = list(tb.iter("step"))
        assert [s.attrib["type"] for s in steps] == ["s", "rcs", "rcs", "r"]
        assert [s.attrib["s"] for s in steps] == ["0", "1", "2", "3"]
        offsets = [steps[0].attrib["srcoff"]] + [s.attrib["dstoff"] for s in steps[1:]]
        assert offsets == [str(r), str((r - 1) % 4), str((r - 2) % 4), str((r - 3) % 4)]
        assert all(s.attrib["depid"] == "-1" and s.attrib["cnt"] == "1" for s in steps)
    assert validate_xml(DATA / "good" / "ring4_allgather_inplace.xml").ok


def test_xml_lexical_form_suits_executor_tokenizer() -> None:
    """No prolog, one element per line, algo carries every attribute the executor requires."""
    topo = directed_ring(3)
    inst = make_instance(topo, make_collective("allgather", topo), "3MB")
    text = to_msccl_xml(inst, verified(inst))
    assert text.startswith("<algo ")
    assert all(line.count("<") <= 1 for line in text.splitlines())
    algo = ET.fromstring(text).attrib
    for key in (
        "nchunksperloop",
        "nchannels",
        "ngpus",
        "proto",
        "coll",
        "minBytes",
        "maxBytes",
        "inplace",
        "outofplace",
        "name",
    ):
        assert key in algo


# --------------------------------------------------------------------------- round trips
ROUND_TRIPS = [
    (topo, kind, chunks, inplace)
    for topo in TOPOLOGIES
    for kind in ("allgather", "broadcast")
    for chunks in (1, 2)
    for inplace in (True, False)
]


@pytest.mark.parametrize(("topo_name", "kind", "chunks", "inplace"), ROUND_TRIPS)
def test_round_trip_reproduces_postcondition(topo_name: str, kind: str, chunks: int, inplace: bool) -> None:
    """schedule -> XML -> parser -> buffer simulation must end with every chunk in place, both
    against the instance and against the collective the XML names."""
    topo = TOPOLOGIES[topo_name]()
    root = 3 if kind == "broadcast" else None
    inst = make_instance(topo, make_collective(kind, topo, chunks=chunks, root=root), "16MB")
    text = to_msccl_xml(inst, verified(inst), inplace=inplace)
    report = validate_xml(text, expect=inst)
    assert report.ok, [str(e) for e in report.errors[:5]]
    # Every demand of the collective is one transfer (no switches here).
    assert report.stats["transfers"] == len(inst.collective.demands)
    # Without expect, a broadcast's root is inferred as the only rank that never receives.
    assert validate_xml(text).ok


@pytest.mark.parametrize(("channels", "instances"), [(2, 1), (1, 3), (2, 2)])
def test_channels_and_instances(channels: int, instances: int) -> None:
    """Replication multiplies nchunksperloop, channels and thread blocks by ``instances``."""
    topo = dgx1()
    inst = make_instance(topo, make_collective("allgather", topo, chunks=2), "16MB")
    schedule = verified(inst)
    one = ET.fromstring(to_msccl_xml(inst, schedule, channels=channels))
    text = to_msccl_xml(inst, schedule, channels=channels, instances=instances, inplace=False)
    root = ET.fromstring(text)
    assert root.attrib["nchunksperloop"] == str(16 * instances)
    assert root.attrib["nchannels"] == str(channels * instances)
    chans = {int(tb.attrib["chan"]) for tb in root.iter("tb")}
    assert chans <= set(range(channels * instances))
    # Out of place adds one copy thread block per GPU to the in-place layout.
    assert len(root.find("gpu").findall("tb")) == instances * (len(one.find("gpu").findall("tb")) + 1)  # type: ignore[union-attr]
    report = validate_xml(text, expect=inst)
    assert report.ok, [str(e) for e in report.errors[:5]]


def test_dropped_send_breaks_postcondition() -> None:
    """A schedule missing its last delivery exports fine but the simulation names the hole."""
    topo = dgx1()
    inst = make_instance(topo, make_collective("allgather", topo), "8MB")
    schedule = verified(inst)
    last = schedule.sends[-1]
    broken = Schedule(schedule.sends[:-1])
    report = validate_xml(to_msccl_xml(inst, broken), expect=inst)
    assert not report.ok
    assert {e.kind for e in report.errors} == {"postcondition"}
    (error,) = report.errors
    assert error.gpu == last.dst and f"chunk {list(last.chunk)}" in error.message


# --------------------------------------------------------------------------- limits and dialects
def test_step_limit_names_limit_and_remedy() -> None:
    """2 GPUs, 40 chunks each: one thread block per GPU sends 40 and receives 40 = 80 steps,
    above the executor's 64 but within legacy's 256; two channels halve it to 40."""
    topo = make_topology("pair", [0, 1], [(0, 1, 50.0, 0.0)])
    inst = make_instance(topo, make_collective("allgather", topo, chunks=40), "80MB")
    schedule = verified(inst)
    with pytest.raises(ValidationError, match=r"MSCCL_MAX_NUM_STEPS = 64.*channels"):
        to_msccl_xml(inst, schedule)
    legacy = to_msccl_xml(inst, schedule, dialect="legacy")
    assert validate_xml(legacy, expect=inst, dialect="legacy").ok
    assert "steps" in validate_xml(legacy, expect=inst).kinds()
    split = to_msccl_xml(inst, schedule, channels=2)
    report = validate_xml(split, expect=inst)
    assert report.ok and report.stats["steps_max"] == 40


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"dialect": "nccl"}, "dialect"),
        ({"proto": "ll"}, "proto"),
        ({"channels": 0}, "channels"),
        ({"channels": 8, "instances": 8}, "MAXCHANNELS"),
        ({"name": 'a"b'}, "name"),
        ({"max_tbs": 2}, "thread blocks"),
    ],
)
def test_bad_options(kwargs: dict[str, object], pattern: str) -> None:
    topo = dgx1()
    inst = make_instance(topo, make_collective("allgather", topo), "8MB")
    with pytest.raises(ValidationError, match=pattern):
        to_msccl_xml(inst, verified(inst), **kwargs)  # type: ignore[arg-type]


def test_collectives_without_mapping_are_refused() -> None:
    topo = directed_ring(4)
    gather = make_instance(topo, make_collective("gather", topo, root=0), "4MB")
    with pytest.raises(ValidationError, match="no MSCCL XML mapping"):
        to_msccl_xml(gather, Schedule(()))
    a2a = make_instance(topo, make_collective("alltoall", topo), "4MB")
    with pytest.raises(ValidationError, match="inplace"):
        to_msccl_xml(a2a, verified(a2a), inplace=True)


def test_alltoall_out_of_place_round_trip() -> None:
    """AllToAll relays chunks through GPUs that do not want them: those land in scratch."""
    topo = directed_ring(4)
    inst = make_instance(topo, make_collective("alltoall", topo), "4MB")
    text = to_msccl_xml(inst, verified(inst), inplace=False)
    report = validate_xml(text, expect=inst)
    assert report.ok, [str(e) for e in report.errors[:5]]
    # On a directed 4-ring, GPU r relays the chunks r-1 -> r+1, r+2 and r-2 -> r+1: 3 scratch slots.
    assert {g.attrib["s_chunks"] for g in ET.fromstring(text).iter("gpu")} == {"3"}
    assert validate_xml(text).ok


def test_legacy_dialect_spelling() -> None:
    topo = directed_ring(3)
    inst = make_instance(topo, make_collective("broadcast", topo, root=0), "3MB")
    root = ET.fromstring(to_msccl_xml(inst, verified(inst), dialect="legacy", proto="LL128", name="bc"))
    assert (
        root.attrib["coll"] == "broadcast" and root.attrib["proto"] == "LL128" and root.attrib["name"] == "bc"
    )


# --------------------------------------------------------------------------- switches
def test_switch_relays_collapse_to_gpu_transfers() -> None:
    """Decision: a relay u -> switch -> v becomes one GPU-to-GPU transfer u -> v. On a star every
    delivery crosses the switch, so the XML has exactly one transfer per switch->GPU send and
    only the 4 GPUs as ranks."""
    topo = star(4)
    inst = make_instance(topo, make_collective("allgather", topo, chunks=2), "8MB")
    schedule = verified(inst)
    text = to_msccl_xml(inst, schedule)
    report = validate_xml(text, expect=inst)
    assert report.ok, [str(e) for e in report.errors[:5]]
    assert report.stats["ngpus"] == 4
    assert report.stats["transfers"] == sum(1 for s in schedule.sends if s.src == 4)
    with pytest.raises(ValidationError, match="switch 4"):
        to_msccl_xml(inst, schedule, switches="refuse")


def test_ndv2_three_chassis_through_global_switch() -> None:
    """NDv2 x3 joins chassis through one global switch (node 24): every inter-chassis delivery
    is a relay GPU0(c) -> switch -> GPU1(c'), exported as a GPU-to-GPU transfer."""
    topo = ndv2(3)
    inst = make_instance(topo, make_collective("allgather", topo), "24MB")
    schedule = verified(inst)
    text = to_msccl_xml(inst, schedule, inplace=False)
    report = validate_xml(text, expect=inst)
    assert report.ok, [str(e) for e in report.errors[:5]]
    assert report.stats["ngpus"] == 24
    direct = sum(1 for s in schedule.sends if 24 not in (s.src, s.dst))
    relayed = sum(1 for s in schedule.sends if s.src == 24)
    assert report.stats["transfers"] == direct + relayed == len(inst.collective.demands)


def test_switch_reordering_keeps_fifo_consistent() -> None:
    """A store-and-forward switch may forward in another order than it received: chunk 0 goes
    0->sw in slot 0 and chunk 1 in slot 1, but sw forwards chunk 1 (slot 2) before chunk 0
    (slot 3). The logical connection 0->1 must then send and receive chunk 1 first."""
    topo = star(2)
    inst = make_instance(topo, make_collective("broadcast", topo, chunks=2, root=0), "2MB")
    schedule = Schedule.of([((0, 0), 0, 2, 0), ((0, 1), 0, 2, 1), ((0, 1), 2, 1, 2), ((0, 0), 2, 1, 3)])
    assert verify(inst, schedule).ok
    transfers = logical_transfers(inst, schedule)
    assert [(t.chunk, t.src, t.dst, t.via) for t in transfers] == [((0, 1), 0, 1, (2,)), ((0, 0), 0, 1, (2,))]
    text = to_msccl_xml(inst, schedule)
    assert validate_xml(text, expect=inst).ok
    root = ET.fromstring(text)
    sender = next(tb for tb in root.find("gpu").iter("tb") if tb.attrib["send"] == "1")  # type: ignore[union-attr]
    assert [s.attrib["srcoff"] for s in sender.iter("step")] == ["1", "0"]


# --------------------------------------------------------------------------- combining
def _verify_combining(inst: Instance, schedule: Schedule) -> None:
    report = verify(inst, schedule)
    assert report.ok, report.violations[:3]


def _k4_all_exchange() -> tuple[Instance, Schedule]:
    """AllReduce of one chunk on the complete graph K4: every GPU reduce-sends its
    contribution to the three others in slot 0."""
    n = 4
    topo = make_topology("k4", range(n), [(a, b, 50.0, 0.0) for a in range(n) for b in range(a + 1, n)])
    g = tuple(range(n))
    coll = Collective("allreduce", 1, (((0, 0), g),), (((0, 0), g),), pieces=1, combining=True)
    inst = make_instance(topo, coll, "1MB")
    schedule = Schedule(tuple(Send(0, (0, 0), u, v, reduce=True) for u in g for v in g if u != v))
    return inst, schedule


def test_allreduce_exchange_needs_nops() -> None:
    """All-exchange AllReduce on K4, in place: every GPU sends its contribution o[0] to the three
    others (three send thread blocks) and reduces the three it receives into o[0]. The first
    receive-reduce overwrites o[0] after three reads in three other thread blocks: one depid
    and two nops; the next two wait for the previous reduction only. So 2 nops per GPU, 8 in
    all, and the simulation must find all 4 contributions summed once everywhere."""
    inst, schedule = _k4_all_exchange()
    _verify_combining(inst, schedule)
    text = to_msccl_xml(inst, schedule)
    report = validate_xml(text, expect=inst)
    assert report.ok, [str(e) for e in report.errors[:5]]
    assert report.stats["nops"] == 8
    assert validate_xml(to_msccl_xml(inst, schedule, inplace=False), expect=inst).ok
    short = Schedule(tuple(s for s in schedule.sends if (s.src, s.dst) != (1, 0)))
    bad = validate_xml(to_msccl_xml(inst, short), expect=inst)
    assert "postcondition" in bad.kinds()
    assert any("3 of 4 contributions" in e.message and e.gpu == 0 for e in bad.errors)


def test_dropping_a_dependency_is_a_race() -> None:
    """In the K4 all-exchange AllReduce, GPU 0's receive-reduce from GPU 1 (the first write of
    o[0]) carries depid = the thread block that sends o[0] to GPU 3. Without it, that read and
    the write are unordered: nothing else links the two thread blocks (GPU 3's send to GPU 0
    does not wait for anything), so the validator must report a race on o[0] of GPU 0."""
    inst, schedule = _k4_all_exchange()
    root = ET.fromstring(to_msccl_xml(inst, schedule))
    gpu0 = root.find("gpu")
    assert gpu0 is not None
    to3 = next(tb for tb in gpu0.iter("tb") if tb.attrib["send"] == "3")
    from1 = next(tb for tb in gpu0.iter("tb") if tb.attrib["recv"] == "1")
    step = next(s for s in from1.iter("step") if s.attrib["type"] == "rrc")
    assert step.attrib["depid"] == to3.attrib["id"]
    step.attrib["depid"] = step.attrib["deps"] = "-1"
    report = validate_xml(ET.tostring(root, encoding="unicode"), expect=inst)
    assert any(e.kind == "race" and e.gpu == 0 and "o[0]" in e.message for e in report.errors)


def test_in_network_reduction_is_refused_and_relays_export() -> None:
    """Reduce to GPU 0 on a 3-GPU star. In-switch: GPUs 1 and 2 send their contributions to the
    switch (slot 0), which forwards the sum to GPU 0 (slot 1): valid only where the switch may
    reduce (``switch_reduce``), and refused by the export in one line, since MSCCL cannot add in
    a switch. Relayed: 1's part passes the switch to 0 (slots 0, 1), then 2's (slots 1, 2; it
    lands after the switch sent 1's on): two transfers 1->0 and 2->0, each reduced at GPU 0
    (two rrc steps)."""
    topo = star(3)
    coll = Collective(
        "reduce", 1, (((0, 0), (0, 1, 2)),), (((0, 0), (0,)),), pieces=1, root=0, combining=True
    )
    inst = make_instance(topo, coll, "1MB")
    in_switch = Schedule(
        (
            Send(0, (0, 0), 1, 3, reduce=True),
            Send(0, (0, 0), 2, 3, reduce=True),
            Send(1, (0, 0), 3, 0, reduce=True),
        )
    )
    assert [v.kind for v in verify(inst, in_switch).violations] == ["switch-reduce"]
    reducing = replace(inst, switch_reduce=True)
    _verify_combining(reducing, in_switch)
    with pytest.raises(ValidationError, match="cannot reduce in a switch") as refused:
        to_msccl_xml(reducing, in_switch)
    assert "\n" not in str(refused.value)
    relayed = Schedule(
        (
            Send(0, (0, 0), 1, 3, reduce=False),
            Send(1, (0, 0), 3, 0, reduce=True),
            Send(1, (0, 0), 2, 3, reduce=False),
            Send(2, (0, 0), 3, 0, reduce=True),
        )
    )
    _verify_combining(inst, relayed)
    assert [(t.src, t.dst, t.reduce) for t in logical_transfers(inst, relayed)] == [
        (1, 0, True),
        (2, 0, True),
    ]
    text = to_msccl_xml(inst, relayed)
    report = validate_xml(text, expect=inst)
    assert report.ok, [str(e) for e in report.errors[:5]]
    gpu0 = ET.fromstring(text).find("gpu")
    assert sorted(s.attrib["type"] for s in gpu0.iter("step")) == ["rrc", "rrc"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("topo_name", "kind"),
    [
        *((t, k) for t in ("dgx1", "ndv2-2", "amd") for k in ("reducescatter", "allreduce")),
        ("ndv2-3", "reduce"),
        ("ndv2-3", "allreduce"),
    ],
)
def test_combining_engine_schedules_export(topo_name: str, kind: str) -> None:
    """Combining schedules of the heuristic engine (reversed AllGather / Broadcast, + AllGather)
    export, and the simulation finds every contribution summed exactly once at its owners."""
    combine = pytest.importorskip("ccplan.pipeline.combining")
    from ccplan.contract import method_names
    from ccplan.instances.combining import make_combining

    if "heuristic" not in method_names():
        pytest.skip("no 'heuristic' method registered")
    topo = ndv2(3) if topo_name == "ndv2-3" else TOPOLOGIES[topo_name]()
    inst = make_instance(topo, make_combining(kind, topo, root=0 if kind == "reduce" else None), "16MB")
    outcome = combine.solve_combining(inst, "heuristic")
    assert outcome.schedule is not None
    assert verify(inst, outcome.schedule).ok
    for inplace in (True, False):
        # as `plan` does: more channels when a thread block would exceed the executor's 64 steps
        for channels in (1, 2, 4, 8):
            try:
                text = to_msccl_xml(inst, outcome.schedule, inplace=inplace, channels=channels)
            except ValidationError as exc:
                assert "steps per thread block" in str(exc)
                continue
            break
        else:
            pytest.fail("no channel count from 1 to 8 exports the schedule")
        report = validate_xml(text, expect=inst)
        assert report.ok, [str(e) for e in report.errors[:5]]


def test_reducescatter_ring_uses_rrs_and_rrc() -> None:
    """ReduceScatter on a directed 3-ring = reversed AllGather: chunk d starts at d+1, is reduced
    at d+2 and then at d. GPU u receives chunk u+1 in slot 1 and forwards the partial sum in the
    same slot (it does not want it: rrs, nothing stored), then receives chunk u and reduces it
    into its output (rrc)."""
    topo = directed_ring(3)
    g = (0, 1, 2)
    pre = tuple(((d, 0), g) for d in g)
    post = tuple(((d, 0), (d,)) for d in g)
    coll = Collective("reducescatter", 1, pre, post, pieces=3, combining=True)
    inst = make_instance(topo, coll, "3MB")
    sends = [Send(0, ((u - 1) % 3, 0), u, (u + 1) % 3, reduce=True) for u in g]
    sends += [Send(1, ((u + 1) % 3, 0), u, (u + 1) % 3, reduce=True) for u in g]
    schedule = Schedule(tuple(sends))
    _verify_combining(inst, schedule)
    for inplace in (True, False):
        text = to_msccl_xml(inst, schedule, inplace=inplace)
        report = validate_xml(text, expect=inst)
        assert report.ok, [str(e) for e in report.errors[:5]]
        types = [[s.attrib["type"] for s in tb.iter("step")] for tb in ET.fromstring(text).iter("tb")]
        assert types == [["s", "rrs", "rrc"]] * 3
        assert validate_xml(text).ok
    legacy = ET.fromstring(to_msccl_xml(inst, schedule, dialect="legacy"))
    assert legacy.attrib["coll"] == "reduce_scatter"


# --------------------------------------------------------------------------- the bad set
def test_every_bad_xml_is_mapped_and_rejected_for_its_reason() -> None:
    mapping = json.loads((DATA / "bad" / "expectations.json").read_text())
    files = sorted(p.name for p in (DATA / "bad").glob("*.xml"))
    unmapped = [f for f in files if f not in mapping]
    assert not unmapped, f"bad XML files without an entry in expectations.json: {unmapped}"
    assert sorted(mapping) == files, "expectations.json names files that do not exist"
    for name in files:
        want = mapping[name]["kind"]
        assert want in ERROR_KINDS
        report = validate_xml(DATA / "bad" / name)
        assert not report.ok, name
        assert want in report.kinds(), (name, [str(e) for e in report.errors])
        located = [e for e in report.errors if e.kind == want]
        assert all(e.gpu is not None for e in located if want not in ("attribute",)), name


def test_bad_set_covers_the_required_failures() -> None:
    kinds = {v["kind"] for v in json.loads((DATA / "bad" / "expectations.json").read_text()).values()}
    required = {
        "cycle",
        "hasdep",
        "nop-without-depid",
        "tb-ids",
        "steps",
        "unmatched",
        "order",
        "offset",
        "postcondition",
    }
    assert required <= kinds


def test_cycle_report_spans_gpus() -> None:
    report = validate_xml(DATA / "bad" / "cycle_across_gpus.xml")
    (cycle,) = [e for e in report.errors if e.kind == "cycle"]
    assert "across GPUs 0, 1" in cycle.message


def test_good_fixtures_pass() -> None:
    for path in sorted((DATA / "good").glob("*.xml")):
        report = validate_xml(path)
        assert report.ok, (path.name, [str(e) for e in report.errors])


def test_optional_heuristic_engine_round_trip() -> None:
    """If the heuristic engine is registered, its schedule exports and validates too."""
    from ccplan.contract import method_names
    from ccplan.pipeline.solve import solve

    if "heuristic" not in method_names():
        pytest.skip("no 'heuristic' method registered yet")
    topo = dgx1()
    inst = make_instance(topo, make_collective("allgather", topo), "8MB")
    result = solve(inst, "heuristic")
    assert result.verified and result.schedule is not None
    assert validate_xml(to_msccl_xml(inst, result.schedule), expect=inst).ok


def test_one_missing_step_attribute_is_one_error() -> None:
    """Only the unreadable step is reported: the steps after it keep their own s= numbers, so
    no spurious step-index errors follow (the file is the good ring-4 AllGather with one cnt
    removed)."""
    report = validate_xml(DATA / "bad" / "step_missing_cnt.xml")
    assert [e.kind for e in report.errors] == ["attribute"], [str(e) for e in report.errors]
    assert "cnt" in str(report.errors[0])


# --------------------------------------------------------------------------- automatic settings
def test_export_defaults_work_for_alltoall_and_long_allreduce(tmp_path: Path) -> None:
    """With no flags the exporter picks what the executor runtime accepts: AllToAll has no
    in-place layout, so it goes out-of-place; NDv2 x2 AllReduce with C=2 needs more than 64
    steps in one thread block on one channel, so it spreads over more channels. Both XMLs
    pass the validator against the instance, and an explicit setting is kept as given."""
    from ccplan.cli import main
    from ccplan.contract import SolveOptions
    from ccplan.export.msccl import export_msccl
    from ccplan.pipeline.solve import solve
    from ccplan.schedule import save_schedule

    ring = ring_topology(4)
    a2a = make_instance(ring, make_collective("alltoall", ring), "4MB")
    res = solve(a2a, "heuristic", SolveOptions(time_limit=2))
    assert res.verified and res.schedule is not None
    choice = export_msccl(a2a, res.schedule)
    assert choice.inplace is False and choice.channels == 1
    assert validate_xml(choice.text, expect=a2a).ok
    with pytest.raises(ValidationError, match="--out-of-place"):
        export_msccl(a2a, res.schedule, inplace=True)

    topo = ndv2(chassis=2)
    ar = make_instance(topo, make_collective("allreduce", topo, chunks=2), "1MB")
    res = solve(ar, "heuristic", SolveOptions(time_limit=2))
    assert res.verified and res.schedule is not None
    with pytest.raises(ValidationError, match=r"MSCCL_MAX_NUM_STEPS = 64.*--channels 2"):
        to_msccl_xml(ar, res.schedule)
    choice = export_msccl(ar, res.schedule)
    assert choice.channels >= 2 and choice.inplace is True
    assert any("steps per thread block" in t for t in choice.tried)
    assert validate_xml(choice.text, expect=ar).ok

    path = tmp_path / "ar.json"
    save_schedule(path, ar, res.schedule)
    out = tmp_path / "ar.xml"
    assert main(["export", str(path), "--format", "msccl-xml", "--out", str(out)]) == 0
    assert validate_xml(out, expect=ar).ok
