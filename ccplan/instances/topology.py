"""Network topologies: nodes (GPUs and switches) and directed links.

The JSON form is the one fixed in DESIGN.md::

    {"name": "my-topo",
     "nodes": [{"id": 0, "kind": "gpu"}, {"id": 8, "kind": "switch"}],
     "links": [{"src": 0, "dst": 1, "bandwidth_GBps": 50.0, "alpha_us": 0.7}]}

Links are directed; a full-duplex cable is two links. A switch that can reduce partial sums
itself (NVLS, SHARP) says so with ``"reduce": true``; without it, it only relays them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ccplan.errors import ValidationError
from ccplan.parsing import int_value, load_json_file, show

NodeKind = Literal["gpu", "switch"]
NODE_KINDS: tuple[str, ...] = ("gpu", "switch")

_NODE_KEYS = {"id", "kind", "reduce"}
_LINK_KEYS = {"src", "dst", "bandwidth_GBps", "alpha_us"}
_TOPOLOGY_KEYS = {"name", "nodes", "links"}
_TOPOLOGY_OPTIONAL_KEYS = {"switch_model"}

SWITCH_MODELS: tuple[str, ...] = ("store-and-forward", "cut-through")
"""Switch semantics: the paper's node-like switch (the default of an instance) and TE-CCL's
bufferless, cut-through one (docs/model.md)."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite_number(value: object) -> bool:
    # A JSON integer literal can exceed the float range; math.isfinite would raise
    # OverflowError instead of letting us report the field.
    if not _is_number(value):
        return False
    try:
        return math.isfinite(value)  # type: ignore[arg-type]
    except OverflowError:
        return False


@dataclass(frozen=True)
class Node:
    """A network node.

    Parameters
    ----------
    id : int
        Non-negative identifier, unique in its topology.
    kind : {"gpu", "switch"}
        A switch owns no data and needs none; it stores and forwards like any node.
    reduce : bool
        The switch can add partial sums itself (in-network reduction: NVLS, SHARP). Only a
        switch may carry it; off, the switch relays partial sums without combining them.
    """

    id: int
    kind: NodeKind = "gpu"
    reduce: bool = False

    def __post_init__(self) -> None:
        int_value(self.id, "node.id")
        if self.kind not in NODE_KINDS:
            raise ValidationError(f"node {self.id}: kind must be one of {NODE_KINDS}, got {show(self.kind)}")
        if not isinstance(self.reduce, bool):
            raise ValidationError(f"node {self.id}: reduce must be true or false, got {show(self.reduce)}")
        if self.reduce and self.kind != "switch":
            raise ValidationError(
                f"node {self.id}: reduce is only valid on a switch (kind {show(self.kind)})"
            )


@dataclass(frozen=True)
class Link:
    """A directed link ``src -> dst``.

    Parameters
    ----------
    src, dst : int
        Node ids.
    bandwidth_GBps : float
        Bandwidth in GB/s (decimal gigabytes), strictly positive and finite.
    alpha_us : float
        Fixed latency alpha in microseconds (the alpha of the alpha-beta model), >= 0.
    """

    src: int
    dst: int
    bandwidth_GBps: float
    alpha_us: float = 0.0

    def __post_init__(self) -> None:
        where = f"link {show(self.src, 30)}->{show(self.dst, 30)}"
        for name in ("src", "dst"):
            value = getattr(self, name)
            if not _is_int(value):
                raise ValidationError(f"{where}: {name} must be a non-negative integer, got {show(value)}")
            int_value(value, f"{where}: {name}")
        if self.src == self.dst:
            raise ValidationError(f"{where}: self-loop (src == dst) is not a link")
        if not _is_finite_number(self.bandwidth_GBps) or self.bandwidth_GBps <= 0:
            raise ValidationError(
                f"{where}: bandwidth_GBps must be a positive finite number, got {show(self.bandwidth_GBps)}"
            )
        if not _is_finite_number(self.alpha_us) or self.alpha_us < 0:
            raise ValidationError(
                f"{where}: alpha_us must be a non-negative finite number, got {show(self.alpha_us)}"
            )

    @property
    def key(self) -> tuple[int, int]:
        """The ``(src, dst)`` pair that identifies the link."""
        return (self.src, self.dst)


