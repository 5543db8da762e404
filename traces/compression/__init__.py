"""Compressors and byte-honest encoders (torch): variance, strom, qsgd, hybrid, topk, dense."""
