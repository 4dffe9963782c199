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
:class:`_FastPath`) are matched in blocks, with numpy over the block's pairs and a short
Python scan per link, and a full assignment (``O(k^3)`` in its size ``k``) only when rows
compete for a chunk; the others (switches, relays) take one assignment each, relay candidates
filtered with bit masks over targets. The number of layers is the makespan, so a run costs
about the candidate pairs summed over the layers, links x chunks / 8 bytes scanned per layer,
and constant Python work per send.

When every receiver is uniform (a torus or a mesh: few in-links of one latency, every chunk
offered is wanted), a pair's weight depends on the receiver and the chunk only, and the
row-by-row rule runs in compiled code over every pair's bits
(:mod:`ccplan.heuristics.layered_jit`), a few nanoseconds a pair; the full assignments it
cannot decide are solved between its runs. It commits the same sends as the blocks.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import random
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linear_sum_assignment

from ccplan.contract import Outcome, SolveOptions, constructor_outcome, register
from ccplan.errors import CCPlanError, ValidationError
from ccplan.heuristics.mteg import Reservations
from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_matrix
from ccplan.instances.topology import Topology
from ccplan.limits import NEVER, Deadline
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

_Commit = Callable[[int, int], None]
_CommitMany = Callable[[np.ndarray, np.ndarray], None]  # the sends (links, chunks) in order

_PROGRESS_EVERY = 10.0  # seconds between progress notes on the log
_BIG = 10**9  # cardinality first: any extra matched pair outweighs every priority difference
_REFERENCE_LAYER = False  # tests: run every layer through _match_per_receiver instead
_COMPILED = True  # tests: False runs uniform receivers through the per-layer blocks instead
_RARITY_CAP = 999  # the rarity term of the chunk score counts at most this many missing holders
_CONFLICT: list[tuple[int, int]] = []  # _rows_scan's answer when rows compete for one column
_NEAR = 5 * 10**4  # pairs kept per link: start weight within this of its largest
_KEEP = 64  # ... and at most this many of them (fewer: more receivers computed in full)
_ASSIGN_MASK_FROM = 256  # _assign finds its columns with a mask above this many pairs, else by sorting
_FAST_DEGREE = 16  # receivers with more in-links (switches) take the general per-receiver path
_HUB_DEGREE = 32  # at a commit to a node with more links, its in-links' bits are found with numpy
# _FIXED[o]: the fixed part of a wanted pair's weight with ``o`` rival in-links holding the chunk
_FIXED = np.array([_BIG + 10**8 + max(0, 9 - o) * 10**7 for o in range(256)], dtype=np.int64)
# _FIXED_BY_HELD[k] = _FIXED[k - 1]: by the in-link tails of a uniform receiver holding the chunk
# (``_State.in_held``), which count the pair's own tail (entry 0 is never read: that tail holds it)
_FIXED_BY_HELD = np.concatenate((_FIXED[:1], _FIXED))
# _BITS[b, i]: bit i of byte b (little-endian), to expand the nonzero bytes of the pair bits
_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(bool)
_BLOCK_LINKS = 256  # receivers of a layer are matched in blocks of about this many in-links


@dataclass(frozen=True)
class LayeredOptions:
    """Parameters of the layered constructor.

    Parameters
    ----------
    slack : int
        A relay hop may be up to ``slack`` slots longer than a shortest path (0: shortest only).
    max_layers : int, optional
        Give up after this many layers (default: generous, from the instance size).
    seed : int, optional
        Shuffle the chunks' tie-break ranks (restarts of :mod:`ccplan.heuristics.search`);
        None ranks chunks by id.
    """

    slack: int = 0
    max_layers: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.slack, int) or self.slack < 0:
            raise ValidationError(f"layered option slack must be a non-negative integer, got {self.slack!r}")
        if self.max_layers is not None and (not isinstance(self.max_layers, int) or self.max_layers < 1):
            raise ValidationError(
                f"layered option max_layers must be a positive integer, got {self.max_layers!r}"
            )

    def label(self) -> str:
        """Short name of the variant, for reports."""
        return f"layered[slack={self.slack}" + ("" if self.seed is None else f",seed={self.seed}") + "]"


