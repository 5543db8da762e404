"""SimPy cluster model (torch-free): topology, network, collectives, trace replay, sweeps."""
