"""Collectives as a precondition and a postcondition over chunks.

A chunk is named ``(source, index)``: the node whose data it is and its index there. The
precondition says which nodes hold each chunk at slot 0; the postcondition says which nodes
must hold it at the end (the draft ``002_*.txt``). Switches never appear in either.

Sizes follow TE-CCL (``../shared/reference/teccl.md`` section 0): ``size`` is the output
buffer of one GPU. The chunk size is ``size / pieces`` where ``pieces`` is the number of
chunks a full output buffer is cut into (``N*C`` for AllGather, ``C`` for Broadcast, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ccplan.errors import ValidationError
from ccplan.instances.topology import Topology, check_keys

Chunk = tuple[int, int]
"""A chunk id: ``(source node, index at the source)``."""


@dataclass(frozen=True)
class Collective:
    """A frozen data-movement collective.

    Parameters
    ----------
    kind : str
        Registry name (``"allgather"``, ``"broadcast"``, ...) or ``"custom"``.
    chunks : int
        ``C``: chunks per contribution (per source, or per (source, destination) pair).
    pre : tuple of (Chunk, tuple of int)
        For every chunk, the nodes holding it at slot 0 (sorted).
    post : tuple of (Chunk, tuple of int)
        For every chunk, the nodes that must hold it at the end (sorted; holders included).
    pieces : int
        Number of chunks the output ``size`` is divided into; ``chunk_bytes = size / pieces``.
    root : int or None
        Root of rooted collectives.
    dests : tuple of int or None
        Destinations of a multicast.
    """

    kind: str
    chunks: int
    pre: tuple[tuple[Chunk, tuple[int, ...]], ...]
    post: tuple[tuple[Chunk, tuple[int, ...]], ...]
    pieces: int
    root: int | None = None
    dests: tuple[int, ...] | None = None
    combining: bool = False
    """True for ReduceScatter / AllReduce / Reduce: every node in ``pre`` holds its own
    contribution to the chunk, and ``post`` nodes must end with the reduction of all of them
    (verified by ``ccplan.schedule.combining``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.chunks, int) or isinstance(self.chunks, bool) or self.chunks < 1:
            raise ValidationError(f"collective.chunks must be a positive integer, got {self.chunks!r}")
        if not isinstance(self.pieces, int) or isinstance(self.pieces, bool) or self.pieces < 1:
            raise ValidationError(f"collective.pieces must be a positive integer, got {self.pieces!r}")
        pre_chunks = [c for c, _ in self.pre]
        if len(set(pre_chunks)) != len(pre_chunks):
            raise ValidationError("collective.pre lists a chunk twice")
        for chunk, holders in self.pre:
            if not holders:
                raise ValidationError(f"collective.pre: chunk {list(chunk)} has no holder")
        post_chunks = [c for c, _ in self.post]
        if len(set(post_chunks)) != len(post_chunks):
            raise ValidationError("collective.post lists a chunk twice")
        missing = set(post_chunks) - set(pre_chunks)
        if missing:
            chunk = sorted(missing)[0]
            raise ValidationError(f"collective.post: chunk {list(chunk)} is held by nobody at slot 0")

    @cached_property
    def holders(self) -> dict[Chunk, frozenset[int]]:
        """Chunk -> nodes holding it at slot 0."""
        return {c: frozenset(h) for c, h in self.pre}

    @cached_property
    def wanted(self) -> dict[Chunk, frozenset[int]]:
        """Chunk -> nodes that must hold it at the end."""
        return {c: frozenset(w) for c, w in self.post}

    @cached_property
    def chunk_ids(self) -> tuple[Chunk, ...]:
        """All chunks of the precondition, sorted."""
        return tuple(sorted(c for c, _ in self.pre))

    @cached_property
    def demands(self) -> tuple[tuple[Chunk, int], ...]:
        """Every ``(chunk, node)`` that must be delivered (wanted and not held at slot 0)."""
        out: list[tuple[Chunk, int]] = []
        for chunk, nodes in self.post:
            held = self.holders[chunk]
            out.extend((chunk, v) for v in nodes if v not in held)
        return tuple(sorted(out))

    def check_against(self, topology: Topology) -> None:
        """Raise :class:`ValidationError` if the collective names non-GPU or unknown nodes."""
        kinds = topology.kind
        for field_name, table in (("pre", self.pre), ("post", self.post)):
            for chunk, nodes in table:
                for v in nodes:
                    if v not in kinds:
                        raise ValidationError(
                            f"collective.{field_name}: chunk {list(chunk)} names unknown node {v}"
                        )
                    if kinds[v] != "gpu":
                        raise ValidationError(
                            f"collective.{field_name}: chunk {list(chunk)} names switch {v}; "
                            "switches own no data and need none"
                        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form: the constructor's arguments, or explicit lists for ``custom``."""
        if self.kind == "custom":
            return {
                "kind": "custom",
                "chunks": self.chunks,
                "pieces": self.pieces,
                "pre": [[list(c), list(h)] for c, h in self.pre],
                "post": [[list(c), list(w)] for c, w in self.post],
            }
        out: dict[str, Any] = {"kind": self.kind, "chunks": self.chunks}
        if self.root is not None:
            out["root"] = self.root
        if self.dests is not None:
            out["dests"] = list(self.dests)
        return out

    @classmethod
    def from_custom(cls, data: Mapping[str, Any], topology: Topology) -> Collective:
        """Rebuild from :meth:`to_dict` output for ``topology``."""
        if not isinstance(data, Mapping):
            raise ValidationError("collective must be a JSON object")
        kind = data.get("kind")
        if kind == "custom":
            check_keys(
                data, {"kind", "chunks", "pieces", "pre", "post"}, {"kind", "pre", "post"}, "collective"
            )
            pre = _table(data["pre"], "pre")
            post = _table(data["post"], "post")
            coll = cls(
                kind="custom",
                chunks=_int_field(data.get("chunks", 1), "collective.chunks"),
                pre=pre,
                post=post,
                pieces=_int_field(data.get("pieces", max(1, len(pre))), "collective.pieces"),
            )
            coll.check_against(topology)
            return coll
        raise ValidationError(f"collective.kind {kind!r}: not custom (see catalog.collective_from_dict)")


def _int_field(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError(f"{what} must be an integer, got {value!r}")
    return value


def _table(raw: object, what: str) -> tuple[tuple[Chunk, tuple[int, ...]], ...]:
    if not isinstance(raw, list):
        raise ValidationError(f"collective.{what} must be a list of [[source, index], [node, ...]]")
    rows = []
    for i, row in enumerate(raw):
        where = f"collective.{what}[{i}]"
        if not (isinstance(row, list) and len(row) == 2 and isinstance(row[0], list) and len(row[0]) == 2):
            raise ValidationError(f"{where} must be [[source, index], [node, ...]], got {row!r}")
        chunk = (_int_field(row[0][0], f"{where} source"), _int_field(row[0][1], f"{where} index"))
        if not isinstance(row[1], list):
            raise ValidationError(f"{where} nodes must be a list, got {row[1]!r}")
        rows.append((chunk, tuple(sorted(_int_field(v, f"{where} node") for v in row[1]))))
    return tuple(sorted(rows))


def _freeze(
    pre: Mapping[Chunk, Iterable[int]], post: Mapping[Chunk, Iterable[int]]
) -> tuple[tuple[tuple[Chunk, tuple[int, ...]], ...], tuple[tuple[Chunk, tuple[int, ...]], ...]]:
    return (
        tuple(sorted((c, tuple(sorted(h))) for c, h in pre.items())),
        tuple(sorted((c, tuple(sorted(w))) for c, w in post.items())),
    )


def _gpu(topology: Topology, node: int | None, what: str) -> int:
    if node is None:
        raise ValidationError(f"{what} is required for this collective (e.g. --root 0)")
    if node not in topology.kind:
        raise ValidationError(f"{what} {node} is not a node of topology {topology.name!r}")
    if topology.kind[node] != "gpu":
        raise ValidationError(f"{what} {node} is a switch; it must be a GPU")
    return node


def _chunks(chunks: object) -> int:
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
        raise ValidationError(f"chunks must be a positive integer, got {chunks!r}")
    return chunks


def broadcast(topology: Topology, chunks: int = 1, root: int | None = 0, **_: Any) -> Collective:
    """Root's ``C`` chunks go to every other GPU. ``chunk_bytes = size / C``."""
    c = _chunks(chunks)
    r = _gpu(topology, root, "root")
    gpus = topology.gpus
    pre = {(r, i): [r] for i in range(c)}
    post = {(r, i): gpus for i in range(c)}
    p, q = _freeze(pre, post)
    return Collective("broadcast", c, p, q, pieces=c, root=r)


def multicast(
    topology: Topology,
    chunks: int = 1,
    root: int | None = 0,
    dests: Iterable[int] | None = None,
    **_: Any,
) -> Collective:
    """Root's ``C`` chunks go to the GPUs in ``dests``. ``chunk_bytes = size / C``."""
    c = _chunks(chunks)
    r = _gpu(topology, root, "root")
    if dests is None:
        raise ValidationError("dests is required for multicast (e.g. --dests 1,2,3)")
    targets = tuple(sorted({_gpu(topology, d, "dests entry") for d in dests} | {r}))
    pre = {(r, i): [r] for i in range(c)}
    post = {(r, i): targets for i in range(c)}
    p, q = _freeze(pre, post)
    return Collective("multicast", c, p, q, pieces=c, root=r, dests=tuple(d for d in targets if d != r))


def gather(topology: Topology, chunks: int = 1, root: int | None = 0, **_: Any) -> Collective:
    """Every GPU's ``C`` chunks go to the root. ``chunk_bytes = size / (N*C)``."""
    c = _chunks(chunks)
    r = _gpu(topology, root, "root")
    gpus = topology.gpus
    pre = {(s, i): [s] for s in gpus for i in range(c)}
    post = {(s, i): sorted({s, r}) for s in gpus for i in range(c)}
    p, q = _freeze(pre, post)
    return Collective("gather", c, p, q, pieces=len(gpus) * c, root=r)


def scatter(topology: Topology, chunks: int = 1, root: int | None = 0, **_: Any) -> Collective:
    """The root sends ``C`` distinct chunks to each GPU. Chunk ``(root, j*C+i)`` goes to the
    j-th GPU. ``chunk_bytes = size / (N*C)``."""
    c = _chunks(chunks)
    r = _gpu(topology, root, "root")
    gpus = topology.gpus
    pre = {(r, j * c + i): [r] for j in range(len(gpus)) for i in range(c)}
    post = {(r, j * c + i): sorted({r, d}) for j, d in enumerate(gpus) for i in range(c)}
    p, q = _freeze(pre, post)
    return Collective("scatter", c, p, q, pieces=len(gpus) * c, root=r)


def allgather(topology: Topology, chunks: int = 1, **_: Any) -> Collective:
    """Every GPU's ``C`` chunks go to every GPU (the paper's problem).
    ``chunk_bytes = size / (N*C)``."""
    c = _chunks(chunks)
    gpus = topology.gpus
    pre = {(s, i): [s] for s in gpus for i in range(c)}
    post = {(s, i): gpus for s in gpus for i in range(c)}
    p, q = _freeze(pre, post)
    return Collective("allgather", c, p, q, pieces=len(gpus) * c)


def alltoall(topology: Topology, chunks: int = 1, **_: Any) -> Collective:
    """GPU s sends ``C`` distinct chunks to each GPU d: chunk ``(s, j*C+i)`` goes to the j-th
    GPU. ``size`` is one GPU's output buffer, so ``chunk_bytes = size / (N*C)``."""
    c = _chunks(chunks)
    gpus = topology.gpus
    pre = {(s, j * c + i): [s] for s in gpus for j in range(len(gpus)) for i in range(c)}
    post = {(s, j * c + i): sorted({s, d}) for s in gpus for j, d in enumerate(gpus) for i in range(c)}
    p, q = _freeze(pre, post)
    return Collective("alltoall", c, p, q, pieces=len(gpus) * c)


CollectiveFactory = Callable[..., Collective]

MOVEMENT: dict[str, CollectiveFactory] = {
    "allgather": allgather,
    "alltoall": alltoall,
    "broadcast": broadcast,
    "multicast": multicast,
    "gather": gather,
    "scatter": scatter,
}
"""Registry of data-movement collectives by name."""

ROOTED_MOVEMENT: frozenset[str] = frozenset({"broadcast", "multicast", "gather", "scatter"})
"""The data-movement collectives that take a root."""
