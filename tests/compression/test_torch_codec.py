"""The torch codec of the DDP hook gives the NumPy compressor's bytes, state and decode.

Every case runs the recorder's ``VarianceCompressor.compress`` (NumPy) and the torch path on
the same inputs for several steps, so error feedback and the variance accumulator carry
over, and compares bit patterns: the primary buffer byte for byte, the residual and the
accumulator as int32 views, the decoded tensor likewise.
"""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest
import torch
from pairwise import joined, pairwise
from torchhelpers import default_dtype

from vgcsim.traces.compression import torch_codec
from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.compression.compressors.variance_based import VarianceState

B = 4
LAYERS = (7, 2, 5, 0, 9)  # vgcsim layer indices of a bucket, in DDP's (any) order
SIZES = (300, 1, 2000, 17, 5)


def gradients(n: int, step: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients over many magnitudes with zeros and subnormals, and squared sums."""
    grad = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g) * 3)
    grad[:50] = 0.0
    grad[50:100] = 1e-40  # subnormal
    grad[100:110] = -1e-42
    if step == 1:
        grad[300] = 0.0  # the one-element layer sends nothing this step
    sq = grad.square() * torch.rand(n, generator=g) * 20
    sq[200:260] = 0.0
    return grad, sq


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def same_state(a, b) -> bool:
    """Residual and variance accumulator equal bit for bit (``b``'s may be on a GPU)."""
    return torch.equal(bits(a.residual), bits(b.residual.cpu())) and torch.equal(
        bits(a.variance), bits(b.variance.cpu())
    )


CPU = torch.device("cpu")


# Pairwise, not the full product (288 configurations), over factors that do not interact;
# factors that do are joined into one factor holding their full product:
# - the accumulator (variance x variance_scale): four nested branches of one expression;
# - the quantizer (values x below_floor x rounding): below_floor and rounding act only on
#   code4 messages (the floor is tested on the scale the rounding then codes against), so
#   code4 takes every floor x rounding pair and fp32 every floor rule (rounding unused there).
# alpha (the selection), after_send (the residual update) and the quantizer meet only through
# the selected elements, which every pair of their values exercises. Each implementation is a
# separate code path and takes the whole set (see test_bucket_path_is_bit_identical...).
FACTORS = {
    "alpha": [0.0, 0.3, 2.0],
    "accumulator": joined(
        variance=["sqsum", "centered"], variance_scale=["batch_mean", "per_sample"]
    ),
    "after_send": ["reset", "error_feedback"],
    "quantizer": joined(
        values=["code4"], below_floor=["keep", "floor"], rounding=["nearest", "log", "down"]
    )
    + joined(values=["fp32"], below_floor=["keep", "floor"]),
}
CONFIGS = [
    {
        "alpha": row["alpha"],
        **row["accumulator"],
        "after_send": row["after_send"],
        **row["quantizer"],
    }
    for row in pairwise(FACTORS)
]


def run_bucket(
    params: dict,
    seed: int,
    dtype: torch.dtype = torch.float32,
    impl: str = "torch",
    device: torch.device = CPU,
) -> int:
    """Four steps of the bucket codec on ``device`` against the recorder's compressor per
    layer: bytes, lengths, sent counts, state and decoded values equal bit for bit."""
    comp = get_compressor("variance", **params)
    g = torch.Generator().manual_seed(seed)
    ref = [comp.init_state(n) for n in SIZES]
    mine = [comp.init_state(n) for n in SIZES]
    bucket = torch_codec.bucket_state(mine, LAYERS, device)
    coded = params.get("values", "code4") == "code4"
    sent_total = 0
    for step in range(4):
        grad, sq = gradients(sum(SIZES), step, g)
        grad = grad.to(dtype)
        words, lengths, sent = torch_codec.compress_bucket(
            comp, grad.to(device), sq.to(device), bucket, batch_size=B, impl=impl
        )
        assert words.device.type == device.type
        payloads, start = [], 0
        for layer, state, n in zip(LAYERS, ref, SIZES, strict=True):
            payloads.append(
                comp.compress(
                    grad[start : start + n],
                    state,
                    sqsum=sq[start : start + n],
                    batch_size=B,
                    layer=layer,
                )
            )
            start += n
        assert words.cpu().view(torch.uint8).numpy().tobytes() == b"".join(p.data for p in payloads)
        assert lengths == [len(p.data) for p in payloads]
        assert sent == [p.sent for p in payloads]
        assert all(same_state(a, b) for a, b in zip(ref, mine, strict=True))
        idx, vals = torch_codec.decode_bucket_message(
            words, lengths, bucket.offsets, coded=coded, impl=impl
        )
        decoded = torch.zeros(sum(SIZES), device=device).index_add_(0, idx, vals)
        assert torch.equal(bits(decoded.cpu()), bits(torch.cat([p.decode() for p in payloads])))
        sent_total += sum(sent)
    return sent_total


@pytest.mark.parametrize("impl", ["torch", "numpy"])
@pytest.mark.parametrize("params", CONFIGS, ids=lambda p: "-".join(map(str, p.values())))
def test_bucket_path_is_bit_identical_to_the_numpy_compressor(params, impl):
    """Each implementation against the NumPy compressor on every configuration of
    :data:`CONFIGS`: all pairs of the independent factors' values, the full product of the
    interacting ones (the implementations do not share code, so each takes the whole set)."""
    sent = run_bucket(params, seed=CONFIGS.index(params), impl=impl)
    assert 0 < sent < 4 * sum(SIZES)  # some elements sent, not all: the test selects


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_bf16_gradients_are_compressed_like_the_numpy_path(impl):
    assert run_bucket({}, seed=1, dtype=torch.bfloat16, impl=impl) > 0


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"scale": "mean"},
        {"scale": "mean", "below_floor": "floor", "rounding": "log"},
        {"values": "fp32", "after_send": "error_feedback"},
        {"variance": "centered", "scale": "mean", "rounding": "down"},
    ],
)
def test_layer_path_is_bit_identical_to_the_numpy_compressor(params):
    comp = get_compressor("variance", **params)
    g = torch.Generator().manual_seed(5)
    ref, mine = comp.init_state(2500), comp.init_state(2500)
    coded = comp.config.values == "code4"
    for step in range(4):
        grad, sq = gradients(2500, step, g)
        payload = comp.compress(grad, ref, sqsum=sq, batch_size=B, layer=3)
        words, sent = torch_codec.compress(comp, grad, mine, sq, batch_size=B, layer=3)
        assert words.view(torch.uint8).numpy().tobytes() == payload.data
        assert sent == payload.sent > 0
        assert same_state(ref, mine)
        idx, vals = torch_codec.decode_sparse(words, numel=2500, coded=coded)
        decoded = torch.zeros(2500).index_add_(0, idx, vals)
        assert torch.equal(bits(decoded), bits(payload.decode()))


