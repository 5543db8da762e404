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
from test_torch_codec import CONFIGS, SIZES, B, bits, gradients, run_bucket, same_state

from vgcsim.traces.compression import torch_codec
from vgcsim.traces.compression.compressors import get_compressor

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda")


def run_bucket_on_cuda(params: dict, seed: int, dtype: torch.dtype = torch.float32) -> int:
    # The CPU file's run on the GPU: impl "auto" there is the torch path.
    return run_bucket(params, seed, dtype, impl="auto", device=CUDA)


@pytest.mark.parametrize("params", CONFIGS, ids=lambda p: "-".join(map(str, p.values())))
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
