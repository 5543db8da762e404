"""Torch-free wire formats: what crosses the wire and how many bits it takes (numpy only).

Modules::

    messages: SparseMessage, DenseMessage, QSGDMessage (what a compressor decided to send)
    encoders: ENCODINGS, SPARSE_ENCODINGS, DENSE_WIRE_ENCODINGS, QSGD_ENCODINGS (real bytes)
    sizes:    closed-form bits of every format from element counts (synth, validate, encoders)
    bitstream, quantize: MSB-first bit packing, Elias codes, the 4-bit log code

Importable without torch; the compressors (:mod:`vgcsim.traces.compression`) build on it.
"""
