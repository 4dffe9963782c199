"""Layer-by-layer schedule constructor of the draft ``002_*.txt``.

The draft expands the topology along time one layer (slot) at a time and, in every layer:

1. *candidate-source discovery*: for every unsatisfied target (a node that must still get a
   chunk) find the nodes that hold the chunk now and reach the target through a link that is
   free in this layer (draft: "starts from the target node and traces reachable links in the
   current time layer");
2. *link-to-chunk matching*: bind chunks to free links, one chunk per link unit, respecting
   link direction and occupancy (draft: "valid matching ... only uses links that are not
   already occupied in the current layer"); here a **maximum-weight bipartite matching**
   (``scipy.optimize.linear_sum_assignment``) with cardinality first, not first-fit;
3. *state update*: a delivered chunk joins the receiver's precondition from slot ``t + L``;
4. repeat with the next layer until the postcondition holds (no horizon is fixed in advance).

Relays: a transfer ``u -> v`` of chunk ``c`` is a candidate when ``v`` wants ``c`` or when
``v`` lies on a (near-)shortest path, by latency ``L``, from ``u`` to some node that still
wants ``c`` (``L(u,v) + d(v, w) <= d(u, w) + slack``). So a switch, or a GPU that does not want
the chunk, receives it when it must forward it. The draft's alternative embodiments ("path
length, node load, or link utilization") become the matching weights: deliveries to a node
that wants the chunk before relays, then rarer chunks (fewer holders) first, then chunks
with more unsatisfied targets.

Semantics are the canonical ones (DESIGN.md): occupancy window ``t .. t+l-1`` under
``omega`` (outages included), arrival at ``t + L``, one copy per node, ``single_port``
as a node-level matching (one send and one receive per node and slot).

Complexity: the candidate pairs (link, chunk) are kept per link as bits, updated at arrivals
and commits; receivers whose in-links are all shortest ways and few (GPUs; see
:class:`~ccplan.heuristics.layered.fastpath._FastPath`) are matched in blocks, with numpy over
the block's pairs and a short Python scan per link, and a full assignment (``O(k^3)`` in its
size ``k``) only when rows compete for a chunk; the others (switches, relays) take one
assignment each, relay candidates filtered with bit masks over targets. The number of layers is
the makespan, so a run costs about the candidate pairs summed over the layers, links x chunks /
8 bytes scanned per layer, and constant Python work per send.

When every receiver is uniform (a torus or a mesh: few in-links of one latency, every chunk
offered is wanted), a pair's weight depends on the receiver and the chunk only, and the
row-by-row rule runs in compiled code over every pair's bits
(:mod:`ccplan.heuristics.layered_jit`), a few nanoseconds a pair; the full assignments it
cannot decide are solved between its runs. It commits the same sends as the blocks.

Modules: :mod:`~ccplan.heuristics.layered.construct` (:class:`LayeredOptions`, the layer loop
:func:`layered_schedule`), :mod:`~ccplan.heuristics.layered.state` (the per-layer state, the
reference and single-port matchings), :mod:`~ccplan.heuristics.layered.fastpath` (the block
and compiled matchings), :mod:`~ccplan.heuristics.layered.rows` (their assignment rules) and
:mod:`~ccplan.heuristics.layered.engine` (the engine ``layered``).
"""

from ccplan.heuristics.layered.construct import LayeredOptions, layered_schedule
from ccplan.heuristics.layered.engine import layered_engine

__all__ = ["LayeredOptions", "layered_engine", "layered_schedule"]
