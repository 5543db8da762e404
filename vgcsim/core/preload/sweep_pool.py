"""Preload of the fork server of a sweep's process pool: the sweep module (see the package)."""

from vgcsim.core.preload import warm

warm("vgcsim.simulator.sweep")
