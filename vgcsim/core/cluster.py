"""Clusters: the one import path of the cluster specs, presets, topologies and file loader.

What a cluster is lives in a few modules, each one job, bottom to top:

* :mod:`vgcsim.core.specs` — :class:`LinkSpec` and :class:`DeviceSpec` (each field says how
  a cluster file spells it and its accepted range, :data:`RANGES`), the link framings;
* :mod:`vgcsim.core.presets` — the sourced link and device presets;
* :mod:`vgcsim.core.topologies` — one typed spec per topology kind (:data:`TOPOLOGIES`);
* :mod:`vgcsim.core.clusterspec` — :class:`ClusterSpec`, processor sharing on a host
  (:func:`host_share`), the cluster presets;
* :mod:`vgcsim.core.clusterfile` — the one unit-aware loader of TOML cluster files
  (:func:`load_cluster`; the file format is in its docstring).

Import the names from here (``from vgcsim.core.cluster import ClusterSpec, load_cluster``).
"""

from __future__ import annotations

from vgcsim.core.clusterfile import cluster_from_dict, cluster_to_dict, load_cluster, read_table
from vgcsim.core.clusterspec import (
    CLUSTER_PRESETS,
    COMPUTE_MODES,
    ClusterSpec,
    gather_cluster,
    gather_link,
    get_cluster,
    host_share,
    shared_cluster,
    shared_link,
    wire_cluster,
    wire_link,
)
from vgcsim.core.presets import (
    DEFAULT_DEVICE,
    DEVICE_PRESETS,
    INTRA_NODE_LINKS,
    LINK_PRESETS,
    get_device,
    get_link,
)
from vgcsim.core.specs import (
    DEFAULT_HOST_PADDED_SHARE,
    FRAMINGS,
    RANGES,
    DeviceSpec,
    Framing,
    LinkSpec,
    Spelling,
    check_range,
    get_framing,
    spelled,
)
from vgcsim.core.topologies import (
    TOPOLOGIES,
    GraphSpec,
    HierarchicalSpec,
    LeafSpineSpec,
    RingSpec,
    StarSpec,
    TopologySpec,
    Torus2dSpec,
    parse_topology,
)

__all__ = [
    "CLUSTER_PRESETS",
    "COMPUTE_MODES",
    "DEFAULT_DEVICE",
    "DEFAULT_HOST_PADDED_SHARE",
    "DEVICE_PRESETS",
    "FRAMINGS",
    "INTRA_NODE_LINKS",
    "LINK_PRESETS",
    "RANGES",
    "TOPOLOGIES",
    "ClusterSpec",
    "DeviceSpec",
    "Framing",
    "GraphSpec",
    "HierarchicalSpec",
    "LeafSpineSpec",
    "LinkSpec",
    "RingSpec",
    "Spelling",
    "StarSpec",
    "TopologySpec",
    "Torus2dSpec",
    "check_range",
    "cluster_from_dict",
    "cluster_to_dict",
    "get_cluster",
    "get_device",
    "get_framing",
    "get_link",
    "host_share",
    "load_cluster",
    "parse_topology",
    "read_table",
    "shared_cluster",
    "wire_cluster",
    "wire_link",
    "gather_cluster",
    "gather_link",
    "shared_link",
    "spelled",
]
