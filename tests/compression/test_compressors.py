"""Compressors: registry, limits that reduce to dense, error feedback, determinism."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest
import torch
from torch import nn
from torchhelpers import default_dtype

from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.traces.compression import sqsum_estimators as variance_mod
from vgcsim.traces.compression.base import Compressor, make_payload
from vgcsim.traces.compression.compressors import COMPRESSORS, get_compressor
from vgcsim.traces.compression.sqsum_hooks import SqsumHooks
from vgcsim.traces.wire.bitstream import decode_fields_sequence
from vgcsim.traces.wire.encoders import (
    DENSE_WIRE_ENCODINGS,
    ENCODINGS,
    QSGD_ENCODINGS,
    SPARSE_ENCODINGS,
)
from vgcsim.traces.wire.messages import SparseMessage

W, N = 4, 3000


def grads(steps: int, seed: int = 0, n: int = N, workers: int = W) -> torch.Tensor:
    """[steps, workers, n] gradients that are nonzero everywhere (no exact ties with 0)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, workers, n, generator=g) * 0.01
    return torch.where(x == 0, torch.full_like(x, 1e-6), x)


def run(c: Compressor, xs: torch.Tensor, seed: int = 0, batch: int = 8):
    """Feed xs[step, worker] through c; returns payloads[step][worker] and the states."""
    gen = torch.Generator().manual_seed(seed)
    states = [c.init_state(xs.shape[-1]) for _ in range(xs.shape[1])]
    out = []
    for step in range(xs.shape[0]):
        row = []
        for w in range(xs.shape[1]):
            x = xs[step, w]
            sq = x * x * batch + 1e-5 * (1 + step)  # a plausible Σ_z (∇f_z)² >= B·g²
            row.append(c.compress(x, states[w], sqsum=sq, batch_size=batch, layer=1, generator=gen))
        out.append(row)
    return out, states


def test_registry_names_and_errors():
    assert set(COMPRESSORS) == {"dense", "variance", "strom", "qsgd", "hybrid", "topk", "powersgd"}
    with pytest.raises(UnknownNameError, match="dense, hybrid, powersgd, qsgd, strom, topk"):
        get_compressor("signsgd")
    with pytest.raises(ConfigError, match="valid: alpha, zeta"):
        get_compressor("variance", beta=1.0)
    for name, bad in [
        ("variance", {"alpha": -1}),
        ("variance", {"zeta": 1.5}),
        ("variance", {"rounding": "up"}),
        ("variance", {"after_send": "bogus"}),
        ("variance", {"below_floor": "drop"}),
        ("variance", {"variance_scale": "batch"}),
        ("hybrid", {"after_send": "zero"}),
        ("hybrid", {"variance_scale": "x"}),
        ("hybrid", {"below_floor": "keep"}),
        ("strom", {"tau": -0.1}),
        ("topk", {"fraction": 0}),
        ("qsgd", {"bits": 1}),
        ("qsgd", {"primary": "packed32"}),
        ("dense", {"precision": "bf16"}),
    ]:
        with pytest.raises(ConfigError):
            get_compressor(name, **bad)


def test_contract_attributes():
    for name, cls in COMPRESSORS.items():
        c = get_compressor(name)
        assert c.name == name and isinstance(c.params, dict)
        assert c.primary_encoding in c.encodings
        assert c.needs_sqsum == (name in ("variance", "hybrid"))
        assert cls is type(c)
    assert get_compressor("variance").encodings == SPARSE_ENCODINGS
    assert get_compressor("dense").encodings == DENSE_WIRE_ENCODINGS
    assert get_compressor("qsgd").encodings == QSGD_ENCODINGS
    assert get_compressor("qsgd").primary_encoding == "qsgd_elias"
    assert get_compressor("topk", values="fp32").primary_encoding == "coo64"
    assert get_compressor("variance").params == {
        "alpha": 2.0,
        "zeta": 0.999,
        "variance": "sqsum",
        "variance_scale": "batch_mean",
        "after_send": "reset",
        "below_floor": "keep",
        "scale": "max",
        "rounding": "nearest",
        "values": "code4",
    }
    assert get_compressor("hybrid").params == {
        "tau": 0.01,
        "alpha": 2.0,
        "zeta": 0.999,
        "variance": "sqsum",
        "variance_scale": "batch_mean",
        "after_send": "reset",
    }


