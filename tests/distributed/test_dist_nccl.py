"""`vgcsim record --backend nccl` on one GPU (skipped without CUDA; CI has none).

One GPU allows one NCCL rank (NCCL refuses two ranks on one device), so this checks the
GPU path end to end — model, batches and gradients on the device, compression on the CPU,
the uneven NCCL allgatherv — against the CPU emulation of one worker.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

# The gloo test's tiny MLP recording (pytest puts this folder on sys.path).
from test_dist_record import SETTINGS as MLP

from vgcsim.cli import main
from vgcsim.core.config import apply_overrides
from vgcsim.traces.io import read_trace
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import validate_trace

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.gpu,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and torch.distributed.is_nccl_available()),
        reason="needs a CUDA device and NCCL",
    ),
]


def _nccl(out, settings):
    args = ["record", "--backend", "nccl", "--nprocs", "1", "-q", "-o", str(out)]
    for s in settings:
        args += ["--set", s]
    assert main(args) == 0
    validate_trace(out)
    return read_trace(out)


def test_nccl_record_of_one_rank_matches_the_cpu_emulation(tmp_path):
    real = _nccl(tmp_path / "nccl", MLP)
    emu = read_trace(record(apply_overrides(RecordConfig(), [*MLP, "workers=1"]), tmp_path / "e"))
    assert real.header["distributed"]["backend"] == "nccl"
    assert real.header["distributed"]["padded_allgather"] is False
    np.testing.assert_allclose(real.steps["loss"], emu.steps["loss"], rtol=1e-4, atol=1e-5)
    sent_real, sent_emu = real.payloads["sent"].sum(), emu.payloads["sent"].sum()
    assert 0 < sent_real < real.payloads["numel"].sum()
    assert abs(sent_real - sent_emu) <= 0.01 * sent_emu
    assert (real.steps["comm_s"] >= 0).all()


@pytest.mark.parametrize("estimator", ["fast", "exact"])
def test_nccl_record_of_a_cnn_with_each_estimator(tmp_path, estimator):
    t = _nccl(
        tmp_path / estimator,
        [
            "data.name=digits",
            "model.name=small_cnn",
            "batch_size=16",
            "steps=6",
            "eval_every=3",
            "eval_samples=200",
            f"estimator={estimator}",
        ],
    )
    assert t.status == "complete" and t.steps_count == 6
    assert t.header["config"]["sq_dtype"] in ("float32", "bfloat16")
    assert np.isfinite(t.steps["loss"]).all()
    assert 0 < t.payloads["sent"].sum() < t.payloads["numel"].sum()
