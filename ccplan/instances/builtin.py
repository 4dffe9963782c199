"""Built-in topologies: the paper machines (DGX1, NDv2, DGX2, AMD MI250) and generic families.

The paper machines follow ``../shared/reference/teccl.md`` section 1 (TE-CCL's
``teccl/topologies``) with the defects documented there fixed rather than reproduced:

- NDv2 with 2 chassis serves all 16 GPUs (TE-CCL flags GPU 0 as a switch);
- DGX2 honours ``chassis`` (TE-CCL hard-codes 2);
- AMD with several chassis makes every GCD a GPU and gives every small switch an uplink
  (TE-CCL has a ``> 16`` test and an off-by-one in its switch indices);
- the 2-D mesh has no row wrap-around link.

Alpha values are the paper's (TE-CCL Table 3): 0.7 us on NVLink/xGMI, 1.3 us on an
inter-node NIC, 0.35 us on NVSwitch, 2.6 us on the DGX2 inter-node link. TE-CCL leaves the
DGX1 and AMD alphas to user input (default 0); here they are the NVLink/xGMI 0.7 us.

Node ids: GPUs come first (``0 .. G-1``), switches after them. Every factory's docstring
gives the mapping to TE-CCL's ids where TE-CCL has the topology.

:func:`resolve_topology` turns a CLI ``--topology`` value (a registered name or a JSON file)
plus parameters into a :class:`~ccplan.instances.topology.Topology`; :data:`TOPOLOGIES` is
the registry and :func:`catalog` the table printed by ``ccplan topologies``.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from ccplan.errors import ValidationError
from ccplan.instances.topology import Topology, make_topology

logger = logging.getLogger(__name__)

Edge = tuple[int, int, float, float]
"""``(a, b, bandwidth_GBps, alpha_us)``: one cable (duplex) or one directed link."""

# Alphas of TE-CCL Table 3, in microseconds.
ALPHA_NVLINK_US = 0.7
ALPHA_NIC_US = 1.3
ALPHA_NVSWITCH_US = 0.35
ALPHA_DGX2_NIC_US = 2.6

NVLINK_UNIT_GBPS = 25.0
"""DGX1/NDv2 NVLink unit: a pair joined by two NVLinks has 50 GB/s, by one 25 GB/s."""

DGX1_DOUBLE_PAIRS: tuple[tuple[int, int], ...] = (
    (0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7),
)  # fmt: skip
"""DGX1 GPU pairs joined by two NVLinks (50 GB/s each way), teccl.md 1.1."""

DGX1_SINGLE_PAIRS: tuple[tuple[int, int], ...] = (
    (0, 2), (0, 3), (1, 2), (1, 5), (3, 7), (4, 6), (4, 7), (5, 6),
)  # fmt: skip
"""DGX1 GPU pairs joined by one NVLink (25 GB/s each way), teccl.md 1.1."""

NIC_GBPS = 12.5
"""NDv2 and DGX2 inter-node link bandwidth (TE-CCL overrides the measured 9.52 GB/s)."""

NVSWITCH_GBPS = 125.0
"""DGX2 GPU <-> NVSwitch bandwidth, each direction."""

XGMI_UNIT_GBPS = 50.0
"""AMD MI250 bandwidth of one xGMI link; a pair joined by w links has w * 50 GB/s."""

AMD_XGMI_PAIRS: tuple[tuple[int, int, int], ...] = (
    # w = 4 (200 GB/s): the two GCDs of one MI250 package.
    (0, 1, 4), (2, 3, 4), (4, 5, 4), (6, 7, 4), (8, 9, 4), (10, 11, 4), (12, 13, 4), (14, 15, 4),
    # w = 2 (100 GB/s)
    (0, 4, 2), (3, 7, 2), (8, 12, 2), (11, 15, 2),
    # w = 1 (50 GB/s)
    (0, 8, 1), (1, 5, 1), (1, 9, 1), (1, 10, 1), (2, 6, 1), (2, 9, 1), (2, 10, 1), (3, 11, 1),
    (4, 6, 1), (5, 6, 1), (5, 7, 1), (9, 13, 1), (10, 14, 1), (12, 14, 1), (13, 14, 1), (13, 15, 1),
)  # fmt: skip
"""AMD MI250 xGMI adjacency ``(a, b, w)`` of one 16-GCD chassis, teccl.md 1.4."""

AMD_NIC_GBPS = 25.0
"""AMD multi-chassis: GCD pair <-> small switch and small switch <-> global switch."""

GCDS_PER_AMD_CHASSIS = 16
GPUS_PER_DGX1 = 8
GPUS_PER_DGX2 = 16


# ---------------------------------------------------------------------- parameter checks
def _check_int(value: object, name: str, minimum: int, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError(f"{where}: parameter {name!r} must be an integer, got {value!r}")
    if value < minimum:
        raise ValidationError(f"{where}: parameter {name!r} must be >= {minimum}, got {value}")
    return value


def _finite_number(value: object) -> TypeGuard[int | float]:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the float range
        return False


def _check_positive(value: object, name: str, where: str) -> float:
    if not _finite_number(value) or value <= 0:
        raise ValidationError(f"{where}: parameter {name!r} must be a positive finite number, got {value!r}")
    return float(value)


def _check_nonneg(value: object, name: str, where: str) -> float:
    if not _finite_number(value) or value < 0:
        raise ValidationError(
            f"{where}: parameter {name!r} must be a non-negative finite number, got {value!r}"
        )
    return float(value)


def _check_bool(value: object, name: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(f"{where}: parameter {name!r} must be true or false, got {value!r}")
    return value


def _link_params(bandwidth_GBps: object, alpha_us: object, where: str) -> tuple[float, float]:
    return (
        _check_positive(bandwidth_GBps, "bandwidth_GBps", where),
        _check_nonneg(alpha_us, "alpha_us", where),
    )


def _guard(where: str, num_nodes: int, num_links: int) -> None:
    """Refuse a topology over the memory budget from its node and link counts, before any of
    its link lists exists (``fully_connected`` with n = 100,000 would build 10^10 of them)."""
    from ccplan.instances.estimate import estimate_topology

    estimate_topology(where, num_nodes, num_links).check()


def _dedupe_pairs(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Unordered pairs without repeats, in first-seen order.

    Wrap-around neighbours coincide on short rings (a 2-ring's right and left neighbour are
    the same node); a cable must still appear once.
    """
    seen: set[tuple[int, int]] = set()
    out = []
    for a, b in pairs:
        key = (min(a, b), max(a, b))
        if a != b and key not in seen:
            seen.add(key)
            out.append((a, b))
    return out


