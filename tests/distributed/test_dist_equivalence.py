"""Real multi-process runs reproduce the single-process emulation of the same workers.

Four gloo ranks on 127.0.0.1 each compute their shard's gradient, compress it with their own
state, exchange the real encoded bytes with an allgatherv, decode and average. With a fixed
seed and the same data split this must reach the emulation's parameters (within 1e-6) with the
same elements sent by every worker at every step. One launch runs every case, the raw
allgatherv's edge cases included (process start-up dominates on small machines).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _scenario import emulate, segments_of

from vgcsim.traces.training.distributed_launch import launch_local

HERE = Path(__file__).parent
WORKERS, STEPS, SEED = 4, 6, 7
RUNS = ("allgatherv:-", "sync:variance", "sync:dense", "ddp:variance")

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # gloo process groups: 11 s to start


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("equivalence") / "runs.pt"
    launch_local(
        [str(HERE / "_sync_worker.py"), ",".join(RUNS), str(STEPS), str(SEED), str(out)],
        WORKERS,
        timeout_s=300,
        threads_per_proc=1,
    )
    return torch.load(out, weights_only=False)  # our own file: bytes and lists inside


def test_allgatherv_delivers_uneven_and_empty_segments_padded_on_gloo(real_runs):
    got = real_runs["allgatherv:-"]
    uneven = got["uneven"]
    assert uneven["segments"] == [segments_of(r) for r in range(WORKERS)]
    assert uneven["rank_bytes"] == [sum(map(len, segments_of(r))) for r in range(WORKERS)]
    # gloo: every rank sends the largest rank's length (rank 3: 21 + 3 bytes).
    assert uneven["padded"] and uneven["wire_bytes"] == [24] * WORKERS
    # All-empty payloads still make a valid exchange: one pad byte each.
    assert got["empty"]["segments"] == [[b"", b""]] * WORKERS
    assert got["empty"]["wire_bytes"] == [1] * WORKERS
    assert got["none"]["segments"] == [[]] * WORKERS


def assert_params_close(got, want, atol):
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, atol=atol, rtol=0), float((a - b).abs().max())


@pytest.mark.parametrize("name", ["variance", "dense"])
def test_four_gloo_ranks_match_the_emulation(real_runs, name):
    real = real_runs[f"sync:{name}"]
    params, sent = emulate(name, WORKERS, STEPS, SEED)
    assert real["sent"] == sent
    assert_params_close(real["params"], params, atol=1e-6)
    total = sum(sum(sum(layer) for layer in w) for w in sent)
    numel = sum(p.numel() for p in params) * WORKERS * STEPS
    if name == "variance":
        # The scenario must compress, else the test could not tell the exchange from dense.
        assert 0 < total < numel / 2
    else:
        assert total == numel


def test_ddp_hook_matches_the_plain_sync(real_runs):
    via_hook, via_sync = real_runs["ddp:variance"], real_runs["sync:variance"]
    assert via_hook["sent"] == via_sync["sent"]
    # DDP's backward and the per-sample pass sum in different orders: float-level agreement.
    assert_params_close(via_hook["params"], via_sync["params"], atol=1e-5)
