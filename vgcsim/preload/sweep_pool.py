"""Preload of the fork server of a sweep's process pool: the simulator's sweep module, whose
``run_job`` the pool's workers run (see the package)."""

from vgcsim.preload import warm

warm("vgcsim.simulator.sweep")
