"""Traces: what a compression trace is (schema, io, validation) and how real training makes one.

``traces.schema``, ``traces.io`` and friends are torch-free and form the shared surface that
``models``, ``simulator`` and ``reports`` read. Only ``traces.compression`` and
``traces.training`` import torch.
"""
