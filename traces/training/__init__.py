"""Workloads (nets, datasets), the emulated data-parallel loop and the distributed hook (torch)."""