def test_exact_ties_take_the_numpy_side():
    """r² = α·v exactly is not sent (strict >); |r| = M·2^-7 exactly is kept (>=); a ratio
    |r|/M of exactly 1.5·2^x (the midpoint of two levels) rounds up to the larger level."""
    comp = get_compressor("variance", alpha=2.0, zeta=1.0)
    # Powers of two and their sums: r², α·v and every ratio are exact in fp32.
    r = torch.tensor([1.0, 0.5, 0.75 * 2.0**-7, 0.75, 0.375, -0.25, 0.5625])
    v = torch.tensor([0.5, 0.125, 0.0, 0.0, 0.0, 0.0, 0.0])  # r² = α·v for the first two
    n = r.numel()
    sq = v * B**2  # the compressor adds sqsum / B² to v
    ref, mine = comp.init_state(n), comp.init_state(n)
    payload = comp.compress(r, ref, sqsum=sq, batch_size=B, layer=0)
    words, sent = torch_codec.compress(comp, r, mine, sq, batch_size=B, layer=0)
    assert words.view(torch.uint8).numpy().tobytes() == payload.data
    idx, vals = torch_codec.decode_sparse(words, numel=n, coded=True)
    # M = 0.75. Kept: M·2^-7 (on the floor), M, M/2, -M/3 (rounds to -M/4) and
    # 0.5625 = M·1.5·2^-1 (the midpoint of M/2 and M: rounds up to M).
    assert idx.tolist() == [2, 3, 4, 5, 6]
    assert vals.tolist() == [0.75 * 2.0**-7, 0.75, 0.375, -0.1875, 0.75]
    assert sent == 5 and same_state(ref, mine)


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_an_infinite_residual_codes_the_layer_like_the_numpy_path(impl):
    comp = get_compressor("variance", alpha=1.0)
    grads = torch.tensor([float("inf"), 1.0, -2.0, 0.0, 3.0])
    sq = torch.zeros(5)
    ref = [comp.init_state(2), comp.init_state(3)]
    mine = [comp.init_state(2), comp.init_state(3)]
    bucket = torch_codec.bucket_state(mine, (0, 1), torch.device("cpu"))
    words, lengths, _ = torch_codec.compress_bucket(
        comp, grads, sq, bucket, batch_size=1, impl=impl
    )
    data = comp.compress(grads[:2], ref[0], sqsum=sq[:2], batch_size=1, layer=0).data
    data += comp.compress(grads[2:], ref[1], sqsum=sq[2:], batch_size=1, layer=1).data
    assert words.view(torch.uint8).numpy().tobytes() == data
    assert all(same_state(a, b) for a, b in zip(ref, mine, strict=True))


def test_the_bucket_path_serves_the_max_scale_of_the_variance_compressor_only():
    assert torch_codec.bucket_supported(get_compressor("variance"), [10, 20])
    assert not torch_codec.bucket_supported(get_compressor("variance", scale="mean"), [10])
    assert not torch_codec.bucket_supported(get_compressor("variance"), [torch_codec.CHUNK + 1])
    assert not torch_codec.bucket_supported(get_compressor("hybrid"), [10])
    assert not torch_codec.supports(get_compressor("strom"))


def test_layer_states_become_views_of_the_bucket_state():
    comp = get_compressor("variance")
    states = [comp.init_state(3), comp.init_state(2)]
    states[0].residual += 1.0
    bucket = torch_codec.bucket_state(states, (4, 1), torch.device("cpu"))
    assert bucket.residual.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    bucket.residual.add_(1.0)
    assert states[1].residual.tolist() == [1.0, 1.0]
    assert bucket.offsets.tolist() == [0, 3, 5]
    assert bucket.layer_ids.tolist() == [0, 0, 0, 1, 1]


# -- the per-layer path's edges, the packed32 chunk layout and the device of every tensor ----


def _f32_bits(x: float) -> int:
    import struct

    return struct.unpack("<i", struct.pack("<f", x))[0]


def _layer_step(params: dict, r: list[float], v: list[float] | None = None, layer: int = 6):
    """One step of the layer path and of the recorder's compressor from residual ``r`` (the
    gradient, zero state) and variance ``v`` (sqsum = v·B²): words, sent, both states."""
    comp = get_compressor("variance", **params)
    grad = torch.tensor(r, dtype=torch.float32)
    sq = torch.tensor(v if v is not None else [0.0] * len(r)) * B**2
    ref, mine = comp.init_state(len(r)), comp.init_state(len(r))
    payload = comp.compress(grad, ref, sqsum=sq, batch_size=B, layer=layer)
    words, sent = torch_codec.compress(comp, grad, mine, sq, batch_size=B, layer=layer)
    assert words.view(torch.uint8).numpy().tobytes() == payload.data
    assert sent == payload.sent and same_state(ref, mine)
    return words.tolist(), sent, mine


def test_layer_path_sends_nothing_as_a_header_with_scale_zero():
    """Nothing passes r² > α·v (r = 0 everywhere): the message is (layer, k = 0, M = 0.0) and
    nothing is sent; the fp32-values message is (layer, 0)."""
    words, sent, _ = _layer_step({"alpha": 2.0}, [0.0, 0.0, 0.0])
    assert words == [6, 0, 0] and sent == 0
    words, sent, _ = _layer_step({"alpha": 2.0, "values": "fp32"}, [0.0, 0.0])
    assert words == [6, 0] and sent == 0


