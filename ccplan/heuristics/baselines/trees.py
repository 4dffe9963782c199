"""Trees: the binomial tree (``tree``) and NCCL's double binary tree (``double-binary-tree``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from ccplan.contract import SolveOptions
from ccplan.heuristics.baselines.placer import Placer
from ccplan.heuristics.baselines.rings import _rotate
from ccplan.heuristics.baselines.supported import _unsupported
from ccplan.instances.collectives import Chunk
from ccplan.instances.instance import Instance
from ccplan.schedule.core import Schedule


# ====================================================================== binomial tree
def _ranks(instance: Instance, root: int | None) -> list[int]:
    gpus = list(instance.topology.gpus)
    return _rotate(gpus, root) if root is not None else gpus


def _binomial_bcast(p: Placer, ranks: Sequence[int], chunks: Sequence[Chunk]) -> None:
    n = len(ranks)
    mask = 1
    while mask < n:
        for r in range(mask):
            if r + mask < n:
                for c in chunks:
                    p.copy(c, ranks[r], ranks[r + mask])
        mask <<= 1


def _binomial_reduce(p: Placer, ranks: Sequence[int], chunks: Sequence[Chunk]) -> int:
    """Children ``r + 2^k`` (``2^k > r``) reduce into ``r``; ranks in decreasing order are a
    topological order (every child has a larger rank than its parent)."""
    n = len(ranks)
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for r in range(n - 1, 0, -1):
        parent = r - (1 << (r.bit_length() - 1))
        for c in chunks:
            arr = p.reduce_to(c, ranks[r], ranks[parent], ready[(c, r)], sink=ranks[0])
            ready[(c, parent)] = max(ready[(c, parent)], arr)
    finish = 0
    for c in chunks:
        p.mark_full(c, ranks[0], ready[(c, 0)])
        finish = max(finish, ready[(c, 0)])
    return finish


def tree_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """Binomial tree (``001_*.txt``): broadcast, reduce, AllReduce = reduce + broadcast.

    Ranks are the GPUs in id order rotated so the root is rank 0 (AllReduce: the first GPU).
    """
    coll = instance.collective
    p = Placer(instance)
    chunks = list(coll.chunk_ids)
    if coll.kind == "broadcast":
        _binomial_bcast(p, _ranks(instance, coll.root), chunks)
    elif coll.kind == "reduce":
        _binomial_reduce(p, _ranks(instance, coll.root), chunks)
    elif coll.kind == "allreduce":
        ranks = _ranks(instance, None)
        _binomial_reduce(p, ranks, chunks)
        _binomial_bcast(p, ranks, chunks)
    else:
        _unsupported("tree", coll.kind)
    return p.schedule("tree")


# ====================================================================== double binary tree
def _btree_parent(rank: int, n: int) -> int | None:
    """Parent of ``rank`` in NCCL's binary tree on ranks ``0 .. n-1`` (``ncclGetBtree``).

    Rank 0 is the root, with one child (the largest power of two below ``n``); below it the
    ranks form an in-order tree: with ``b`` the lowest set bit of ``rank``, the parent is
    ``(rank ^ b) | 2b``, or ``rank ^ b`` when that falls beyond ``n``.
    """
    if rank == 0:
        return None
    b = rank & -rank
    up = (rank ^ b) | (b << 1)
    return up if up < n else rank ^ b


def double_binary_trees(n: int) -> tuple[dict[int, int | None], dict[int, int | None]]:
    """Parent maps (rank -> parent rank) of NCCL's two complementary binary trees
    (``ncclGetDtree`` in ``src/graph/trees.cc``).

    Tree 1 is :func:`_btree_parent`; tree 2 is its mirror ``r -> n-1-r`` when ``n`` is even and
    its shift by one rank when ``n`` is odd, so the interior ranks of one tree are leaves of the
    other (every rank forwards in at most one tree, save one with odd ``n``).
    """
    t1: dict[int, int | None] = {r: _btree_parent(r, n) for r in range(n)}
    t2: dict[int, int | None] = {}
    for r in range(n):
        if n % 2 == 0:
            up = _btree_parent(n - 1 - r, n)
            t2[r] = None if up is None else n - 1 - up
        else:
            up = _btree_parent((r - 1) % n, n)
            t2[r] = None if up is None else (up + 1) % n
    return t1, t2


def _tree_allreduce(
    p: Placer, gpus: Sequence[int], parent: Mapping[int, int | None], chunks: Sequence[Chunk]
) -> None:
    depth: dict[int, int] = {}

    def d(r: int) -> int:
        if r not in depth:
            par = parent[r]
            depth[r] = 0 if par is None else d(par) + 1
        return depth[r]

    order = sorted(parent, key=lambda r: (-d(r), r))
    root = next(r for r in parent if parent[r] is None)
    ready: dict[tuple[Chunk, int], int] = defaultdict(int)
    for r in order:
        par = parent[r]
        if par is None:
            continue
        for c in chunks:
            arr = p.reduce_to(c, gpus[r], gpus[par], ready[(c, r)], sink=gpus[root])
            ready[(c, par)] = max(ready[(c, par)], arr)
    for c in chunks:
        p.mark_full(c, gpus[root], ready[(c, root)])
    for r in reversed(order):
        par = parent[r]
        if par is not None:
            for c in chunks:
                p.copy(c, gpus[par], gpus[r])


def double_binary_tree_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """NCCL's double binary tree AllReduce: half the chunks on each tree, reduce up then
    broadcast down, pipelined by chunk.

    The trees span all GPUs (ranks in id order), flat: NCCL spans its trees across nodes only,
    one rank per node, and chains the GPUs inside a node (docs/collectives.md, section 4).
    """
    coll = instance.collective
    if coll.kind != "allreduce":
        _unsupported("double-binary-tree", coll.kind)
    gpus = list(instance.topology.gpus)
    p = Placer(instance)
    chunks = list(coll.chunk_ids)
    half = (len(chunks) + 1) // 2
    t1, t2 = double_binary_trees(len(gpus))
    _tree_allreduce(p, gpus, t1, chunks[:half])
    if chunks[half:]:
        _tree_allreduce(p, gpus, t2, chunks[half:])
    return p.schedule("double-binary-tree")