@pytest.mark.parametrize(
    "name,params",
    [
        ("variance", {"alpha": 0.0, "values": "fp32"}),
        ("topk", {"fraction": 1.0, "values": "fp32"}),
        ("dense", {}),
    ],
)
def test_limits_send_everything_and_equal_dense_aggregation(name, params):
    xs = grads(1)
    payloads, _ = run(get_compressor(name, **params), xs)
    assert all(p.sent == N for p in payloads[0])
    aggregated = sum(p.decode() for p in payloads[0])
    dense = sum(xs[0, w] for w in range(W))
    assert torch.equal(aggregated, dense)


@pytest.mark.parametrize(
    "name,params",
    [
        ("variance", {"alpha": 0.0, "below_floor": "floor", "after_send": "error_feedback"}),
        ("strom", {"tau": 0.0}),
        ("hybrid", {"tau": 0.0, "alpha": 0.0, "after_send": "error_feedback"}),
        ("topk", {"fraction": 1.0}),
    ],
)
def test_limits_send_every_element_with_4bit_values(name, params):
    # With the 4-bit code (or Strom's ±τ values) the sent values are quantized, so one
    # step equals dense only together with the residual: decoded + r == g (error feedback;
    # below_floor="floor", since "keep" holds back the elements below M·2^-7).
    xs = grads(1)
    payloads, states = run(get_compressor(name, **params), xs)
    for w, p in enumerate(payloads[0]):
        assert p.sent == N
        torch.testing.assert_close(p.decode() + states[w].residual, xs[0, w], rtol=0, atol=1e-9)


def test_strict_thresholds_send_nothing_when_far_away():
    xs = grads(1)
    for name, params in [
        ("strom", {"tau": 10.0}),
        ("hybrid", {"tau": 10.0}),
        ("variance", {"alpha": 1e9}),
    ]:
        payloads, _ = run(get_compressor(name, **params), xs)
        assert all(p.sent == 0 for p in payloads[0])
        assert all(torch.count_nonzero(p.decode()) == 0 for p in payloads[0])


def _dyadic(steps: int, seed: int) -> torch.Tensor:
    # Integers / 256: sums, ±τ = ±1/16 and residual updates stay exact in fp32.
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-40, 41, (steps, 2, 500), generator=g).float() / 256


@pytest.mark.parametrize(
    "name,params",
    [
        ("strom", {"tau": 1 / 16}),
        ("hybrid", {"tau": 1 / 16, "alpha": 1.0, "after_send": "error_feedback"}),
    ],
)
def test_error_feedback_conserves_exactly(name, params):
    xs = _dyadic(60, 1)
    payloads, states = run(get_compressor(name, **params), xs)
    for w in range(2):
        sent = sum(payloads[s][w].decode() for s in range(60))
        assert torch.equal(sent + states[w].residual, xs[:, w].sum(0))
        assert sum(payloads[s][w].sent for s in range(60)) > 0


@pytest.mark.parametrize(
    "name,params",
    [
        ("variance", {"after_send": "error_feedback"}),
        ("variance", {"after_send": "error_feedback", "below_floor": "floor"}),
        (
            "variance",
            {
                "after_send": "error_feedback",
                "variance": "centered",
                "rounding": "log",
                "scale": "mean",
            },
        ),
        ("variance", {"after_send": "error_feedback", "rounding": "down"}),
        ("topk", {"fraction": 0.05}),
        ("topk", {"fraction": 0.05, "values": "fp32"}),
    ],
)
def test_error_feedback_conserves(name, params):
    # Σ decoded + r == Σ inputs per element; fp32 rounding is the only slack:
    # tolerance 1e-6 of the largest |Σ inputs| (steps × a few ulps).
    steps = 80
    xs = grads(steps, seed=2, n=800, workers=2)
    payloads, states = run(get_compressor(name, **params), xs)
    for w in range(2):
        sent = torch.stack([payloads[s][w].decode() for s in range(steps)]).double().sum(0)
        total = xs[:, w].double().sum(0)
        err = (sent + states[w].residual.double() - total).abs().max().item()
        assert err <= 1e-6 * total.abs().max().item()
        assert 0 < sum(payloads[s][w].sent for s in range(steps)) < steps * 800