# ---------------------------------------------------------------------- paper machines
def _dgx1_cables(offset: int = 0) -> list[Edge]:
    """The 16 NVLink cables of one DGX1 / NDv2 chassis with GPU ids shifted by ``offset``."""
    cables: list[Edge] = []
    for pairs, width in ((DGX1_DOUBLE_PAIRS, 2), (DGX1_SINGLE_PAIRS, 1)):
        for a, b in pairs:
            cables.append((offset + a, offset + b, width * NVLINK_UNIT_GBPS, ALPHA_NVLINK_US))
    return cables


def dgx1() -> Topology:
    """NVIDIA DGX1 (V100): 8 GPUs in a hybrid cube-mesh of NVLinks, no switch.

    Pairs joined by two NVLinks carry 50 GB/s each way, pairs joined by one 25 GB/s
    (teccl.md 1.1); each GPU has 6 NVLinks, i.e. 150 GB/s out. Alpha 0.7 us on every link
    (TE-CCL takes it from user input, default 0). Ids 0..7 are TE-CCL's ids.
    """
    return make_topology(
        "dgx1",
        gpus=range(GPUS_PER_DGX1),
        duplex_links=_dgx1_cables(),
        description="DGX1: 8 V100 GPUs, NVLink 50/25 GB/s, alpha 0.7 us (teccl.md 1.1)",
    )