def test_layer_path_with_one_element_sent():
    """α = 0 sends every nonzero element: one nonzero r = 3.0 at index 1 gives (layer, 1,
    M = 3.0, 1 << 4 | code 0) and resets r there."""
    words, sent, state = _layer_step({"alpha": 0.0}, [0.0, 3.0, 0.0])
    assert words == [6, 1, _f32_bits(3.0), (1 << 4) | 0] and sent == 1
    assert state.residual.tolist() == [0.0, 0.0, 0.0]
    idx, vals = torch_codec.decode_sparse(
        torch.tensor(words, dtype=torch.int32), numel=3, coded=True
    )
    assert idx.tolist() == [1] and vals.tolist() == [3.0]


def test_layer_path_with_scale_exactly_one():
    """M = max |r| = 1.0 exactly: codes are the exponents of |r| (1 → 0, 0.5 → 1, 0.25 → 2)
    with the sign in bit 3; a scale of 1 is not a special case."""
    words, sent, _ = _layer_step({"alpha": 0.0}, [1.0, -0.5, 0.25])
    assert words == [6, 3, _f32_bits(1.0), 0 << 4 | 0, 1 << 4 | 8 | 1, 2 << 4 | 2]
    assert sent == 3


def test_layer_path_with_an_infinite_residual_sends_zero_codes():
    """An infinite |r| makes M infinite: with ``below_floor="keep"`` every finite element is
    below M·2^-7 and stays, so the inf alone is sent, code 0; with ``floor`` all three selected
    elements go with code 0 and M = inf, as the NumPy path writes them (bytes and state)."""
    inf = float("inf")
    words, sent, _ = _layer_step({"alpha": 1.0}, [inf, 1.0, -2.0, 0.0])
    assert words == [6, 1, _f32_bits(inf), 0 << 4 | 0] and sent == 1
    words, sent, _ = _layer_step({"alpha": 1.0, "below_floor": "floor"}, [inf, 1.0, -2.0, 0.0])
    assert words == [6, 3, _f32_bits(inf), 0 << 4, 1 << 4, 2 << 4] and sent == 3


def test_layer_path_refuses_a_gradient_of_another_size_with_the_whole_message():
    comp = get_compressor("variance")
    state = comp.init_state(5)
    with pytest.raises(ValueError) as err:
        torch_codec.compress(comp, torch.ones(3), state, torch.ones(3), batch_size=B, layer=0)
    assert str(err.value) == (
        "grad/sqsum have 3/3 elements but the compressor state holds 5 "
        "(a state belongs to one (worker, layer))"
    )


def test_chunks_counts_2_to_the_28_elements_per_chunk():
    c = torch_codec.CHUNK
    assert c == 2**28
    assert [torch_codec.chunks(n) for n in (0, 1, c - 1, c, c + 1, 3 * c, 3 * c + 1)] == [
        1,
        1,
        1,
        1,
        2,
        3,
        4,
    ]
    comp = get_compressor("variance")
    assert torch_codec.bucket_supported(comp, [c, 1])  # a layer of exactly one chunk
    assert not torch_codec.bucket_supported(comp, [c + 1])


@pytest.fixture
def small_chunks(monkeypatch):
    """packed32 with 4 index bits per chunk (16 elements a chunk) instead of 28, so that the
    chunked layout is exercised on a 40-element layer."""
    monkeypatch.setattr(torch_codec, "PACKED32_INDEX_BITS", 4)
    monkeypatch.setattr(torch_codec, "CHUNK", 16)


def test_chunked_layout_by_hand(small_chunks):
    """A 40-element layer is 3 chunks of 16: the header (layer, k, M) is followed by the count
    of each chunk's elements, then each element's index within its chunk << 4 | code
    (the documented packed32 layout); decoding gives back the layer's indices and values.
    Chunk 1 empty: counts (2, 0, 2)."""
    idx = torch.tensor([1, 15, 33, 39])
    codes = torch.tensor([0, 9, 2, 7], dtype=torch.uint8)
    m = torch.tensor(2.0)
    words = torch_codec._pack(5, 40, idx, codes, m, torch.zeros(4))
    assert words.dtype == torch.int32
    assert words.tolist() == [
        5,
        4,
        _f32_bits(2.0),
        2,
        0,
        2,
        1 << 4 | 0,
        15 << 4 | 9,
        1 << 4 | 2,
        7 << 4 | 7,
    ]
    got_idx, got_vals = torch_codec.decode_sparse(words, numel=40, coded=True)
    assert got_idx.tolist() == [1, 15, 33, 39]
    assert got_vals.tolist() == [2.0, -1.0, 0.5, 2.0 * 2**-7]
    # two chunks (numel 17..32): counts follow the header too; one chunk: no counts
    two = torch_codec._pack(5, 20, torch.tensor([3, 17]), codes[:2], m, torch.zeros(2))
    assert two.tolist()[3:] == [1, 1, 3 << 4 | 0, 1 << 4 | 9]
    one = torch_codec._pack(5, 16, torch.tensor([3, 15]), codes[:2], m, torch.zeros(2))
    assert one.tolist()[3:] == [3 << 4 | 0, 15 << 4 | 9]
    got_idx, _ = torch_codec.decode_sparse(two, numel=20, coded=True)
    assert got_idx.tolist() == [3, 17]
    # the last chunks empty: their counts (0) are still written, one per chunk
    first = torch_codec._pack(5, 40, torch.tensor([2, 9]), codes[:2], m, torch.zeros(2))
    assert first.tolist()[3:] == [2, 0, 0, 2 << 4 | 0, 9 << 4 | 9]
    got_idx, _ = torch_codec.decode_sparse(first, numel=40, coded=True)
    assert got_idx.tolist() == [2, 9]


def test_uncoded_layout_by_hand():
    """coo64: (layer, k, then index and fp32 value bits per element)."""
    words = torch_codec._pack(2, 9, torch.tensor([4, 8]), None, None, torch.tensor([1.5, -2.0]))
    assert words.tolist() == [2, 2, 4, _f32_bits(1.5), 8, _f32_bits(-2.0)]
    idx, vals = torch_codec.decode_sparse(words, numel=9, coded=False)
    assert idx.tolist() == [4, 8] and vals.tolist() == [1.5, -2.0]


META = torch.device("meta")


