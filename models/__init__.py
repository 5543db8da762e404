"""Closed-form cost models (torch-free): collectives, compute, iteration; `vgcsim predict`."""
