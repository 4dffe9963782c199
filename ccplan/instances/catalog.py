"""The catalog of collectives: every kind by name, data-movement (:mod:`.collectives`) and
combining (:mod:`.combining`), and :func:`make_collective`, which builds one by name after
checking its tables against the memory budget."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ccplan.errors import ValidationError
from ccplan.instances.collectives import MOVEMENT, ROOTED_MOVEMENT, Collective, CollectiveFactory
from ccplan.instances.combining import COMBINING, ROOTED_COMBINING
from ccplan.instances.estimate import check_collective
from ccplan.instances.topology import Topology, check_keys

COLLECTIVES: dict[str, CollectiveFactory] = {**MOVEMENT, **COMBINING}
"""Registry of every collective by name."""

ROOTED: frozenset[str] = ROOTED_MOVEMENT | frozenset(ROOTED_COMBINING)
"""The collectives that take a root."""


def make_collective(
    kind: str,
    topology: Topology,
    chunks: int = 1,
    root: int | None = None,
    dests: Iterable[int] | None = None,
) -> Collective:
    """Build a registered collective by name.

    Raises
    ------
    ValidationError
        Unknown name, bad chunk count, root or destinations.
    """
    try:
        factory = COLLECTIVES[kind]
    except KeyError:
        raise ValidationError(
            f"collective {kind!r} is unknown (choose from {', '.join(sorted(COLLECTIVES))})"
        ) from None
    if kind in ROOTED and root is None:
        root = topology.gpus[0]
    check_collective(kind, topology, chunks)
    return factory(topology, chunks=chunks, root=root, dests=dests)


def collective_from_dict(data: Mapping[str, Any], topology: Topology) -> Collective:
    """Rebuild a collective from :meth:`Collective.to_dict` output for ``topology``: a named
    kind through :func:`make_collective`, ``custom`` through :meth:`Collective.from_custom`."""
    if not isinstance(data, Mapping):
        raise ValidationError("collective must be a JSON object")
    if data.get("kind") == "custom":
        return Collective.from_custom(data, topology)
    check_keys(data, {"kind", "chunks", "root", "dests"}, {"kind"}, "collective")
    dests = data.get("dests")
    return make_collective(
        str(data.get("kind")),
        topology,
        chunks=data.get("chunks", 1),
        root=data.get("root"),
        dests=tuple(dests) if dests is not None else None,
    )
