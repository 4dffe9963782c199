"""Index-set planning of :func:`ccplan.model.milp.build_model`: which ``x``, ``y`` and ``z``
exist and which column each gets (:class:`_Plan`), as numpy arrays over chunks x links and
chunks x nodes, before any Pyomo object exists; the sparse windows come from
:func:`ccplan.model.size.reach_windows`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.model.size import StartState, reach_windows, y_window


@dataclass(frozen=True)
class _Plan:
    """Index sets of one build as numpy arrays (before any Pyomo object exists).

    Columns are numbered ``x`` first (chunk, link, slot order), then ``y`` (chunk, node,
    slot), then ``z`` (demanded chunk, node, slot), then ``D``. ``y[k, v, t]`` exists for
    ``ylo[k, v] <= t <= yhi[k, v]`` and is column ``ycol0[k, v] + t``; chunks and nodes are
    positions (``chunks[k]``, ``nodes[v]``).
    """

    chunks: tuple[Chunk, ...]
    nodes: tuple[int, ...]
    src: np.ndarray  # node position of each link's tail
    dst: np.ndarray  # node position of each link's head
    held: np.ndarray  # (K, N) bool: node holds the chunk at slot 0
    xk: np.ndarray
    xe: np.ndarray
    xt: np.ndarray
    ylo: np.ndarray  # (K, N); ylo > yhi: no y
    yhi: np.ndarray
    ycol0: np.ndarray  # (K, N): column of y[k, v, t] is ycol0 + t
    yk: np.ndarray
    yv: np.ndarray
    yt: np.ndarray
    zk: np.ndarray
    zv: np.ndarray
    zt: np.ndarray
    zcol0: np.ndarray  # (K, N): column of z[k, v, t] is zcol0 + t (demands only)
    earliest: dict[tuple[Chunk, int], int]
    latest: dict[tuple[Chunk, int], int]
    origin: int  # first slot of the model (the start state's slot; 0 for the whole model)
    demands: tuple[tuple[Chunk, int], ...]  # demands the model must meet

    @property
    def nx(self) -> int:
        return int(self.xk.size)

    @property
    def ny(self) -> int:
        return int(self.yk.size)

    @property
    def nz(self) -> int:
        return int(self.zk.size)

    @property
    def d_col(self) -> int:
        return self.nx + self.ny + self.nz

    def y_exists(self, k: np.ndarray, v: np.ndarray, t: np.ndarray) -> np.ndarray:
        return (self.ylo[k, v] <= t) & (t <= self.yhi[k, v])

    def y_col(self, k: np.ndarray, v: np.ndarray, t: np.ndarray) -> np.ndarray:
        return self.ycol0[k, v] + t


def _expand(first: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For windows ``first[i] .. first[i] + count[i] - 1``: (window of each slot, slot)."""
    owner = np.repeat(np.arange(count.size), count)
    starts = np.cumsum(count) - count
    slots = first[owner] + np.arange(int(count.sum()), dtype=np.int64) - starts[owner]
    return owner, slots


