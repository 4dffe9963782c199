"""Slotted numbers of an Instance (DESIGN.md, canonical slot semantics) and size parsing."""

from __future__ import annotations

import pytest

from ccplan.errors import ValidationError
from ccplan.instances import make_collective, make_instance, make_topology, parse_size
from ccplan.instances.instance import format_size


def two_speed_pair():
    """GPU 0 <-> 1 at 50 GB/s (alpha 0.7 us) and 1 -> 2 at 12.5 GB/s (alpha 1.3 us), 2 -> 0 at 25 GB/s."""
    return make_topology(
        "pair",
        range(3),
        duplex_links=[(0, 1, 50.0, 0.7)],
        directed_links=[(1, 2, 12.5, 1.3), (2, 0, 25.0, 0.7)],
    )


def test_parse_size_decimal_units_like_teccl():
    """1KB = 1e3 bytes, 64MB = 64e6, 1GB = 1e9 (TE-CCL's decimal sizes); KiB is binary."""
    assert parse_size("1KB") == 1e3
    assert parse_size("64MB") == 64e6
    assert parse_size("1GB") == 1e9
    assert parse_size("2KiB") == 2048
    assert parse_size(4096) == 4096
    assert parse_size("1.5 MB") == 1.5e6
    assert format_size(1e9) == "1GB"


@pytest.mark.parametrize("bad", ["", "abc", "1XB", "-1MB", "0", 0, -5])
def test_parse_size_rejects_bad_input(bad):
    with pytest.raises(ValidationError, match="size"):
        parse_size(bad)


def test_fastest_rule_numbers_at_1GB():
    """AllGather of 1 GB on 3 GPUs, C=1: mu = 1e9/3 bytes.

    tau = mu / 50 GB/s = (1e9/3) / 50e9 s = 6666.67 us.  l = ceil(Bmax/B): 1 on the 50 GB/s
    links, 4 on 12.5 GB/s, 2 on 25 GB/s.  alpha/tau is ~1e-4 <= 0.1, so delta = 0 and L = l.
    """
    topo = two_speed_pair()
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    assert inst.chunk_bytes == pytest.approx(1e9 / 3)
    assert inst.tau_us == pytest.approx(1e9 / 3 / 50e9 * 1e6)
    by_link = {lk.key: i for i, lk in enumerate(topo.links)}
    assert [int(inst.occupancy[by_link[k]]) for k in [(0, 1), (1, 0), (1, 2), (2, 0)]] == [1, 1, 4, 2]
    assert list(inst.delay) == [0, 0, 0, 0]
    assert list(inst.latency) == list(inst.occupancy)


def test_small_size_makes_alpha_dominate():
    """At 3 KB (mu = 1000 B) tau = 1000 B / 50 GB/s = 0.02 us.

    delta = ceil(0.7 / 0.02) = 35 on NVLink and ceil(1.3 / 0.02) = 65 on the 12.5 GB/s link,
    whose occupancy is 4 slots: L = 69.
    """
    topo = two_speed_pair()
    inst = make_instance(topo, make_collective("allgather", topo), "3KB")
    assert inst.tau_us == pytest.approx(0.02)
    i12 = topo.link_index[(1, 2)]
    i01 = topo.link_index[(0, 1)]
    assert int(inst.delay[i01]) == 35
    assert int(inst.delay[i12]) == 65
    assert int(inst.latency[i12]) == 69


def test_alpha_threshold_zero_is_the_papers_literal_ceil():
    """With alpha_threshold=0 any alpha > 0 costs at least one slot (paper: delta = ceil(alpha/tau))."""
    topo = two_speed_pair()
    inst = make_instance(topo, make_collective("allgather", topo), "1GB", alpha_threshold=0.0)
    assert list(inst.delay) == [1, 1, 1, 1]


def test_slowest_and_explicit_rules():
    """Slowest rule: tau = mu / 12.5 GB/s, so every link fits in one slot (l = 1).

    Explicit tau = mu/25GBps: the 50 GB/s links need half a slot -> l = 1, the 12.5 GB/s link
    needs 2 slots.
    """
    topo = two_speed_pair()
    coll = make_collective("allgather", topo)
    slow = make_instance(topo, coll, "1GB", tau_rule="slowest")
    assert slow.tau_us == pytest.approx(1e9 / 3 / 12.5e9 * 1e6)
    assert list(slow.occupancy) == [1, 1, 1, 1]
    tau = 1e9 / 3 / 25e9 * 1e6
    expl = make_instance(topo, coll, "1GB", tau_rule="explicit", tau_us=tau)
    assert int(expl.occupancy[topo.link_index[(1, 2)]]) == 2
    assert int(expl.occupancy[topo.link_index[(0, 1)]]) == 1


def test_outages_set_omega_to_zero_and_are_validated():
    topo = two_speed_pair()
    coll = make_collective("allgather", topo)
    inst = make_instance(topo, coll, "1MB", outages=[(0, 1, 3)])
    i01 = topo.link_index[(0, 1)]
    assert inst.omega(i01, 3) == 0
    assert inst.omega(i01, 2) == 1
    with pytest.raises(ValidationError, match="no link 2->1"):
        make_instance(topo, coll, "1MB", outages=[(2, 1, 0)])


def test_instance_round_trip_through_dict():
    topo = two_speed_pair()
    inst = make_instance(
        topo,
        make_collective("broadcast", topo, chunks=3, root=1),
        "4MB",
        single_port=True,
        outages=[(1, 2, 5)],
    )
    from ccplan.instances import Instance

    again = Instance.from_dict(inst.to_dict())
    assert again.to_dict() == inst.to_dict()
    assert again.collective.chunk_ids == ((1, 0), (1, 1), (1, 2))


def test_algbw_is_output_bytes_over_time():
    """1 GB delivered in 40000 us -> 1e9 B / 4e-2 s = 25 GB/s."""
    topo = two_speed_pair()
    inst = make_instance(topo, make_collective("allgather", topo), "1GB")
    assert inst.algbw_GBps(40000.0) == pytest.approx(25.0)


def test_collectives_name_switches_as_errors():
    topo = make_topology("star", range(3), duplex_links=[(i, 3, 50, 0.35) for i in range(3)], switches=[3])
    with pytest.raises(ValidationError, match="root 3 is a switch"):
        make_collective("broadcast", topo, root=3)
    with pytest.raises(ValidationError, match="unknown"):
        make_collective("allreduce-typo", topo)
    coll = make_collective("allgather", topo, chunks=2)
    assert len(coll.demands) == 3 * 2 * 2  # each of 3 GPUs needs 2 chunks from each of 2 others
