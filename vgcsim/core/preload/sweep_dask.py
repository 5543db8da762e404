"""Preload of the fork server of a sweep's Dask LocalCluster: the sweep module and Dask (see
the package)."""

from vgcsim.core.preload import warm

warm("vgcsim.simulator.sweep", "distributed")
