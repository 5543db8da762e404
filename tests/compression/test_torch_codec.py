"""The torch codec of the DDP hook gives the NumPy compressor's bytes, state and decode.

Every case runs the recorder's ``VarianceCompressor.compress`` (NumPy) and the torch path on
the same inputs for several steps, so error feedback and the variance accumulator carry
over, and compares bit patterns: the primary buffer byte for byte, the residual and the
accumulator as int32 views, the decoded tensor likewise.
"""

from __future__ import annotations

import itertools

import pytest
import torch
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


GRID = {
    "alpha": [0.0, 0.3, 2.0],
    "variance": ["sqsum", "centered"],
    "variance_scale": ["batch_mean", "per_sample"],
    "after_send": ["reset", "error_feedback"],
    "below_floor": ["keep", "floor"],
    "rounding": ["nearest", "log", "down"],
    "values": ["code4", "fp32"],
}
CONFIGS = [dict(zip(GRID, combo, strict=True)) for combo in itertools.product(*GRID.values())]


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
