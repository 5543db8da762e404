"""Property tests (hypothesis) over shapes, dtypes and densities."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.wire.encoders import ENCODINGS, SPARSE_ENCODINGS, Packed32
from vgcsim.traces.wire.messages import SparseMessage
from vgcsim.traces.wire.quantize import ROUNDINGS, SCALES, quantize_log4

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def sparse_messages(draw):
    n = draw(st.integers(1, 3000))
    density = draw(st.sampled_from([0.0, 0.001, 0.01, 0.1, 0.5, 1.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    coded = draw(st.booleans())
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(rng.random(n) < density).astype(np.int64)
    if coded:
        scale = float(np.float32(draw(st.floats(1e-30, 1e30))))
        return SparseMessage(3, n, idx, rng.integers(0, 16, idx.size).astype(np.uint8), scale)
    return SparseMessage(3, n, idx, values=rng.standard_normal(idx.size).astype(np.float32))


@SETTINGS
@given(sparse_messages())
def test_every_sparse_encoder_round_trips_with_exact_bits(msg):
    for name in SPARSE_ENCODINGS:
        if name == "packed32" and not msg.coded:
            continue
        enc = ENCODINGS[name]
        data = enc.encode(msg)
        assert enc.bit_length(msg) == 8 * len(data)
        back = enc.decode(data, numel=msg.numel, coded=msg.coded)
        np.testing.assert_array_equal(back.indices, msg.indices)
        np.testing.assert_array_equal(back.dense(), msg.dense())


@SETTINGS
@given(sparse_messages(), st.integers(1, 12))
def test_packed32_chunking_round_trips(msg, index_bits):
    if not msg.coded:
        return
    enc = Packed32(index_bits=index_bits)
    data = enc.encode(msg)
    assert enc.bit_length(msg) == 8 * len(data)
    np.testing.assert_array_equal(enc.decode(data, numel=msg.numel).dense(), msg.dense())


#: Quantizer inputs: n values, seed, scale rule, rounding rule, magnitude.
QUANTIZER_CASES = given(
    st.integers(1, 500),
    st.integers(0, 2**31 - 1),
    st.sampled_from(SCALES),
    st.sampled_from(ROUNDINGS),
    st.floats(1e-30, 1e30),
)


@SETTINGS
@QUANTIZER_CASES
def test_4bit_quantizer_properties(n, seed, scale, rounding, magnitude):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * magnitude).astype(np.float32)
    x[x == 0] = np.float32(magnitude)
    codes, m, q = quantize_log4(x, scale=scale, rounding=rounding)
    # Codes decode to exactly the quantized values; signs agree; |q| is M·2^-e, e in 0..7.
    msg = SparseMessage(0, n, np.arange(n), codes, m)
    np.testing.assert_array_equal(msg.sent_values(), q)
    assert np.all(np.signbit(q) == np.signbit(x))
    assert codes.max() <= 15
    if scale == "max" and rounding != "log":
        # The largest element is represented exactly.
        top = np.argmax(np.abs(x))
        assert q[top] == x[top]
    if rounding == "down":
        assert np.all((np.abs(q) <= np.abs(x)) | (codes & 7 == 7))
    # round-trip through the paper's wire format
    data = ENCODINGS["packed32"].encode(msg)
    np.testing.assert_array_equal(ENCODINGS["packed32"].decode(data, numel=n).dense(), q)


def _quantize_reference(values, scale, rounding):
    """The 4-bit quantizer written from its definition: levels ±M·2^(−e), e in 0..7, chosen
    by comparing the fp32 ratio |x|/M with each level 2^(−e) (float64), ties to the larger
    level."""
    x = np.asarray(values, dtype=np.float32)
    m = np.float32(np.abs(x).max() if scale == "max" else np.abs(x).mean(dtype=np.float64))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mag = (np.abs(x) / m).astype(np.float64)
    levels = 2.0 ** -np.arange(8)
    if rounding == "nearest":
        cost = np.abs(levels[None, :] - mag[:, None])
    elif rounding == "log":
        # Nearest in log2: |x| rounds up to level L_e when |x| >= L_e/√2, with 1/√2 taken
        # in fp32 as the implementation documents.
        bound = levels * float(np.float32(1 / np.sqrt(2)))  # exact: power-of-two scaling
        above = mag[:, None] >= bound[None, :]
        e = np.where(above.any(1), np.argmax(above, 1), 7)
        return e, m
    else:  # down: the largest level not above |x|, else the smallest level
        ok = levels[None, :] <= mag[:, None]
        e = np.where(ok.any(1), np.argmax(ok, 1), 7)
        return e, m
    e = np.argmin(cost, 1)  # argmin takes the first (larger level) on ties
    return e, m


@SETTINGS
@QUANTIZER_CASES
def test_4bit_quantizer_matches_its_definition(n, seed, scale, rounding, magnitude):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * magnitude).astype(np.float32)
    # Exact midpoints and powers of two, zeros of both signs, subnormal-sized values.
    top = np.float32(np.abs(x).max() or 1.0)
    specials = np.float32(top) * np.float32([1.0, 0.75, 0.5, 0.375, 2.0**-7, 2.0**-9, 0.0])
    x[: min(n, specials.size)] = specials[: min(n, specials.size)]
    if n > 8:
        x[7], x[8] = np.float32(-0.0), np.float32(1e-40)
    codes, m, q = quantize_log4(x, scale=scale, rounding=rounding)
    e_ref, m_ref = _quantize_reference(x, scale, rounding)
    if not (m_ref > 0 and np.isfinite(m_ref)):
        return
    assert m == m_ref
    np.testing.assert_array_equal(codes & 7, e_ref)
    np.testing.assert_array_equal(codes >> 3, np.signbit(x).astype(np.uint8))
    magnitude_q = np.ldexp(np.float32(m), -(codes & 7).astype(np.int32)).astype(np.float32)
    np.testing.assert_array_equal(q, np.where(np.signbit(x), -magnitude_q, magnitude_q))


@SETTINGS
@given(
    st.sampled_from(["dense", "variance", "strom", "qsgd", "hybrid", "topk"]),
    st.lists(st.integers(1, 12), min_size=1, max_size=3),
    st.sampled_from([torch.float16, torch.float32, torch.float64]),
    st.integers(0, 2**31 - 1),
)
def test_compressors_over_shapes_and_dtypes(name, shape, dtype, seed):
    c = get_compressor(name)
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g) * 0.05).to(dtype)
    numel = x.numel()
    state = c.init_state(numel)
    for step in range(3):
        p = c.compress(x, state, sqsum=x.float().square() * 4, batch_size=4, layer=2, generator=g)
        assert p.numel == numel and p.layer == 2 and 0 <= p.sent <= numel
        assert set(p.bits) == set(c.encodings)
        assert p.bits[c.primary_encoding] == 8 * len(p.data)
        out = p.decode()
        assert out.dtype == torch.float32 and out.shape == (numel,)
        assert torch.all(torch.isfinite(out))
        for enc, bits in p.bits.items():
            assert bits == 8 * len(ENCODINGS[enc].encode(p.message)), (enc, step)


@SETTINGS
@given(
    st.integers(1, 3000),
    st.sampled_from([1, 7, 128, 512]),
    st.sampled_from([1, 3, 7, 15, 255]),
    st.sampled_from([0.0, 0.01, 0.3, 1.0]),
    st.integers(0, 2**31 - 1),
)
def test_qsgd_encoders_round_trip_with_exact_bits(n, d, s, density, seed):
    from vgcsim.traces.wire.messages import QSGDMessage

    rng = np.random.default_rng(seed)
    levels = rng.integers(-s, s + 1, n) * (rng.random(n) < density)
    norms = rng.random(-(-n // d)).astype(np.float32)
    msg = QSGDMessage(1, n, d, s, norms, levels.astype(np.int64))
    for name in ("qsgd_fixed", "qsgd_elias"):
        enc = ENCODINGS[name]
        data = enc.encode(msg)
        assert enc.bit_length(msg) == 8 * len(data)
        back = enc.decode(data, numel=n, bucket_size=d, s=s)
        np.testing.assert_array_equal(back.levels, msg.levels)
        np.testing.assert_array_equal(back.dense(), msg.dense())