def test_variance_rule_by_hand():
    # Today's reading, error feedback: after a send r -= q (the code's error stays), v = 0.
    c = get_compressor("variance", alpha=2.0, zeta=0.5, after_send="error_feedback")
    st = c.init_state(3)
    g = torch.tensor([1.0, 1.0, 0.1])
    sq = torch.tensor([4.0, 16.0, 0.04])  # B = 2: v = sq / 4 = [1, 4, 0.01]
    p = c.compress(g, st, sqsum=sq, batch_size=2)
    # r² = [1, 1, 0.01] > 2v = [2, 8, 0.02]? none -> nothing sent, v decays by zeta.
    assert p.sent == 0
    torch.testing.assert_close(st.variance, torch.tensor([0.5, 2.0, 0.005]))
    p = c.compress(g, st, sqsum=torch.zeros(3), batch_size=2)
    # r = [2, 2, 0.2], r² = [4, 4, 0.04] > 2v = [1, 4, 0.01] -> elements 0 and 2.
    assert p.sent == 2
    np.testing.assert_array_equal(p.message.indices, [0, 2])
    # M = 2 (max sent |r|); 0.2 -> nearest of 2·2^-e is 0.25 (e = 3).
    torch.testing.assert_close(p.decode(), torch.tensor([2.0, 0.0, 0.25]))
    torch.testing.assert_close(st.residual, torch.tensor([0.0, 2.0, -0.05]))
    torch.testing.assert_close(st.variance, torch.tensor([0.0, 1.0, 0.0]))


def test_hybrid_rule_by_hand():
    # Sent only when both tests pass (|r| >= tau and r² > alpha·v), as ±tau; r -= ±tau.
    c = get_compressor("hybrid", tau=0.5, alpha=1.0, zeta=0.5, after_send="error_feedback")
    st = c.init_state(4)
    g = torch.tensor([1.0, -1.0, 0.2, 1.0])
    sq = torch.tensor([0.0, 0.0, 0.0, 16.0])  # B = 2: v = sq / 4 = [0, 0, 0, 4]
    p = c.compress(g, st, sqsum=sq, batch_size=2)
    # |r| >= 0.5: elements 0, 1, 3; r² > v: elements 0, 1, 2 -> both: 0 and 1.
    np.testing.assert_array_equal(p.message.indices, [0, 1])
    torch.testing.assert_close(p.decode(), torch.tensor([0.5, -0.5, 0.0, 0.0]))
    torch.testing.assert_close(st.residual, torch.tensor([0.5, -0.5, 0.2, 1.0]))
    torch.testing.assert_close(st.variance, torch.tensor([0.0, 0.0, 0.0, 2.0]))


def test_variance_reset_rule_by_hand():
    # The paper's Algorithm 1 as both public re-implementations read it: after a send
    # r = 0 and v = 0. Same inputs as test_variance_rule_by_hand (alpha 2, zeta 1/2, B = 2).
    def three_steps(after_send):
        c = get_compressor("variance", alpha=2.0, zeta=0.5, after_send=after_send)
        st = c.init_state(3)
        g = torch.tensor([1.0, 1.0, 0.1])
        c.compress(g, st, sqsum=torch.tensor([4.0, 16.0, 0.04]), batch_size=2)
        second = c.compress(g, st, sqsum=torch.zeros(3), batch_size=2)
        residual_after_second = st.residual.clone()
        third = c.compress(torch.zeros(3), st, sqsum=torch.zeros(3), batch_size=2)
        return second, residual_after_second, third, st

    second, r2, third, st = three_steps("reset")
    # Step 2 sends elements 0 and 2 (r = [2, 2, 0.2], 2v = [1, 4, 0.01]) with the same
    # codes as under error feedback, [2, 0, 0.25]; then r = [0, 2, 0], v = [0, 1, 0].
    np.testing.assert_array_equal(second.message.indices, [0, 2])
    torch.testing.assert_close(second.decode(), torch.tensor([2.0, 0.0, 0.25]))
    torch.testing.assert_close(r2, torch.tensor([0.0, 2.0, 0.0]), rtol=0, atol=0)
    # Step 3 (g = 0, sq = 0): v = [0, 1, 0] before the test; r² = [0, 4, 0]
    # > 2v = [0, 2, 0]: element 1 only (0 > 0 is false). Sent as M = 2; r = 0, v = 0.
    np.testing.assert_array_equal(third.message.indices, [1])
    torch.testing.assert_close(st.residual, torch.zeros(3), rtol=0, atol=0)
    torch.testing.assert_close(st.variance, torch.zeros(3), rtol=0, atol=0)

    second, r2, third, st = three_steps("error_feedback")
    torch.testing.assert_close(r2, torch.tensor([0.0, 2.0, -0.05]))
    # Error feedback: element 2 keeps the code's overshoot r = -0.05 with v = 0, so
    # r² = 0.0025 > 0 passes again at once: elements 1 and 2 are sent. M = 2; 0.05/2 lies
    # above the midpoint 0.046875 of the levels 2·2^-6 and 2·2^-5 -> -0.0625 (e = 5);
    # r = -0.05 + 0.0625 = 0.0125.
    np.testing.assert_array_equal(third.message.indices, [1, 2])
    torch.testing.assert_close(third.decode(), torch.tensor([0.0, 2.0, -0.0625]))
    torch.testing.assert_close(st.residual, torch.tensor([0.0, 0.0, 0.0125]))