def _useful_masks(
    dmat: np.ndarray, lat: np.ndarray, tail_pos: np.ndarray, head_pos: np.ndarray, slack: int
) -> tuple[list[int], np.ndarray]:
    """Per link ``j = (u, v)``: the bit mask of targets ``w`` with ``L_j + d(v, w) <= d(u, w) +
    slack`` (link on a near-shortest path towards ``w``; bit ``i`` is node position ``i``), and
    whether the head itself is such a target. Computed in blocks of links so the ``(E, V)``
    comparison never exists whole."""
    masks: list[int] = []
    self_target = np.zeros(len(lat), dtype=bool)
    block = max(1, 2**22 // max(1, dmat.shape[0]))
    for lo in range(0, len(lat), block):
        hi = min(len(lat), lo + block)
        du = dmat[tail_pos[lo:hi]]
        dv = dmat[head_pos[lo:hi]]
        ok = np.isfinite(du) & np.isfinite(dv) & (lat[lo:hi, None] + dv <= du + slack)
        self_target[lo:hi] = ok[np.arange(hi - lo), head_pos[lo:hi]]
        packed = np.packbits(ok, axis=1, bitorder="little")
        masks.extend(int.from_bytes(row.tobytes(), "little") for row in packed)
    return masks, self_target


def layered_schedule(
    instance: Instance, options: LayeredOptions | None = None, deadline: Deadline = NEVER
) -> Schedule:
    """Build a schedule layer by layer (draft ``002_*.txt``); see the module docstring.

    ``deadline`` is checked once per layer.

    Raises
    ------
    OutOfTimeError
        ``deadline`` passed before the schedule was complete.
    ValidationError
        Combining collectives (built elsewhere from data-movement ones).
    CCPlanError
        A target no holder can reach, or no progress within ``max_layers``.
    """
    opts = options or LayeredOptions()
    coll = instance.collective
    if coll.combining:
        raise ValidationError(f"layered schedules data-movement collectives; {coll.kind!r} is combining")
    topo = instance.topology
    res = Reservations(instance)
    lat = [int(x) for x in instance.latency]
    tail = [lk.src for lk in topo.links]
    head = [lk.dst for lk in topo.links]
    nodes = topo.node_ids
    pos = {v: i for i, v in enumerate(nodes)}
    n_nodes = len(nodes)
    bit = {v: 1 << i for i, v in enumerate(nodes)}
    tail_pos = np.array([pos[x] for x in tail], dtype=np.intp)
    head_pos = np.array([pos[x] for x in head], dtype=np.intp)
    lat_arr = np.asarray(lat, dtype=np.int64)
    dmat = latency_matrix(topo, instance.latency)  # rows and columns: pos (= node_index)

    chunks = list(coll.chunk_ids)
    n_chunks = len(chunks)
    cidx = {c: i for i, c in enumerate(chunks)}
    # held_arr[p, c]: node position p holds chunk c now; have_arr: ... or has it in flight.
    # Dense (node x chunk) arrays over bytearrays: numpy reads them whole, the per-send
    # updates write single bytes (no Python set per node: 16.8 million entries at 4,096 GPUs)
    # held_arr has one extra all-False row: the padding of the rival table below
    held_buf = bytearray((n_nodes + 1) * n_chunks)
    held_arr = np.frombuffer(held_buf, dtype=np.bool_).reshape(n_nodes + 1, n_chunks)
    have_buf = bytearray(n_nodes * n_chunks)
    have_arr = np.frombuffer(have_buf, dtype=np.bool_).reshape(n_nodes, n_chunks)
    holders_count = array("q", bytes(8 * n_chunks))  # int64 buffer: the compiled run reads it
    for c, hs in coll.holders.items():
        for v in hs:
            held_arr[pos[v], cidx[c]] = True
            have_arr[pos[v], cidx[c]] = True
            holders_count[cidx[c]] += 1
    # wants[c, p]: node p must end with chunk c and does not hold it -- the collective's
    # demands, built from its postcondition: ``coll.demands`` would be a tuple of 16.8 million
    # (chunk, node) pairs at 4,096 GPUs, cached in the collective (1.5 GB)
    wants = np.zeros((n_chunks, n_nodes), dtype=bool)
    for c, ws in coll.post:
        wants[cidx[c], [pos[v] for v in ws]] = True
    wants &= ~have_arr.T
    reach = np.zeros_like(wants)
    for c, hs in coll.holders.items():
        reach[cidx[c]] = np.isfinite(dmat[[pos[h] for h in hs]]).any(axis=0)
    lost_c, lost_v = np.nonzero(wants & ~reach)
    if len(lost_c):
        node_ids = np.asarray(nodes, dtype=np.int64)
        first = int(np.lexsort((node_ids[lost_v], lost_c))[0])  # the first demand, as sorted
        c, v = chunks[int(lost_c[first])], int(node_ids[lost_v[first]])
        raise CCPlanError(f"chunk {list(c)} cannot reach node {v}: no path from its holders")
    # bit mask of nodes that want the chunk and do not have it
    unsat = [int.from_bytes(row.tobytes(), "little") for row in np.packbits(wants, axis=1, bitorder="little")]
    left = n_demands = int(wants.sum())
    # useful[j]: targets w for which link j lies on a (near-)shortest path from its tail
    useful, self_target = _useful_masks(dmat, lat_arr, tail_pos, head_pos, opts.slack)

    rank = list(range(n_chunks))
    if opts.seed is not None:
        random.Random(opts.seed).shuffle(rank)
    may_relay = np.asarray((~have_arr & ~wants.T).any(axis=1))
    fast = _FastPath.build(instance, lat_arr, tail_pos, head_pos, self_target, may_relay)
    # the bit masks of unsatisfied targets and the arrival slots are read only by the general
    # per-receiver code (relay candidates, switches, single-port); the fast path reads counts
    masks_read = bool(
        instance.single_port or _REFERENCE_LAYER or not fast.fast_recv.all() or fast.relay_check.any()
    )
    avail = np.full((n_chunks, n_nodes) if masks_read else (0, 0), np.inf)
    if masks_read:
        avail[have_arr.T] = 0
    avail_flat = avail.reshape(-1).data  # one entry written per send, without numpy's call cost
    wants_flat = wants.reshape(-1).data
    state = _State(
        unsat,
        useful,
        bit,
        holders_count,
        max(1, n_nodes),
        rank,
        lat,
        pos,
        dmat,
        avail,
        wants,
        held_arr,
        have_arr,
        np.zeros(0, dtype=np.int64),
    )
    # chunk part of the weights: one int64 buffer, read one entry at a time (score_list) and
    # as an array (chunk_score)
    state.score_list = array("q", bytes(8 * n_chunks))
    state.chunk_score = np.frombuffer(state.score_list, dtype=np.int64) if n_chunks else np.zeros(0, np.int64)
    for ci in range(n_chunks):
        state.rescore(ci)
    # cand: bit c of row j is set when the tail of link j holds chunk c and its head neither has
    # nor awaits it (the link's candidate pairs before the relay filter; bits, so a layer scans
    # an eighth of a byte per (link, chunk)); lacking[j]: their number. Both kept up to date at
    # arrivals and commits, so a layer reads its pairs from cand instead of comparing the
    # tails' and heads' rows, and links with nothing to offer are skipped
    state.head_pos = head_pos
    n_links = topo.num_links
    row_bytes = (n_chunks + 7) // 8
    cand_buf = bytearray(n_links * row_bytes)
    cand = np.frombuffer(cand_buf, dtype=np.uint8).reshape(n_links, row_bytes)
    lacking_init = np.zeros(n_links, dtype=np.int64)
    for lo in range(0, n_links, 1024):
        pairs = held_arr[tail_pos[lo : lo + 1024]] & ~have_arr[head_pos[lo : lo + 1024]]
        lacking_init[lo : lo + 1024] = pairs.sum(axis=1)
        cand[lo : lo + 1024] = np.packbits(pairs, axis=1, bitorder="little")
    state.cand = cand
    state.have_flat = have_buf
    # an int64 buffer: the commits update single entries, the arrivals add with numpy
    state.lacking = array("q", lacking_init.tobytes())
    lacking_of = state.lacking
    lacking_view = np.frombuffer(lacking_of, dtype=np.int64) if n_links else np.zeros(0, dtype=np.int64)
    # out-links grouped by tail position (compressed rows), for the arrivals
    out_flat = np.argsort(tail_pos, kind="stable").astype(np.intp)
    out_ptr = np.searchsorted(tail_pos[out_flat], np.arange(n_nodes + 1)).astype(np.intp)
    out_deg = np.diff(out_ptr)
    # per node position: (link, head position) of its out-links and (link, tail position) of its
    # in-links; plain loops over them: a node has a handful of links and numpy's per-call cost
    # would dominate -- except at hubs (a switch with hundreds of links), taken with numpy
    out_pairs = [[(j, int(head_pos[j])) for j in topo.out_links[v]] for v in nodes]
    in_pairs = [[(j, int(tail_pos[j])) for j in topo.in_links[v]] for v in nodes]
    hub = [max(len(out_pairs[p]), len(in_pairs[p])) > _HUB_DEGREE for p in range(n_nodes)]
    in_arr = [np.array([j for j, _ in in_pairs[p]], dtype=np.intp) for p in range(n_nodes)]
    busy_until = fast.busy_until
    # in_held[p, c]: in-links of node p whose tail holds chunk c, for the receivers whose
    # in-links all have one latency (the "exclusive" term of the weights), kept up to date at
    # arrivals instead of summed over the in-link tails every layer
    in_held = np.zeros((n_nodes, n_chunks), dtype=np.uint8)
    rows_u = np.flatnonzero(fast.uniform)
    for lo in range(0, len(rows_u), 256):
        r = rows_u[lo : lo + 256]
        in_held[r] = held_arr[fast.in_tails[r]].sum(axis=1, dtype=np.uint8)
    state.in_held = in_held
    bits = [1 << p for p in range(n_nodes)]
    # every receiver uniform (a torus, a mesh; no relay, so every pair offered is wanted): the
    # row-by-row rule in compiled code over every pair's bits instead of the blocks
    has_in = np.bincount(head_pos, minlength=n_nodes) > 0
    uniform_all = not instance.single_port and not fast.relay_check.any() and bool(fast.uniform[has_in].all())
    compiled = _Compiled() if _COMPILED and not _REFERENCE_LAYER and uniform_all else None

    pending: dict[int, list[int]] = {}  # arrival slot -> node position x n_chunks + chunk
    # the sends as three int32 columns until Schedule.from_columns
    s_slot = array("i")
    s_link = array("i")
    s_chunk = array("i")
    last_outage = max((t for _, _, t in instance.outages), default=0)
    limit = opts.max_layers or (10 * (n_demands + 1) * max(lat, default=1) + last_outage + 10)
    t = 0
    occ = [int(x) for x in instance.occupancy]
    # a one-slot send on a link of its own receiver's layer never meets another reservation
    # (the next layer starts at a later slot), so only longer windows and ports are recorded
    reserve_all = instance.single_port
    # slots at which something can change besides an arrival: a link frees up (end of a send
    # window or of an outage); layers in between are skipped when the current one did nothing
    events = sorted({t + 1 for _, _, t in instance.outages})
    total = left
    started = time.perf_counter()
    next_note = started + _PROGRESS_EVERY
    head_l = head_pos.tolist()
    score = state.score_list
    max_holders = state.max_holders
    rank_part = [99 - min(r, 99) for r in rank]
    cache = state.cache

    slow = [reserve_all or o > 1 for o in occ]
    unsat_n = array("q", [m.bit_count() for m in unsat])  # per chunk: its unsatisfied targets
    if compiled is not None:
        compiled.holders = np.frombuffer(holders_count, dtype=np.int64)
        compiled.unsat = np.frombuffer(unsat_n, dtype=np.int64)
        compiled.rank_part = np.asarray(rank_part, dtype=np.int64)

    def commit(j: int, ci: int) -> None:
        nonlocal left
        pv = head_l[j]
        if slow[j]:
            res.reserve(j, t)
            heapq.heappush(events, t + occ[j])
            busy_until[j] = t + occ[j]
        s_slot.append(t)
        s_link.append(j)
        s_chunk.append(ci)
        key = pv * n_chunks + ci
        have_buf[key] = 1
        byte = ci >> 3
        m = 1 << (ci & 7)
        if hub[pv]:
            for k in in_arr[pv][(cand[in_arr[pv], byte] & m) != 0].tolist():
                cand_buf[k * row_bytes + byte] ^= m
                lacking_of[k] -= 1
        else:
            for k, _ in in_pairs[pv]:
                if cand_buf[k * row_bytes + byte] & m:
                    cand_buf[k * row_bytes + byte] ^= m
                    lacking_of[k] -= 1
        holders_count[ci] += 1
        arrive = t + lat[j]
        pending.setdefault(arrive, []).append(key)
        at = ci * n_nodes + pv
        if wants_flat[at]:
            wants_flat[at] = False
            unsat_n[ci] -= 1
            left -= 1
            if masks_read:
                unsat[ci] ^= bits[pv]
        if masks_read:
            avail_flat[at] = arrive
            if cache:
                cache.pop(ci, None)
        # the chunk part of the weights (_State.rescore, inlined: once per send)
        score[ci] = (
            min(max(max_holders - holders_count[ci], 0), _RARITY_CAP) * 10**4
            + min(unsat_n[ci], 99) * 100
            + rank_part[ci]
        )

    # the compiled path's sends, committed a run at a time: the array part in compiled code
    # (layered_jit.commit_run) where no send reserves anything and no bit mask of targets is
    # kept, the rest (columns, arrival queue) in bulk; otherwise one commit per send
    in_pad = None
    if compiled is not None and not masks_read and not any(slow):
        in_pad = np.full((n_nodes, max(1, max(map(len, in_arr), default=1))), -1, dtype=np.intp)
        for p, ks in enumerate(in_arr):
            in_pad[p, : len(ks)] = ks
    one_lat = lat[0] if lat and len(set(lat)) == 1 else None

    def commit_many(links: np.ndarray, cis: np.ndarray) -> None:
        nonlocal left
        if in_pad is None or compiled is None:
            for j, ci in zip(links.tolist(), cis.tolist(), strict=True):
                commit(j, ci)
            return
        from ccplan.heuristics.layered_jit import commit_run

        left -= commit_run(
            links,
            cis,
            head_pos,
            have_arr,
            cand,
            lacking_view,
            in_pad,
            compiled.holders,
            compiled.unsat,
            wants,
            state.chunk_score,
            compiled.rank_part,
            max_holders,
            _RARITY_CAP,
        )
        link_l = links.tolist()
        s_slot.extend([t] * len(link_l))
        s_link.extend(link_l)
        s_chunk.extend(cis.tolist())
        keys = (head_pos[links] * n_chunks + cis).tolist()
        if one_lat is not None:
            pending.setdefault(t + one_lat, []).extend(keys)
        else:
            for j, key in zip(link_l, keys, strict=True):
                pending.setdefault(t + lat[j], []).append(key)

    while left > 0:
        deadline.check()
        if time.perf_counter() >= next_note:
            # long runs (thousands of GPUs) say how far they are; the CLI shows it with -v
            next_note = time.perf_counter() + _PROGRESS_EVERY
            log.info(
                "layered: layer %d, %d of %d deliveries done, %.0f s%s",
                t,
                total - left,
                total,
                time.perf_counter() - started,
                "" if compiled is None else f" ({compiled.assigned} full assignments)",
            )
        if t > limit:
            raise CCPlanError(f"layered constructor made no complete schedule within {limit} layers")
        arrived = pending.pop(t, None)
        if arrived:
            # the layer's arrivals at once: holdings, then on every out-link of the new holder
            # whose head lacks the chunk the candidate bit and count, and the in-link holder
            # counts of its heads (ufunc.at: a link or node may get several chunks at once)
            keys = np.asarray(arrived, dtype=np.int64)
            held_arr.reshape(-1)[keys] = True
            pv_a, ci_a = np.divmod(keys, n_chunks)
            deg = out_deg[pv_a]
            each = np.repeat(np.arange(len(keys)), deg)
            ks = out_flat[out_ptr[pv_a][each] + np.arange(len(each)) - np.repeat(np.cumsum(deg) - deg, deg)]
            cs = ci_a[each]
            hs = head_pos[ks]
            new = ~have_arr[hs, cs]
            ks_new, cs_new = ks[new], cs[new]
            np.bitwise_or.at(cand, (ks_new, cs_new >> 3), np.left_shift(1, cs_new & 7).astype(np.uint8))
            lacking_view += np.bincount(ks_new, minlength=n_links)
            counts_at = fast.uniform[hs]
            np.add.at(in_held, (hs[counts_at], cs[counts_at]), 1)
        state.refresh(t)
        before = len(s_slot)
        if instance.single_port:
            _match_single_port(topo, res, t, state, commit)
        elif _REFERENCE_LAYER:
            _match_per_receiver(topo, res, t, state, commit)
        elif compiled is not None:
            fast.compiled_layer(res, t, state, commit_many, compiled)
        else:
            fast.layer(topo, res, t, state, commit)
        if len(s_slot) > before:
            t += 1
            continue
        # nothing was sent: the next layer that can differ is the next arrival or release
        while events and events[0] <= t:
            heapq.heappop(events)
        nxt = min([*pending, *events[:1]], default=None)
        if nxt is None:
            raise CCPlanError(f"layered constructor is stuck at layer {t}: no transfer can make progress")
        t = nxt
    links = np.asarray(s_link, dtype=np.intp)
    cis = np.asarray(s_chunk, dtype=np.intp)
    chunk_src = np.array([c[0] for c in chunks], dtype=np.int64)
    chunk_ix = np.array([c[1] for c in chunks], dtype=np.int64)
    return Schedule.from_columns(
        slot=np.asarray(s_slot, dtype=np.int64),
        chunk_source=chunk_src[cis] if len(cis) else np.zeros(0, dtype=np.int64),
        chunk_index=chunk_ix[cis] if len(cis) else np.zeros(0, dtype=np.int64),
        src=np.asarray(tail, dtype=np.int64)[links] if len(links) else np.zeros(0, dtype=np.int64),
        dst=np.asarray(head, dtype=np.int64)[links] if len(links) else np.zeros(0, dtype=np.int64),
        method="layered",
    )


@dataclass
class _State:
    """Per-layer state: who holds what, who still wants what, and static link facts."""

    unsat: list[int]  # per chunk: bit mask of nodes that want it and do not have it
    useful: list[int]  # per link: bit mask of targets it leads towards
    bit: dict[int, int]
    holders_count: array[int]  # an int64 buffer: the compiled rule reads it as an array
    max_holders: int
    rank: list[int]  # tie-break rank per chunk (0 = first); shuffled when seeded
    lat: list[int]
    pos: dict[int, int]  # node id -> row of the arrays below
    dmat: np.ndarray  # (V, V) shortest latency, inf when unreachable
    avail: np.ndarray  # (C, V) slot from which a node has the chunk (inf: never)
    wants: np.ndarray  # (C, V) bool: wants the chunk and does not have it
    held_arr: np.ndarray  # (V + 1, C) bool: holds the chunk now (the last row: padding, False)
    have_arr: np.ndarray  # (V, C) bool: holds it or has it in flight
    chunk_score: np.ndarray  # per chunk: the chunk part of the weights (a view of score_list)
    score_list: array[int] = field(default_factory=lambda: array("q"))  # read one at a time
    in_facts: dict[int, tuple[np.ndarray, np.ndarray, dict[int, int]]] = field(default_factory=dict)
    now: int = 0
    cache: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    lacking: array[int] = field(default_factory=lambda: array("q"))  # per link: its candidate count
    cand: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.uint8))  # (E, C/8) pair bits
    in_held: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.uint8))  # (V, C)
    head_pos: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))  # per link
    have_flat: bytearray = field(default_factory=bytearray)  # have_arr's buffer, read one byte at a time

    def active_receivers(self) -> list[int]:
        """Positions of the nodes with an in-link whose tail holds a chunk they lack, ascending."""
        return np.unique(self.head_pos[np.asarray(self.lacking) > 0]).tolist()

    def uniform_fixed(self, receivers: np.ndarray, chunks: np.ndarray) -> np.ndarray:
        """The fixed part of the weights of pairs into uniform receivers (wanted, exclusive
        term): ``_FIXED_BY_HELD[in_held[receivers, chunks]]``, since ``in_held`` counts the pair's
        own tail too; read as one flat take (twice as fast as the 2-D index on millions of
        pairs)."""
        flat = self.in_held.reshape(-1).take(receivers * self.in_held.shape[1] + chunks)
        return _FIXED_BY_HELD[flat]

    def refresh(self, t: int) -> None:
        """Start layer ``t``: forget the cached arrival estimates."""
        self.now = t
        self.cache.clear()

    def _eta(self, cis: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per chunk of ``cis`` and target: the earliest slot some copy could get there (best,
        which node gives it, second best), computed on demand and cached for the layer."""
        for ci in cis:
            if ci in self.cache:
                continue
            # only nodes that hold the chunk or have it in flight can give it: the other rows
            # of the (V, V) table are inf, so dropping them changes no minimum and no argmin
            # of a target some holder reaches (the only ones the relay test reads)
            rows = np.flatnonzero(np.isfinite(self.avail[ci]))
            eta = np.maximum(self.avail[ci, rows], self.now)[:, None] + self.dmat[rows]
            best = np.argmin(eta, axis=0)
            eta1 = eta[best, np.arange(eta.shape[1])]
            eta2 = np.partition(eta, 1, axis=0)[1] if len(rows) >= 2 else np.full_like(eta1, np.inf)
            self.cache[ci] = (eta1, rows[best], eta2)
        got = [self.cache[ci] for ci in cis]
        return (np.array([g[0] for g in got]), np.array([g[1] for g in got]), np.array([g[2] for g in got]))

    def relay_helps(self, cis: list[int], j: int, u: int, v: int, t: int) -> list[int]:
        """The chunks of ``cis`` for which a copy at ``v`` would reach some target before any
        copy other than the sender's can (so two relays do not carry the same chunk the same
        way); on a tie the copy at the lowest node position goes, so ties never block every
        copy. Vectorised over ``cis``."""
        if not cis:
            return []
        pu = self.pos[u]
        eta1, arg, eta2 = self._eta(cis)
        others = np.where(arg == pu, eta2, eta1)
        via = t + self.lat[j] + self.dmat[self.pos[v]]
        wins = ((via < others) | ((via == others) & (pu <= arg))) & self.wants[np.asarray(cis)]
        keep = wins.any(axis=1)
        return [ci for ci, k in zip(cis, keep.tolist(), strict=True) if k]

    def weights(self, cols: np.ndarray, links: list[int], v: int, topo: Topology) -> np.ndarray:
        """Priority of sending each chunk of ``cols`` over each link of ``links`` (all into
        ``v``; larger first; < _BIG).

        Order of importance: ``v`` wants the chunk (10^8); no other in-link of ``v`` as fast as
        the link offers it now (exclusivity, ``max(0, 9 - others)`` x 10^7: do not spend a link
        on what ``v`` gets as well elsewhere); then the chunk part (:meth:`rescore`): rarity
        (fewer holders, copies in flight included), more unsatisfied targets, the seeded rank.

        Returns an int64 array ``(len(links), len(cols))``, computed with one membership row
        per in-link of ``v``; the chunk terms are computed once.
        """
        srcs, rival, row_of = self._in_facts(v, topo)
        c = np.asarray(cols, dtype=np.intp)
        held_in = self.held_arr[srcs[:, None], c[None, :]].astype(np.int64)  # np.ix_ is slower here
        others = rival[[row_of[j] for j in links]] @ held_in
        exclusive = np.maximum(0, 9 - others)
        chunk_terms = self.wants[c, self.pos[v]] * 10**8 + self.chunk_score[c]
        return exclusive * 10**7 + chunk_terms[None, :]

    def _in_facts(self, v: int, topo: Topology) -> tuple[np.ndarray, np.ndarray, dict[int, int]]:
        """Static facts of ``v``'s in-links, cached: their tails' rows, the (K, K) matrix of
        "in-link k is another in-link at least as fast as j" and the row of each link."""
        got = self.in_facts.get(v)
        if got is None:
            ins = topo.in_links[v]
            srcs = np.array([self.pos[topo.links[k].src] for k in ins], dtype=np.intp)
            lat_in = np.array([self.lat[k] for k in ins])
            rival = (lat_in[None, :] <= lat_in[:, None]) & ~np.eye(len(ins), dtype=bool)
            got = (srcs, rival.astype(np.int64), {k: r for r, k in enumerate(ins)})
            self.in_facts[v] = got
        return got

    def rescore(self, ci: int) -> None:
        """Refresh the chunk part of :meth:`weights` (rarity, unsatisfied count, rank) of
        ``ci`` (``chunk_score`` is a view of ``score_list``); the commit of
        :func:`layered_schedule` computes the same inline."""
        self.score_list[ci] = (
            min(max(self.max_holders - self.holders_count[ci], 0), _RARITY_CAP) * 10**4
            + min(self.unsat[ci].bit_count(), 99) * 100
            + (99 - min(self.rank[ci], 99))
        )

    def candidates(self, j: int, u: int, v: int, t: int) -> np.ndarray:
        """Chunk indices ``u`` may usefully send to ``v`` over link ``j`` in slot ``t``
        (candidate sources): ``v`` wants the chunk, or ``v`` is a relay towards a target that
        no other copy reaches as early. Sorted array."""
        mask = self.useful[j]
        unsat = self.unsat
        bv = self.bit[v]
        new = np.flatnonzero(self.held_arr[self.pos[u]] & ~self.have_arr[self.pos[v]])
        if not len(new):
            return new
        wanted = self.wants[new, self.pos[v]]
        if mask & bv:
            # v itself is a target the link leads to: every chunk v wants passes the filter
            out = new[wanted]
        else:
            out = np.array([ci for ci in new[wanted].tolist() if unsat[ci] & mask], dtype=np.intp)
        relay = [ci for ci in new[~wanted].tolist() if unsat[ci] & mask]
        if not relay:
            return out
        return np.union1d(out, np.asarray(self.relay_helps(relay, j, u, v, t), dtype=np.intp))


def _match_per_receiver(topo: Topology, res: Reservations, t: int, st: _State, commit: _Commit) -> None:
    """Without single-port, receivers only share chunks: one assignment per receiver, each
    committed at once so the next receivers see the chunk as less rare (otherwise every
    receiver picks the same rarest chunk and a bottleneck carries copies of one chunk).

    The reference form of a layer; :class:`_FastPath` computes the same commits."""
    nodes = topo.node_ids
    # commits only lower ``lacking`` on the receiver's own in-links, so the set is fixed for the layer
    for p in st.active_receivers():
        _match_receiver(topo, res, t, st, commit, nodes[p])


def _match_receiver(topo: Topology, res: Reservations, t: int, st: _State, commit: _Commit, v: int) -> None:
    """Candidates, weights and the assignment of receiver ``v`` in layer ``t``, committed."""
    lacking = st.lacking
    units: list[int] = []
    cand: dict[int, np.ndarray] = {}
    for j in topo.in_links[v]:
        if not lacking[j]:
            continue
        u = topo.links[j].src
        free = res.free_units(j, t)
        if free <= 0:
            continue
        cs = st.candidates(j, u, v, t)
        if not len(cs):
            continue
        cand[j] = cs
        units.extend([j] * free)
    if not units:
        return
    links = list(cand)
    if len(units) == 1:
        # one link, so ``cols`` is its candidate list; argmax takes the lowest chunk on a tie
        cols = cand[units[0]]
        commit(units[0], int(cols[int(np.argmax(st.weights(cols, links, v, topo)[0]))]))
        return
    # rows over all chunks, then the columns some link offers (cheaper than np.unique)
    offered_all = np.zeros((len(links), st.held_arr.shape[1]), dtype=bool)
    for r, j in enumerate(links):
        offered_all[r, cand[j]] = True
    cols = np.flatnonzero(offered_all.any(axis=0))
    offered = offered_all[:, cols]
    per_link = st.weights(cols, links, v, topo)
    per_link = np.where(offered, per_link + _BIG, 0)
    row_of = {j: r for r, j in enumerate(links)}
    w = per_link[[row_of[j] for j in units]]
    rows, colsel = linear_sum_assignment(w, maximize=True)
    for r, k in zip(rows, colsel, strict=True):
        if w[r, k] > 0:
            commit(units[r], int(cols[k]))


@dataclass(frozen=True)
class _FastPath:
    """One layer of :func:`_match_per_receiver`, with the work done for a block of receivers
    at once where no commit of another receiver can change it.

    Within a layer, what a receiver ``v`` is offered depends on the holdings of its in-links'
    tails (fixed: arrivals are applied before the layer), on what ``v`` has (changed only by
    ``v``'s own commits, which come after its matching), on the free units of its in-links
    (reserved only by ``v``) and on the "exclusive" term of :meth:`_State.weights` (holdings
    again). So the candidate pairs (link, chunk), their "wanted" and "exclusive" terms are
    computed for a block of receivers (about ``_BLOCK_LINKS`` in-links) at once, when the
    block's first receiver's turn comes; only the chunk part of the weight (rarity and
    unsatisfied count, which other receivers' commits change, downwards only) is read at the
    receiver's turn, so the block's start weights bound it from above.

    The assignment of a receiver is then taken row by row (one row per free link unit, in
    the order of ``topo.in_links``): a row takes the lowest chunk of its largest weight that
    no earlier row took. When every row finds one and there are no more rows than columns,
    this is exactly what :func:`scipy.optimize.linear_sum_assignment` returns on the same
    matrix (its shortest augmenting path starts each row from the unassigned column of least
    reduced cost, lowest index first on a tie, and the duals stay zero while no path has to
    re-route an earlier row); otherwise the full assignment is solved as before.

    Receivers with many in-links (a switch), an in-link that is not a shortest way to its
    head, or a relay candidate (a chunk offered that the receiver does not want) go through
    the general per-receiver code (:func:`_match_receiver`).
    """

    order: np.ndarray  # links sorted by (head position, place in the head's in-link list)
    tail_pos: np.ndarray
    head_pos: np.ndarray
    occ1: np.ndarray  # per link: one-slot occupancy window
    cap: np.ndarray  # per link: omega outside outages
    outages_at: dict[int, np.ndarray]  # slot -> links down in it
    fast_recv: np.ndarray  # per node position: may take the fast path
    rivals: np.ndarray  # (E, width): tail rows of the in-links "at least as fast" (pad: a False row)
    uniform: np.ndarray  # per node: a fast receiver whose in-links all have one latency
    in_tails: np.ndarray  # (V, width + 1): rows of a fast receiver's in-link tails (pad: a False row)
    relay_check: np.ndarray  # per node: a fast receiver that may be offered a chunk it does not want
    simple: np.ndarray  # per link: window of more than one slot, omega 1, no outage
    asks: np.ndarray  # per link: window of more than one slot, not simple
    busy_until: np.ndarray  # per simple link: first slot after the window of its last send

    @classmethod
    def build(
        cls,
        instance: Instance,
        lat: np.ndarray,
        tail_pos: np.ndarray,
        head_pos: np.ndarray,
        self_target: np.ndarray,
        may_relay: np.ndarray,
    ) -> _FastPath:
        """Static per-link tables (see the attributes); ``may_relay``: per node, whether it
        lacks a chunk it does not want (so a chunk may be offered to it as a relay)."""
        topo = instance.topology
        nodes = topo.node_ids
        n = len(nodes)
        in_rank = np.zeros(topo.num_links, dtype=np.int64)
        for v in nodes:
            for r, j in enumerate(topo.in_links[v]):
                in_rank[j] = r
        order = np.lexsort((in_rank, head_pos)).astype(np.intp)
        deg = np.array([len(topo.in_links[v]) for v in nodes], dtype=np.int64)
        all_shortest = np.ones(n, dtype=bool)
        np.logical_and.at(all_shortest, head_pos, self_target)
        fast_recv = (deg <= _FAST_DEGREE) & all_shortest
        width = max(1, int(deg[fast_recv].max(initial=1)) - 1)
        rivals = np.full((topo.num_links, width), n, dtype=np.intp)
        for p in np.flatnonzero(fast_recv).tolist():
            ins = topo.in_links[nodes[p]]
            for j in ins:
                row = [int(tail_pos[k]) for k in ins if k != j and lat[k] <= lat[j]]
                rivals[j, : len(row)] = row
        # receivers whose in-links all have one latency: every other in-link is a rival, so
        # the rivals holding a chunk are the in-link tails holding it, less the link's own
        uniform = np.zeros(n, dtype=bool)
        in_tails = np.full((n, width + 1), n, dtype=np.intp)
        for p in np.flatnonzero(fast_recv).tolist():
            ins = topo.in_links[nodes[p]]
            uniform[p] = len({int(lat[k]) for k in ins}) <= 1
            in_tails[p, : len(ins)] = [int(tail_pos[k]) for k in ins]
        outages: dict[int, list[int]] = {}
        for link, slot in instance.outage_set:
            outages.setdefault(slot, []).append(link)
        occ1 = np.asarray(instance.occupancy) == 1
        cap = np.asarray(instance.link_capacity, dtype=np.int64)
        down = np.zeros(topo.num_links, dtype=bool)
        down[[link for link, _ in instance.outage_set]] = True
        simple = ~occ1 & (cap == 1) & ~down
        return cls(
            order=order,
            tail_pos=tail_pos,
            head_pos=head_pos,
            occ1=occ1,
            cap=cap,
            outages_at={s: np.array(sorted(ls), dtype=np.intp) for s, ls in outages.items()},
            fast_recv=fast_recv,
            rivals=rivals,
            uniform=uniform & fast_recv,
            in_tails=in_tails,
            relay_check=fast_recv & may_relay,
            simple=simple,
            asks=~occ1 & ~simple,
            busy_until=np.zeros(topo.num_links, dtype=np.int64),
        )

    def _free_links(
        self, res: Reservations, t: int, st: _State
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int], np.ndarray] | None:
        """The links of layer ``t`` with a candidate pair and a free unit, in ``order``: the
        links, their free units, their heads, the start of each receiver's run of links (and
        its end) and every link's candidate count; None when there is none."""
        lack = np.fromiter(st.lacking, dtype=np.int64, count=len(st.lacking))
        cl = self.order[lack[self.order] > 0]
        if not len(cl):
            return None
        # free units at the start of the layer: omega for one-slot links (nothing reserved
        # their slot yet), the reservations for longer windows
        units = self.cap[cl]
        down = self.outages_at.get(t)
        if down is not None:
            units = np.where(np.isin(cl, down), 0, units)
        # longer windows of one unit on links without outages: free once the last send's
        # window ended (sends start in increasing layers); others ask the reservations
        units = np.where(self.simple[cl], self.busy_until[cl] <= t, units)
        for i in np.flatnonzero(self.asks[cl]).tolist():
            units[i] = res.free_units(int(cl[i]), t)
        keep = units > 0
        cl, units = cl[keep], units[keep]
        if not len(cl):
            return None
        heads = self.head_pos[cl]
        cuts = [*np.flatnonzero(np.r_[True, heads[1:] != heads[:-1]]).tolist(), len(cl)]
        return cl, units, heads, cuts, lack

    def layer(self, topo: Topology, res: Reservations, t: int, st: _State, commit: _Commit) -> None:
        """Match and commit every receiver of layer ``t``, in ascending node position."""
        got = self._free_links(res, t, st)
        if got is None:
            return
        cl, units, heads, cuts, lack = got
        # receivers in blocks of about _BLOCK_LINKS links: a block's pairs and their weights are
        # taken when its first receiver's turn comes, so the chunk scores they start from are
        # at most a block old (scans stay short) while numpy still works on many pairs at once
        g = 0
        while g < len(cuts) - 1:
            h = max(g + 1, bisect.bisect_right(cuts, cuts[g] + _BLOCK_LINKS) - 1)
            self._block(topo, res, t, st, commit, cl, units, heads, lack, cuts[g : h + 1])
            g = h

    def compiled_layer(
        self,
        res: Reservations,
        t: int,
        st: _State,
        commit: _CommitMany,
        run: _Compiled,
    ) -> None:
        """:meth:`layer` when every receiver is uniform: the row-by-row rule in compiled code
        (:func:`~ccplan.heuristics.layered_jit.rows_first_run`) over runs of receivers, a
        receiver whose rule fails solved in full between runs (the matrix :func:`_assign` would
        build, by :func:`~ccplan.heuristics.layered_jit.assignment_matrix`)."""
        # imported here: numba's import and first compile are paid only by runs that use it
        from ccplan.heuristics.layered_jit import assignment_matrix, rows_first_run

        got = self._free_links(res, t, st)
        if got is None:
            return
        cl, units, heads, cuts, _lack = got
        cuts_arr = np.asarray(cuts, dtype=np.intp)
        out_link = np.empty(int(units.sum()), dtype=np.int64)
        out_chunk = np.empty_like(out_link)
        g = 0
        while g < len(cuts) - 1:
            failed, n_out = rows_first_run(
                st.cand,
                cl,
                units,
                heads,
                cuts_arr,
                g,
                st.in_held,
                run.fixed,
                st.chunk_score,
                run.holders,
                run.unsat,
                run.rank_part,
                st.max_holders,
                _RARITY_CAP,
                out_link,
                out_chunk,
            )
            commit(out_link[:n_out], out_chunk[:n_out])
            if failed < 0:
                return
            # the receiver's full assignment (_assign's matrix, built in compiled code with the
            # scores its predecessors' commits left)
            a, b = cuts[failed], cuts[failed + 1]
            run.assigned += 1
            mat, cols, row_link = assignment_matrix(
                st.cand, cl[a:b], units[a:b], int(heads[a]), st.in_held, run.fixed, st.chunk_score
            )
            rows, colsel = linear_sum_assignment(mat, maximize=True)
            keep = mat[rows, colsel] > 0
            commit(row_link[rows[keep]], cols[colsel[keep]])
            g = failed + 1

    def _block(
        self,
        topo: Topology,
        res: Reservations,
        t: int,
        st: _State,
        commit: _Commit,
        cl_all: np.ndarray,
        units_all: np.ndarray,
        heads_all: np.ndarray,
        lack: np.ndarray,
        cuts_all: list[int],
    ) -> None:
        """Match and commit the receivers of one block of :meth:`layer`: links
        ``cuts_all[0] .. cuts_all[-1]-1`` of ``cl_all``, one receiver per segment of ``cuts_all``.

        Nothing a receiver's matching reads other than the chunk scores changes between the
        start of the layer and its turn (see the class docstring), so pairs taken now are
        those of the start of the layer."""
        first = cuts_all[0]
        cuts = [c - first for c in cuts_all]
        cl = cl_all[first : cuts_all[-1]]
        units = units_all[first : cuts_all[-1]]
        heads = heads_all[first : cuts_all[-1]]
        links = cl.tolist()
        counts_arr = lack[cl]
        # pairs (link, chunk) of the fast receivers, link by link, chunks ascending
        fast_at = np.flatnonzero(self.fast_recv[heads])
        rows = st.cand[cl[fast_at]]
        row_bytes = max(1, rows.shape[1])
        flat = np.flatnonzero(rows)  # flat positions of nonzero bytes (cheaper than 2-D nonzero)
        f = np.flatnonzero(_BITS[rows.reshape(-1)[flat]])
        at = flat[f >> 3]
        r = at // row_bytes
        pl = fast_at[r]
        pc = (at - r * row_bytes) * 8 + (f & 7)
        pcount = np.where(self.fast_recv[heads], counts_arr, 0)
        n_pairs = len(pc)
        prec = heads[pl]
        held_arr = st.held_arr
        # a relay candidate (a chunk the receiver does not want) sends the receiver to the
        # general code; only receivers that lack a chunk they do not want can have one
        relay_at: set[int] = set()
        if self.relay_check.any():
            ask = np.flatnonzero(self.relay_check[prec])
            relay_at = set(np.unique(prec[ask[~st.wants[pc[ask], prec[ask]]]]).tolist())
        # "exclusive" term: rival in-links (another in-link at least as fast) whose tail holds
        # the chunk; on receivers with one in-link latency, all in-link tails holding it less
        # one (counted at arrivals, ``in_held``)
        # every pair a fast receiver keeps is one it wants (the others went to the general
        # code), so its fixed part is _BIG + 10**8 + max(0, 9 - others) * 10**7, from a table
        if self.uniform[heads[fast_at]].all():
            fixed = st.uniform_fixed(prec, pc)
        else:
            uni = self.uniform[prec]
            fixed = np.zeros(len(pl), dtype=np.int64)
            if uni.any():
                fixed[uni] = _FIXED[st.in_held[prec[uni], pc[uni]].astype(np.intp) - 1]
            odd = np.flatnonzero(~uni)
            fixed[odd] = _FIXED[held_arr[self.rivals[cl[pl[odd]]], pc[odd, None]].sum(axis=1)]
        starts_arr = np.concatenate(([0], np.cumsum(pcount)))
        starts = starts_arr.tolist()
        unit_l = units.tolist()
        heads_l = heads.tolist()
        chunk_score = st.chunk_score
        # each link's pairs of nearly its largest weight now, sorted by that weight, largest
        # first, lowest chunk first on a tie. Chunk scores only fall within a layer (more
        # holders, fewer unsatisfied), so at the receiver's turn a scan for the largest weight
        # then may stop at the first pair whose weight now is below the best found; when it
        # runs past the pairs kept, the receiver's weights are computed in full
        near_w, keep_n = _NEAR, _KEEP  # read at the call: the tests set smaller lists
        w0 = fixed + chunk_score[pc]
        floor = np.zeros(len(cl), dtype=np.int64)
        if n_pairs:
            # the maximum over the links with pairs only: their starts rise strictly, so
            # reduceat takes each link's whole run. Clipping the starts of empty links (a
            # block ending in a switch) cut the last pair off the run before them, and a pair
            # above its link's floor + near_w sorted into another link's kept pairs below
            has = pcount > 0
            floor[has] = np.maximum.reduceat(w0, starts_arr[:-1][has]) - near_w
        near = np.flatnonzero(w0 >= floor[pl])
        # pairs come by link and chunk ascending: a stable sort by (link, weight descending)
        # puts the lowest chunk first on a tie (floor <= w0 <= floor + near_w within a link)
        near = near[
            np.argsort(pl[near] * (near_w + 1) + (floor[pl[near]] + near_w - w0[near]), kind="stable")
        ]
        near_starts_arr = np.searchsorted(pl[near], np.arange(len(cl) + 1))
        # at most keep_n pairs per link: the floor of a cut link rises to the weight of its last
        # kept pair; a pair left out weighs less, or as much with a higher chunk (_rows_scan)
        rank = np.arange(len(near)) - near_starts_arr[:-1][pl[near]]
        cut = np.diff(near_starts_arr) > keep_n
        if cut.any():
            at = np.flatnonzero(cut)
            floor[at] = w0[near[near_starts_arr[at] + keep_n - 1]]
            near = near[rank < keep_n]
            near_starts_arr = np.searchsorted(pl[near], np.arange(len(cl) + 1))
        near_starts = near_starts_arr.tolist()
        cut_l = cut.tolist()
        s_chunk = pc[near].tolist()
        s_fixed = fixed[near].tolist()
        s_w0 = w0[near].tolist()
        floor_l = floor.tolist()
        score = st.score_list

        nodes = topo.node_ids
        # per receiver: most pairs of a link
        most = np.maximum.reduceat(counts_arr, np.asarray(cuts[:-1], dtype=np.intp)).tolist()
        for g, (a, b) in enumerate(itertools.pairwise(cuts)):
            p = heads_l[a]
            if not self.fast_recv[p] or p in relay_at:
                _match_receiver(topo, res, t, st, commit, nodes[p])
                continue
            chosen = _rows_scan(
                s_chunk, s_fixed, s_w0, score, near_starts, floor_l, cut_l, unit_l, links, a, b
            )
            if (
                chosen is not None
                and len(chosen) > most[g]
                and len(chosen) > len(set(pc[starts[a] : starts[b]].tolist()))
            ):
                chosen = None  # more rows than columns: scipy solves the transposed problem
            if chosen is _CONFLICT or chosen is None:
                lo, hi = starts[a], starts[b]
                w = fixed[lo:hi] + chunk_score[pc[lo:hi]]
                found = None
                if chosen is None:  # the kept pairs did not decide: the rule on all pairs may
                    found = _rows_first(w, pc[lo:hi], starts_arr[a:b] - lo, counts_arr[a:b], unit_l[a:b])
                if found is None:
                    chosen = _assign(w, pc[lo:hi], counts_arr[a:b], unit_l[a:b], links[a:b])
                else:
                    chosen = [(links[a + i], ci) for i, ci in found]
            for j, ci in chosen:
                commit(j, ci)


@dataclass
class _Compiled:
    """What :meth:`_FastPath.compiled_layer` passes to the compiled run besides the state:
    int64 views of the commit's holder and unsatisfied counts, the rank part of the chunk
    score, ``_FIXED_BY_HELD``; and how many receivers were solved in full."""

    holders: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    unsat: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rank_part: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    fixed: np.ndarray = field(default_factory=lambda: _FIXED_BY_HELD.copy())
    assigned: int = 0


def _rows_scan(
    s_chunk: list[int],
    s_fixed: list[int],
    s_w0: list[int],
    score: Sequence[int],
    starts: list[int],
    floor: list[int],
    cut: list[bool],
    units: list[int],
    links: list[int],
    a: int,
    b: int,
) -> list[tuple[int, int]] | None:
    """Row-by-row assignment of the receiver of link slots ``a .. b-1`` (see
    :class:`_FastPath`) from each link's pairs kept at the start of the layer: ``(link,
    chunk)`` per row; :data:`_CONFLICT` when a row finds every best column taken (the optimal
    assignment may re-route a row), None when it needs pairs that were not kept (then the
    caller computes the receiver in full).

    ``s_chunk``/``s_fixed``/``s_w0``: per kept pair its chunk, the fixed part of its weight and
    its weight at the start of the layer; link ``i``'s pairs are ``starts[i] .. starts[i+1]-1``,
    sorted by start weight, largest first, lowest chunk first on a tie, and are all its pairs
    of start weight ``>= floor[i]``, except when ``cut[i]``: then they are its first pairs in
    that order down to one of start weight ``floor[i]``, and a pair left out weighs less or
    as much with a higher chunk; ``score``: the current chunk part of the weights.
    """
    taken: set[int] = set()
    chosen: list[tuple[int, int]] = []
    for i in range(a, b):
        best = -1
        tops: list[int] = []
        need = units[i]
        ready = 0  # untaken chunks of the largest weight met among pairs whose start weight equals it
        for q in range(starts[i], starts[i + 1]):
            start = s_w0[q]
            # the rest weigh at most ``start`` now; at ``start == best`` they are higher chunks
            # than the ``ready`` ones of the same start weight, so none of them is picked
            if start < best or (start == best and ready >= need):
                break
            c = s_chunk[q]
            now = s_fixed[q] + score[c]
            if now > best:
                best = now
                tops = [c]
                ready = 0
            elif now == best:
                tops.append(c)
            else:
                continue
            if start == best and c not in taken:
                ready += 1
        else:
            if best < floor[i] or (cut[i] and best == floor[i] and ready < need):
                # a pair left out may weigh as much now (if it ties with the last kept one
                # and enough untaken kept ones of that start weight are lowest, it does not)
                return None
        for _ in range(need):
            free = [c for c in tops if c not in taken]
            if not free:
                return _CONFLICT  # every best column is taken: the assignment may re-route a row
            c = min(free)
            taken.add(c)
            chosen.append((links[i], c))
    return chosen


def _rows_first(
    w: np.ndarray, chunks: np.ndarray, rel: np.ndarray, counts: np.ndarray, units: list[int]
) -> list[tuple[int, int]] | None:
    """Row-by-row assignment of one receiver (see :class:`_FastPath`): ``(link, chunk)`` per
    row, the link as its place among the receiver's links, or None when it may differ from the
    choice of the optimal assignment.

    ``w`` and ``chunks``: the receiver's candidate pairs, link by link, chunks ascending
    within a link; ``rel``/``counts``: where each link's pairs start and how many there are.
    """
    rows = sum(units)
    if rows > int(counts.max()) and rows > len(np.unique(chunks)):
        return None  # more rows than columns: scipy solves the transposed problem
    best = np.flatnonzero(w == np.repeat(np.maximum.reduceat(w, rel), counts))
    link_of = np.searchsorted(rel, best, side="right") - 1
    best_chunks = chunks[best].tolist()
    tops: list[list[int]] = [[] for _ in units]
    for i, ci in zip(link_of.tolist(), best_chunks, strict=True):
        tops[i].append(ci)
    taken: set[int] = set()
    picks: list[tuple[int, int]] = []
    for i, n_units in enumerate(units):
        for _ in range(n_units):
            for ci in tops[i]:
                if ci not in taken:
                    break
            else:
                return None  # every best column is taken: the assignment may re-route a row
            taken.add(ci)
            picks.append((i, ci))
    return picks


def _assign(
    w: np.ndarray, chunks: np.ndarray, counts: np.ndarray, units: list[int], links: list[int]
) -> list[tuple[int, int]]:
    """The full assignment of one receiver, on the matrix :func:`_match_receiver` builds
    (rows: link units in order; columns: the offered chunks ascending; 0 where not offered)."""
    n = len(units)
    if len(chunks) > _ASSIGN_MASK_FROM:
        # many pairs: the columns as a mask over chunk ids, a chunk's column the count of
        # offered chunks below it (np.unique and searchsorted were half of a call at 4,096
        # GPUs); a few pairs (NDv2's 131,072 small calls): the sort is cheaper
        mask = np.zeros(int(chunks.max()) + 1, dtype=bool)
        mask[chunks] = True
        cols = np.flatnonzero(mask)
        at = (np.cumsum(mask) - 1)[chunks]
    else:
        cols = np.unique(chunks)
        at = np.searchsorted(cols, chunks)
    per_link = np.zeros((n, len(cols)), dtype=np.int64)
    per_link[np.repeat(np.arange(n), counts), at] = w
    if max(units) == 1:
        row_links = list(range(n))
        mat = per_link
    else:
        row_links = [i for i, u in enumerate(units) for _ in range(u)]
        mat = per_link[row_links]
    rows, colsel = linear_sum_assignment(mat, maximize=True)
    keep = mat[rows, colsel] > 0
    picked = zip(rows[keep].tolist(), cols[colsel[keep]].tolist(), strict=True)
    return [(links[row_links[r]], k) for r, k in picked]


def _match_single_port(topo: Topology, res: Reservations, t: int, st: _State, commit: _Commit) -> None:
    """Single-port: a node-level bipartite matching senders x receivers, then the best chunk."""
    nodes = list(topo.node_ids)
    npos = {u: i for i, u in enumerate(nodes)}
    w = np.zeros((len(nodes), len(nodes)), dtype=np.int64)
    best: dict[tuple[int, int], tuple[int, int]] = {}
    for j, link in enumerate(topo.links):
        u, v = link.src, link.dst
        if not st.lacking[j] or res.free_units(j, t) <= 0:
            continue
        cs = st.candidates(j, u, v, t)
        if not len(cs):
            continue
        ws = st.weights(cs, [j], v, topo)[0]
        k = int(np.argmax(ws))  # ``cs`` is sorted: the lowest chunk wins a tie
        ci = int(cs[k])
        value = _BIG + int(ws[k])
        if value > w[npos[u], npos[v]]:
            w[npos[u], npos[v]] = value
            best[(u, v)] = (j, ci)
    if not best:
        return
    rows, cols = linear_sum_assignment(w, maximize=True)
    for r, k in zip(rows, cols, strict=True):
        if w[r, k] > 0:
            commit(*best[(nodes[r], nodes[k])])


@register("layered")
def layered_engine(instance: Instance, options: SolveOptions) -> Outcome:
    """Engine ``layered``: the draft's layer-by-layer constructor (``extra``: ``slack``)."""
    seed = options.extra.get("layered_seed")
    opts = LayeredOptions(slack=int(options.extra.get("slack", 0)), seed=None if seed is None else int(seed))
    limit = options.time_limit
    if limit is None:
        return constructor_outcome(
            lambda deadline: layered_schedule(instance, opts, deadline), None, opts.label()
        )
    return _within_time_limit(instance, opts, limit)


def _within_time_limit(instance: Instance, opts: LayeredOptions, limit: float) -> Outcome:
    """``layered`` under a time limit that always ends with a schedule where one is cheap.

    The construction gets the limit less what the shortest-path-tree fallback
    (:mod:`ccplan.heuristics.tree_fallback`) may need on this many deliveries; when the
    construction does not finish by then, the fallback's schedule is the answer (status
    ``feasible``, ``details["fallback"]`` says why). A limit too short for any of the
    construction goes straight to the fallback.
    """
    from ccplan.heuristics import tree_fallback as fb
    from ccplan.instances.estimate import count_deliveries

    start = time.perf_counter()
    usable = fb.applies(instance)
    reserve = fb.reserve_seconds(count_deliveries(instance)) if usable else 0.0
    own = limit - reserve
    why = ""
    if own >= 0.1 * limit or not usable:
        outcome = constructor_outcome(
            lambda deadline: layered_schedule(instance, opts, deadline), max(own, 1e-3), opts.label()
        )
        if outcome.schedule is not None or not usable or outcome.details.get("interrupted"):
            return outcome
        why = f"layered did not finish within {own:.3g} s of the {limit:g} s time limit"
    else:
        why = f"the {limit:g} s time limit leaves layered no time next to the fallback's {reserve:.3g} s"
    schedule = fb.tree_fallback(instance, method="layered")
    if schedule is None:
        reason = f"time limit of {limit:g} s reached"
        return Outcome(schedule=None, status="unknown", details={"variant": opts.label(), "reason": reason})
    log.info("layered: %s; shortest-path trees instead", why)
    details = {
        "variant": opts.label(),
        "seconds": time.perf_counter() - start,
        "fallback": f"{why}: shortest-path trees",
    }
    return Outcome(schedule=schedule, status="feasible", details=details)
