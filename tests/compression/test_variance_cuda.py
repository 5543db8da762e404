"""worker_gradients on a CUDA device agrees with the CPU (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch

# The CPU test module's models and batches (pytest puts this folder on sys.path).
from test_variance_estimators import LOSS, W, _Residual, batch, cnn

from vgcsim.traces.compression import sqsum_estimators as variance
from vgcsim.traces.compression.sqsum_estimators import worker_gradients

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(autouse=True)
def _full_precision():
    # cuDNN convolutions default to TF32 on Ampere and later; compare in full fp32.
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _both(model_fn, shape, seed, estimator, **kw):
    x, y = batch(shape, seed=seed)
    cpu = worker_gradients(model_fn(), LOSS, x, y, W, estimator, **kw)
    gpu = worker_gradients(model_fn().cuda(), LOSS, x.cuda(), y.cuda(), W, estimator, **kw)
    return cpu, gpu


@pytest.mark.parametrize("estimator", [None, "fast", "exact"])
@pytest.mark.parametrize("model_fn", [cnn, _Residual])
def test_cuda_matches_cpu(estimator, model_fn):
    cpu, gpu = _both(model_fn, (2, 8, 8), 7, estimator, sq_dtype="float32")
    torch.testing.assert_close(gpu.losses.cpu(), cpu.losses, rtol=1e-4, atol=1e-6)
    for g_gpu, g_cpu in zip(gpu.grads, cpu.grads, strict=True):
        assert g_gpu.device.type == "cuda"
        torch.testing.assert_close(g_gpu.cpu(), g_cpu, rtol=1e-3, atol=1e-6)
    if estimator is not None:
        for s_gpu, s_cpu in zip(gpu.sqsums, cpu.sqsums, strict=True):
            assert s_gpu.device.type == "cuda"
            torch.testing.assert_close(s_gpu.cpu(), s_cpu, rtol=1e-3, atol=1e-7)


def test_cuda_bfloat16_squared_sums_within_a_percent():
    cpu, gpu = _both(cnn, (2, 8, 8), 8, "fast", sq_dtype="bfloat16")
    ref, _ = _both(cnn, (2, 8, 8), 8, "fast", sq_dtype="float32")
    for name, s_gpu, s_ref in zip(gpu.names, gpu.sqsums, ref.sqsums, strict=True):
        rel = float((s_gpu.cpu() - s_ref).abs().sum() / s_ref.abs().sum().clamp_min(1e-30))
        assert rel < 1e-2, (name, rel)


def test_cuda_exact_in_sample_chunks(monkeypatch):
    one, _ = _both(cnn, (2, 8, 8), 9, "exact")
    monkeypatch.setattr(variance, "EXACT_CHUNK_BYTES", 4096)
    x, y = batch((2, 8, 8), seed=9)
    chunked = worker_gradients(cnn().cuda(), LOSS, x.cuda(), y.cuda(), W, "exact")
    for a, b in zip(chunked.sqsums, one.sqsums, strict=True):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-3, atol=1e-7)