def test_hybrid_reset_rule_by_hand():
    # As test_hybrid_rule_by_hand, with the default after_send="reset": sent elements end
    # with r = 0 instead of r -= ±tau; unsent ones keep r, v decays by zeta.
    c = get_compressor("hybrid", tau=0.5, alpha=1.0, zeta=0.5)
    st = c.init_state(4)
    g = torch.tensor([1.0, -1.0, 0.2, 1.0])
    p = c.compress(g, st, sqsum=torch.tensor([0.0, 0.0, 0.0, 16.0]), batch_size=2)
    np.testing.assert_array_equal(p.message.indices, [0, 1])
    torch.testing.assert_close(p.decode(), torch.tensor([0.5, -0.5, 0.0, 0.0]))
    torch.testing.assert_close(st.residual, torch.tensor([0.0, 0.0, 0.2, 1.0]), rtol=0, atol=0)
    torch.testing.assert_close(st.variance, torch.tensor([0.0, 0.0, 0.0, 2.0]))


def test_below_floor_keep_and_floor_by_hand():
    # alpha 1, zeta 1/2, B = 1 (v += sq). Dyadic values, exact in fp32.
    # g = [1, 2^-8, -1/2], sq = [0, 2^-20, 0]: r² = [1, 2^-16, 1/4] > v = [0, 2^-20, 0]:
    # all three pass. M = max |r| = 1, smallest level M·2^-7 = 2^-7 > 2^-8 = |r_1|.
    g = torch.tensor([1.0, 2.0**-8, -0.5])
    sq = torch.tensor([0.0, 2.0**-20, 0.0])

    keep = get_compressor("variance", alpha=1.0, zeta=0.5)  # below_floor="keep" by default
    st = keep.init_state(3)
    p = keep.compress(g, st, sqsum=sq, batch_size=1)
    # keep: element 1 is not sent; it stays in r, and v decays like any unsent element.
    np.testing.assert_array_equal(p.message.indices, [0, 2])
    assert p.message.scale == 1.0
    torch.testing.assert_close(p.decode(), torch.tensor([1.0, 0.0, -0.5]), rtol=0, atol=0)
    torch.testing.assert_close(st.residual, torch.tensor([0.0, 2.0**-8, 0.0]), rtol=0, atol=0)
    torch.testing.assert_close(st.variance, torch.tensor([0.0, 2.0**-21, 0.0]), rtol=0, atol=0)

    for after_send, r1 in (("reset", 0.0), ("error_feedback", 2.0**-8 - 2.0**-7)):
        floor = get_compressor(
            "variance", alpha=1.0, zeta=0.5, below_floor="floor", after_send=after_send
        )
        st = floor.init_state(3)
        p = floor.compress(g, st, sqsum=sq, batch_size=1)
        # floor: element 1 goes out as the smallest level 2^-7 (code e = 7), v = 0.
        np.testing.assert_array_equal(p.message.indices, [0, 1, 2])
        torch.testing.assert_close(p.decode(), torch.tensor([1.0, 2.0**-7, -0.5]), rtol=0, atol=0)
        torch.testing.assert_close(st.residual, torch.tensor([0.0, r1, 0.0]), rtol=0, atol=0)
        torch.testing.assert_close(st.variance, torch.zeros(3), rtol=0, atol=0)