def test_tables_and_messages_are_built_on_the_inputs_device():
    """The meta device holds no data, so a tensor the codec made on the default device (the
    CPU) instead of its input's cannot mix with it: the decode table, the power tables, an
    empty quantization and a packed message all stay on the input's device."""
    m = torch.tensor(2.0, device=META)
    assert torch_codec._signed_powers(m).device == META
    assert torch_codec._pow2(META).device == META
    codes, scale, q = torch_codec._quantize(torch.empty(0, device=META), "max", "nearest")
    assert codes.device == scale.device == q.device == META
    assert codes.dtype == torch.uint8 and scale.dtype == torch.float32
    assert codes.shape == (0,) and scale.shape == ()
    idx = torch.tensor([1, 2], device=META)
    coded = torch_codec._pack(1, 4, idx, torch.zeros(2, dtype=torch.uint8, device=META), m, m)
    assert coded.device == META and coded.shape == (3 + 2,)
    plain = torch_codec._pack(1, 4, idx, None, None, torch.zeros(2, device=META))
    assert plain.device == META and plain.shape == (2 + 4,)


def test_the_codec_does_not_depend_on_the_default_dtype(monkeypatch):
    """The same bytes and state with torch's default dtype set to float64: every table and
    scalar the codec makes is fp32 by its own choice (a user's process may change the
    default). The per-device tables are built afresh under float64 (not taken from the
    cache an earlier call filled)."""
    monkeypatch.setattr(torch_codec, "_POW2", {})
    monkeypatch.setattr(torch_codec, "_SIGNED_POW2", {})
    with default_dtype(torch.float64):
        assert torch_codec._signed_powers(torch.tensor(2.0, dtype=torch.float32)).dtype == (
            torch.float32
        )
        assert torch_codec._pow2(torch.device("cpu")).dtype == torch.float32
        for params in ({}, {"scale": "mean"}, {"scale": "mean", "rounding": "down"}):
            _layer_step({"alpha": 0.0, **params}, [1.5, -0.3, 0.0, 2.5e-3, 7.0])
        codes, scale, _ = torch_codec._quantize(torch.empty(0), "max", "nearest")
        assert codes.dtype == torch.uint8 and scale.dtype == torch.float32


@pytest.mark.parametrize("values", ["code4", "fp32"])
def test_several_ranks_messages_decode_like_each_one_alone(values):
    """decode_messages on three ranks' bucket messages at once gives, back to back, what
    decode_bucket_message gives for each message alone, and each message's element count."""
    comp = get_compressor("variance", alpha=0.5, values=values)
    g = torch.Generator().manual_seed(9)
    messages, alone = [], []
    for _ in range(3):
        states = [comp.init_state(n) for n in SIZES]
        bucket = torch_codec.bucket_state(states, LAYERS, CPU)
        grad, sq = gradients(sum(SIZES), 0, g)
        words, lengths, sent = torch_codec.compress_bucket(
            comp, grad, sq, bucket, batch_size=B, impl="numpy"
        )
        messages.append((words.numpy(), lengths))
        idx, vals = torch_codec.decode_bucket_message(
            words, lengths, bucket.offsets, coded=values == "code4", impl="numpy"
        )
        alone.append((idx.numpy(), vals.numpy(), sum(sent)))
    idx, vals, sizes = torch_codec.decode_messages(
        messages, bucket.offsets.numpy(), values == "code4"
    )
    assert sizes == [a[2] for a in alone] and all(s > 0 for s in sizes)
    assert idx.tolist() == np.concatenate([a[0] for a in alone]).tolist()
    assert (
        vals.view(np.int32).tolist()
        == np.concatenate([a[1] for a in alone]).view(np.int32).tolist()
    )


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_bucket_path_refuses_a_gradient_of_another_size_with_the_whole_message(impl):
    comp = get_compressor("variance")
    bucket = torch_codec.bucket_state([comp.init_state(3), comp.init_state(2)], (0, 1), CPU)
    with pytest.raises(ValueError) as err:
        torch_codec.compress_bucket(
            comp, torch.ones(4), torch.ones(5), bucket, batch_size=B, impl=impl
        )
    assert str(err.value) == "grad/sqsum have 4/5 elements but the bucket state holds 5"
    with pytest.raises(ValueError):
        torch_codec.compress_bucket(
            comp, torch.ones(5), torch.ones(4), bucket, batch_size=B, impl=impl
        )


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_bucket_path_with_a_layer_scale_of_exactly_one(impl):
    """A layer whose largest |r| is exactly 1 (M = 1) is coded like any other (the codes are
    the exponents), equal to the NumPy compressor's bytes."""
    comp = get_compressor("variance", alpha=0.0)
    grads = torch.tensor([1.0, -0.5, 0.25, 3.0, 0.0])
    sq = torch.zeros(5)
    ref = [comp.init_state(3), comp.init_state(2)]
    bucket = torch_codec.bucket_state([comp.init_state(3), comp.init_state(2)], (0, 1), CPU)
    words, lengths, sent = torch_codec.compress_bucket(
        comp, grads, sq, bucket, batch_size=1, impl=impl
    )
    data = comp.compress(grads[:3], ref[0], sqsum=sq[:3], batch_size=1, layer=0).data
    data += comp.compress(grads[3:], ref[1], sqsum=sq[3:], batch_size=1, layer=1).data
    assert words.view(torch.uint8).numpy().tobytes() == data
    assert sent == [3, 1]
    assert words.tolist()[:6] == [0, 3, _f32_bits(1.0), 0 << 4 | 0, 1 << 4 | 8 | 1, 2 << 4 | 2]


def test_flat_fp32_views_take_tensors_that_require_grad_and_other_dtypes():
    """The bucket path's NumPy view of its inputs: a tensor that requires grad (numpy()
    refuses it) is detached first; bf16 and non-contiguous inputs are converted to flat fp32;
    a plain contiguous fp32 tensor is viewed without a copy."""
    t = torch.tensor([1.0, -2.0, 0.5], requires_grad=True)
    assert torch_codec.flat_f32(t).tolist() == [1.0, -2.0, 0.5]
    assert torch_codec.flat_f32(t.detach().to(torch.bfloat16)).dtype == np.float32
    strided = torch.arange(6, dtype=torch.float32)[::2]
    assert torch_codec.flat_f32(strided).tolist() == [0.0, 2.0, 4.0]
    plain = torch.zeros(4)
    view = torch_codec.flat_f32(plain)
    view[1] = 3.0
    assert plain[1] == 3.0


