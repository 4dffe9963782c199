"""The arrays behind the verifiers' fast paths: :class:`ArrivalMap` (a Report's arrivals as
two sorted arrays) and the lookups of node positions and sorted keys, shared by the column
verifier (:mod:`ccplan.schedule.verify`) and the compiled combining check
(:mod:`ccplan.schedule.verify_combining_fast`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance


class ArrivalMap(Mapping[tuple[Chunk, int], int]):
    """Read-only ``(chunk, node) -> slot`` over sorted integer keys (``chunk * n + node``).

    What :attr:`Report.arrivals` holds for a schedule accepted by :func:`verify_columns`:
    two arrays instead of a dict entry per delivery; a lookup is a binary search.
    """

    def __init__(
        self, keys: np.ndarray, slots: np.ndarray, chunks: tuple[Chunk, ...], node_ids: tuple[int, ...]
    ) -> None:
        self._keys = keys
        self._slots = slots
        self._chunks = chunks
        self._nodes = node_ids
        self._chunk_index: dict[Chunk, int] | None = None
        self._node_index = {v: i for i, v in enumerate(node_ids)}

    def _key(self, item: object) -> int | None:
        if not (isinstance(item, tuple) and len(item) == 2):
            return None
        chunk, node = item
        if self._chunk_index is None:
            self._chunk_index = {c: i for i, c in enumerate(self._chunks)}
        c = self._chunk_index.get(chunk) if isinstance(chunk, tuple) else None
        v = self._node_index.get(node) if isinstance(node, int) else None
        if c is None or v is None:
            return None
        key = c * len(self._nodes) + v
        pos = int(np.searchsorted(self._keys, key))
        return pos if pos < len(self._keys) and int(self._keys[pos]) == key else None

    def __getitem__(self, item: tuple[Chunk, int]) -> int:
        pos = self._key(item)
        if pos is None:
            raise KeyError(item)
        return int(self._slots[pos])

    def __contains__(self, item: object) -> bool:
        return self._key(item) is not None

    def __iter__(self) -> Iterator[tuple[Chunk, int]]:
        n = len(self._nodes)
        for key in self._keys.tolist():
            yield self._chunks[key // n], self._nodes[key % n]

    def __len__(self) -> int:
        return len(self._keys)


def _node_positions(instance: Instance, ids: np.ndarray) -> np.ndarray:
    """Node index of each node id (-1 for an id the topology does not have)."""
    topo = instance.topology
    known = np.asarray(topo.node_ids, dtype=np.int64)
    lookup = np.full(int(known.max()) + 1, -1, dtype=np.int64)
    lookup[known] = np.arange(len(known))
    # an id beyond the largest node id is unknown (no table as long as the largest id sent)
    inside = ids < len(lookup)
    return np.where(inside, lookup[np.where(inside, ids, 0)], -1)


def _find(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of ``keys`` in ``sorted_keys`` and whether each is there."""
    pos = np.searchsorted(sorted_keys, keys)
    inside = pos < len(sorted_keys)
    found = np.zeros(len(keys), dtype=bool)
    found[inside] = sorted_keys[pos[inside]] == keys[inside]
    return np.minimum(pos, max(len(sorted_keys) - 1, 0)), found


def send_columns(
    instance: Instance, cols: Mapping[str, np.ndarray], known: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Each send's chunk position (among the sorted packed chunk ids ``known``, packed as
    ``source * width + index``), sender and receiver positions and link number, as int32
    columns (at 16.8 million sends each is 67 MB); None when a send names an unknown chunk,
    an unknown node or a pair without a link (the replay then words it)."""
    pos, found = _find(known, cols["chunk_source"] * width + cols["chunk_index"])
    if not found.all():
        return None
    chunk = pos.astype(np.int32)
    del pos, found
    num = len(chunk)
    src = _node_positions(instance, cols["src"]).astype(np.int32)
    dst = _node_positions(instance, cols["dst"]).astype(np.int32)
    if num and (int(src.min()) < 0 or int(dst.min()) < 0):
        return None
    found_link = instance.topology.links_between(cols["src"], cols["dst"])
    if num and int(found_link.min()) < 0:
        return None
    return chunk, src, dst, found_link.astype(np.int32)