def _plan(instance: Instance, horizon: int, dense: bool, start: StartState | None = None) -> _Plan:
    """The sparse (or dense) index sets of :func:`build_model`, vectorised over chunks x links
    and chunks x nodes; the windows come from :func:`ccplan.model.size.reach_windows`."""
    topo = instance.topology
    coll = instance.collective
    H = horizon
    origin = 0 if start is None else start.slot
    holders = coll.holders if start is None else start.holders(coll)
    chunks = coll.chunk_ids
    nodes = topo.node_ids
    pos = {v: i for i, v in enumerate(nodes)}
    K, N, E = len(chunks), len(nodes), topo.num_links
    lat = np.asarray(instance.latency, dtype=np.int64)
    occ = np.asarray(instance.occupancy, dtype=np.int64)
    src = np.array([pos[link.src] for link in topo.links], dtype=np.int64)
    dst = np.array([pos[link.dst] for link in topo.links], dtype=np.int64)
    earliest, latest, demanders = reach_windows(instance, H, dense, start)
    ea = np.array([[earliest[(k, v)] for v in nodes] for k in chunks], dtype=np.int64).reshape(K, N)
    la = np.array([[latest[(k, v)] for v in nodes] for k in chunks], dtype=np.int64).reshape(K, N)
    held = np.zeros((K, N), dtype=bool)
    dem = np.zeros((K, N), dtype=bool)
    for k, chunk in enumerate(chunks):
        held[k, [pos[v] for v in holders.get(chunk, ())]] = True
        dem[k, [pos[v] for v in demanders.get(chunk, ())]] = True

    # x: one window per (chunk, link), chunk-major like the keys of the Pyomo set.
    last = np.broadcast_to(H - lat, (K, E)).copy()
    if dense:
        first = np.zeros((K, E), dtype=np.int64)
    else:
        first = ea[:, src]
        last = np.minimum(last, la[:, dst] - lat)
        last[held[:, dst]] = -1  # a node holds a chunk at most once: never send it to a holder
    count = np.maximum(last - first + 1, 0)
    owner, xt = _expand(first.ravel(), count.ravel())
    xk, xe = owner // E, owner % E
    # Start slots closed per link: an (E, H + 1) mask, so an outage or a busy port at a slot
    # beyond the horizon can never close a start of another link (a flat key
    # ``e * (H + 1) + t`` with ``t > H`` would alias link ``e + 1``'s early slots).
    closed = np.zeros((E, H + 1), dtype=bool)

    def close(e: int, q: int) -> None:
        # a start whose occupancy window t .. t+l-1 meets slot q has no variable
        lo, hi = max(0, q - int(occ[e]) + 1), min(q, H)
        if lo <= hi:
            closed[e, lo:hi + 1] = True

    if not dense:
        for e, q in instance.outage_set:
            close(e, q)
    if start is not None and (start.busy_send or start.busy_recv):
        # single_port: a port the sends before the window still use is closed to the window
        for busy, ends in ((start.busy_send, topo.out_links), (start.busy_recv, topo.in_links)):
            for v, q in busy:
                for e in ends[v]:
                    close(e, q)
    if closed.any():
        keep = ~closed[xe, xt]
        xk, xe, xt = xk[keep], xe[keep], xt[keep]

    ylo = np.zeros((K, N), dtype=np.int64)
    yhi = np.full((K, N), -1, dtype=np.int64)
    for k in range(K):
        for v in range(N):
            ylo[k, v], yhi[k, v] = y_window(H, dense, bool(held[k, v]), bool(dem[k, v]),
                                            int(ea[k, v]), int(la[k, v]), origin)
    ny_pair = np.maximum(yhi - ylo + 1, 0)
    nx = xk.size
    ycol0 = nx + (np.cumsum(ny_pair.ravel()) - ny_pair.ravel()).reshape(K, N) - ylo
    owner, yt = _expand(ylo.ravel(), ny_pair.ravel())
    yk, yv = owner // N, owner % N
    nz_pair = np.where(dem, ny_pair, 0)
    zcol0 = nx + yk.size + (np.cumsum(nz_pair.ravel()) - nz_pair.ravel()).reshape(K, N) - ylo
    owner, zt = _expand(ylo.ravel(), nz_pair.ravel())
    zk, zv = owner // N, owner % N
    return _Plan(chunks=chunks, nodes=nodes, src=src, dst=dst, held=held, xk=xk, xe=xe, xt=xt,
                 ylo=ylo, yhi=yhi, ycol0=ycol0, yk=yk, yv=yv, yt=yt, zk=zk, zv=zv, zt=zt,
                 zcol0=zcol0, earliest=earliest, latest=latest, origin=origin,
                 demands=coll.demands if start is None else start.demands(coll))