@dataclass(frozen=True)
class Topology:
    """A frozen, validated network: nodes and directed links.

    Parameters
    ----------
    name : str
        Human-readable name, e.g. ``"ndv2-2"``.
    nodes : tuple of Node
        Unique ids; order is preserved and defines :attr:`node_index`.
    links : tuple of Link
        Directed links between known nodes; at most one link per ordered pair.
    description : str
        Free text (not serialised): where the facts came from, choices made.
    switch_model : {"store-and-forward", "cut-through"}, optional
        How the machine's switches forward, when the topology states it (an imported machine:
        its NVSwitch, PCIe and NIC switches cut through). None: not stated, and an instance
        takes the paper's store-and-forward default unless told otherwise.

    Raises
    ------
    ValidationError
        On duplicate node ids, links to unknown nodes, duplicate links.
    """

    name: str
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    description: str = field(default="", compare=False)
    switch_model: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValidationError(f"topology.name must be a non-empty string, got {show(self.name)}")
        if self.switch_model is not None and self.switch_model not in SWITCH_MODELS:
            raise ValidationError(
                f"topology {self.name!r}: switch_model must be one of {SWITCH_MODELS}, "
                f"got {show(self.switch_model)}"
            )
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "links", tuple(self.links))
        if not self.nodes:
            raise ValidationError(f"topology {self.name!r}: nodes is empty")
        seen: set[int] = set()
        for node in self.nodes:
            if not isinstance(node, Node):
                raise ValidationError(f"topology {self.name!r}: nodes must be Node objects")
            if node.id in seen:
                raise ValidationError(f"topology {self.name!r}: duplicate node id {node.id}")
            seen.add(node.id)
        pairs: set[tuple[int, int]] = set()
        for link in self.links:
            if not isinstance(link, Link):
                raise ValidationError(f"topology {self.name!r}: links must be Link objects")
            for end in (link.src, link.dst):
                if end not in seen:
                    raise ValidationError(
                        f"topology {self.name!r}: link {link.src}->{link.dst} names unknown node {end}"
                    )
            if link.key in pairs:
                raise ValidationError(f"topology {self.name!r}: duplicate link {link.src}->{link.dst}")
            pairs.add(link.key)
        if not any(n.kind == "gpu" for n in self.nodes):
            raise ValidationError(f"topology {self.name!r}: no node of kind 'gpu'")

    # ----------------------------------------------------------------- derived views
    @cached_property
    def node_ids(self) -> tuple[int, ...]:
        """Node ids in declaration order."""
        return tuple(n.id for n in self.nodes)

    @cached_property
    def node_index(self) -> dict[int, int]:
        """Map node id -> dense position (row of the numpy arrays)."""
        return {n.id: i for i, n in enumerate(self.nodes)}

    @cached_property
    def kind(self) -> dict[int, str]:
        """Map node id -> kind."""
        return {n.id: n.kind for n in self.nodes}

    @cached_property
    def gpus(self) -> tuple[int, ...]:
        """Ids of GPU nodes, in declaration order."""
        return tuple(n.id for n in self.nodes if n.kind == "gpu")

    @cached_property
    def switches(self) -> tuple[int, ...]:
        """Ids of switch nodes, in declaration order."""
        return tuple(n.id for n in self.nodes if n.kind == "switch")

    @cached_property
    def link_index(self) -> dict[tuple[int, int], int]:
        """Map ``(src, dst)`` -> position of the link in :attr:`links`."""
        return {link.key: i for i, link in enumerate(self.links)}

    @cached_property
    def _link_keys(self) -> tuple[int, np.ndarray, np.ndarray]:
        """``(width, keys, order)``: ``src * width + dst`` per link (ids below ``width``) and
        the order that sorts them, for :meth:`links_between`."""
        width = max(self.node_ids) + 1
        keys = np.array([lk.src * width + lk.dst for lk in self.links], dtype=np.int64)
        return width, keys, np.argsort(keys)

    def links_between(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """:attr:`link_index` for arrays of node ids: the position of link ``src[i] ->
        dst[i]`` in :attr:`links`, or -1 where there is no such link (ids the topology does
        not have included); one binary search over the sorted link keys."""
        width, keys, order = self._link_keys
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if not len(keys):
            return np.full(len(src), -1, dtype=np.int64)
        inside = (src >= 0) & (src < width) & (dst >= 0) & (dst < width)
        wanted = np.where(inside, src * width + dst, -1)
        sorted_keys = keys[order]
        pos = np.minimum(np.searchsorted(sorted_keys, wanted), len(keys) - 1)
        return np.where(sorted_keys[pos] == wanted, order[pos], -1)

    @cached_property
    def out_links(self) -> dict[int, tuple[int, ...]]:
        """Map node id -> indices of its outgoing links."""
        out: dict[int, list[int]] = {n: [] for n in self.node_ids}
        for i, link in enumerate(self.links):
            out[link.src].append(i)
        return {n: tuple(v) for n, v in out.items()}

    @cached_property
    def in_links(self) -> dict[int, tuple[int, ...]]:
        """Map node id -> indices of its incoming links."""
        inc: dict[int, list[int]] = {n: [] for n in self.node_ids}
        for i, link in enumerate(self.links):
            inc[link.dst].append(i)
        return {n: tuple(v) for n, v in inc.items()}

    @cached_property
    def bandwidth(self) -> np.ndarray:
        """Per-link bandwidth in GB/s, aligned with :attr:`links`."""
        return np.array([link.bandwidth_GBps for link in self.links], dtype=float)

    @cached_property
    def alpha(self) -> np.ndarray:
        """Per-link alpha in microseconds, aligned with :attr:`links`."""
        return np.array([link.alpha_us for link in self.links], dtype=float)

    @property
    def num_nodes(self) -> int:
        """Number of nodes (GPUs and switches)."""
        return len(self.nodes)

    @property
    def num_links(self) -> int:
        """Number of directed links."""
        return len(self.links)

    def has_link(self, src: int, dst: int) -> bool:
        """Whether the directed link ``src -> dst`` exists."""
        return (src, dst) in self.link_index

    def link(self, src: int, dst: int) -> Link:
        """The link ``src -> dst``; raises :class:`ValidationError` if absent."""
        try:
            return self.links[self.link_index[(src, dst)]]
        except KeyError:
            raise ValidationError(f"topology {self.name!r} has no link {src}->{dst}") from None

    def reversed(self) -> Topology:
        """The same network with every link turned around (for ReduceScatter / Reduce)."""
        return Topology(
            name=f"{self.name}-reversed",
            nodes=self.nodes,
            links=tuple(Link(lk.dst, lk.src, lk.bandwidth_GBps, lk.alpha_us) for lk in self.links),
            description=self.description,
            switch_model=self.switch_model,
        )

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph`` with node attribute ``kind`` and edge attributes."""
        import networkx as nx

        graph = nx.DiGraph(name=self.name)
        for node in self.nodes:
            graph.add_node(node.id, kind=node.kind)
        for link in self.links:
            graph.add_edge(link.src, link.dst, bandwidth_GBps=link.bandwidth_GBps, alpha_us=link.alpha_us)
        return graph

    # ----------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        """The DESIGN.md JSON form as a plain dict (``switch_model`` only when stated, so files
        that do not state it stay as they were)."""
        out: dict[str, Any] = {
            "name": self.name,
            # "reduce" only when set, so files of switches that cannot reduce stay as they were
            "nodes": [
                {"id": n.id, "kind": n.kind, **({"reduce": True} if n.reduce else {})} for n in self.nodes
            ],
            "links": [
                {
                    "src": lk.src,
                    "dst": lk.dst,
                    "bandwidth_GBps": lk.bandwidth_GBps,
                    "alpha_us": lk.alpha_us,
                }
                for lk in self.links
            ],
        }
        if self.switch_model is not None:
            out["switch_model"] = self.switch_model
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        """Build from the JSON form; unknown or missing keys raise :class:`ValidationError`."""
        if not isinstance(data, Mapping):
            raise ValidationError("topology: top level must be a JSON object")
        check_keys(data, _TOPOLOGY_KEYS | _TOPOLOGY_OPTIONAL_KEYS, _TOPOLOGY_KEYS, "topology")
        nodes_raw = data["nodes"]
        links_raw = data["links"]
        if not isinstance(nodes_raw, list):
            raise ValidationError("topology.nodes must be a list")
        if not isinstance(links_raw, list):
            raise ValidationError("topology.links must be a list")
        nodes = []
        for i, raw in enumerate(nodes_raw):
            where = f"nodes[{i}]"
            if not isinstance(raw, Mapping):
                raise ValidationError(f"{where} must be an object")
            check_keys(raw, _NODE_KEYS, {"id"}, where)
            try:
                nodes.append(Node(id=raw["id"], kind=raw.get("kind", "gpu"), reduce=raw.get("reduce", False)))
            except ValidationError as exc:
                raise ValidationError(f"{where}: {exc}") from None
        links = []
        for i, raw in enumerate(links_raw):
            where = f"links[{i}]"
            if not isinstance(raw, Mapping):
                raise ValidationError(f"{where} must be an object")
            check_keys(raw, _LINK_KEYS, {"src", "dst", "bandwidth_GBps"}, where)
            try:
                links.append(
                    Link(
                        src=raw["src"],
                        dst=raw["dst"],
                        bandwidth_GBps=raw["bandwidth_GBps"],
                        alpha_us=raw.get("alpha_us", 0.0),
                    )
                )
            except ValidationError as exc:
                raise ValidationError(f"{where}: {exc}") from None
        return cls(
            name=data["name"], nodes=tuple(nodes), links=tuple(links), switch_model=data.get("switch_model")
        )

    def to_json(self, path: str | Path | None = None) -> str:
        """Serialise to JSON text; also write it to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_json(cls, path: str | Path) -> Topology:
        """Read a topology JSON file."""
        return cls.from_dict(load_json(path, "topology"))


def check_keys(data: Mapping[str, Any], allowed: set[str], required: Iterable[str], where: str) -> None:
    """Reject unknown keys and require ``required`` keys in a JSON object named ``where``."""
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValidationError(f"{where}: unknown key {show(unknown[0])} (allowed: {sorted(allowed)})")
    for key in required:
        if key not in data:
            raise ValidationError(f"{where}: missing field {key!r}")


def load_json(path: str | Path, what: str) -> Any:
    """Read a JSON file, turning I/O, encoding, syntax and nesting problems into
    :class:`ValidationError` (:func:`ccplan.parsing.load_json_file`)."""
    return load_json_file(path, what)


def make_topology(
    name: str,
    gpus: Iterable[int],
    duplex_links: Iterable[tuple[int, int, float, float]] = (),
    directed_links: Iterable[tuple[int, int, float, float]] = (),
    switches: Iterable[int] = (),
    description: str = "",
) -> Topology:
    """Convenience constructor used by the built-in topologies.

    ``duplex_links`` entries ``(a, b, GBps, alpha_us)`` become the two links a->b and b->a.
    Nodes are ordered by id.
    """
    kinds: dict[int, NodeKind] = {g: "gpu" for g in gpus}
    for s in switches:
        kinds[s] = "switch"
    duplex_links = list(duplex_links)
    directed_links = list(directed_links)
    from ccplan.instances.estimate import estimate_topology

    estimate_topology(name, len(kinds), 2 * len(duplex_links) + len(directed_links)).check()
    links: list[Link] = []
    for a, b, bw, alpha in duplex_links:
        links.append(Link(a, b, float(bw), float(alpha)))
        links.append(Link(b, a, float(bw), float(alpha)))
    for a, b, bw, alpha in directed_links:
        links.append(Link(a, b, float(bw), float(alpha)))
    nodes = tuple(Node(i, kinds[i]) for i in sorted(kinds))
    return Topology(name=name, nodes=nodes, links=tuple(links), description=description)
