"""What the MSCCL runtimes accept: the two XML dialects and the limits they share.

``reference/msccl_and_peers.md`` sections 1.1, 1.2 and 5: the ``coll`` spellings, steps per
thread block and required ``<algo>`` attributes of each runtime, and the channel, ``cnt``,
offset and thread-block limits of both. The exporter and the independent validator
(:mod:`ccplan.export.xml_validate`) check against these same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PROTOCOLS: tuple[str, ...] = ("Simple", "LL", "LL128")
"""Values of the ``proto`` attribute (exact case)."""

MAX_CHANNELS = 32
"""``MAXCHANNELS`` of the NCCL versions the runtimes are built on."""
MAX_COUNT = 72
"""``MSCCL_MAX_COUNT``: ``cnt`` must be below it."""
MAX_OFFSET = 32767
"""Offsets are stored as ``int16``."""
MAX_DEP_TB = 127
"""``depid`` is stored as ``int8``."""
MAX_TBS_PER_CHANNEL = 32
"""``MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL`` (send tbs and receive tbs, each)."""
DEFAULT_MAX_TBS = 108
"""All thread blocks of a GPU must be co-resident: keep their number at most the SM count (A100)."""
MAX_BYTES = 1099511627776
"""Explicit ``maxBytes`` (1 TiB): the executor reads 0 as "no limit" but legacy msccl reads it literally."""


@dataclass(frozen=True)
class Dialect:
    """What one MSCCL runtime accepts.

    Attributes
    ----------
    name : str
    coll_names : mapping
        Canonical collective kind -> spelling of the ``coll`` attribute.
    max_steps : int
        ``MSCCL_MAX_NUM_STEPS``: steps per thread block (``nop`` included).
    max_tb_id : int
        Thread block ids must be below it.
    required_attrs : tuple of str
        ``<algo>`` attributes the parser insists on.
    """

    name: str
    coll_names: Mapping[str, str]
    max_steps: int
    max_tb_id: int
    required_attrs: tuple[str, ...]
    accepted_colls: frozenset[str]


DIALECTS: dict[str, Dialect] = {
    "executor": Dialect(
        name="executor",
        coll_names={
            "allgather": "allgather",
            "broadcast": "broadcast",
            "alltoall": "alltoall",
            "reducescatter": "reducescatter",
            "allreduce": "allreduce",
            "reduce": "reduce",
        },
        max_steps=64,
        max_tb_id=32 * MAX_CHANNELS,
        required_attrs=(
            "nchunksperloop",
            "nchannels",
            "ngpus",
            "proto",
            "coll",
            "minBytes",
            "maxBytes",
            "inplace",
            "outofplace",
        ),
        accepted_colls=frozenset(
            [
                "reduce",
                "broadcast",
                "allreduce",
                "reducescatter",
                "allgather",
                "send",
                "recv",
                "gather",
                "scatter",
                "alltoall",
                "alltoallv",
            ]
        ),
    ),
    "legacy": Dialect(
        name="legacy",
        coll_names={
            "allgather": "allgather",
            "broadcast": "broadcast",
            "alltoall": "alltoall",
            "reducescatter": "reduce_scatter",
            "allreduce": "allreduce",
            "reduce": "reduce",
        },
        max_steps=256,
        max_tb_id=216,
        required_attrs=("name", "ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace"),
        accepted_colls=frozenset(
            ["allreduce", "allgather", "reduce", "broadcast", "alltoall", "reduce_scatter", "custom"]
        ),
    ),
}
"""The two XML dialects of ``reference/msccl_and_peers.md`` section 1.1."""

COLL_TO_KIND: dict[str, str] = {
    "allgather": "allgather",
    "broadcast": "broadcast",
    "alltoall": "alltoall",
    "reducescatter": "reducescatter",
    "reduce_scatter": "reducescatter",
    "allreduce": "allreduce",
    "reduce": "reduce",
}
"""XML ``coll`` spelling (either dialect) -> canonical kind."""

COMBINING_KINDS: frozenset[str] = frozenset({"reducescatter", "allreduce", "reduce"})
SWITCH_POLICIES: tuple[str, ...] = ("collapse", "refuse")


def canonical_kind(kind: str) -> str:
    """``"reduce_scatter"``, ``"ReduceScatter"``, ``"reduce-scatter"`` -> ``"reducescatter"``."""
    return kind.replace("_", "").replace("-", "").lower()
