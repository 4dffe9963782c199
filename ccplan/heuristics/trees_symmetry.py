r"""Tree schedules by symmetry: one root's schedule, translated to every root (2-D tori).

On a 2-D torus of ``R x C`` GPUs (``R, C >= 3``, every link with the same bandwidth and
alpha, GPU ``(i, j)`` at position ``i C + j``) the translations ``sigma_r: (i, j) -> (i + r_i,
j + r_j)`` are automorphisms, one per root, and each maps a link to a link of the same
*direction* (``+row``, ``-row``, ``+col``, ``-col``). If every root ``r`` sends its chunks
exactly as root 0 does, mapped by ``sigma_r``, the sends on a link ``e`` of direction ``d`` in
slot ``t`` are the sends of root 0 in slot ``t`` on the links ``sigma_r^{-1}(e)``, one link of
direction ``d`` per root: so the whole schedule respects capacity iff root 0's own sends, per
slot and direction, use at most ``omega`` links. Root 0's chunks are therefore placed in a
reservation table of four "links", one per direction, and copied by array arithmetic; the
verifier checks the copies like any schedule.

Root 0's trees: a shortest-path tree whose parents are picked (in breadth-first order, among
the neighbours one hop closer) to even out the links per direction, and its images under the
automorphisms that fix root 0 and permute the directions: the four rotations by 90 degrees on
a square torus, the four reflections otherwise. Chunk ``k`` rides image ``k mod 4``, so every
four chunks load the four directions equally: ``N - 1`` sends each, the in-capacity bound
``x* = 4 omega / (l (N - 1))`` of a GPU. Causality is per chunk along its tree, as in the full
table (:func:`ccplan.heuristics.trees.schedule_trees`).

No LP and no max-flow on the full network: the work is root 0's ``C (N - 1)`` sends and the
copies, so a 32 x 32 torus (1,024 GPUs) costs what one root costs.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import numpy as np

from ccplan.instances.instance import Instance
from ccplan.limits import Deadline
from ccplan.schedule.core import Schedule

log = logging.getLogger(__name__)

Torus = tuple[int, int]


def torus_shape(instance: Instance) -> Torus | None:
    """``(R, C)`` when the topology is exactly the 2-D torus of ``R x C`` GPUs described in the
    module docstring (nodes ``0 .. RC-1`` in id order, uniform links), else None."""
    topo = instance.topology
    n = topo.num_nodes
    if len(topo.gpus) != n or tuple(topo.node_ids) != tuple(range(n)) or topo.num_links != 4 * n:
        return None
    if len({(lk.bandwidth_GBps, lk.alpha_us) for lk in topo.links}) != 1:
        return None
    if len(set(np.asarray(instance.occupancy).tolist())) != 1:
        return None
    pairs = {(lk.src, lk.dst) for lk in topo.links}
    for rows in range(3, n // 3 + 1):
        if n % rows:
            continue
        cols = n // rows
        want = set()
        for v in range(n):
            i, j = divmod(v, cols)
            for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                want.add((v, ((i + di) % rows) * cols + (j + dj) % cols))
        if want == pairs:
            return rows, cols
    return None


def _direction(shape: Torus, a: int, b: int) -> int:
    """0: +row, 1: -row, 2: +col, 3: -col for the link ``a -> b``."""
    rows, cols = shape
    (ai, aj), (bi, bj) = divmod(a, cols), divmod(b, cols)
    if ai == bi:
        return 2 if (bj - aj) % cols == 1 else 3
    return 0 if (bi - ai) % rows == 1 else 1


def balanced_tree(shape: Torus) -> list[tuple[int, int]]:
    """Root 0's shortest-path tree, ``(parent, child)`` in breadth-first order, parents picked
    to even out the links per direction (module docstring)."""
    rows, cols = shape
    n = rows * cols
    dist = np.full(n, -1, dtype=np.int64)
    dist[0] = 0
    order = [0]
    queue = deque([0])
    while queue:
        v = queue.popleft()
        i, j = divmod(v, cols)
        for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            w = ((i + di) % rows) * cols + (j + dj) % cols
            if dist[w] < 0:
                dist[w] = dist[v] + 1
                order.append(w)
                queue.append(w)
    count = [0, 0, 0, 0]
    tree = []
    for v in order[1:]:
        i, j = divmod(v, cols)
        parents = []
        for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            u = ((i + di) % rows) * cols + (j + dj) % cols
            if dist[u] == dist[v] - 1:
                parents.append((count[_direction(shape, u, v)], u))
        _, u = min(parents)
        count[_direction(shape, u, v)] += 1
        tree.append((u, v))
    return tree


def _images(shape: Torus) -> list[np.ndarray]:
    """Node maps fixing node 0 that permute the four directions (rotations on a square torus,
    reflections otherwise); the identity first."""
    rows, cols = shape
    idx = np.arange(rows * cols)
    i, j = idx // cols, idx % cols
    if rows == cols:
        maps = [(i, j), (j, (-i) % cols), ((-i) % rows, (-j) % cols), ((-j) % rows, i)]
    else:
        maps = [(i, j), ((-i) % rows, j), (i, (-j) % cols), ((-i) % rows, (-j) % cols)]
    return [a * cols + b for a, b in maps]


def symmetric_schedule(instance: Instance, deadline: Deadline, details: dict[str, Any]) -> Schedule | None:
    """The AllGather schedule of a 2-D torus by translation (module docstring), or None when
    the instance is not one (another topology or collective, outages, single-port, roots with
    different chunk counts)."""
    coll = instance.collective
    if coll.kind != "allgather" or instance.outages or instance.single_port:
        return None
    shape = torus_shape(instance)
    if shape is None:
        return None
    rows, cols = shape
    n = rows * cols
    chunks_of: dict[int, list[int]] = {}
    for s, k in coll.holders:
        chunks_of.setdefault(s, []).append(k)
    counts = {len(v) for v in chunks_of.values()}
    if set(chunks_of) != set(range(n)) or len(counts) != 1:
        return None
    chunks = counts.pop()
    step = int(instance.occupancy[0])
    lat = int(instance.latency[0])
    omega = int(instance.link_capacity[0])
    tree = balanced_tree(shape)
    images = _images(shape)
    trees = []
    for m in images:
        image = [(int(m[u]), int(m[v])) for u, v in tree]
        trees.append([(u, v, _direction(shape, u, v)) for u, v in image])
    # root 0's sends in a table of four direction "links": load[d][slot] < omega
    load: list[list[int]] = [[], [], [], []]
    first_free = [0, 0, 0, 0]  # every slot below is full (skips the saturated prefix)
    slot_c: list[int] = []
    index_c: list[int] = []
    src_c: list[int] = []
    dst_c: list[int] = []
    for k in range(chunks):
        if k % 64 == 0:
            deadline.check()
        hold = {0: 0}
        for u, v, d in trees[k % 4]:
            row = load[d]
            t = max(hold[u], first_free[d])
            t += (-t) % step
            while True:
                if len(row) < t + step:
                    row.extend([0] * (t + step - len(row) + 1024))
                if all(row[x] < omega for x in range(t, t + step)):
                    break
                t += step
            for x in range(t, t + step):
                row[x] += 1
            while first_free[d] < len(row) and row[first_free[d]] >= omega:
                first_free[d] += 1
            hold[v] = t + lat
            slot_c.append(t)
            index_c.append(k)
            src_c.append(u)
            dst_c.append(v)
    # copies: root r = (ri, rj) maps node (i, j) to (i + ri, j + rj)
    r = np.arange(n)
    ri, rj = (r // cols)[:, None], (r % cols)[:, None]
    src0, dst0 = np.asarray(src_c), np.asarray(dst_c)
    src = ((src0 // cols + ri) % rows) * cols + (src0 % cols + rj) % cols
    dst = ((dst0 // cols + ri) % rows) * cols + (dst0 % cols + rj) % cols
    per = len(slot_c)
    index_map = np.array([sorted(chunks_of[g]) for g in range(n)], dtype=np.int64)
    index = index_map[np.repeat(r, per), np.tile(np.asarray(index_c, dtype=np.int64), n)]
    span = max(s + lat for s in slot_c) if slot_c else 0
    details.update(placement="symmetric", symmetry=f"torus {rows}x{cols} translations",
                   root_sends=per, symmetric_slots=span)
    log.info("trees: %dx%d torus by translation, root 0 placed in %d slots (%d sends)", rows, cols, span, per)
    return Schedule.from_columns(
        slot=np.tile(np.asarray(slot_c, dtype=np.int64), n), chunk_source=np.repeat(r, per),
        chunk_index=index, src=src.ravel(), dst=dst.ravel(), method="trees",
    )
