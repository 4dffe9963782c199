r"""The classic collective algorithms users compare against, as slotted schedules.

Each algorithm is a *logical* pattern (who sends what to whom, in which order) from
``001_*.txt`` (binomial broadcast/reduce), ``003_*.txt`` (ring, tree, recursive
halving-doubling, hierarchical) and NCCL (double binary tree). It is mapped onto the physical
topology by :class:`Placer`:

- a logical transfer ``u -> v`` follows a shortest path (link weight ``L``); intermediate nodes
  may be switches, and GPUs as well where the canonical semantics allow it (see below);
- each hop is placed at the earliest slot at which the sender holds the data and the link has
  free capacity over its whole occupancy window (``omega``, outages, single-port), so logical
  steps overlap as far as the links allow and links shared by several logical transfers are
  shared honestly;
- data-movement hops are copies; the partial sums of the combining phases (ReduceScatter,
  Reduce, the first half of AllReduce) are copies into relays and a receive-and-reduce
  (``Send.reduce``) at the logical receiver.

Relays. A node holds one buffer per chunk (canonical semantics). A finished chunk can be
relayed by any node (it keeps a copy; a GPU that later needs it does not receive it twice).
A *partial sum* may only be relayed by a switch or by a GPU that has already passed on its own
partial sum of that chunk (its buffer is dead, :mod:`ccplan.schedule.combining`), and two
partial sums of the same chunk never overlap in one relay. When no such route exists the
algorithm raises :class:`~ccplan.errors.ValidationError` naming the pair.

Closed-form alpha-beta costs (Hockney model, ``003_*.txt`` and
``reference/msccl_and_peers.md`` section 4.1) are given next to each algorithm; ``alpha`` is
the per-message latency (µs), ``beta`` the time per byte (µs/B), ``size`` the TE-CCL buffer
size (bytes) and ``n`` the number of GPUs.

The package, by responsibility: :mod:`~ccplan.heuristics.baselines.costs` (the closed-form
costs), :mod:`~ccplan.heuristics.baselines.placer` (the :class:`Placer`),
:mod:`~ccplan.heuristics.baselines.channels` (NCCL-style ring channels),
:mod:`~ccplan.heuristics.baselines.routes` (ring hops through switches),
:mod:`~ccplan.heuristics.baselines.nodes` (NCCL's rings across nodes),
:mod:`~ccplan.heuristics.baselines.rings` (ring order, NCCL-style rings and the single ring),
:mod:`~ccplan.heuristics.baselines.trees` (binomial and double binary trees, across nodes too),
:mod:`~ccplan.heuristics.baselines.doubling` (recursive doubling / halving),
:mod:`~ccplan.heuristics.baselines.hierarchical` (two-level rings, pairwise),
:mod:`~ccplan.heuristics.baselines.supported` (what each method implements) and
:mod:`~ccplan.heuristics.baselines.registry` (the registered engines).
"""

from ccplan.heuristics.baselines.channels import Channels, find_channels
from ccplan.heuristics.baselines.costs import (
    binomial_broadcast_cost,
    binomial_reduce_cost,
    chain_broadcast_cost,
    double_binary_tree_allreduce_cost,
    hierarchical_allreduce_cost,
    recursive_doubling_allgather_cost,
    recursive_halving_doubling_allreduce_cost,
    ring_allgather_cost,
    ring_allreduce_cost,
    ring_reducescatter_cost,
    tree_allreduce_cost,
)
from ccplan.heuristics.baselines.doubling import (
    recursive_doubling_schedule,
    recursive_halving_doubling_schedule,
)
from ccplan.heuristics.baselines.hierarchical import hierarchical_schedule, infer_groups, pairwise_schedule
from ccplan.heuristics.baselines.placer import HOP_KINDS, Placer
from ccplan.heuristics.baselines.registry import BASELINES, Builder
from ccplan.heuristics.baselines.rings import ring1_schedule, ring_order, ring_schedule
from ccplan.heuristics.baselines.supported import SUPPORTED, baseline_label, supports
from ccplan.heuristics.baselines.trees import (
    double_binary_tree_schedule,
    double_binary_trees,
    tree_schedule,
)

__all__ = [
    "BASELINES",
    "HOP_KINDS",
    "SUPPORTED",
    "Builder",
    "Channels",
    "Placer",
    "baseline_label",
    "binomial_broadcast_cost",
    "binomial_reduce_cost",
    "chain_broadcast_cost",
    "double_binary_tree_allreduce_cost",
    "double_binary_tree_schedule",
    "double_binary_trees",
    "find_channels",
    "hierarchical_allreduce_cost",
    "hierarchical_schedule",
    "infer_groups",
    "pairwise_schedule",
    "recursive_doubling_allgather_cost",
    "recursive_doubling_schedule",
    "recursive_halving_doubling_allreduce_cost",
    "recursive_halving_doubling_schedule",
    "ring1_schedule",
    "ring_allgather_cost",
    "ring_allreduce_cost",
    "ring_order",
    "ring_reducescatter_cost",
    "ring_schedule",
    "supports",
    "tree_allreduce_cost",
    "tree_schedule",
]
