"""File formats: round trips (topology, schedule, collective) and malformed files.

The malformed files live in ``tests/data/bad``; ``EXPECTED.json`` there maps every file name
to a substring its ValidationError message must contain. ``topology_*`` files are read with
``Topology.from_json``, ``schedule_*`` files with ``load_schedule``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccplan.errors import ValidationError
from ccplan.instances.builtin import TOPOLOGIES, resolve_topology
from ccplan.instances.catalog import COLLECTIVES, collective_from_dict, make_collective
from ccplan.instances.collectives import Collective
from ccplan.instances.instance import Instance, make_instance
from ccplan.instances.topology import Link, Node, Topology
from ccplan.schedule.core import Schedule, Send
from ccplan.schedule.io import load_schedule, save_schedule
from ccplan.schedule.verify import verify

BAD_DIR = Path(__file__).parent / "data" / "bad"
EXPECTED_FILE = BAD_DIR / "EXPECTED.json"


# ---------------------------------------------------------------------- topology JSON
@pytest.mark.parametrize("name", list(TOPOLOGIES))
def test_builtin_topology_json_round_trip(name: str, tmp_path: Path) -> None:
    """to_json(file) -> from_json gives an equal topology for every built-in at defaults."""
    topo = resolve_topology(name)
    path = tmp_path / f"{name}.json"
    topo.to_json(path)
    back = Topology.from_json(path)
    assert back == topo
    assert back.to_dict() == topo.to_dict()


@pytest.mark.parametrize(
    "name,params",
    [
        ("ndv2", {"chassis": 4}),
        ("dgx2", {"chassis": 3}),
        ("amd", {"chassis": 2}),
        ("ring", {"bidirectional": False}),
    ],
)
def test_builtin_topology_json_round_trip_params(name: str, params: dict[str, Any], tmp_path: Path) -> None:
    """Round trip of the variants with switches or one-way links."""
    topo = resolve_topology(name, **params)
    path = tmp_path / "t.json"
    topo.to_json(path)
    assert Topology.from_json(path) == topo


@st.composite
def small_topologies(draw: st.DrawFn) -> Topology:
    """1-6 nodes with arbitrary distinct ids (at least one GPU) and any set of directed links."""
    ids = draw(st.lists(st.integers(0, 50), min_size=1, max_size=6, unique=True))
    kinds = draw(st.lists(st.sampled_from(["gpu", "switch"]), min_size=len(ids), max_size=len(ids)))
    kinds[draw(st.integers(0, len(ids) - 1))] = "gpu"
    pairs = [(a, b) for a in ids for b in ids if a != b]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=12)) if pairs else []
    links = tuple(
        Link(
            a,
            b,
            draw(st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)),
            draw(st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)),
        )
        for a, b in chosen
    )
    name = draw(st.text(min_size=1, max_size=12))
    nodes = tuple(Node(i, k) for i, k in zip(ids, kinds, strict=True))  # type: ignore[arg-type]
    return Topology(name=name, nodes=nodes, links=links)


@settings(max_examples=150, deadline=None)
@given(small_topologies())
def test_random_topology_json_round_trip(topo: Topology) -> None:
    """Any valid topology survives to_json -> JSON text -> from_dict exactly (floats included)."""
    back = Topology.from_dict(json.loads(topo.to_json()))
    assert back == topo
    assert back.bandwidth.tolist() == topo.bandwidth.tolist()
    assert back.alpha.tolist() == topo.alpha.tolist()
    assert back.gpus == topo.gpus and back.switches == topo.switches


# ---------------------------------------------------------------------- schedule files
def _line3_allgather(**options: Any) -> tuple[Instance, Schedule]:
    """AllGather on the line 0-1-2 (50 GB/s, alpha 0.7 us), size 3MB, one chunk per GPU.

    Hand derivation: chunk = 3MB / 3 = 1MB, tau = 1e6 B / 50 GB/s = 20 us, alpha/tau =
    0.035 <= 0.1 so delta = 0, l = 1, L = 1. Slot 0: every GPU sends its chunk to each
    neighbour; slot 1: GPU 1 forwards 0's chunk to 2 and 2's chunk to 0. Every link carries
    at most one chunk per slot; the end chunks need 2 hops, so the makespan is 2.
    """
    topo = resolve_topology("line", n=3)
    inst = make_instance(topo, make_collective("allgather", topo), "3MB", **options)
    sends = [
        ((0, 0), 0, 1, 0),
        ((1, 0), 1, 0, 0),
        ((1, 0), 1, 2, 0),
        ((2, 0), 2, 1, 0),
        ((0, 0), 1, 2, 1),
        ((2, 0), 1, 0, 1),
    ]
    return inst, Schedule.of(sends, method="hand")


@pytest.mark.parametrize(
    "options",
    [{}, {"tau_rule": "explicit", "tau_us": 20.0, "capacity": 2, "outages": [(0, 1, 5), (2, 1, 7)]}],
    ids=["defaults", "explicit-tau-outages"],
)
def test_schedule_file_round_trip(options: dict[str, Any], tmp_path: Path) -> None:
    """save_schedule -> load_schedule keeps the instance dict, the sends and the method."""
    inst, sched = _line3_allgather(**options)
    report = verify(inst, sched)
    assert report.ok, report.violations
    assert report.makespan_slots == 2
    path = tmp_path / "s.json"
    save_schedule(path, inst, sched)
    inst2, sched2 = load_schedule(path)
    assert inst2.to_dict() == inst.to_dict()
    assert inst2.tau_us == inst.tau_us == pytest.approx(20.0)
    assert sched2.sends == sched.sends
    assert sched2.method == "hand"
    assert verify(inst2, sched2).makespan_slots == 2
    assert not list(tmp_path.glob("*.tmp")), "atomic write left its temporary file"


def test_schedule_keeps_reduce_flag(tmp_path: Path) -> None:
    """The optional ``reduce`` flag of a send survives the file (format test only; a
    combining collective, since a data-movement one refuses the flag)."""
    topo = resolve_topology("line", n=3)
    inst = make_instance(topo, make_collective("reducescatter", topo), "3MB")
    sched = Schedule((Send(0, (0, 0), 0, 1, reduce=True), Send(0, (1, 0), 1, 0)), method="x")
    path = tmp_path / "r.json"
    save_schedule(path, inst, sched)
    _, back = load_schedule(path)
    assert back.sends == sched.sends
    assert [s.reduce for s in back.sends] == [s.reduce for s in sched.sends]


# ---------------------------------------------------------------------- collectives
@pytest.mark.parametrize("kind", [*sorted(COLLECTIVES), "custom"])
def test_collective_round_trip(kind: str) -> None:
    """to_dict -> JSON text -> from_dict gives an equal collective, for every registered
    collective and for ``custom`` (explicit pre/post tables), on a network with a switch."""
    topo = resolve_topology("star_switch", n=4)  # GPUs 0-3, switch 4
    if kind == "custom":
        coll = Collective(
            kind="custom",
            chunks=1,
            pre=(((0, 0), (0,)), ((1, 0), (1, 2))),
            post=(((0, 0), (0, 1, 3)), ((1, 0), (1, 2, 3))),
            pieces=2,
        )
    else:
        coll = make_collective(kind, topo, chunks=2, root=2, dests=(1, 3))
    data = json.loads(json.dumps(coll.to_dict()))
    back = collective_from_dict(data, topo)
    assert back == coll
    assert back.demands == coll.demands


# ---------------------------------------------------------------------- malformed files
def _expected() -> dict[str, str]:
    data = json.loads(EXPECTED_FILE.read_text())
    assert isinstance(data, dict)
    return data


def _bad_files() -> list[str]:
    return sorted(p.name for p in BAD_DIR.iterdir() if p.name != EXPECTED_FILE.name)


LOADERS = {"topology_": Topology.from_json, "schedule_": load_schedule}


def test_every_bad_file_has_an_entry() -> None:
    """No malformed file goes untested, and no entry points at a missing file."""
    expected = _expected()
    assert _bad_files(), "tests/data/bad is empty"
    assert set(_bad_files()) == set(expected)
    for name, substring in expected.items():
        assert isinstance(substring, str) and substring, name
        assert any(name.startswith(prefix) for prefix in LOADERS), f"{name}: no loader for this prefix"


@pytest.mark.parametrize("name", _bad_files())
def test_bad_file_is_rejected(name: str) -> None:
    """Loading the file raises ValidationError whose message contains the expected text."""
    expected = _expected()
    assert name in expected, f"{name} has no entry in EXPECTED.json"
    loader = next(fn for prefix, fn in LOADERS.items() if name.startswith(prefix))
    with pytest.raises(ValidationError) as info:
        loader(BAD_DIR / name)
    assert expected[name] in str(info.value)


def test_schedule_rejects_non_send_entries() -> None:
    """A stray non-Send in ``Schedule.sends`` is a ValidationError, not a sorting TypeError."""
    with pytest.raises(ValidationError, match=r"schedule\.sends must hold Send objects"):
        Schedule((Send(0, (0, 0), 0, 1), "0 -> 1"))  # type: ignore[arg-type]
