"""The DDP hook in a user's script: torchrun-style gloo ranks, DistributedSampler, no_sync
accumulation over two micro-batches, tiny buckets, ``register_vgc_hook`` from ``vgcsim.ddp``.

One launch per world size runs plain DDP and four hooked runs from the same weights and data
(see ``_ddp_hook_worker.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _ddp_hook_worker import MICRO_STEPS, build_model

from vgcsim.traces.training.distributed_launch import launch_local

HERE = Path(__file__).parent
STEPS, SEED = 4, 3
HOOKED_RUNS = ("alpha0_fp32", "variance_fast", "variance_exact", "strom", "dense")

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # two launches of 3-5 gloo ranks


@pytest.fixture(scope="module", params=[2, 3], ids=["2ranks", "3ranks"])
def runs(request, tmp_path_factory) -> tuple[int, dict]:
    out = tmp_path_factory.mktemp(f"ddp_hook_{request.param}") / "runs.pt"
    launch_local(
        [str(HERE / "_ddp_hook_worker.py"), str(STEPS), str(SEED), str(out)],
        request.param,
        timeout_s=300,
        threads_per_proc=1,
    )
    return request.param, torch.load(out, weights_only=False)


@pytest.mark.parametrize("name", ("plain", *HOOKED_RUNS))
def test_every_rank_holds_the_same_parameters_after_every_step(runs, name):
    world, results = runs
    params = results[name]["params"]
    assert len(params) == STEPS
    for step in params:
        assert len(step) == world
        assert all(torch.equal(step[0], other) for other in step[1:])


def test_alpha_zero_with_fp32_values_is_plain_ddp(runs):
    world, results = runs
    for hooked, plain in zip(
        results["alpha0_fp32"]["params"], results["plain"]["params"], strict=True
    ):
        if world == 2:
            # Halving is exact: the same sums as DDP's allreduce, bit for bit.
            assert torch.equal(hooked[0], plain[0])
        else:
            # gloo adds three ranks in its own order; the hook adds them in rank order.
            assert torch.allclose(hooked[0], plain[0], rtol=0, atol=1e-6)
    # The model moved: the comparison is not between untouched initial weights.
    first = torch.cat([p.detach().reshape(-1) for p in build_model(SEED).parameters()])
    assert not torch.equal(results["plain"]["params"][-1][0], first)


def test_the_dense_hook_is_plain_ddp_and_counts_every_element_every_step(runs):
    """From each bucket's second step on the dense fp32 hook reduces DDP's buffer in place
    (nothing compressed or decoded); its parameters and counts stay those of the first."""
    world, results = runs
    for hooked, plain in zip(results["dense"]["params"], results["plain"]["params"], strict=True):
        if world == 2:
            assert torch.equal(hooked[0], plain[0])  # halving is exact, as above
        else:
            assert torch.allclose(hooked[0], plain[0], rtol=0, atol=1e-6)
    numel = sum(p.numel() for p in build_model(SEED).parameters())
    dense = results["dense"]
    assert dense["sent"] == [numel] * STEPS
    assert dense["wire_bytes"] == [4 * numel] * STEPS
    # every encoding's bits as the first step's full path counted them
    assert dense["payload_bytes"] == [dense["payload_bytes"][0]] * STEPS
    assert dense["fallback_rounds"] == [0] * STEPS
    # the first step compressed (and counted); the later ones reduced in place
    assert dense["compress_s"][0] > 0 and dense["compress_s"][1:] == [0.0] * (STEPS - 1)


def test_compression_changes_the_trajectory_and_sends_less(runs):
    _, results = runs
    numel = sum(p.numel() for p in build_model(SEED).parameters())
    assert results["alpha0_fp32"]["sent"] == [numel] * STEPS
    for name in ("variance_fast", "variance_exact", "strom"):
        assert all(0 < s < numel for s in results[name]["sent"])
        assert not torch.equal(results[name]["params"][-1][0], results["plain"]["params"][-1][0])


def test_wire_bytes_are_one_steps_and_include_the_lengths(runs):
    _, results = runs
    layers = len(list(build_model(SEED).parameters()))
    run = results["alpha0_fp32"]
    wire, payload, fallback = run["wire_bytes"], run["payload_bytes"], run["fallback_rounds"]
    numel = run["sent"][0]
    # Every step sends every element as coo64: 4-byte index + 4-byte value per element and
    # an 8-byte header per layer, the same bytes every step.
    assert payload == [8 * numel + 8 * layers] * STEPS
    # The first steps have no bound for their buckets (DDP rebuilds its buckets after the
    # first one): a fallback round per bucket. Later the bound holds the message (fixed
    # size here), so each step sends the same padded bytes, and no more than 1.25 × the
    # message plus alignment: the statistics are one step's, not a running total.
    assert fallback[0] >= 1 and fallback[-2:] == [0, 0]
    assert wire[-1] == wire[-2]
    message = payload[-1] + 4 * layers + 4  # + per-layer lengths and the total, per bucket
    assert message <= wire[-1] <= 1.25 * (message + 4 * layers) + 8 * layers
    assert all(w < wire[-1] for w in results["strom"]["wire_bytes"][-2:])


def test_one_forward_and_one_backward_per_micro_batch(runs):
    _, results = runs
    for name in ("plain", *HOOKED_RUNS):
        assert results[name]["forwards"] == [MICRO_STEPS] * STEPS
    # The squared sums come from the ordinary backward: each of the 4 hooked layers
    # (Conv2d, GroupNorm, 2 Linear) runs its hook once per micro-batch, no second pass.
    for name in ("alpha0_fp32", "variance_fast", "variance_exact"):
        assert results[name]["layer_backwards"] == [4 * MICRO_STEPS] * STEPS
    assert results["strom"]["layer_backwards"] == [0] * STEPS