def ndv2(chassis: int = 2) -> Topology:
    """Azure NDv2: chassis of 8 V100 GPUs wired as a DGX1, joined by 12.5 GB/s NICs.

    GPU g of chassis c has id ``8c + g``; intra-chassis links are the DGX1 graph
    (50/25 GB/s, alpha 0.7 us). Inter-chassis links are directed, 12.5 GB/s, alpha 1.3 us:

    - ``chassis == 1``: the DGX1 graph alone.
    - ``chassis == 2``: the two links ``0 -> 9`` and ``8 -> 1`` (GPU0 of each chassis sends
      to GPU1 of the other), as in TE-CCL, but all 16 nodes are GPUs; TE-CCL flags GPU 0 as
      a switch and so serves only 15 GPUs (teccl.md 1.2). Ids equal TE-CCL's.
    - ``chassis >= 3``: TE-CCL's single global switch: GPU0 of every chassis -> switch and
      switch -> GPU1 of every chassis. GPUs keep ids ``0 .. 8k-1`` and the switch is
      ``8k``; TE-CCL puts the switch at 0 and GPU g of chassis c at ``1 + 8c + g``, so
      TE-CCL id ``i`` is our ``i - 1`` for GPUs and our ``8k`` for the switch.
    """
    where = "ndv2"
    k = _check_int(chassis, "chassis", 1, where)
    _guard(where, GPUS_PER_DGX1 * k + 1, (2 * len(_dgx1_cables()) + 2) * k)
    cables: list[Edge] = []
    for c in range(k):
        cables.extend(_dgx1_cables(GPUS_PER_DGX1 * c))
    gpus = range(GPUS_PER_DGX1 * k)
    directed: list[Edge] = []
    switches: list[int] = []
    if k == 2:
        directed = [(0, 9, NIC_GBPS, ALPHA_NIC_US), (8, 1, NIC_GBPS, ALPHA_NIC_US)]
    elif k >= 3:
        switch = GPUS_PER_DGX1 * k
        switches = [switch]
        for c in range(k):
            directed.append((GPUS_PER_DGX1 * c, switch, NIC_GBPS, ALPHA_NIC_US))
            directed.append((switch, GPUS_PER_DGX1 * c + 1, NIC_GBPS, ALPHA_NIC_US))
    return make_topology(
        f"ndv2-{k}",
        gpus=gpus,
        duplex_links=cables,
        directed_links=directed,
        switches=switches,
        description=f"NDv2 x{k}: DGX1 chassis joined by 12.5 GB/s NICs, alpha 1.3 us (teccl.md 1.2)",
    )


