"""Export a verified schedule as an MSCCL algorithm XML ("MSCCL-IR").

The XML has no global clock: a schedule's "chunk c crosses u -> v in slot t" survives only as
per-thread-block program order, FIFO order on each (channel, peer) connection and explicit
cross-thread-block dependencies. This package follows the mapping recipe of
``reference/msccl_and_peers.md`` section 1.3 and the runtime limits of sections 1.2 / 5:

1. **Buffers** (:class:`BufferLayout`): where every chunk lives on every rank. AllGather in
   place keeps chunk ``(s, j)`` at ``o[rank(s)*C + j]`` everywhere (``i_chunks = 0``); out of
   place reads own data from ``i[j]`` and copies it into ``o``. Broadcast, AllToAll and the
   combining collectives (ReduceScatter, AllReduce, Reduce) have their own layouts. Chunks a
   rank only relays (neither holds nor wants) go to scratch.
2. **Channels**: chunk ``k`` (its position in the sorted chunk list) uses channel
   ``k mod channels`` on every hop, so a forwarded chunk stays on its channel and can be fused.
3. **Thread blocks**: per rank and channel, one send stream per peer and one receive stream
   per peer; a receive stream and a send stream share a thread block when chunks are received
   from one and forwarded to the other (most forwards first), otherwise when they name the same
   peer. Every thread block therefore has one send peer and one receive peer per channel.
4. **Order**: every operation gets a key; sends ``(t, 1, ...)``, receives ``(arrival, 0, ...)``
   where ``arrival = t + L``. All happens-before edges (program order, dependencies, a send
   before its receive) strictly increase in that key, so the exported program is deadlock free
   whenever the schedule is valid; both ends of a connection list its transfers in the same
   order, which is the FIFO matching the runtime needs.
5. **Fusion**: a receive immediately followed, in the same thread block, by the send of the
   same chunk becomes ``rcs`` (``rrcs``/``rrs`` for receive-and-reduce).
6. **Dependencies**: read-after-write, write-after-write and write-after-read on a buffer
   slot between thread blocks become ``depid/deps`` (only the latest step per foreign thread
   block is kept); extra dependencies become ``nop`` steps right before the step, and every
   target gets ``hasdep="1"``.
7. **Replication**: ``instances = k`` repeats the program k times on fresh channels with
   interleaved chunk offsets ``x*k + i``.

Memory: items 3-6 depend only on a rank's own transfers and the buffer layout, except two
facts per transfer that its other end decides (where the receiver stores it, what the sender
sends). :class:`_Planner` plans one rank at a time; a first pass records those facts (a few
integers per transfer) and checks every limit, and the rendering plans each rank again. The
transfers are numpy columns, so the peak is one rank's step objects plus bytes per transfer.

Switches: MSCCL connects GPUs only. By default (``switches="collapse"``) a relay
``u -> switch -> ... -> v`` becomes one logical GPU-to-GPU transfer ``u -> v`` (the runtime's
transport, e.g. NET through the switch, carries it); a switch that copies a chunk to several
GPUs becomes several transfers from ``u``. A schedule in which a switch adds partial sums
(in-network reduction, ``--switch-reduce``) is refused: MSCCL has no such operation.
``switches="refuse"`` raises on any switch hop.

The package: :mod:`~ccplan.export.msccl.dialects` (runtime limits),
:mod:`~ccplan.export.msccl.layout` (item 1), :mod:`~ccplan.export.msccl.transfers` (switch
relays, FIFO check), :mod:`~ccplan.export.msccl.planning` (items 2-6, one rank at a time),
:mod:`~ccplan.export.msccl.building` (the limits pass) and :mod:`~ccplan.export.msccl.rendering`
(item 7, the text and the streamed file) and :mod:`~ccplan.export.msccl.selection` (size ranges
and protocols: how a runtime picks among several files).
"""

from ccplan.export.msccl.dialects import (
    COLL_TO_KIND,
    COMBINING_KINDS,
    DEFAULT_MAX_TBS,
    DIALECTS,
    MAX_BYTES,
    MAX_CHANNELS,
    MAX_COUNT,
    MAX_DEP_TB,
    MAX_OFFSET,
    MAX_TBS_PER_CHANNEL,
    PROTOCOLS,
    SWITCH_POLICIES,
    Dialect,
    canonical_kind,
)
from ccplan.export.msccl.layout import LAYOUTS, BufferLayout, LayoutBuilder, Loc, alias, buffer_layout
from ccplan.export.msccl.rendering import (
    ExportChoice,
    WrittenExport,
    export_msccl,
    to_msccl_xml,
    write_msccl_export,
    write_msccl_xml,
)
from ccplan.export.msccl.selection import (
    LL128_MAX_BYTES_PER_GPU,
    LL_MAX_BYTES_PER_GPU,
    SizeRange,
    byte_granularity,
    protocol_for,
    render_max_bytes,
    size_ranges,
)
from ccplan.export.msccl.transfers import Transfer, logical_transfers

__all__ = [
    "COLL_TO_KIND",
    "COMBINING_KINDS",
    "DEFAULT_MAX_TBS",
    "DIALECTS",
    "LAYOUTS",
    "LL128_MAX_BYTES_PER_GPU",
    "LL_MAX_BYTES_PER_GPU",
    "MAX_BYTES",
    "MAX_CHANNELS",
    "MAX_COUNT",
    "MAX_DEP_TB",
    "MAX_OFFSET",
    "MAX_TBS_PER_CHANNEL",
    "PROTOCOLS",
    "SWITCH_POLICIES",
    "BufferLayout",
    "Dialect",
    "ExportChoice",
    "LayoutBuilder",
    "Loc",
    "SizeRange",
    "Transfer",
    "WrittenExport",
    "alias",
    "buffer_layout",
    "byte_granularity",
    "canonical_kind",
    "export_msccl",
    "logical_transfers",
    "protocol_for",
    "render_max_bytes",
    "size_ranges",
    "to_msccl_xml",
    "write_msccl_export",
    "write_msccl_xml",
]
