"""Preload of the fork server of a sweep's Dask LocalCluster: the sweep runners (which import
the simulator's sweep module) and Dask (see the package)."""

from vgcsim.preload import warm

warm("vgcsim.sweep_runners", "distributed")