def test_below_floor_keep_with_mean_scale_repeats_until_nothing_falls_below():
    # scale "mean": dropping a small element raises M, which can put another below M·2^-7.
    # r = [1, 0.003, 2^-20], all pass (v = 0). Round 1: M = 1.00300095/3 = 0.33433,
    # floor 0.0026120: drops 2^-20 only. Round 2: M = 1.003/2 = 0.5015, floor 0.0039180
    # > 0.003: drops 0.003. Round 3: M = 1, floor 2^-7 < 1: only element 0 is sent.
    c = get_compressor("variance", alpha=1.0, zeta=1.0, scale="mean")
    st = c.init_state(3)
    g = torch.tensor([1.0, 0.003, 2.0**-20])
    p = c.compress(g, st, sqsum=torch.zeros(3), batch_size=1)
    np.testing.assert_array_equal(p.message.indices, [0])
    assert p.message.scale == 1.0
    torch.testing.assert_close(st.residual, torch.tensor([0.0, 0.003, 2.0**-20]))


def _variance_after_one_step(**params) -> torch.Tensor:
    # zeta 1 and an alpha no element with v > 0 passes: v after one step is exactly the
    # step's term (an element with v = 0 passes and is reset to v = 0, the same value).
    c = get_compressor("variance", alpha=1e9, zeta=1.0, **params)
    st = c.init_state(3)
    # B = 4 samples per element: [1, 0, 0, 1], [1, 1, 1, 1], [2, 2, 2, 2] (per-sample
    # gradients) -> mean g = [0.5, 1, 2], S = Σ_z g_z² = [2, 4, 16].
    g = torch.tensor([0.5, 1.0, 2.0])
    sq = torch.tensor([2.0, 4.0, 16.0])
    c.compress(g, st, sqsum=sq, batch_size=4)
    return st.variance


def test_variance_scale_readings_by_hand():
    # sqsum, batch_mean: S/|B|² = [2, 4, 16]/16; per_sample: S/|B| = [2, 4, 16]/4.
    torch.testing.assert_close(
        _variance_after_one_step(), torch.tensor([0.125, 0.25, 1.0]), rtol=0, atol=0
    )
    torch.testing.assert_close(
        _variance_after_one_step(variance_scale="per_sample"),
        torch.tensor([0.5, 1.0, 4.0]),
        rtol=0,
        atol=0,
    )


def test_centered_variance_readings_by_hand():
    # The biased sample variance of the per-sample gradients: element 0 [1, 0, 0, 1]:
    # mean(g_z²) − mean² = 0.5 − 0.25 = 0.25; elements 1, 2 are constant: 0.
    # per_sample: v += V_B = [0.25, 0, 0]; batch_mean: v += V_B/|B| = [0.0625, 0, 0] (the
    # final /|B|: without it batch_mean would equal per_sample).
    torch.testing.assert_close(
        _variance_after_one_step(variance="centered"),
        torch.tensor([0.0625, 0.0, 0.0]),
        rtol=0,
        atol=0,
    )
    torch.testing.assert_close(
        _variance_after_one_step(variance="centered", variance_scale="per_sample"),
        torch.tensor([0.25, 0.0, 0.0]),
        rtol=0,
        atol=0,
    )


def test_variance_scale_changes_what_is_sent():
    # B = 4, g = 0.5, S = 2, alpha 1: batch_mean v = 0.125 < r² = 0.25 -> sent;
    # per_sample v = 0.5 > 0.25 -> held, v *= zeta = 0.25.
    g, sq = torch.tensor([0.5]), torch.tensor([2.0])
    c = get_compressor("variance", alpha=1.0, zeta=0.5)
    assert c.compress(g, c.init_state(1), sqsum=sq, batch_size=4).sent == 1
    c = get_compressor("variance", alpha=1.0, zeta=0.5, variance_scale="per_sample")
    st = c.init_state(1)
    assert c.compress(g, st, sqsum=sq, batch_size=4).sent == 0
    assert st.variance.item() == 0.25
    # The hybrid reads v the same way: tau 0.25 <= |r| = 0.5, so only the variance test decides.
    for scale, sent in (("batch_mean", 1), ("per_sample", 0)):
        h = get_compressor("hybrid", tau=0.25, alpha=1.0, variance_scale=scale)
        assert h.compress(g, h.init_state(1), sqsum=sq, batch_size=4).sent == sent


