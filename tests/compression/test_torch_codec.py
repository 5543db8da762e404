"""The torch codec of the DDP hook gives the NumPy compressor's bytes, state and decode.

Every case runs the recorder's ``VarianceCompressor.compress`` (NumPy) and the torch path on
the same inputs for several steps, so error feedback and the variance accumulator carry
over, and compares bit patterns: the primary buffer byte for byte, the residual and the
accumulator as int32 views, the decoded tensor likewise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pairwise import joined, pairwise
from torchhelpers import default_dtype
from vgcsim.traces.compression import torch_codec
from vgcsim.traces.compression.compressors import get_compressor

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
    assert torch_codec._flat_f32(t).tolist() == [1.0, -2.0, 0.5]
    assert torch_codec._flat_f32(t.detach().to(torch.bfloat16)).dtype == np.float32
    strided = torch.arange(6, dtype=torch.float32)[::2]
    assert torch_codec._flat_f32(strided).tolist() == [0.0, 2.0, 4.0]
    plain = torch.zeros(4)
    view = torch_codec._flat_f32(plain)
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
    from vgcsim.traces.compression.compressors.variance import VarianceState

    r, v = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 0.25])
    state = VarianceState(residual=r, variance=v)
    torch_codec.state_to(state, torch.device("cpu"))
    assert state.residual is r and state.variance is v
    meta = torch.device("meta")
    torch_codec.state_to(state, meta)
    assert (state.residual.device, state.variance.device) == (meta, meta)
    assert state.residual.shape == (2,) and state.variance.dtype == torch.float32
    assert r.device.type == "cpu"  # moved by a copy, the caller's tensors untouched
