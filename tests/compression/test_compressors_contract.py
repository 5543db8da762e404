"""Every compressor hyperparameter: the values at the edge of its documented range are
accepted, the first values past the edge are refused with one line naming the parameter,
the range and the value given (the compressor docstrings give the ranges); and every
compressor's message is exactly what the receiver decodes from the real bytes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.traces.compression.compressors import get_compressor

INF, NAN = math.inf, math.nan


def _refused(name: str, **params) -> str:
    with pytest.raises(ConfigError) as exc:
        get_compressor(name, **params)
    return str(exc.value)


@pytest.mark.parametrize("name", ["variance", "hybrid"])
def test_alpha_is_a_finite_number_at_least_zero(name):
    assert get_compressor(name, alpha=0.0).config.alpha == 0.0
    assert get_compressor(name, alpha=1e300).config.alpha == 1e300
    for bad in (-1e-12, INF, NAN, -INF):
        assert _refused(name, alpha=bad) == (
            f"{name}: alpha must be a finite number >= 0, got {bad}"
        )


@pytest.mark.parametrize("name", ["variance", "hybrid"])
def test_zeta_is_within_zero_and_one(name):
    assert get_compressor(name, zeta=0.0).config.zeta == 0.0
    assert get_compressor(name, zeta=1.0).config.zeta == 1.0
    for bad in (-1e-12, 1.0 + 1e-12, NAN):
        assert _refused(name, zeta=bad) == f"{name}: zeta must be in [0, 1], got {bad}"


@pytest.mark.parametrize("name", ["strom", "hybrid"])
def test_tau_is_a_finite_number_at_least_zero(name):
    assert get_compressor(name, tau=0.0).config.tau == 0.0
    assert get_compressor(name, tau=1e300).config.tau == 1e300
    for bad in (-1e-12, INF, NAN):
        assert _refused(name, tau=bad) == f"{name}: tau must be a finite number >= 0, got {bad}"


def test_topk_fraction_is_in_the_half_open_unit_interval():
    assert get_compressor("topk", fraction=1.0).config.fraction == 1.0
    assert get_compressor("topk", fraction=1e-12).config.fraction == 1e-12
    for bad in (0.0, -0.5, 1.0 + 1e-12, NAN):
        assert _refused("topk", fraction=bad) == f"topk: fraction must be in (0, 1], got {bad}"


def test_qsgd_bits_bucket_size_and_levels_ranges():
    for bits in (2, 16):
        assert get_compressor("qsgd", bits=bits).config.bits == bits
    for bad in (1, 17, 0):
        assert _refused("qsgd", bits=bad) == f"qsgd: bits must be in 2..16, got {bad}"
    assert get_compressor("qsgd", bucket_size=1).config.bucket_size == 1
    for bad in (0, -3):
        assert _refused("qsgd", bucket_size=bad) == f"qsgd: bucket_size must be >= 1, got {bad}"
    assert get_compressor("qsgd", levels=0).s == 7  # 0 = from bits: 2^(4-1) - 1
    assert get_compressor("qsgd", levels=1).s == 1
    assert _refused("qsgd", levels=-1) == "qsgd: levels must be >= 0 (0 = from bits), got -1"


# (compressor, parameter, kind named in the message, valid choices)
CHOICES = [
    ("variance", "variance", "variance reading", ("centered", "sqsum")),
    ("variance", "variance_scale", "variance_scale", ("batch_mean", "per_sample")),
    ("variance", "after_send", "after_send rule", ("error_feedback", "reset")),
    ("variance", "below_floor", "below_floor rule", ("floor", "keep")),
    ("variance", "scale", "scale rule", ("max", "mean")),
    ("variance", "rounding", "rounding rule", ("down", "log", "nearest")),
    ("variance", "values", "value format", ("code4", "fp32")),
    ("hybrid", "variance", "variance reading", ("centered", "sqsum")),
    ("hybrid", "variance_scale", "variance_scale", ("batch_mean", "per_sample")),
    ("hybrid", "after_send", "after_send rule", ("error_feedback", "reset")),
    ("topk", "values", "value format", ("code4", "fp32")),
    ("topk", "scale", "scale rule", ("max", "mean")),
    ("topk", "rounding", "rounding rule", ("down", "log", "nearest")),
    ("qsgd", "primary", "qsgd encoding", ("qsgd_elias", "qsgd_fixed")),
    ("dense", "precision", "precision", ("fp16", "fp32")),
]


@pytest.mark.parametrize(("name", "param", "kind", "valid"), CHOICES)
def test_every_choice_is_accepted_and_another_is_refused_naming_the_valid_ones(
    name, param, kind, valid
):
    for choice in valid:
        assert getattr(get_compressor(name, **{param: choice}).config, param) == choice
    with pytest.raises(UnknownNameError) as exc:
        get_compressor(name, **{param: "bogus"})
    assert str(exc.value) == f"unknown {kind} 'bogus'; valid: {', '.join(valid)}"


def test_unknown_and_mistyped_parameters_are_one_line_each():
    assert _refused("strom", tau=0.1, alpha=2.0) == (
        "unknown parameter(s) alpha for compressor 'strom'; valid: tau"
    )
    assert _refused("dense", zeta=1.0, alpha=2.0) == (
        "unknown parameter(s) alpha, zeta for compressor 'dense'; valid: precision"
    )
    assert _refused("qsgd", bits=2.5) == "compressor 'qsgd': parameter 'bits' expects int, got 2.5"
    assert (
        _refused("qsgd", bits=True) == "compressor 'qsgd': parameter 'bits' expects int, got True"
    )
    assert _refused("strom", tau=False) == (
        "compressor 'strom': parameter 'tau' expects float, got False"
    )
    assert _refused("dense", precision=16) == (
        "compressor 'dense': parameter 'precision' expects str, got 16"
    )
    # an int is a float hyperparameter's value, as in a TOML or JSON config
    assert get_compressor("strom", tau=1).config.tau == 1
    assert get_compressor("variance", alpha=0).config.alpha == 0


def test_base_contract_of_a_compressor_without_parameters():
    from dataclasses import dataclass

    from vgcsim.traces.compression.base import Compressor

    @dataclass(frozen=True)
    class NoParams:
        pass

    class Bare(Compressor):
        name = "bare"
        Params = NoParams

    with pytest.raises(ConfigError) as exc:
        Bare(k=1)
    assert str(exc.value) == "unknown parameter(s) k for compressor 'bare'; valid: (none)"
    bare = Bare()
    assert bare.params == {} and repr(bare) == "Bare()"
    assert bare.init_state(5) is None
    for attr in ("encodings", "primary_encoding"):
        with pytest.raises(NotImplementedError):
            getattr(bare, attr)


def test_repr_lists_every_hyperparameter():
    assert repr(get_compressor("strom", tau=0.5)) == "StromCompressor(tau=0.5)"
    assert repr(get_compressor("qsgd", bits=3, bucket_size=128)) == (
        "QSGDCompressor(bits=3, bucket_size=128, levels=0, primary='qsgd_elias')"
    )


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("dense", {}),
        ("dense", {"precision": "fp16"}),
        ("variance", {}),
        ("variance", {"values": "fp32"}),
        ("strom", {"tau": 0.5}),
        ("hybrid", {"tau": 0.5, "alpha": 0.5}),
        ("topk", {"fraction": 0.25}),
        ("topk", {"fraction": 0.25, "values": "fp32"}),
        ("qsgd", {"bits": 3, "bucket_size": 4}),
    ],
)
def test_the_message_is_what_the_receiver_decodes_from_the_bytes(name, params):
    # a message's dense() is the tensor the receiver adds up; it must be exactly the decode
    # of the real buffer (fp16 rounding included), and messages hold fp32 values
    import torch

    c = get_compressor(name, **params)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(16, generator=g) * 3 + 1e-3
    state = c.init_state(16)
    p = c.compress(x, state, sqsum=x * x * 4, batch_size=4, layer=2, generator=g)
    assert torch.equal(p.decode(), torch.from_numpy(p.message.dense()))
    assert p.message.dense().dtype == np.float32
    values = getattr(p.message, "values", None)
    if values is not None:
        assert values.dtype == np.float32
    if name == "dense" and params:
        # fp16: every value is representable in half precision, as the bytes carry it
        assert torch.equal(x.half().float(), torch.from_numpy(p.message.dense()))


SPARSE = ("packed32", "coo64", "gap_elias_gamma", "gap_elias_delta", "bitmap")


@pytest.mark.parametrize(
    ("name", "params", "primary", "encodings"),
    [
        ("dense", {}, "fp32", ("fp32", "fp16")),
        ("dense", {"precision": "fp16"}, "fp16", ("fp32", "fp16")),
        # 4-bit codes cross the wire in the paper's packed32 words
        ("variance", {}, "packed32", SPARSE),
        ("strom", {}, "packed32", SPARSE),
        ("hybrid", {}, "packed32", SPARSE),
        ("topk", {}, "packed32", SPARSE),
        # fp32 values have no room in a packed32 word: coo64, and packed32 is not sized
        ("variance", {"values": "fp32"}, "coo64", SPARSE[1:]),
        ("topk", {"values": "fp32"}, "coo64", SPARSE[1:]),
        ("qsgd", {}, "qsgd_elias", ("qsgd_fixed", "qsgd_elias")),
        ("qsgd", {"primary": "qsgd_fixed"}, "qsgd_fixed", ("qsgd_fixed", "qsgd_elias")),
    ],
)
def test_primary_encoding_and_reported_sizes(name, params, primary, encodings):
    import torch

    c = get_compressor(name, **params)
    assert c.primary_encoding == primary and tuple(c.encodings) == encodings
    g = torch.Generator().manual_seed(6)
    x = torch.randn(32, generator=g)
    p = c.compress(x, c.init_state(32), sqsum=x * x, batch_size=1, generator=g)
    assert p.encoding == primary and tuple(p.bits) == encodings


def test_missing_inputs_are_named_in_one_line():
    import torch

    q = get_compressor("qsgd")
    with pytest.raises(ConfigError) as exc:
        q.compress(torch.ones(4), q.init_state(4))
    assert str(exc.value) == "qsgd draws random numbers: pass a seeded torch.Generator"
    for name in ("variance", "hybrid"):
        c = get_compressor(name)
        with pytest.raises(ValueError) as exc:
            c.compress(torch.ones(4), c.init_state(4), batch_size=2)
        assert str(exc.value) == f"{name} needs sqsum (per-element Σ_z (∇f_z)²)"


def test_qsgd_bucket_with_a_norm_below_one_by_hand():
    # bits 3: s = 3. Bucket (0.5, 0, 0, 0) has norm 0.5, so |x|/‖x‖·s = 3 exactly:
    # level floor(3 + u) clamped to s = 3 whatever u, value 0.5·3/3 = 0.5. The bucket
    # (−0.25, 0, 0, 0) likewise gives level −3, value −0.25; an all-zero bucket level 0.
    import torch

    c = get_compressor("qsgd", bits=3, bucket_size=4)
    g = torch.Generator().manual_seed(0)
    x = torch.tensor([0.5, 0, 0, 0, -0.25, 0, 0, 0, 0, 0, 0, 0])
    p = c.compress(x, None, generator=g)
    assert p.message.levels.tolist() == [3, 0, 0, 0, -3, 0, 0, 0, 0, 0, 0, 0]
    assert p.message.norms.tolist() == [0.5, 0.25, 0.0]
    assert torch.equal(p.decode(), x)


def test_unknown_compressor_is_one_line_naming_the_valid_ones():
    with pytest.raises(UnknownNameError) as exc:
        get_compressor("signsgd")
    assert str(exc.value) == (
        "unknown compressor 'signsgd'; valid: dense, hybrid, powersgd, qsgd, strom, topk, variance"
    )


def test_topk_uses_its_rounding_rule():
    # fraction 1 sends both; M = 1: 0.75 = 1.5·2^-1 rounds up to 1 (nearest), down to 0.5
    import torch

    x = torch.tensor([1.0, 0.75])
    got = {}
    for rounding in ("nearest", "down"):
        c = get_compressor("topk", fraction=1.0, rounding=rounding)
        got[rounding] = c.compress(x, c.init_state(2)).decode().tolist()
    assert got == {"nearest": [1.0, 1.0], "down": [1.0, 0.5]}


def test_topk_uses_its_scale_rule():
    # fraction 1 sends all four; "mean": M = 2, 4 clipped to 2; "max": M = 4, all exact
    import torch

    x = torch.tensor([4.0, -1.0, 1.0, 2.0])
    got = {}
    for scale in ("mean", "max"):
        c = get_compressor("topk", fraction=1.0, scale=scale)
        got[scale] = c.compress(x, c.init_state(4)).decode().tolist()
    assert got == {"mean": [2.0, -1.0, 1.0, 2.0], "max": [4.0, -1.0, 1.0, 2.0]}


def test_input_of_another_size_is_one_line():
    import torch

    c = get_compressor("strom")
    with pytest.raises(ValueError) as exc:
        c.compress(torch.ones(3), c.init_state(4))
    assert str(exc.value) == (
        "grad has 3 elements but the compressor state holds 4 "
        "(a state belongs to one (worker, layer))"
    )
