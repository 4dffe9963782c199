"""Trees: the binomial tree (``tree``) and NCCL's double binary tree (``double-binary-tree``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import pairwise

from ccplan.contract import SolveOptions
from ccplan.heuristics.baselines.channels import MAX_CHANNELS
from ccplan.heuristics.baselines.nodes import Nodes, node_groups
from ccplan.heuristics.baselines.placer import _DETAILS, Placer
from ccplan.heuristics.baselines.rings import _cached_channels, _rotate
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


def _tree_allreduce(p: Placer, parent: Mapping[int, int | None], chunks: Sequence[Chunk]) -> None:
    """Reduce ``chunks`` up the GPU tree ``parent`` (GPU -> parent GPU), children before
    parents, then copy the sums down, pipelined by chunk."""
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
            arr = p.reduce_to(c, r, par, ready[(c, r)], sink=root)
            ready[(c, par)] = max(ready[(c, par)], arr)
    for c in chunks:
        p.mark_full(c, root, ready[(c, root)])
    for r in reversed(order):
        par = parent[r]
        if par is not None:
            for c in chunks:
                p.copy(c, par, r)


def _ranked(gpus: Sequence[int], tree: Mapping[int, int | None]) -> dict[int, int | None]:
    """A rank tree as a GPU tree: rank ``r`` is ``gpus[r]``."""
    return {gpus[r]: None if up is None else gpus[up] for r, up in tree.items()}


# ====================================================================== across nodes
def node_chains(instance: Instance) -> tuple[Nodes, list[list[list[int]]]] | None:
    """The nodes of the machine and, per channel, the chain through each node (the ring
    channels' per-node paths, from the GPU the ring enters the node at), or ``None`` for a
    machine without chassis.

    NCCL's tree channels are chains through a node (``src/graph/search.cc``: "Tree: NET n ->
    GPU a -> GPU b -> .. -> GPU x") found with the same channel count as the rings
    (``ncclTopoCompareGraphs`` keeps the rings' ``nChannels`` for the trees). When the ring
    channels do not run node by node (the ring search found no such rings), one chain per node
    in GPU order.
    """
    topo = instance.topology
    nodes = node_groups(topo)
    if nodes is None:
        return None
    found = _cached_channels(topo, MAX_CHANNELS)
    chains: list[list[list[int]]] = []
    for ring in found.rings if found is not None else ():
        per_node: list[list[int]] = [[] for _ in nodes.groups]
        # start where the ring enters a node: after the first GPU whose successor is elsewhere
        n = len(ring)
        shift = next((i + 1 for i in range(n) if nodes.label[ring[i]] != nodes.label[ring[(i + 1) % n]]), 0)
        for g in (*ring[shift:], *ring[:shift]):
            per_node[nodes.label[g]].append(g)
        runs = sum(1 for i in range(len(ring)) if nodes.label[ring[i]] != nodes.label[ring[i - 1]])
        if runs != len(nodes.groups):
            chains = []
            break  # a ring that visits a node twice: not NCCL's node-by-node channels
        chains.append(per_node)
    if not chains:
        chains = [[list(group) for group in nodes.groups]]
    return nodes, chains


def _node_trees(nodes: Nodes, chains: Sequence[Sequence[int]]) -> list[dict[int, int | None]]:
    """NCCL's two trees of one channel as GPU trees: inside a node each GPU's parent is the one
    before it in the node's chain; a node's first GPU has the first GPU of its parent node in the
    double binary tree over nodes (``connectTrees``, ``ncclGetDtree(nNodes, node)``)."""
    out = []
    for tree in double_binary_trees(len(nodes.groups)):
        parent: dict[int, int | None] = {}
        for c, chain in enumerate(chains):
            up = tree[c]
            parent[chain[0]] = None if up is None else chains[up][0]
            for a, b in pairwise(chain):
                parent[b] = a
        out.append(parent)
    return out


def double_binary_tree_schedule(instance: Instance, options: SolveOptions) -> Schedule:
    """NCCL's double binary tree AllReduce: half the chunks on each tree, reduce up then
    broadcast down, pipelined by chunk.

    On a machine of several nodes (:func:`~ccplan.heuristics.baselines.nodes.node_groups`) the
    trees are NCCL's: per channel a chain through each node (:func:`node_chains`) and the double
    binary tree over the nodes, joining the chains' first GPUs; chunk ``i`` goes to tree
    ``i mod 2`` of channel ``(i div 2) mod k`` (NCCL runs each channel's chains on both trees,
    as channels ``c`` and ``c + k``).
    On one node the trees span all GPUs (ranks in id order), flat: NCCL would run a chain there
    (docs/collectives.md, section 4a).
    """
    coll = instance.collective
    if coll.kind != "allreduce":
        _unsupported("double-binary-tree", coll.kind)
    p = Placer(instance)
    chunks = list(coll.chunk_ids)
    across = node_chains(instance)
    note = _DETAILS.get()
    if across is not None:
        nodes, chains = across
        k = len(chains)
        trees = [_node_trees(nodes, per_node) for per_node in chains]
        share: dict[tuple[int, int], list[Chunk]] = defaultdict(list)
        for i, c in enumerate(chunks):
            share[((i // 2) % k, i % 2)].append(c)
        for (ch, t), part in sorted(share.items(), key=lambda x: (x[0][1], x[0][0])):
            _tree_allreduce(p, trees[ch][t], part)
        if note is not None:
            note["tree"] = "nodes"
            note["nodes"] = len(nodes.groups)
            note["channels"] = k
        return p.schedule("double-binary-tree")
    gpus = list(instance.topology.gpus)
    half = (len(chunks) + 1) // 2
    t1, t2 = double_binary_trees(len(gpus))
    _tree_allreduce(p, _ranked(gpus, t1), chunks[:half])
    if chunks[half:]:
        _tree_allreduce(p, _ranked(gpus, t2), chunks[half:])
    if note is not None:
        note["tree"] = "flat"
    return p.schedule("double-binary-tree")
