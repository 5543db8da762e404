"""QSGD: unbiased stochastic rounding (Monte Carlo) and the variance bound of Lemma 3.1."""

from __future__ import annotations

import math

import pytest
import torch
from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.wire.messages import qsgd_values

DRAWS = 10_000


@pytest.mark.parametrize("bits,d", [(2, 128), (3, 512), (4, 512), (2, 16)])
def test_unbiased_and_variance_bound(bits, d):
    c = get_compressor("qsgd", bits=bits, bucket_size=d)
    s = c.s
    g = torch.Generator().manual_seed(bits * 1000 + d)
    x = torch.randn(d, generator=g) * torch.linspace(0.01, 2.0, d)
    # DRAWS independent quantizations at once: every tiled copy is its own bucket.
    norms, levels = c.quantize(x.repeat(DRAWS), g)
    q = torch.from_numpy(qsgd_values(norms.numpy(), levels.numpy(), d, s)).view(DRAWS, d)
    # Unbiased: per element, the Monte-Carlo mean is within 5 standard errors of x.
    # Var of one draw is (‖x‖/s)² p(1-p) with p the fractional part of s|x|/‖x‖.
    norm = x.norm()
    p = (s * x.abs() / norm) % 1.0
    std_err = (norm / s) * torch.sqrt(p * (1 - p)) / math.sqrt(DRAWS)
    err = (q.mean(0) - x).abs()
    assert torch.all(err <= 5 * std_err + 1e-6 * norm)
    # Variance bound: E‖Q(x) − x‖² <= min(d/s², √d/s)·‖x‖² (QSGD Lemma 3.1).
    mse = (q - x).pow(2).sum(1).mean()
    assert mse <= min(d / s**2, math.sqrt(d) / s) * norm**2
    # Levels stay in −s..s and carry the sign of x.
    assert levels.abs().max() <= s
    assert torch.all((levels.view(DRAWS, d) * x.sign()) >= 0)


def test_bits_reading_and_paper_settings():
    assert get_compressor("qsgd", bits=2, bucket_size=128).s == 1
    assert get_compressor("qsgd", bits=3, bucket_size=512).s == 3
    assert get_compressor("qsgd", bits=4, bucket_size=512).s == 7
    assert get_compressor("qsgd", bits=4, levels=15).s == 15


def test_payload_decodes_to_quantized_values_and_zero_bucket():
    c = get_compressor("qsgd", bits=3, bucket_size=4)
    x = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, -2.0, 0.5, 0.25, 3.0])
    p = c.compress(x, None, generator=torch.Generator().manual_seed(0))
    out = p.decode()
    assert torch.equal(out[:4], torch.zeros(4))
    assert p.sent == 9
    norm = x[4:8].norm()
    # every value is a multiple of ‖bucket‖/s with the right sign
    levels = out[4:8] / (norm / 3)
    torch.testing.assert_close(levels, levels.round(), rtol=0, atol=1e-5)
    assert torch.all(out[4:8] * x[4:8] >= 0)
