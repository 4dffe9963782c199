"""The cells of a sweep: one solve each (:class:`Cell`), its stable key, the plain-data payload
shipped to a worker, and the grid's cells in config order (:func:`cells_of`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ccplan.errors import ValidationError
from ccplan.sweep.config import CollectiveEntry, MethodSpec, SweepConfig, TopologyEntry


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Cell:
    """One solve of a sweep."""

    sweep: str
    topology: TopologyEntry
    collective: CollectiveEntry
    size: str
    chunks: int
    method: MethodSpec
    tau_rule: str
    alpha_threshold: float
    alpha_cap_ratio: float | None
    switch_model: str = "store-and-forward"
    switch_reduce: bool = False

    @property
    def key(self) -> str:
        """Stable identity: readable axis values plus a hash of every defining option."""
        ident = {
            "topology": [self.topology.name, dict(self.topology.params)],
            "collective": [self.collective.kind, self.collective.root],
            "size": self.size,
            "chunks": self.chunks,
            "method": self.method.options_dict(),
            "tau_rule": self.tau_rule,
            "alpha_threshold": self.alpha_threshold,
            "alpha_cap_ratio": self.alpha_cap_ratio,
        }
        if self.switch_model != "store-and-forward":
            ident["switch_model"] = self.switch_model  # keys of default cells stay as they were
        if self.switch_reduce:
            ident["switch_reduce"] = True
        digest = hashlib.sha1(_canonical(ident).encode()).hexdigest()[:10]
        return (
            f"{self.topology.label}|{self.collective.label}|{self.size}|C{self.chunks}|"
            f"{self.method.label}|{digest}"
        )

    def to_payload(self, simulate: bool, imports: Sequence[str]) -> dict[str, Any]:
        """Plain-data form shipped to a worker (process pool or Dask)."""
        m = self.method
        return {
            "key": self.key,
            "sweep": self.sweep,
            "topology": self.topology.label,
            "topology_name": self.topology.name,
            "topology_params": dict(self.topology.params),
            "collective": self.collective.kind,
            "root": self.collective.root,
            "size": self.size,
            "chunks": self.chunks,
            "method_label": m.label,
            "method": m.method,
            "time_limit": m.time_limit,
            "workers": m.workers,
            "warm_start": m.warm_start,
            "seed": m.seed,
            "horizon": m.horizon,
            "extra": dict(m.extra),
            "tau_rule": m.tau_rule or self.tau_rule,
            "alpha_threshold": self.alpha_threshold,
            "alpha_cap_ratio": self.alpha_cap_ratio,
            "switch_model": self.switch_model,
            "switch_reduce": self.switch_reduce,
            "simulate": simulate,
            "imports": list(imports),
        }


def cells_of(config: SweepConfig) -> list[Cell]:
    """All cells of the grid, in config order (topology, collective, size, chunks, method)."""
    from ccplan.instances.instance import parse_size

    out: list[Cell] = []
    for topo in config.topologies:
        for coll in config.collectives:
            for size in config.sizes:
                for chunks in config.chunks:
                    for m in config.methods:
                        if m.sizes is not None and not any(
                            parse_size(s) == parse_size(size) for s in m.sizes
                        ):
                            continue
                        if m.chunks is not None and chunks not in m.chunks:
                            continue
                        if m.topologies is not None and topo.label not in m.topologies:
                            continue
                        if m.collectives is not None and coll.label not in m.collectives:
                            continue
                        out.append(
                            Cell(
                                config.name,
                                topo,
                                coll,
                                size,
                                chunks,
                                m,
                                config.tau_rule,
                                config.alpha_threshold,
                                config.alpha_cap_ratio,
                                config.switch_model,
                                config.switch_reduce,
                            )
                        )
    keys = [c.key for c in out]
    if len(set(keys)) != len(keys):
        raise ValidationError(f"sweep {config.name!r}: two cells have the same key (duplicate axis values?)")
    return out
