"""Traces: what a compression trace is (schema, io, validation) and how real training makes one.

``vgcsim.traces.schema``, ``vgcsim.traces.io`` and friends are torch-free and form the shared surface that
``models``, ``simulator`` and ``reports`` read. Only ``vgcsim.traces.compression`` and
``vgcsim.traces.training`` import torch.
"""
