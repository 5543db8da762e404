"""QSGD: unbiased stochastic rounding (Monte Carlo) and the variance bound of Lemma 3.1."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchhelpers import default_dtype

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


def test_a_level_never_exceeds_s_when_the_bucket_norm_rounds_below_an_element():
    """fp32 norms of subnormal-range buckets lose precision: for [1e-20, 0, 0, 0] the norm is
    below the element (|x|/‖x‖ = 1.0000026), so with s = 2^20 levels |x|/‖x‖·s + u exceeds
    s + 1 for every draw u; the level is clamped to s (QSGD's levels lie in −s..s)."""
    c = get_compressor("qsgd", levels=2**20, bucket_size=4)
    x = torch.tensor([1e-20, 0.0, 0.0, 0.0, -1e-20, 0.0, 0.0, 0.0])  # two buckets
    norm = torch.tensor([1e-20, 0.0, 0.0, 0.0]).norm()
    assert float(torch.tensor(1e-20) / norm) * c.s >= c.s + 2  # the premise
    p = c.compress(x, None, generator=torch.Generator().manual_seed(0))
    assert p.message.levels.tolist() == [2**20, 0, 0, 0, -(2**20), 0, 0, 0]


def test_qsgd_does_not_depend_on_the_default_dtype():
    """The same message (norms, levels and bytes) with torch's default dtype set to float64:
    the padding buffer and the random draws are fp32 by the compressor's own choice."""
    c = get_compressor("qsgd", bits=4, bucket_size=8)
    x = torch.linspace(-1.0, 2.0, 21, dtype=torch.float32)
    ref = c.compress(x, None, generator=torch.Generator().manual_seed(3))
    with default_dtype(torch.float64):
        got = c.compress(x, None, generator=torch.Generator().manual_seed(3))
    assert got.data == ref.data
    assert got.message.norms.dtype == ref.message.norms.dtype
    assert got.message.levels.dtype == np.int64
