"""Topologies, collectives and slotted instances (no solver code lives here)."""

from ccplan.instances.catalog import COLLECTIVES, make_collective
from ccplan.instances.collectives import Chunk, Collective
from ccplan.instances.instance import Instance, format_size, make_instance, parse_size
from ccplan.instances.topology import Link, Node, Topology, make_topology

__all__ = [
    "COLLECTIVES",
    "Chunk",
    "Collective",
    "Instance",
    "Link",
    "Node",
    "Topology",
    "format_size",
    "make_collective",
    "make_instance",
    "make_topology",
    "parse_size",
]
