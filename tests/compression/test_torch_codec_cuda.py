"""The torch codec on a CUDA device gives the NumPy compressor's bytes, state and decode
(skipped without a GPU).

The CPU cases of test_torch_codec.py once more with the gradients, squared sums and state on
the GPU (the ``"auto"`` path there is the torch one): every step's primary buffer byte for
byte, the residual and the variance accumulator as int32 views, and the decoded tensor, for
inputs with zeros, subnormals, exact ties of the test and of the quantizer, and bf16
gradients.
"""

from __future__ import annotations

import pytest
import torch

# The CPU test module's inputs and comparisons (pytest puts this folder on sys.path).
from test_torch_codec import CONFIGS, LAYERS, SIZES, B, bits, gradients
from vgcsim.traces.compression import torch_codec
from vgcsim.traces.compression.compressors import get_compressor

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda")


def same_state(ref, gpu) -> bool:
    return torch.equal(bits(ref.residual), bits(gpu.residual.cpu())) and torch.equal(
        bits(ref.variance), bits(gpu.variance.cpu())
    )


def run_bucket_on_cuda(params: dict, seed: int, dtype: torch.dtype = torch.float32) -> int:
    comp = get_compressor("variance", **params)
    g = torch.Generator().manual_seed(seed)
    ref = [comp.init_state(n) for n in SIZES]
    mine = [comp.init_state(n) for n in SIZES]
    bucket = torch_codec.bucket_state(mine, LAYERS, CUDA)
    coded = params.get("values", "code4") == "code4"
    sent_total = 0
    for step in range(4):
        grad, sq = gradients(sum(SIZES), step, g)
        grad = grad.to(dtype)
        words, lengths, sent = torch_codec.compress_bucket(
            comp, grad.to(CUDA), sq.to(CUDA), bucket, batch_size=B
        )
        assert words.device.type == "cuda"
        payloads, start = [], 0
        for layer, state, n in zip(LAYERS, ref, SIZES, strict=True):
            part = slice(start, start + n)
            payloads.append(
                comp.compress(grad[part], state, sqsum=sq[part], batch_size=B, layer=layer)
            )
            start += n
        assert words.cpu().view(torch.uint8).numpy().tobytes() == b"".join(p.data for p in payloads)
        assert lengths == [len(p.data) for p in payloads]
        assert sent == [p.sent for p in payloads]
        assert all(same_state(a, b) for a, b in zip(ref, mine, strict=True))
        idx, vals = torch_codec.decode_bucket_message(words, lengths, bucket.offsets, coded=coded)
        decoded = torch.zeros(sum(SIZES), device=CUDA).index_add_(0, idx, vals)
        assert torch.equal(bits(decoded.cpu()), bits(torch.cat([p.decode() for p in payloads])))
        sent_total += sum(sent)
    return sent_total


@pytest.mark.parametrize("params", CONFIGS[::6], ids=lambda p: "-".join(map(str, p.values())))
def test_bucket_path_on_cuda_is_bit_identical_to_the_numpy_compressor(params):
    sent = run_bucket_on_cuda(params, seed=CONFIGS.index(params))
    assert 0 < sent < 4 * sum(SIZES)


def test_bf16_gradients_on_cuda_are_compressed_like_the_numpy_path():
    assert run_bucket_on_cuda({}, seed=1, dtype=torch.bfloat16) > 0


@pytest.mark.parametrize(
    "params",
    [{}, {"scale": "mean"}, {"values": "fp32", "after_send": "error_feedback"}],
)
def test_layer_path_on_cuda_is_bit_identical_to_the_numpy_compressor(params):
    comp = get_compressor("variance", **params)
    g = torch.Generator().manual_seed(5)
    ref, mine = comp.init_state(2500), comp.init_state(2500)
    torch_codec.state_to(mine, CUDA)
    coded = comp.config.values == "code4"
    for step in range(4):
        grad, sq = gradients(2500, step, g)
        payload = comp.compress(grad, ref, sqsum=sq, batch_size=B, layer=3)
        words, sent = torch_codec.compress(
            comp, grad.to(CUDA), mine, sq.to(CUDA), batch_size=B, layer=3
        )
        assert words.cpu().view(torch.uint8).numpy().tobytes() == payload.data
        assert sent == payload.sent > 0
        assert same_state(ref, mine)
        idx, vals = torch_codec.decode_sparse(words, numel=2500, coded=coded)
        decoded = torch.zeros(2500, device=CUDA).index_add_(0, idx, vals)
        assert torch.equal(bits(decoded.cpu()), bits(payload.decode()))


def test_exact_ties_on_cuda_take_the_numpy_side():
    """r² = α·v exactly is not sent, |r| = M·2^-7 exactly is kept, a ratio at the midpoint
    of two levels rounds up: the same elements and codes as the NumPy path."""
    comp = get_compressor("variance", alpha=2.0, zeta=1.0)
    r = torch.tensor([1.0, 0.5, 0.75 * 2.0**-7, 0.75, 0.375, -0.25, 0.5625])
    v = torch.tensor([0.5, 0.125, 0.0, 0.0, 0.0, 0.0, 0.0])
    sq = v * B**2
    n = r.numel()
    ref, mine = comp.init_state(n), [comp.init_state(n)]
    payload = comp.compress(r, ref, sqsum=sq, batch_size=B, layer=0)
    bucket = torch_codec.bucket_state(mine, (0,), CUDA)
    words, lengths, sent = torch_codec.compress_bucket(
        comp, r.to(CUDA), sq.to(CUDA), bucket, batch_size=B
    )
    assert words.cpu().view(torch.uint8).numpy().tobytes() == payload.data
    assert sent == [5] and same_state(ref, mine[0])
    idx, vals = torch_codec.decode_bucket_message(words, lengths, bucket.offsets, coded=True)
    assert idx.tolist() == [2, 3, 4, 5, 6]
    assert vals.tolist() == [0.75 * 2.0**-7, 0.75, 0.375, -0.1875, 0.75]
