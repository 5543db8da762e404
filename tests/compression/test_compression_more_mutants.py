"""Compressor base class, Strom's sign, the mean-scale floor, dtypes and devices of the
variance estimators: cases the other compression tests leave out, each from a hand-worked
value or a stated contract."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest
import torch
from torch import nn
from torchhelpers import default_dtype
from vgcsim.traces.compression import sqsum_estimators as variance_mod
from vgcsim.traces.compression.base import Compressor, make_payload
from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.compression.sqsum_hooks import SqsumHooks
from vgcsim.traces.wire.bitstream import decode_fields_sequence
from vgcsim.traces.wire.encoders import ENCODINGS
from vgcsim.traces.wire.messages import SparseMessage

from vgcsim.core.errors import ConfigError


def _message() -> SparseMessage:
    codes = np.array([0, 9, 2], dtype=np.uint8)
    return SparseMessage(4, 100, np.array([1, 7, 50]), codes, 2.0)


def test_make_payload_times_the_encoding_within_the_call():
    """encode_s is the encoding's wall time: positive and within the call's own span."""
    before = time.perf_counter()
    p = make_payload(_message(), sent=3, encodings=("packed32", "coo64"), primary="packed32")
    span = time.perf_counter() - before
    assert 0 < p.encode_s <= span


def test_the_primary_encodings_bits_are_the_real_buffers_length(monkeypatch):
    """The primary encoding is sized from the buffer it wrote (8 × bytes: 12 + 4·3 bytes for
    packed32), never from its closed form, which only prices the other encodings."""
    monkeypatch.setattr(ENCODINGS["packed32"], "bit_length", lambda msg: -1)
    p = make_payload(_message(), sent=3, encodings=("packed32", "coo64"), primary="packed32")
    assert p.bits["packed32"] == 8 * len(p.data) == 8 * (12 + 4 * 3)
    assert p.bits["coo64"] == 8 * (12 + 8 * 3)


@dataclasses.dataclass(frozen=True)
class _Params:
    size: int = 1
    flag: bool = False
    shape: tuple = (1, 2)

    def __post_init__(self):
        if self.size < 0:
            raise ValueError("size must be >= 0")


class _Demo(Compressor):
    name = "demo"
    Params = _Params


def test_a_params_error_becomes_a_config_error_naming_the_compressor():
    with pytest.raises(ConfigError) as err:
        _Demo(size=-1)
    assert str(err.value) == "compressor 'demo': size must be >= 0"


def test_parameters_of_other_types_are_not_type_checked():
    """Only int, float and str fields are checked: a bool or tuple field takes its value."""
    c = _Demo(flag=True, shape=(3,))
    assert c.config.flag is True and c.config.shape == (3,)
    with pytest.raises(ConfigError, match="parameter 'size' expects int, got 'x'"):
        _Demo(size="x")


def test_compress_defaults_to_layer_0_and_a_batch_of_one():
    """Without layer and batch_size: the header's layer is 0 and v += S/1² (ζ = 1 keeps it):
    r = (1, 0.5) with S = (4, 4) gives v = (4, 4), nothing sent (r² ≤ 2·4)."""
    comp = get_compressor("variance", zeta=1.0)
    state = comp.init_state(2)
    p = comp.compress(torch.tensor([1.0, 0.5]), state, sqsum=torch.tensor([4.0, 4.0]))
    assert p.layer == 0 and p.data[:4] == b"\0\0\0\0" and p.sent == 0
    assert state.variance.tolist() == [4.0, 4.0]


def test_strom_sends_a_zero_residual_as_plus_tau():
    """τ = 0 sends every element as ±τ with r's sign; r = 0 is not negative: code 0 (sign bit
    clear), −1 is code 8, 2 is code 0."""
    comp = get_compressor("strom", tau=0.0)
    p = comp.compress(torch.tensor([0.0, -1.0, 2.0]), comp.init_state(3))
    assert p.sent == 3
    assert p.message.codes.tolist() == [0, 8, 0]


def test_the_mean_scales_floor_uses_the_float64_mean():
    """scale="mean" with the floor rule: M is the float32 rounding of the float64 mean of the
    magnitudes. For (1, 1 + 2^-23, e) a float32 sum loses the 2^-23 (2 + 2^-23 is a tie and
    rounds to 2), so its mean is one ulp lower; e is that lower mean's level M'·2^-7, below
    M·2^-7: held back (then M = mean(1, 1 + 2^-23) and both others go)."""
    one_up = 1 + 2.0**-23
    e = float.fromhex("0x1.56397ap-8")
    m = np.float32(math.fsum([1.0, one_up, e]) / 3)  # exact sum, one rounding of the mean
    m_f32_sum = np.float32(np.float32(np.float32(1.0) + np.float32(one_up)) + np.float32(e)) / 3
    assert np.float32(e) < m * np.float32(2.0**-7)
    assert np.float32(e) >= np.float32(m_f32_sum) * np.float32(2.0**-7)
    comp = get_compressor("variance", alpha=0.0, scale="mean")
    state = comp.init_state(3)
    p = comp.compress(torch.tensor([1.0, one_up, e]), state, sqsum=torch.zeros(3))
    assert p.sent == 2
    assert state.residual.tolist() == [0.0, 0.0, np.float32(e)]


def test_init_state_is_fp32_whatever_the_default_dtype():
    with default_dtype(torch.float64):
        state = get_compressor("variance").init_state(3)
    assert state.residual.dtype == state.variance.dtype == torch.float32


def test_hook_sums_of_a_float64_model_are_fp32():
    """The squared sums the hooks hand out are fp32 (the compressors' state precision), also
    for a float64 model; they equal the float64 sums Σ_z (∇f_z/B)² to fp32 precision."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2)).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    hooks = SqsumHooks(model, "fast", sq_dtype="float32")
    model(x).sum(1).mean().backward()
    got = hooks.take(0)
    assert got.dtype == torch.float32
    # Linear weight: per-sample gradient ∂(Σ out)/∂W = 1 ⊗ x_z, scaled by 1/B
    want = (x.square().sum(0) / 16).expand(2, 3)
    assert torch.allclose(got.double(), want, rtol=1e-6)


def test_the_exact_estimator_in_chunks_builds_on_the_datas_device(monkeypatch):
    """The exact estimator's sample chunks (a tiny memory bound forces several) with torch's
    default device set to meta: every tensor it makes follows the data (CPU), and the result
    equals the one-chunk run."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 2))
    x, y = torch.randn(6, 3), torch.randn(6, 2)

    def loss_fn(out, target):
        return (out - target).square().sum(1)

    whole = variance_mod.worker_gradients(model, loss_fn, x, y, 2, "exact")
    monkeypatch.setattr(variance_mod, "EXACT_CHUNK_BYTES", 1)
    with torch.device("meta"):
        chunked = variance_mod.worker_gradients(model, loss_fn, x, y, 2, "exact")
    for a, b in zip(whole.sqsums, chunked.sqsums, strict=True):
        assert b.device.type == "cpu" and torch.allclose(a, b, rtol=1e-6)


def test_a_fields_sequence_read_by_hand():
    """("bit", "gamma") twice from 1|011|0|1 (γ(3) = 011, γ(1) = 1, MSB first) + padding:
    bits 1, 0 and gammas 3, 1; zero repetitions give one empty int64 array per field."""
    bits, gammas = decode_fields_sequence(bytes([0b1011_0100]), 2, ("bit", "gamma"))
    assert bits.tolist() == [1, 0] and gammas.tolist() == [3, 1]
    empty = decode_fields_sequence(b"", 0, ("gamma", "bit"))
    assert [(a.dtype, a.size) for a in empty] == [(np.dtype(np.int64), 0)] * 2
