"""An independent checker for MSCCL algorithm XML files.

It parses the XML back (ours or anyone's) and checks, per ``reference/msccl_and_peers.md``
sections 1.2, 1.3 item 6 and 5:

- the ``<algo>`` attributes a runtime requires, the ``coll`` spelling, ``proto``;
- structure limits: contiguous thread block ids, thread blocks per GPU (co-residency), steps
  per thread block (``MSCCL_MAX_NUM_STEPS``), ``s`` numbered 0, 1, ... in document order,
  ``0 <= cnt < 72``, offsets inside the declared buffers and ``int16``, channels, peers, at most
  one thread block per (peer, channel, direction);
- dependencies: ``depid``/``deps`` name an existing step, its target has ``hasdep="1"``, a
  ``nop`` always carries a ``depid``;
- connections: per (sender, receiver, channel) the sends and the receives match in number,
  ``cnt`` and order (the redundant remote offsets the exporter writes must agree);
- deadlock freedom: the **global** happens-before graph (program order, dependencies, each
  send before its matching receive, across all GPUs) is acyclic;
- data races: two accesses to one buffer slot, one of them a write, are ordered;
- a buffer simulation that checks the postcondition: which chunk (or which sum of
  contributions) ends where, against ``expect`` when given, else against the collective the
  XML names.

Sends are taken to be buffered (a send completes without waiting for its receive), which is how
NCCL connections behave for the protocol slices a step moves.

The package: :mod:`~ccplan.export.xml_validate.parsing` (the stream into columns, the format
notes), :mod:`~ccplan.export.xml_validate.structure` (structure and runtime limits),
:mod:`~ccplan.export.xml_validate.graph` (dependencies, connections, deadlock),
:mod:`~ccplan.export.xml_validate.races`, :mod:`~ccplan.export.xml_validate.replay` (the
buffer simulation), :mod:`~ccplan.export.xml_validate.report` (the result types) and
:mod:`~ccplan.export.xml_validate.validate` (the entry point, running them in order) and
:mod:`~ccplan.export.xml_validate.ranges` (a directory: which file serves which call, gaps and
overlaps between the files' size ranges).
"""

from ccplan.export.xml_validate.parsing import STEP_TYPES
from ccplan.export.xml_validate.ranges import (
    AlgoHeader,
    DirectoryReport,
    check_ranges,
    read_header,
    validate_directory,
)
from ccplan.export.xml_validate.replay import Value
from ccplan.export.xml_validate.report import ERROR_KINDS, XmlError, XmlReport
from ccplan.export.xml_validate.validate import validate_xml

__all__ = [
    "ERROR_KINDS",
    "STEP_TYPES",
    "AlgoHeader",
    "DirectoryReport",
    "Value",
    "XmlError",
    "XmlReport",
    "check_ranges",
    "read_header",
    "validate_directory",
    "validate_xml",
]