@pytest.mark.parametrize(
    "name,params",
    [("strom", {"tau": 0.25}), ("hybrid", {"tau": 0.25, "alpha": 1.0, "after_send": "reset"})],
)
def test_threshold_is_inclusive_exactly_at_tau(name, params):
    # |r| >= tau, not > tau: dyadic inputs equal to ±tau are sent (v = 0, so the hybrid's
    # variance test r² > 0 passes for every nonzero r and only tau decides).
    c = get_compressor(name, **params)
    st = c.init_state(4)
    g = torch.tensor([0.25, -0.25, 0.125, 0.375])
    p = c.compress(g, st, sqsum=torch.zeros(4), batch_size=1)
    np.testing.assert_array_equal(p.message.indices, [0, 1, 3])
    torch.testing.assert_close(p.decode(), torch.tensor([0.25, -0.25, 0.0, 0.25]), rtol=0, atol=0)
    # Strom: r ∓= tau -> [0, 0, 0.125, 0.125]; hybrid with reset: r = 0 where sent.
    expected = [0.0, 0.0, 0.125, 0.125] if name == "strom" else [0.0, 0.0, 0.125, 0.0]
    torch.testing.assert_close(st.residual, torch.tensor(expected), rtol=0, atol=0)
    # Second step: element 2 reaches exactly tau (0.125 + 0.125) and is sent.
    p = c.compress(torch.tensor([0.0, 0.0, 0.125, 0.0]), st, sqsum=torch.zeros(4), batch_size=1)
    assert 2 in p.message.indices.tolist()


def test_needs_sqsum_and_generator():
    with pytest.raises(ValueError, match="sqsum"):
        get_compressor("variance").compress(torch.ones(3), get_compressor("variance").init_state(3))
    with pytest.raises(ConfigError, match="Generator"):
        get_compressor("qsgd").compress(torch.ones(3), None)


def test_topk_sends_k_largest():
    c = get_compressor("topk", fraction=0.2, values="fp32")
    x = torch.tensor([0.1, -5.0, 0.2, 3.0, 0.0, 0.05, -0.3, 0.4, 0.01, 0.02])
    p = c.compress(x, c.init_state(10))
    np.testing.assert_array_equal(p.message.indices, [1, 3])
    assert p.sent == 2


def test_dense_fp16_rounds_values():
    x = torch.tensor([1.0 + 2**-12, 3.0])
    p = get_compressor("dense", precision="fp16").compress(x, None)
    assert p.bits == {"fp32": 64 + 64, "fp16": 64 + 32}
    torch.testing.assert_close(p.decode(), torch.tensor([1.0, 3.0]), rtol=0, atol=0)


#: compressors with one payload per worker (powersgd exchanges all workers at once)
PER_WORKER = sorted(n for n, c in COMPRESSORS.items() if not c.collective)


@pytest.mark.parametrize("name", PER_WORKER)
def test_same_seed_same_bytes(name):
    xs = grads(5, seed=4, n=700)
    a, _ = run(get_compressor(name), xs, seed=9)
    b, _ = run(get_compressor(name), xs, seed=9)
    for ra, rb in zip(a, b, strict=True):
        for pa, pb in zip(ra, rb, strict=True):
            assert pa.data == pb.data and pa.bits == pb.bits and pa.sent == pb.sent


def test_qsgd_different_seed_different_bytes():
    xs = grads(1, n=700)
    a, _ = run(get_compressor("qsgd"), xs, seed=1)
    b, _ = run(get_compressor("qsgd"), xs, seed=2)
    assert a[0][0].data != b[0][0].data


@pytest.mark.parametrize("name", PER_WORKER)
def test_payload_bits_match_real_buffers(name):
    from vgcsim.traces.wire.encoders import ENCODINGS

    xs = grads(3, seed=5, n=1500)
    payloads, _ = run(get_compressor(name), xs)
    for row in payloads:
        for p in row:
            assert p.bits[p.encoding] == 8 * len(p.data)
            for enc, bits in p.bits.items():
                assert bits == 8 * len(ENCODINGS[enc].encode(p.message))
            torch.testing.assert_close(
                p.decode(), torch.from_numpy(p.message.dense()), rtol=0, atol=0
            )