@pytest.mark.parametrize("variance", ["sqsum", "centered"])
def test_bf16_gradients_and_sums_are_read_as_fp32_on_the_layer_path(variance):
    """bf16 gradients and squared sums: the layer path converts both to fp32 before any
    arithmetic (g·g of the centered reading, S/|B|² of the sqsum one), as the NumPy path
    does: the same bytes and state."""
    comp = get_compressor("variance", variance=variance, alpha=0.5)
    g = torch.Generator().manual_seed(13)
    ref, mine = comp.init_state(400), comp.init_state(400)
    for step in range(3):
        grad, sq = gradients(400, step, g)
        grad, sq = grad.to(torch.bfloat16), sq.to(torch.bfloat16)
        payload = comp.compress(grad, ref, sqsum=sq, batch_size=3, layer=1)
        words, sent = torch_codec.compress(comp, grad, mine, sq, batch_size=3, layer=1)
        assert words.view(torch.uint8).numpy().tobytes() == payload.data
        assert sent == payload.sent and same_state(ref, mine)


def test_an_infinite_residual_in_a_bucket_raises_no_numpy_warning():
    """The NumPy bucket path divides |r| by M = inf for an infinite residual (inf/inf): the
    code it gives is masked to 0, and the division raises no RuntimeWarning."""
    import warnings

    comp = get_compressor("variance", alpha=1.0, below_floor="floor")
    grads = torch.tensor([float("inf"), 1.0, -2.0, 0.0, 3.0])
    bucket = torch_codec.bucket_state([comp.init_state(2), comp.init_state(3)], (0, 1), CPU)
    ref = [comp.init_state(2), comp.init_state(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        words, _, _ = torch_codec.compress_bucket(
            comp, grads, torch.zeros(5), bucket, batch_size=1, impl="numpy"
        )
    data = comp.compress(grads[:2], ref[0], sqsum=torch.zeros(2), batch_size=1, layer=0).data
    data += comp.compress(grads[2:], ref[1], sqsum=torch.zeros(3), batch_size=1, layer=1).data
    assert words.view(torch.uint8).numpy().tobytes() == data


def test_state_to_moves_both_accumulators_and_leaves_a_state_in_place_alone():
    """state_to: a state on another device gets its residual and variance moved there (the
    `meta` device, which holds no data, stands in for a GPU); a state already on the device
    keeps its very tensors (no copy)."""
    from vgcsim.traces.compression.compressors.variance_based import VarianceState

    r, v = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 0.25])
    state = VarianceState(residual=r, variance=v)
    torch_codec.state_to(state, torch.device("cpu"))
    assert state.residual is r and state.variance is v
    meta = torch.device("meta")
    torch_codec.state_to(state, meta)
    assert (state.residual.device, state.variance.device) == (meta, meta)
    assert state.residual.shape == (2,) and state.variance.dtype == torch.float32
    assert r.device.type == "cpu"  # moved by a copy, the caller's tensors untouched


# The torch codec's GPU code run on the CPU, its dispatch, and inputs the other tests leave out.
#
# The selection and the bucket pass have NumPy shortcuts for CPU tensors, so on a machine
# without a GPU their torch ops only run with ``torch_codec.NUMPY_ON_CPU`` set to False: every
# case then compares them with the recorder's NumPy ``VarianceCompressor`` bit for bit, or with
# a hand-worked message. Tensors the codec makes must sit on its input's device whatever
# torch's default device and dtype are; the ``meta`` device (no data, and no mixing with CPU
# tensors) stands in for a GPU.

FEW_LAYERS = (7, 2, 5)
FEW_SIZES = (40, 1, 25)


@pytest.fixture
def torch_ops(monkeypatch):
    """CPU tensors take the torch ops a GPU runs instead of the NumPy shortcuts."""
    monkeypatch.setattr(torch_codec, "NUMPY_ON_CPU", False)


def int_bits(t: torch.Tensor) -> list[int]:
    return t.detach().cpu().contiguous().view(torch.int32).tolist()


