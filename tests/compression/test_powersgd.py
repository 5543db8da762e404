"""PowerSGD: torch's hook as the reference, the closed form of its bytes, and a recording.

References: T. Vogels, S. P. Karimireddy, M. Jaggi, NeurIPS 2019 (Algorithm 1), and
``torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py`` run for real on two gloo
ranks on 127.0.0.1.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from vgcsim.core.config import apply_overrides
from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.compression.compressors.powersgd import layer_plan, orthogonalize
from vgcsim.traces.training.distributed_launch import launch_local
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import validate_trace

HERE = Path(__file__).parent
STEPS, SEED, WORLD = 6, 5, 2
U = 2.0**-24  # unit roundoff of float32


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory) -> dict:
    """Torch's hook at approximation rank 1 (Gram-Schmidt) and 4 (QR), one launch."""
    out = tmp_path_factory.mktemp("powersgd") / "run.pt"
    launch_local(
        [str(HERE / "_powersgd_torch_worker.py"), "1,4", str(STEPS), str(SEED), str(out)],
        WORLD,
        timeout_s=300,
        threads_per_proc=1,
    )
    return torch.load(out, weights_only=False)


@pytest.fixture(params=[1, 4], ids=["rank1-gram-schmidt", "rank4-qr"])
def torch_run(request, torch_runs):
    return request.param, torch_runs[request.param]


@pytest.mark.distributed
@pytest.mark.slow
def test_update_equals_torch_powersgd_hook_on_two_gloo_ranks(torch_run):
    """Fed the local gradients both ranks had, the emulated exchange returns the reduced
    gradient torch's hook put in ``.grad``, step by step: two plain-allreduce steps, the first
    PowerSGD step (random Q), then warm-started ones, error feedback throughout.

    Tolerance: both sides run the same float32 operations on the same inputs, and differ only
    in the order of the reductions inside kernels (a batched vs a single matmul, a norm over
    another axis; the two-rank allreduce sum is exact either way). A reordered sum of k terms
    moves by at most γ_k·Σ|terms| (γ_k = k·u/(1 − k·u), Higham, *Accuracy and Stability of
    Numerical Algorithms*, 2nd ed., §3.1); the result passes through three products of inner
    length at most n + m (M Q, Mᵀ P, P Qᵀ, with orthonormal P and Q of entries ≤ 1) and one
    orthogonalization, so per element |Δ| ≤ 3·γ_{n+m}·‖M‖_F·κ, with κ = 10 allowed for the
    Gram-Schmidt / QR amplification on these well-conditioned random matrices; the state
    carried between steps (error, Q) adds one such bound per step.
    """
    rank, run = torch_run
    comp = get_compressor("powersgd", rank=rank, start_iter=2)
    shapes = run["shapes"]
    states = [[comp.init_state(math.prod(s)) for s in shapes] for _ in range(WORLD)]
    shared = comp.init_shared()
    compressed_steps = 0
    for step in range(STEPS):
        local = run["local"][step]
        grads = [
            torch.stack([local[w][i].reshape(-1) for w in range(WORLD)]) for i in range(len(shapes))
        ]
        res = comp.exchange(grads, shapes, states, shared)
        for i, shape in enumerate(shapes):
            want = run["reduced"][step][i].reshape(-1)
            plan = layer_plan(i, tuple(shape), rank, 2.0)
            inner = plan.rows + plan.cols
            norm = float(grads[i].norm()) + max(
                float(states[w][i].error.norm()) for w in range(WORLD)
            )
            tol = (step + 1) * 3 * (inner * U / (1 - inner * U)) * norm * 10
            diff = float((res.means[i] - want).abs().max())
            assert diff <= tol, (step, i, shape, diff, tol)
        compressed_steps += any(p > 0 for p in res.p_elements)
    assert compressed_steps == STEPS - 2


def test_bytes_equal_the_closed_form_per_layer(tmp_path):
    """A short recording's per-layer elements against torch's rule, worked out here:
    (n, m) = (shape[0], numel/shape[0]), r' = min(n, m, r); compressed when
    (n + m)·r'·2 < n·m, then P = n·r', Q = m·r' and 32·(P + Q) bits, else 32·numel bits;
    every layer plain before start_iter."""
    cfg = apply_overrides(
        RecordConfig(),
        [
            "data.name=synthetic",
            "model.name=small_cnn",
            "workers=2",
            "batch_size=8",
            "steps=4",
            "eval_every=2",
            "eval_samples=100",
            "compressor.name=powersgd",
            "compressor.rank=2",
        ],
    )
    trace = validate_trace(record(cfg, tmp_path / "t"))  # raises when the trace is invalid
    p = trace.payloads
    checked_compressed = checked_plain = 0
    for layer in trace.layers:
        shape = layer["shape"]
        numel = math.prod(shape)
        n = shape[0]
        m = numel // n
        r = min(n, m, 2)
        small = not (len(shape) and (n + m) * r * 2 < n * m)
        rows = p[p["layer"] == layer["index"]]
        for step, part in rows.groupby("step"):
            if step < 2 or small:
                want_p = want_q = 0
                want_bits = 32 * numel
                checked_plain += step >= 2
            else:
                want_p, want_q = n * r, m * r
                want_bits = 32 * (n + m) * r
                checked_compressed += 1
            assert (part["lowrank_p_elements"] == want_p).all()
            assert (part["lowrank_q_elements"] == want_q).all()
            assert (part["bits_lowrank_fp32"] == want_bits).all()
            assert (part["sent"] * 32 == part["bits_lowrank_fp32"]).all()
    assert checked_compressed > 0 and checked_plain > 0


def test_orthogonalize_gives_orthonormal_columns_both_ways():
    g = torch.Generator().manual_seed(0)
    for r in (1, 2, 3, 5):
        a = torch.randn(40, r, generator=g, dtype=torch.float64)
        orthogonalize(a)
        np.testing.assert_allclose(a.T @ a, np.eye(r), atol=1e-12)


def test_small_tensors_stay_plain_and_rank_is_capped():
    assert not layer_plan(0, (10,), 4, 2.0).compressed  # a bias: 1 column
    assert not layer_plan(0, (10, 16), 4, 2.0).compressed  # (26)·4·2 = 208 > 160
    assert layer_plan(0, (10, 16), 1, 2.0).compressed  # 52 < 160
    plan = layer_plan(0, (3, 100), 8, 1.0)  # r' = min(3, 100, 8) = 3: 309 > 300
    assert plan.rank == 0
    plan = layer_plan(0, (4, 1, 3, 3), 2, 2.0)  # n = 4, m = 9, r' = 2: 52 > 36
    assert not plan.compressed


def test_bad_parameters_are_one_line_errors():
    for bad in ({"rank": 0}, {"min_compression_rate": 0.5}, {"start_iter": -1}, {"warm_start": 1}):
        with pytest.raises(ConfigError):
            get_compressor("powersgd", **bad)
    with pytest.raises(ConfigError, match="exchanges all workers"):
        get_compressor("powersgd").compress(torch.ones(4), None)