def test_parameter_of_wrong_type_is_a_config_error():
    # A float bits once passed validation and failed in compress with a TypeError traceback;
    # a string alpha failed inside the range check with a TypeError.
    for name, bad in [
        ("qsgd", {"bits": 2.5}),
        ("qsgd", {"bucket_size": 2.5}),
        ("qsgd", {"levels": True}),
        ("variance", {"alpha": "2"}),
        ("strom", {"tau": None}),
        ("topk", {"fraction": "0.1"}),
        ("dense", {"precision": 16}),
    ]:
        with pytest.raises(ConfigError, match="expects"):
            get_compressor(name, **bad)
    assert get_compressor("variance", alpha=2).config.alpha == 2


@pytest.mark.parametrize("name", ["variance", "strom", "hybrid", "topk"])
def test_input_of_another_size_than_the_state_is_refused(name):
    # numpy once broadcast a one-element gradient over the whole residual, silently.
    c = get_compressor(name)
    state = c.init_state(10)
    with pytest.raises(ValueError, match="grad has 1 elements"):
        c.compress(torch.tensor([0.5]), state, sqsum=torch.tensor([0.01]), batch_size=4)
    if c.needs_sqsum:
        with pytest.raises(ValueError, match="sqsum has 1 elements"):
            c.compress(torch.ones(10), state, sqsum=torch.tensor([0.01]), batch_size=4)
    assert not state.residual.any()


def test_hybrid_ties_at_both_thresholds_by_hand():
    """Dyadic inputs exactly at each threshold (exact in fp32): |r| = τ passes Strom's test
    (>=), r² = α·v fails the variance test (strict >). α = 1, τ = 0.5, B = 1 (v += sq).
    r = [0.5, 0.5, 1.0], v = [0, 0.25, 1.0]: element 0 passes both; element 1 sits on
    τ and has r² = α·v (not sent); element 2 has r² = α·v = 1 (not sent)."""
    c = get_compressor("hybrid", tau=0.5, alpha=1.0, zeta=0.5)
    st = c.init_state(3)
    p = c.compress(
        torch.tensor([0.5, 0.5, 1.0]), st, sqsum=torch.tensor([0.0, 0.25, 1.0]), batch_size=1
    )
    np.testing.assert_array_equal(p.message.indices, [0])
    torch.testing.assert_close(p.decode(), torch.tensor([0.5, 0.0, 0.0]), rtol=0, atol=0)
    # one ulp above the tie: element 2 with r slightly above 1 passes (r² > v)
    st = c.init_state(1)
    up = float(np.nextafter(np.float32(1.0), np.float32(2.0)))
    p = c.compress(torch.tensor([up]), st, sqsum=torch.tensor([1.0]), batch_size=1)
    np.testing.assert_array_equal(p.message.indices, [0])


def test_topk_sends_at_least_one_element_and_no_more_when_the_fraction_is_tiny():
    """k = min(n, max(1, ceil(fraction·n))): fraction 10^-6 of 8 elements is 1 element (the
    largest |r|), not 2; with n = 1, that one."""
    c = get_compressor("topk", fraction=1e-6)
    st = c.init_state(8)
    p = c.compress(torch.tensor([0.1, -3.0, 0.2, 2.0, 0.0, 0.5, -0.4, 1.0]), st)
    np.testing.assert_array_equal(p.message.indices, [1])
    assert p.sent == 1
    one = c.init_state(1)
    assert c.compress(torch.tensor([0.25]), one).sent == 1


@pytest.mark.parametrize("name", ["topk", "strom", "hybrid", "variance"])
def test_states_are_fp32_whatever_the_default_dtype(name):
    """A compressor's state buffers are fp32 by its own choice, also with torch's default
    dtype set to float64 (the residual is read as an fp32 NumPy view)."""
    c = get_compressor(name)
    with default_dtype(torch.float64):
        st = c.init_state(5)
    assert st.residual.dtype == torch.float32
    if hasattr(st, "variance"):
        assert st.variance.dtype == torch.float32


# Compressor base class, Strom's sign, the mean-scale floor, dtypes and devices of the
# variance estimators: cases the other compression tests leave out, each from a hand-worked
# value or a stated contract.


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