def f32_bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def few_gradients(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients over many magnitudes with zeros, and squared sums with zeros."""
    grad = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g) * 3)
    grad[::7] = 0.0
    sq = grad.square() * torch.rand(n, generator=g) * 20
    sq[3::11] = 0.0
    return grad, sq


def reference_steps(params: dict, inputs, sizes=FEW_SIZES, layers=FEW_LAYERS):
    """The recorder's NumPy compressor, layer by layer: (bytes, sent) per step, final states."""
    comp = get_compressor("variance", **params)
    states = [comp.init_state(n) for n in sizes]
    out = []
    for grad, sq in inputs:
        data, sent, start = b"", [], 0
        for layer, state, n in zip(layers, states, sizes, strict=True):
            p = comp.compress(
                grad[start : start + n],
                state,
                sqsum=sq[start : start + n],
                batch_size=B,
                layer=layer,
            )
            data += p.data
            sent.append(p.sent)
            start += n
        out.append((data, sent))
    return out, states


PARAMS = [
    {"alpha": 0.0},
    {"alpha": 0.3, "variance": "centered", "after_send": "error_feedback"},
    {"alpha": 2.0, "variance_scale": "per_sample", "rounding": "log"},
    {"alpha": 0.3, "below_floor": "floor", "after_send": "error_feedback"},
    {"alpha": 2.0, "values": "fp32"},
    {"alpha": 1.0, "scale": "mean", "rounding": "down"},
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: "-".join(map(str, p.values())))
def test_torch_ops_on_the_cpu_give_the_numpy_compressors_bytes_and_state(torch_ops, params):
    """With the NumPy shortcuts off, the layer path and (for the max scale) the bucket path
    give the recorder's bytes, sent counts and state for three steps; the configs cover
    α = 0, the strict test with α > 0, both variance readings and scales, error feedback,
    both floor rules and fp32 values."""
    g = torch.Generator().manual_seed(PARAMS.index(params))
    inputs = [few_gradients(sum(FEW_SIZES), g) for _ in range(3)]
    expected, ref_states = reference_steps(params, inputs)
    comp = get_compressor("variance", **params)
    # the layer path
    states = [comp.init_state(n) for n in FEW_SIZES]
    for (grad, sq), (data, sent) in zip(inputs, expected, strict=True):
        got, counts, start = b"", [], 0
        for layer, state, n in zip(FEW_LAYERS, states, FEW_SIZES, strict=True):
            words, k = torch_codec.compress(
                comp,
                grad[start : start + n],
                state,
                sq[start : start + n],
                batch_size=B,
                layer=layer,
            )
            got += words.view(torch.uint8).numpy().tobytes()
            counts.append(k)
            start += n
        assert got == data and counts == sent
    for a, b in zip(ref_states, states, strict=True):
        assert int_bits(a.residual) == int_bits(b.residual) and int_bits(a.variance) == int_bits(
            b.variance
        )
    assert 0 < sum(sum(s) for _, s in expected) < 3 * sum(FEW_SIZES)  # the test selects
    if not torch_codec.bucket_supported(comp, FEW_SIZES):
        return
    states = [comp.init_state(n) for n in FEW_SIZES]
    bucket = torch_codec.bucket_state(states, FEW_LAYERS, CPU)
    for (grad, sq), (data, sent) in zip(inputs, expected, strict=True):
        words, lengths, counts = torch_codec.compress_bucket(
            comp, grad, sq, bucket, batch_size=B, impl="torch"
        )
        assert words.view(torch.uint8).numpy().tobytes() == data and counts == sent
    for a, b in zip(ref_states, states, strict=True):
        assert int_bits(a.residual) == int_bits(b.residual) and int_bits(a.variance) == int_bits(
            b.variance
        )


def _one_step(params, grad, sq, batch_size=1, layer=3):
    comp = get_compressor("variance", **params)
    state = comp.init_state(grad.numel())
    words, sent = torch_codec.compress(comp, grad, state, sq, batch_size=batch_size, layer=layer)
    return words.tolist(), sent, state


@pytest.mark.parametrize("shortcuts", [True, False])
def test_alpha_zero_sends_every_nonzero_residual_even_where_its_square_underflows(
    monkeypatch, shortcuts
):
    """α = 0 passes every nonzero r (the rule's docstring), also r = 2^-100 whose fp32
    square is 0 and would fail r² > 0·v; with the fp32 values the message is, by hand,
    [layer, k, (index, value)...]."""
    monkeypatch.setattr(torch_codec, "NUMPY_ON_CPU", shortcuts)
    tiny = 2.0**-100
    grad = torch.tensor([0.0, tiny, -3.0, 0.0])
    words, sent, _ = _one_step({"alpha": 0.0, "values": "fp32"}, grad, torch.ones(4))
    assert sent == 2
    assert words == [3, 2, 1, f32_bits(tiny), 2, f32_bits(-3.0)]


@pytest.mark.parametrize("shortcuts", [True, False])
def test_the_test_is_strict_a_residual_square_equal_to_alpha_v_stays(monkeypatch, shortcuts):
    """r² > α·v is strict: with α = 1, |B| = 1 and S = (4, 0, 1) the element with
    r² = α·v = 4 and the zero element (0 = 0) stay; only r = 3 (9 > 1) goes. And α
    multiplies v: r = 1, v = 4, α = 0.5 stays (1 < 2; α/v = 0.125 would let it go)."""
    monkeypatch.setattr(torch_codec, "NUMPY_ON_CPU", shortcuts)
    grad = torch.tensor([2.0, 0.0, 3.0])
    words, sent, state = _one_step(
        {"alpha": 1.0, "values": "fp32"}, grad, torch.tensor([4.0, 0.0, 1.0])
    )
    assert sent == 1 and words == [3, 1, 2, f32_bits(3.0)]
    assert state.residual.tolist() == [2.0, 0.0, 0.0]
    words, sent, _ = _one_step(
        {"alpha": 0.5, "values": "fp32"}, torch.tensor([1.0]), torch.tensor([4.0])
    )
    assert sent == 0 and words == [3, 0]


@pytest.mark.parametrize("variance", ["sqsum", "centered"])
def test_float64_inputs_are_rounded_to_fp32_before_any_arithmetic(variance):
    """A float64 gradient and squared sum give the state and bytes of their fp32 roundings
    (the state is fp32; rounding first is the NumPy compressor's reading): r + g and
    S·(1/|B|²) computed in float64 and rounded once would differ in the last bit."""
    comp = get_compressor("variance", variance=variance, alpha=2.0, after_send="error_feedback")
    g = torch.Generator().manual_seed(5)
    wide, narrow = comp.init_state(300), comp.init_state(300)
    for _ in range(3):
        grad = torch.randn(300, generator=g, dtype=torch.float64)
        sq = grad.square() * torch.rand(300, generator=g, dtype=torch.float64) * 9
        w1, k1 = torch_codec.compress(comp, grad, wide, sq, batch_size=3, layer=0)
        w2, k2 = torch_codec.compress(comp, grad.float(), narrow, sq.float(), batch_size=3, layer=0)
        assert w1.tolist() == w2.tolist() and k1 == k2
        assert int_bits(wide.residual) == int_bits(narrow.residual)
        assert int_bits(wide.variance) == int_bits(narrow.variance)


def test_the_bucket_paths_flat_views_are_flat():
    """flat_f32 returns a 1-D array for a 2-D input: a contiguous fp32 tensor (a view), one
    it converts, one it only detaches; a 2-D gradient then compresses like its flat twin."""
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert torch_codec.flat_f32(t).shape == (6,)
    assert torch_codec.flat_f32(t.to(torch.bfloat16)).shape == (6,)
    assert torch_codec.flat_f32(t.clone().requires_grad_()).shape == (6,)  # detached only
    assert torch_codec.flat_f32(t.t()).tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    comp = get_compressor("variance", alpha=0.5)
    out = []
    for shape in [(6,), (2, 3)]:
        bucket = torch_codec.bucket_state([comp.init_state(4), comp.init_state(2)], (0, 1), CPU)
        grad = torch.tensor([1.0, -2.0, 0.0, 4.0, 0.5, 3.0]).reshape(shape)
        words, _, sent = torch_codec.compress_bucket(
            comp, grad, grad.square().reshape(shape), bucket, batch_size=2, impl="numpy"
        )
        out.append((words.tolist(), sent))
    assert out[0] == out[1]


def test_bucket_state_fields_by_hand():
    """Three layers of 3, 1 and 2 elements: sizes, starts, every element's layer position and
    index within its layer; the layer states are views of the flat tensors."""
    comp = get_compressor("variance")
    states = [comp.init_state(n) for n in (3, 1, 2)]
    states[1].residual[0] = 5.0
    bucket = torch_codec.bucket_state(states, (4, 0, 9), CPU)
    assert bucket.layers == (4, 0, 9) and bucket.numels == [3, 1, 2]
    assert bucket.offsets.tolist() == [0, 3, 4, 6] and bucket.offsets.dtype == torch.int64
    assert bucket.layer_ids.tolist() == [0, 0, 0, 1, 2, 2]
    assert bucket.local_index.tolist() == [0, 1, 2, 0, 0, 1]
    assert bucket.local_index.dtype == torch.int32
    assert bucket.residual.tolist() == [0.0, 0.0, 0.0, 5.0, 0.0, 0.0]
    bucket.variance[5] = 2.0
    assert states[2].variance.tolist() == [0.0, 2.0]


def test_bucket_state_moves_the_states_to_the_device_given():
    """bucket_state on another device (meta) puts the flat state, offsets and per-element
    tables there, and the layer states become views on it."""
    comp = get_compressor("variance")
    states = [comp.init_state(n) for n in (3, 1, 2)]
    bucket = torch_codec.bucket_state(states, (4, 0, 9), META)
    for t in (bucket.residual, bucket.variance, bucket.offsets, bucket.layer_ids):
        assert t.device == META
    assert bucket.local_index.device == META and bucket.local_index.shape == (6,)
    assert all(s.residual.device == META and s.variance.device == META for s in states)
    assert bucket.numels == [3, 1, 2]


def _codec_inputs(params: dict, inf: bool) -> dict:
    """CPU inputs of :func:`_codec_run`, made before any default device is changed."""
    g = torch.Generator().manual_seed(11)
    grad, sq = few_gradients(30, g)
    if inf:
        grad[4] = float("inf")
    bgrad = grad.clone()
    bgrad[22:] = 0.0  # the bucket's third layer sends nothing: M = 0
    comps = {s: get_compressor("variance", **{**params, "scale": s}) for s in ("max", "mean")}
    return {
        "grad": grad,
        "sq": sq,
        "bgrad": bgrad,
        "comps": comps,
        "layer_states": {s: c.init_state(30) for s, c in comps.items()},
        "bucket_states": [comps["max"].init_state(n) for n in (10, 12, 8)],
    }


def _codec_run(params: dict, x: dict) -> list:
    """Everything the codec makes from ``x``, as plain lists: two layer steps for each scale,
    bucket_state and two bucket steps (torch impl, with a layer whose M is infinite when
    ``x`` has an infinite gradient and an empty layer), and the bucket decodes."""
    out = []
    for scale, c in x["comps"].items():
        state = x["layer_states"][scale]
        for _ in range(2):
            words, sent = torch_codec.compress(c, x["grad"], state, x["sq"], batch_size=B, layer=1)
            out += [int_bits(words), sent, int_bits(state.residual), int_bits(state.variance)]
    bucket = torch_codec.bucket_state(x["bucket_states"], (3, 1, 2), CPU)
    out += [bucket.offsets.tolist(), bucket.layer_ids.tolist(), bucket.local_index.tolist()]
    coded = params.get("values", "code4") == "code4"
    for _ in range(2):
        words, lengths, sent = torch_codec.compress_bucket(
            x["comps"]["max"], x["bgrad"], x["sq"], bucket, batch_size=B, impl="torch"
        )
        out += [
            int_bits(words),
            lengths,
            sent,
            int_bits(bucket.residual),
            int_bits(bucket.variance),
        ]
        idx, vals = torch_codec.decode_bucket_message(
            words, lengths, bucket.offsets, coded=coded, impl="torch"
        )
        out += [idx.tolist(), int_bits(vals)]
    return out


@pytest.mark.parametrize(
    "params",
    [{"alpha": 0.5}, {"alpha": 0.5, "values": "fp32"}, {"alpha": 0.0, "below_floor": "keep"}],
    ids=["code4", "fp32", "alpha0"],
)
def test_the_codec_makes_its_tensors_on_the_inputs_device_not_the_default(
    torch_ops, monkeypatch, params
):
    """With torch's default device set to meta, the torch ops on CPU inputs give the same
    words, counts, state and decode as with the default CPU: every tensor the codec makes
    (tables, scales, positions, headers, empty and masked codes) is put on its input's
    device (a CPU tensor would not mix with a meta one). The tables are built afresh."""
    expected = _codec_run(params, _codec_inputs(params, inf=True))
    x = _codec_inputs(params, inf=True)
    monkeypatch.setattr(torch_codec, "_POW2", {})
    monkeypatch.setattr(torch_codec, "_SIGNED_POW2", {})
    with torch.device(META):
        got = _codec_run(params, x)
    assert got == expected


def test_a_chunked_sparse_decode_builds_its_chunk_bases_on_the_words_device():
    """decode_sparse of a layer of 2^28 + 4 elements (two chunks) with the default device set
    to meta: the indices are the chunk base + the packed index, by hand."""
    numel = (1 << 28) + 4
    m = f32_bits(2.0)
    # two elements in chunk 0 (indices 5, 9), one in chunk 1 (index 2^28 + 3), codes 0, 1, 9
    words = torch.tensor([1, 3, m, 2, 1, 5 << 4 | 0, 9 << 4 | 1, 3 << 4 | 9], dtype=torch.int32)
    with torch.device(META):
        idx, vals = torch_codec.decode_sparse(words, numel=numel, coded=True)
    assert idx.device == CPU
    assert idx.tolist() == [5, 9, (1 << 28) + 3]
    assert vals.tolist() == [2.0, 1.0, -1.0]


def test_the_bucket_codec_does_not_depend_on_the_default_dtype(torch_ops):
    """torch's default dtype set to float64: the bucket path's per-layer scales stay fp32,
    the same words and state as with the default fp32."""
    params = {"alpha": 0.5}
    expected = _codec_run(params, _codec_inputs(params, inf=False))
    x = _codec_inputs(params, inf=False)
    with default_dtype(torch.float64):
        got = _codec_run(params, x)
    assert got == expected


def test_impl_picks_the_pass(monkeypatch):
    """impl="numpy" and "auto" (on a CPU state) run the NumPy bucket pass and decode,
    impl="torch" never does."""
    calls = []

    def spy(name):
        real = getattr(torch_codec, name)

        def wrapper(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(torch_codec, name, wrapper)

    spy("_compress_bucket_numpy")
    spy("_decode_bucket_message_numpy")
    comp = get_compressor("variance", alpha=0.5)
    grad, sq = few_gradients(6, torch.Generator().manual_seed(2))
    for impl, numpy in (("torch", False), ("numpy", True), ("auto", True)):
        calls.clear()
        bucket = torch_codec.bucket_state([comp.init_state(4), comp.init_state(2)], (0, 1), CPU)
        words, lengths, _ = torch_codec.compress_bucket(
            comp, grad, sq, bucket, batch_size=B, impl=impl
        )
        torch_codec.decode_bucket_message(words, lengths, bucket.offsets, coded=True, impl=impl)
        assert calls == (
            ["_compress_bucket_numpy", "_decode_bucket_message_numpy"] if numpy else []
        )


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_a_layer_of_infinite_scale_keeps_its_residual_under_error_feedback(torch_ops, impl):
    """M = inf codes every element of its layer 0 with q = 0 (the quantizer's rule for a
    non-finite scale), so error feedback leaves r − q = r: the infinite element and a finite
    one sent beside it (``below_floor="floor"``: "keep" would hold 3 < inf·2^-7 back) keep
    their values; the other layer (M = 4) is coded as usual."""
    comp = get_compressor("variance", alpha=0.0, after_send="error_feedback", below_floor="floor")
    bucket = torch_codec.bucket_state([comp.init_state(3), comp.init_state(2)], (0, 1), CPU)
    grad = torch.tensor([float("inf"), 3.0, 0.0, 4.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        words, lengths, sent = torch_codec.compress_bucket(
            comp, grad, torch.zeros(5), bucket, batch_size=1, impl=impl
        )
    assert sent == [2, 2] and lengths == [20, 20]
    assert bucket.residual.tolist()[:3] == [float("inf"), 3.0, 0.0]
    # layer 1: 4 = M·2^0 (code 0), −1 = −M·2^−2 (code 8 | 2): both exact, residual 0
    assert bucket.residual.tolist()[3:] == [0.0, 0.0]
    w = words.tolist()
    assert w[:5] == [0, 2, f32_bits(float("inf")), 0 << 4 | 0, 1 << 4 | 0]
    assert w[5:] == [1, 2, f32_bits(4.0), 0 << 4 | 0, 1 << 4 | 10]


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_a_scale_of_one_beside_an_empty_layer_is_coded(torch_ops, impl):
    """M = 1 is a usable scale also when another layer of the bucket sends nothing (M = 0):
    1, −0.5, 0.25 get codes 0, 8 | 1, 2 by hand; the empty layer is a bare header."""
    comp = get_compressor("variance", alpha=0.0)
    bucket = torch_codec.bucket_state([comp.init_state(3), comp.init_state(2)], (0, 1), CPU)
    grad = torch.tensor([1.0, -0.5, 0.25, 0.0, 0.0])
    words, lengths, sent = torch_codec.compress_bucket(
        comp, grad, torch.zeros(5), bucket, batch_size=1, impl=impl
    )
    assert sent == [3, 0] and lengths == [24, 12]
    assert words.tolist() == [0, 3, f32_bits(1.0), 0 << 4 | 0, 1 << 4 | 9, 2 << 4 | 2, 1, 0, 0]


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_a_layer_id_beyond_the_u32_header_is_refused_not_wrapped(impl):
    """The header's layer field is a u32 (the encoders' struct.pack refuses 2^32 + 3): both
    bucket passes refuse it rather than writing it modulo 2^32 (layer 3)."""
    with pytest.raises(struct.error):
        struct.pack("<I", (1 << 32) + 3)
    comp = get_compressor("variance", alpha=0.0)
    bucket = torch_codec.bucket_state([comp.init_state(2)], ((1 << 32) + 3,), CPU)
    with pytest.raises((OverflowError, RuntimeError)):
        torch_codec.compress_bucket(
            comp, torch.ones(2), torch.zeros(2), bucket, batch_size=1, impl=impl
        )


def test_state_to_a_device_moves_the_state_there():
    """state_to(meta) moves a CPU state's two tensors; a state already there keeps them."""
    state = VarianceState(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    torch_codec.state_to(state, META)
    assert state.residual.device == META and state.variance.device == META
    r = state.residual
    torch_codec.state_to(state, META)
    assert state.residual is r


def test_the_numpy_shortcuts_are_the_default():
    """Production keeps the NumPy shortcuts on the CPU."""
    assert torch_codec.NUMPY_ON_CPU is True


class _NumpySpy:
    """numpy for the codec module, counting calls of ``flatnonzero`` (the shortcuts' step)."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        if name != "flatnonzero":
            return getattr(np, name)

        def flatnonzero(*args, **kwargs):
            self.calls += 1
            return np.flatnonzero(*args, **kwargs)

        return flatnonzero


@pytest.mark.parametrize("shortcuts", [True, False])
def test_numpy_on_cpu_switches_the_shortcuts_of_the_cpu(monkeypatch, shortcuts):
    """NUMPY_ON_CPU = True: the selection and _nonzero of CPU tensors go through NumPy;
    False: neither does. The indices are the same either way (α = 0 and α > 0)."""
    monkeypatch.setattr(torch_codec, "NUMPY_ON_CPU", shortcuts)
    spy = _NumpySpy()
    monkeypatch.setattr(torch_codec, "np", spy)
    mask = torch.tensor([False, True, False, True, True])
    assert torch_codec._nonzero(mask).tolist() == [1, 3, 4]
    assert spy.calls == (1 if shortcuts else 0)
    for alpha, sent in ((0.0, 2), (1.0, 1)):
        spy.calls = 0
        # r = (0, 2, 0.5), v = S = (0, 1, 1): α = 0 sends the two nonzero; α = 1 only 4 > 1
        _, k, _ = _one_step(
            {"alpha": alpha, "values": "fp32"},
            torch.tensor([0.0, 2.0, 0.5]),
            torch.tensor([0.0, 1.0, 1.0]),
        )
        assert k == sent and spy.calls == (1 if shortcuts else 0)
