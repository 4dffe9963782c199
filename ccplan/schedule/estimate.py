"""Memory estimates of the schedule layer: replaying a schedule (verify, simulate, export) and
loading a columnar schedule file, each checked against the budget before the work starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ccplan.instances.estimate import slots_per_hop
from ccplan.limits import (
    BYTES_PER_HORIZON_SLOT,
    BYTES_PER_LINK_SLOT,
    BYTES_PER_SEND,
    BYTES_PER_SEND_COLUMNS,
    Estimate,
)

if TYPE_CHECKING:
    from ccplan.instances.instance import Instance
    from ccplan.schedule.core import Schedule

def estimate_columnar_load(sends: int, where: str) -> Estimate:
    """Memory of loading a columnar schedule file (and of the column verifier after it) that
    declares ``sends`` sends (:data:`BYTES_PER_SEND_COLUMNS` each), known from the arrays'
    headers before anything is decompressed."""
    return Estimate("load", float(sends) * BYTES_PER_SEND_COLUMNS, f"{where} declaring {sends} sends")


def estimate_schedule(
    instance: Instance,
    schedule: Schedule,
    what: str = "verify",
    *,
    per_send: int = BYTES_PER_SEND,
    per_link_slot: int = BYTES_PER_LINK_SLOT,
) -> Estimate:
    """Memory of replaying ``schedule`` (verify, simulate, export): its sends and link-slots
    (:data:`BYTES_PER_SEND` and :data:`BYTES_PER_LINK_SLOT` each unless given).

    The verifier records every slot a send occupies its link (``l`` slots per send), so the
    sum of ``l`` over the sends is exact here, not estimated.
    """
    occupancy, _delay = slots_per_hop(instance)
    # from the columns, so a schedule kept as columns makes no Send objects here
    cols = schedule.columns()
    link = instance.topology.links_between(cols["src"], cols["dst"])
    # a send on no link counts one slot
    occ = np.append(np.asarray(occupancy, dtype=float), 1.0)
    link_slots = float(occ[link].sum())
    if instance.single_port:
        link_slots *= 3
    last = schedule.last_slot + 1
    total = len(schedule) * per_send + link_slots * per_link_slot
    total += last * BYTES_PER_HORIZON_SLOT
    driver = (
        f"{len(schedule)} sends occupying {link_slots:.3g} link-slots "
        f"(tau={instance.tau_us:.3g} us)"
    )
    if last * BYTES_PER_HORIZON_SLOT > link_slots * per_link_slot:
        driver = f"a schedule whose last send is at slot {last - 1}"
    return Estimate(what, float(total), driver)
