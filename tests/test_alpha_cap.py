"""``alpha_cap`` (``--alpha-cap``) takes TE-CCL's smallest alpha: over every link, zeros included.

TE-CCL (``reference/teccl.md`` §2.1, ``Topology.get_min_alpha``) takes the minimum of the
alpha matrix entries ``>= 0``: missing links are ``-1`` and left out, a link with alpha 0 is
kept. So one zero-alpha link makes ``min_alpha / tau = 0``, never above the cap, and tau is
not raised. ccplan used the smallest *positive* alpha, which raised tau there.
"""

from __future__ import annotations

import pytest

from ccplan.instances import make_collective, make_instance
from ccplan.instances.topology import make_topology
from ccplan.schedule.verify import verify
from tests.helpers import greedy_schedule


def _line(alpha_01: float):  # type: ignore[no-untyped-def]
    """0 <-> 1 at 50 GB/s with ``alpha_01``, 1 <-> 2 at 50 GB/s with alpha 1.3 us."""
    return make_topology("cap-line", range(3), duplex_links=[(0, 1, 50.0, alpha_01), (1, 2, 50.0, 1.3)])


def test_a_zero_alpha_link_keeps_tau_as_teccl_does() -> None:
    """AllGather of 3 KB on 3 GPUs: chunk 1000 B, tau = 1000 B / 50 GB/s = 0.02 us.

    With alphas 0 and 1.3 us, TE-CCL's min alpha is 0: 0 / 0.02 = 0 <= 200, tau stays 0.02 us
    and the 1.3 us link spans ceil(1.3 / 0.02) = 65 slots. With alphas 0.5 and 1.3 us the min
    is 0.5: 0.5 / 0.02 = 25 <= 200, no cap either; with cap 10, 25 > 10 raises tau to
    0.5 / 10 = 0.05 us (delta of the 1.3 us link: ceil(26) = 26)."""
    for alpha_01, cap, tau, delta in ((0.0, 200.0, 0.02, 65), (0.0, 10.0, 0.02, 65),
                                      (0.5, 200.0, 0.02, 65), (0.5, 10.0, 0.05, 26)):
        topo = _line(alpha_01)
        inst = make_instance(topo, make_collective("allgather", topo, chunks=1), "3KB", alpha_cap=cap)
        assert inst.uncapped_tau_us == pytest.approx(0.02)
        assert inst.tau_us == pytest.approx(tau), (alpha_01, cap)
        assert int(inst.delay.max()) == delta
        assert verify(inst, greedy_schedule(inst)).ok
