"""The one place the benchmarks build an edge node inside their own process.

Every in-process node of tools/bench comes from `start_edge_node`, so a change in how the
edge tier wires a node is made here once.
"""

from __future__ import annotations

from pathlib import Path

from strata.edge.build import NodeOptions, build_node
from strata.edge.node import EdgeNode, Endpoints
from strata.shared.config.edge import EdgeConfig
from strata.shared.config.objects import ObjectsConfig


def start_edge_node(cfg: EdgeConfig, model: Path) -> tuple[EdgeNode, Endpoints]:
    """A started edge node of `cfg` serving `model` (with the default `objects` section, as
    `strata edge` runs), and the addresses it bound."""
    node = build_node(cfg, model, options=NodeOptions(objects=ObjectsConfig()))
    return node, node.start()
