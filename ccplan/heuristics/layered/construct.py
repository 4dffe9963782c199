"""The layer-by-layer loop: :class:`LayeredOptions`, the relay masks of the links and
:func:`layered_schedule`, which keeps the holdings, the candidate pair bits and the arrivals
up to date, commits the sends and hands every layer to a matcher (single-port, the reference
per-receiver assignment, the compiled rule or the fast path)."""

from __future__ import annotations

import heapq
import logging
import random
import time
from array import array
from dataclasses import dataclass

import numpy as np

from ccplan.errors import CCPlanError, ValidationError
from ccplan.heuristics.layered.fastpath import _Compiled, _FastPath
from ccplan.heuristics.layered.state import (
    _RARITY_CAP,
    _match_per_receiver,
    _match_single_port,
    _State,
)
from ccplan.heuristics.mteg import Reservations
from ccplan.instances.instance import Instance
from ccplan.instances.paths import latency_matrix
from ccplan.limits import NEVER, Deadline
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

_PROGRESS_EVERY = 10.0  # seconds between progress notes on the log
_REFERENCE_LAYER = False  # tests: run every layer through _match_per_receiver instead
_COMPILED = True  # tests: False runs uniform receivers through the per-layer blocks instead
_HUB_DEGREE = 32  # at a commit to a node with more links, its in-links' bits are found with numpy


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

