"""`vgcsim record --device cuda` agrees with the CPU recording of the same seed (skipped
without CUDA; CI has none)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vgcsim.core.config import apply_overrides
from vgcsim.traces.io import read_trace
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import validate_trace

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CNN = [
    "data.name=digits",
    "model.name=small_cnn",
    "workers=4",
    "batch_size=16",
    "steps=8",
    "eval_every=4",
    "eval_samples=200",
    "sq_dtype=float32",
]


@pytest.fixture(autouse=True)
def _full_precision():
    # cuDNN convolutions default to TF32 on Ampere and later; compare in full fp32.
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _both(tmp_path, settings):
    cfg = apply_overrides(RecordConfig(), settings)
    cpu = read_trace(record(cfg, tmp_path / "cpu"))
    gpu = validate_trace(record(apply_overrides(cfg, ["device=cuda"]), tmp_path / "gpu"))
    return cpu, gpu


def test_cuda_header_names_the_card(tmp_path):
    _, gpu = _both(tmp_path, [*CNN, "compressor.name=dense", "steps=2"])
    assert gpu.header["config"]["device"] == "cuda"
    assert gpu.header["device"]["type"] == "cuda"
    assert gpu.header["device"]["name"] == torch.cuda.get_device_name(0)


def test_dense_cuda_recording_matches_the_cpu(tmp_path):
    cpu, gpu = _both(tmp_path, [*CNN, "compressor.name=dense"])
    np.testing.assert_allclose(gpu.steps["loss"], cpu.steps["loss"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gpu.steps["grad_norm"], cpu.steps["grad_norm"], rtol=1e-3)
    np.testing.assert_allclose(gpu.evals["test_acc"], cpu.evals["test_acc"], atol=0.02)
    assert (gpu.payloads["sent"] == gpu.payloads["numel"]).all()


@pytest.mark.parametrize("estimator", ["fast", "exact"])
def test_variance_cuda_recording_sends_what_the_cpu_sends(tmp_path, estimator):
    cpu, gpu = _both(tmp_path, [*CNN, "compressor.name=variance", f"estimator={estimator}"])
    np.testing.assert_allclose(gpu.steps["loss"], cpu.steps["loss"], rtol=1e-3, atol=1e-4)
    sent_cpu, sent_gpu = cpu.payloads["sent"].sum(), gpu.payloads["sent"].sum()
    assert 0 < sent_gpu < gpu.payloads["numel"].sum()
    # Float summation order differs on the GPU: a few test outcomes may flip near the bound.
    assert abs(int(sent_gpu) - int(sent_cpu)) <= 0.01 * sent_cpu
    assert gpu.steps["rank_compute_s"].notna().any() and (gpu.steps["optimizer_s"] > 0).all()