def dgx2(chassis: int = 2) -> Topology:
    """NVIDIA DGX2: chassis of 16 V100 GPUs around one NVSwitch, joined by 12.5 GB/s NICs.

    Ids: GPU s (local 0..15) of chassis c is ``16c + s``; the NVSwitch of chassis c is
    ``16k + c`` (GPUs first, then switches). TE-CCL (2 chassis only) puts the switch of
    chassis c at ``17c`` and local GPU s at ``17c + s + 1``.

    Links: every GPU <-> its own NVSwitch, both directions, 125 GB/s, alpha 0.35 us; no direct
    GPU-GPU link inside a chassis. Inter-chassis, directed, 12.5 GB/s, alpha 2.6 us: the GPU
    with odd local index s in chassis i sends to local GPU s-1 in chassis ``(i + 1) mod k``
    (teccl.md 1.3). For k = 2 this is exactly TE-CCL's rule "to the other chassis"
    (2->18 ... 33->15 in its ids = 1->16 ... 31->14 in ours); TE-CCL ignores ``chassis`` and
    always builds 2, here k = 1 gives one chassis and k >= 3 a directed ring of chassis.
    """
    where = "dgx2"
    k = _check_int(chassis, "chassis", 1, where)
    _guard(where, (GPUS_PER_DGX2 + 1) * k, (2 * GPUS_PER_DGX2 + GPUS_PER_DGX2 // 2) * k)
    n_gpus = GPUS_PER_DGX2 * k
    cables: list[Edge] = []
    directed: list[Edge] = []
    for c in range(k):
        switch = n_gpus + c
        for s in range(GPUS_PER_DGX2):
            cables.append((GPUS_PER_DGX2 * c + s, switch, NVSWITCH_GBPS, ALPHA_NVSWITCH_US))
    if k >= 2:
        for i in range(k):
            j = (i + 1) % k
            for s in range(1, GPUS_PER_DGX2, 2):
                directed.append(
                    (GPUS_PER_DGX2 * i + s, GPUS_PER_DGX2 * j + s - 1, NIC_GBPS, ALPHA_DGX2_NIC_US)
                )
    return make_topology(
        f"dgx2-{k}",
        gpus=range(n_gpus),
        duplex_links=cables,
        directed_links=directed,
        switches=range(n_gpus, n_gpus + k),
        description=f"DGX2 x{k}: 16 GPUs per NVSwitch (125 GB/s), 12.5 GB/s NICs (teccl.md 1.3)",
    )


def amd(chassis: int = 1) -> Topology:
    """AMD MI250: chassis of 16 GCDs on xGMI, joined through NIC switches.

    Intra-chassis (teccl.md 1.4): the xGMI adjacency with w = 4/2/1 links per pair, i.e.
    200/100/50 GB/s each way, alpha 0.7 us (TE-CCL takes alpha from input, default 0).
    Every GCD has 7 xGMI links (350 GB/s out).

    With ``chassis == k > 1`` every chassis has 8 small switches (one NIC per GCD pair):
    small switch m of chassis c joins GCDs 2m and 2m+1 at 25 GB/s both ways, and every small
    switch has a 25 GB/s duplex uplink to one global switch; alpha 1.3 us on all switch
    links. TE-CCL's two bugs are fixed: every GCD is a GPU and every small switch is a
    switch with an uplink, all at 25 GB/s.

    Ids: GCD g of chassis c is ``16c + g``; small switch m of chassis c is ``16k + 8c + m``;
    the global switch is ``24k``. TE-CCL's intended ids are ``1 + 24c + g`` for GCDs,
    ``1 + 24c + 16 + m`` for small switches and 0 for the global switch.
    """
    where = "amd"
    k = _check_int(chassis, "chassis", 1, where)
    _guard(where, 24 * k + 1, (2 * len(AMD_XGMI_PAIRS) + 2 * 24) * k)
    n_gpus = GCDS_PER_AMD_CHASSIS * k
    cables: list[Edge] = []
    for c in range(k):
        base = GCDS_PER_AMD_CHASSIS * c
        for a, b, w in AMD_XGMI_PAIRS:
            cables.append((base + a, base + b, w * XGMI_UNIT_GBPS, ALPHA_NVLINK_US))
    switches: list[int] = []
    if k > 1:
        global_switch = 24 * k
        for c in range(k):
            for m in range(GCDS_PER_AMD_CHASSIS // 2):
                small = n_gpus + 8 * c + m
                switches.append(small)
                for g in (2 * m, 2 * m + 1):
                    cables.append((GCDS_PER_AMD_CHASSIS * c + g, small, AMD_NIC_GBPS, ALPHA_NIC_US))
                cables.append((small, global_switch, AMD_NIC_GBPS, ALPHA_NIC_US))
        switches.append(global_switch)
    return make_topology(
        f"amd-{k}",
        gpus=range(n_gpus),
        duplex_links=cables,
        switches=switches,
        description=f"AMD MI250 x{k}: 16 GCDs on xGMI 200/100/50 GB/s, 25 GB/s NICs (teccl.md 1.4)",
    )


# ---------------------------------------------------------------------- generic families
def ring(
    n: int = 8, bidirectional: bool = True, bandwidth_GBps: float = 50.0, alpha_us: float = ALPHA_NVLINK_US
) -> Topology:
    """Ring of n GPUs: GPU i is joined to i+1 mod n (both ways unless ``bidirectional=False``).

    A bidirectional ring has 2n links (2 for n = 2: one cable); a unidirectional one has n
    links ``i -> i+1 mod n``.
    """
    where = "ring"
    size = _check_int(n, "n", 2, where)
    _guard(where, size, 2 * size)
    both = _check_bool(bidirectional, "bidirectional", where)
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    pairs = [(i, (i + 1) % size) for i in range(size)]
    if both:
        duplex = [(a, b, bw, alpha) for a, b in _dedupe_pairs(pairs)]
        return make_topology(f"ring-{size}", gpus=range(size), duplex_links=duplex,
                             description=f"bidirectional ring of {size} GPUs")
    directed = [(a, b, bw, alpha) for a, b in pairs]
    return make_topology(f"ring-{size}-uni", gpus=range(size), directed_links=directed,
                         description=f"unidirectional ring of {size} GPUs")


def line(n: int = 4, bandwidth_GBps: float = 50.0, alpha_us: float = ALPHA_NVLINK_US) -> Topology:
    """Chain of n GPUs: GPU i <-> i+1 for i < n-1 (2(n-1) links)."""
    where = "line"
    size = _check_int(n, "n", 2, where)
    _guard(where, size, 2 * size)
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    cables = [(i, i + 1, bw, alpha) for i in range(size - 1)]
    return make_topology(f"line-{size}", gpus=range(size), duplex_links=cables,
                         description=f"line of {size} GPUs")


def fully_connected(n: int = 4, bandwidth_GBps: float = 50.0, alpha_us: float = ALPHA_NVLINK_US) -> Topology:
    """Every pair of n GPUs joined both ways (n(n-1) links)."""
    where = "fully_connected"
    size = _check_int(n, "n", 2, where)
    _guard(where, size, size * (size - 1))
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    cables = [(a, b, bw, alpha) for a in range(size) for b in range(a + 1, size)]
    return make_topology(f"fully-connected-{size}", gpus=range(size), duplex_links=cables,
                         description=f"all-to-all links among {size} GPUs")


def _grid(rows: int, cols: int, wrap: bool, where: str) -> list[tuple[int, int]]:
    """Unordered neighbour pairs of a rows x cols grid; GPU (r, c) has id ``r * cols + c``."""
    r_max = _check_int(rows, "rows", 1, where)
    c_max = _check_int(cols, "cols", 1, where)
    if r_max * c_max < 2:
        raise ValidationError(f"{where}: rows * cols must be >= 2, got {rows} x {cols}")
    pairs = []
    for r in range(r_max):
        for c in range(c_max):
            here = r * c_max + c
            # Right and down neighbours only; the row boundary is respected (no (r, C-1) -> (r+1, 0)).
            if c + 1 < c_max or wrap:
                pairs.append((here, r * c_max + (c + 1) % c_max))
            if r + 1 < r_max or wrap:
                pairs.append((here, ((r + 1) % r_max) * c_max + c))
    return _dedupe_pairs(pairs)


def torus2d(
    rows: int = 4, cols: int = 4, bandwidth_GBps: float = 50.0, alpha_us: float = ALPHA_NVLINK_US
) -> Topology:
    """2-D torus: GPU (r, c) = id ``r*cols + c`` <-> its four neighbours with wrap-around.

    rows, cols >= 3 give 2*rows*cols cables (4*rows*cols links); a dimension of 2 has one
    cable per pair (no doubled wrap link), a dimension of 1 none.
    """
    where = "torus2d"
    cells = _check_int(rows, "rows", 1, where) * _check_int(cols, "cols", 1, where)
    _guard(where, cells, 4 * cells)
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    pairs = _grid(rows, cols, True, where)
    return make_topology(f"torus2d-{rows}x{cols}", gpus=range(rows * cols),
                         duplex_links=[(a, b, bw, alpha) for a, b in pairs],
                         description=f"{rows}x{cols} torus of GPUs")


def mesh2d(
    rows: int = 4, cols: int = 4, bandwidth_GBps: float = 50.0, alpha_us: float = ALPHA_NVLINK_US
) -> Topology:
    """2-D mesh: GPU (r, c) = id ``r*cols + c`` <-> right and down neighbours, no wrap-around.

    ``rows*(cols-1) + cols*(rows-1)`` cables. Unlike TE-CCL's Mesh (teccl.md 1.5) the last
    GPU of a row is not joined to the first GPU of the next row.
    """
    where = "mesh2d"
    cells = _check_int(rows, "rows", 1, where) * _check_int(cols, "cols", 1, where)
    _guard(where, cells, 4 * cells)
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    pairs = _grid(rows, cols, False, where)
    return make_topology(f"mesh2d-{rows}x{cols}", gpus=range(rows * cols),
                         duplex_links=[(a, b, bw, alpha) for a, b in pairs],
                         description=f"{rows}x{cols} mesh of GPUs")


def star_switch(n: int = 8, bandwidth_GBps: float = 50.0, alpha_us: float = ALPHA_NVLINK_US) -> Topology:
    """n GPUs (ids 0..n-1) around one switch (id n), each GPU <-> switch (2n links)."""
    where = "star_switch"
    size = _check_int(n, "n", 2, where)
    _guard(where, size + 1, 2 * size)
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    cables = [(g, size, bw, alpha) for g in range(size)]
    return make_topology(f"star-switch-{size}", gpus=range(size), switches=[size], duplex_links=cables,
                         description=f"{size} GPUs through one switch")


def leaf_spine(
    leaves: int = 2,
    gpus_per_leaf: int = 4,
    spines: int = 2,
    bandwidth_GBps: float = 50.0,
    alpha_us: float = ALPHA_NVLINK_US,
    uplink_GBps: float = 100.0,
    uplink_alpha_us: float = ALPHA_NIC_US,
) -> Topology:
    """Two-level leaf-spine (folded Clos) network of GPUs.

    Parameters
    ----------
    leaves : int
        Leaf (top-of-rack) switches, >= 1.
    gpus_per_leaf : int
        GPUs under each leaf, >= 1 (at least 2 GPUs in all).
    spines : int
        Spine switches, >= 1; every leaf has one uplink to every spine.
    bandwidth_GBps, alpha_us : float
        GPU <-> leaf links.
    uplink_GBps, uplink_alpha_us : float
        Leaf <-> spine links. The defaults (2 x 100 GB/s up for 4 x 50 GB/s down) make the
        default network non-blocking; lower ``uplink_GBps`` to oversubscribe it.

    Ids: GPU g under leaf l is ``l * gpus_per_leaf + g``; leaf l is ``G + l`` and spine s is
    ``G + leaves + s`` where ``G = leaves * gpus_per_leaf``. All links are duplex:
    ``2 * G + 2 * leaves * spines`` directed links.
    """
    where = "leaf_spine"
    n_leaves = _check_int(leaves, "leaves", 1, where)
    per_leaf = _check_int(gpus_per_leaf, "gpus_per_leaf", 1, where)
    n_spines = _check_int(spines, "spines", 1, where)
    _guard(where, n_leaves * (per_leaf + 1) + n_spines, 2 * n_leaves * (per_leaf + n_spines))
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    up_bw = _check_positive(uplink_GBps, "uplink_GBps", where)
    up_alpha = _check_nonneg(uplink_alpha_us, "uplink_alpha_us", where)
    n_gpus = n_leaves * per_leaf
    if n_gpus < 2:
        raise ValidationError(f"{where}: leaves * gpus_per_leaf must be >= 2, got {n_gpus}")
    cables: list[Edge] = []
    for leaf in range(n_leaves):
        leaf_id = n_gpus + leaf
        for g in range(per_leaf):
            cables.append((leaf * per_leaf + g, leaf_id, bw, alpha))
        for s in range(n_spines):
            cables.append((leaf_id, n_gpus + n_leaves + s, up_bw, up_alpha))
    return make_topology(
        f"leaf-spine-{n_leaves}x{per_leaf}-{n_spines}",
        gpus=range(n_gpus),
        switches=range(n_gpus, n_gpus + n_leaves + n_spines),
        duplex_links=cables,
        description=f"leaf-spine: {n_leaves} leaves x {per_leaf} GPUs, {n_spines} spines",
    )


def fat_tree(
    k: int = 4,
    bandwidth_GBps: float = 50.0,
    alpha_us: float = ALPHA_NIC_US,
) -> Topology:
    """Three-level k-ary fat-tree (Al-Fares et al.): ``k**3 / 4`` GPUs, full bisection.

    Parameters
    ----------
    k : int
        Switch radix, even, >= 2. ``k`` pods of ``k/2`` edge and ``k/2`` aggregation switches;
        every edge switch serves ``k/2`` GPUs; ``(k/2)**2`` core switches. k = 16 gives 1,024
        GPUs, k = 26 gives 4,394.
    bandwidth_GBps, alpha_us : float
        Every link (GPU-edge, edge-aggregation, aggregation-core), both directions.

    Ids: GPUs first, GPU g of edge switch e of pod p is ``(p * k/2 + e) * k/2 + g``; then the
    edge switches (``G + p * k/2 + e``), the aggregation switches (``G + k*k/2 + p * k/2 + a``)
    and the core switches (``G + k*k + i * k/2 + j``). Aggregation switch a of every pod is
    joined to the core switches ``a * k/2 .. a * k/2 + k/2 - 1``. Every cable is duplex.
    """
    where = "fat_tree"
    radix = _check_int(k, "k", 2, where)
    if radix % 2:
        raise ValidationError(f"{where}: parameter 'k' must be even, got {radix}")
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    half = radix // 2
    _guard(where, radix * half * half + radix * radix + half * half, 6 * radix * half * half)
    n_gpus = radix * half * half
    edge0 = n_gpus
    agg0 = edge0 + radix * half
    core0 = agg0 + radix * half
    cables: list[Edge] = []
    for p in range(radix):
        for e in range(half):
            edge = edge0 + p * half + e
            for g in range(half):
                cables.append(((p * half + e) * half + g, edge, bw, alpha))
            for a in range(half):
                cables.append((edge, agg0 + p * half + a, bw, alpha))
        for a in range(half):
            for j in range(half):
                cables.append((agg0 + p * half + a, core0 + a * half + j, bw, alpha))
    return make_topology(
        f"fat-tree-{radix}",
        gpus=range(n_gpus),
        switches=range(n_gpus, core0 + half * half),
        duplex_links=cables,
        description=f"{radix}-ary fat-tree: {n_gpus} GPUs, {radix * radix + half * half} switches",
    )


def hypercube(dim: int = 3, bandwidth_GBps: float = 50.0, alpha_us: float = ALPHA_NVLINK_US) -> Topology:
    """Hypercube of ``2**dim`` GPUs: i <-> i XOR 2**b for every bit b (``dim * 2**dim`` links)."""
    where = "hypercube"
    d = _check_int(dim, "dim", 1, where)
    if d > 16:
        raise ValidationError(f"{where}: parameter 'dim' must be <= 16, got {d}")
    bw, alpha = _link_params(bandwidth_GBps, alpha_us, where)
    size = 1 << d
    cables = [(i, i ^ (1 << b), bw, alpha) for i in range(size) for b in range(d) if i < i ^ (1 << b)]
    return make_topology(f"hypercube-{d}", gpus=range(size), duplex_links=cables,
                         description=f"{d}-dimensional hypercube of {size} GPUs")


# ---------------------------------------------------------------------- registry
@dataclass(frozen=True)
class TopologySpec:
    """A registered built-in topology.

    Parameters
    ----------
    name : str
        Registry name, as given to ``--topology``.
    factory : callable
        Keyword-only use: ``factory(**params) -> Topology``.
    parameters : tuple of (str, default)
        Parameter names and defaults, in signature order.
    description : str
        One line for ``ccplan topologies``.
    """

    name: str
    factory: Callable[..., Topology]
    parameters: tuple[tuple[str, Any], ...]
    description: str

    @property
    def defaults(self) -> dict[str, Any]:
        """Parameter name -> default value."""
        return dict(self.parameters)

    def build(self, **params: Any) -> Topology:
        """Instantiate with ``params`` (checked: unknown names and bad types are errors)."""
        known = self.defaults
        unknown = sorted(set(params) - set(known))
        if unknown:
            choices = ", ".join(known) if known else "none"
            raise ValidationError(
                f"unknown parameter {unknown[0]!r} for topology {self.name!r} (parameters: {choices})"
            )
        coerced = {key: _coerce(self.name, key, value, known[key]) for key, value in params.items()}
        return self.factory(**coerced)


_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def _coerce(topology: str, name: str, value: Any, default: Any) -> Any:
    """Accept CLI strings for a parameter whose default fixes its type (int, float, bool)."""
    if not isinstance(value, str):
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value
    text = value.strip()
    where = f"{topology}: parameter {name!r}"
    if isinstance(default, bool):
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValidationError(f"{where} must be true or false, got {value!r}")
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ValidationError(f"{where} must be an integer, got {value!r}") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise ValidationError(f"{where} must be a number, got {value!r}") from None
    return value


def _spec(name: str, factory: Callable[..., Topology]) -> TopologySpec:
    """Registry entry whose parameters are read off the factory's signature."""
    params = tuple(
        (p.name, p.default)
        for p in inspect.signature(factory).parameters.values()
        if p.default is not inspect.Parameter.empty
    )
    # The docstring's summary line, without reST literal markup, is the CLI's description.
    summary = (inspect.getdoc(factory) or name).splitlines()[0].strip().replace("``", "")
    return TopologySpec(name=name, factory=factory, parameters=params, description=summary)


TOPOLOGIES: dict[str, TopologySpec] = {
    spec.name: spec
    for spec in (
        _spec("dgx1", dgx1),
        _spec("ndv2", ndv2),
        _spec("dgx2", dgx2),
        _spec("amd", amd),
        _spec("ring", ring),
        _spec("line", line),
        _spec("fully_connected", fully_connected),
        _spec("torus2d", torus2d),
        _spec("mesh2d", mesh2d),
        _spec("star_switch", star_switch),
        _spec("leaf_spine", leaf_spine),
        _spec("fat_tree", fat_tree),
        _spec("hypercube", hypercube),
    )
}
"""Built-in topologies by name."""


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def resolve_topology(spec: str | Path, **params: Any) -> Topology:
    """A built-in topology by name, or a topology JSON file.

    Parameters
    ----------
    spec : str or Path
        A name of :data:`TOPOLOGIES` (case-insensitive, ``-`` and ``_`` alike, e.g.
        ``"NDv2"``, ``"fully-connected"``) or the path of a topology JSON file (a name that
        ends in ``.json`` or names an existing file).
    **params
        Parameters of the built-in (``chassis=2``, ``n=8``, ``rows=4`` ...). A value of
        ``None`` counts as not given, so a CLI can pass its unset options straight through.
        Strings are converted to the parameter's type (``"2"`` -> 2).

    Raises
    ------
    ValidationError
        Unknown name, unknown or bad parameter, parameters given with a file, bad file.
    """
    given = {key: value for key, value in params.items() if value is not None}
    text = str(spec)
    key = _normalise(text)
    if isinstance(spec, str) and key in TOPOLOGIES:
        return TOPOLOGIES[key].build(**given)
    path = Path(text)
    if isinstance(spec, Path) or text.lower().endswith(".json") or path.is_file():
        if given:
            raise ValidationError(
                f"parameter {sorted(given)[0]!r} only applies to built-in topologies, "
                f"not to the file {text!r}"
            )
        logger.debug("reading topology file %s", path)
        return Topology.from_json(path)
    raise ValidationError(
        f"topology {text!r} is neither a built-in ({', '.join(TOPOLOGIES)}) nor a JSON file"
    )


def catalog() -> list[dict[str, Any]]:
    """One row per built-in at its default parameters, for ``ccplan topologies``.

    Returns
    -------
    list of dict
        Keys ``name``, ``parameters`` (name -> default), ``nodes``, ``links``, ``gpus``,
        ``switches``, ``description``.
    """
    rows = []
    for spec in TOPOLOGIES.values():
        topo = spec.factory()
        rows.append(
            {
                "name": spec.name,
                "parameters": spec.defaults,
                "nodes": topo.num_nodes,
                "links": topo.num_links,
                "gpus": len(topo.gpus),
                "switches": len(topo.switches),
                "description": spec.description,
            }
        )
    return rows


def describe_parameters(parameters: Mapping[str, Any]) -> str:
    """``"chassis=2, n=8"``: parameters as one short string for tables."""
    return ", ".join(f"{k}={v}" for k, v in parameters.items())
