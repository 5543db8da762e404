"""Single-process checks of the DDP hook's state: no silent defaults, per-step statistics."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
from torch import nn
from vgcsim.traces.training.distributed_launch import free_port

from vgcsim.core.errors import ConfigError
from vgcsim.ddp import VGCState, get_compressor, register_vgc_hook, sync_gradients


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 2))


@pytest.mark.parametrize("name", ["variance", "hybrid"])
def test_building_the_state_without_batch_size_is_one_clear_error(name):
    with pytest.raises(ConfigError, match=f"compressor '{name}' needs batch_size=") as err:
        VGCState.for_model(small_model(), get_compressor(name))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="positive"):
        VGCState.for_model(small_model(), get_compressor(name), batch_size=0)
    # Compressors that do not scale squared sums do not need it.
    assert VGCState.for_model(small_model(), get_compressor("strom")).batch_size is None


@pytest.fixture
def world_of_one():
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{free_port()}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=30),
    )
    yield
    dist.destroy_process_group()


def _backward(model: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(8, 5, generator=g), torch.randint(0, 2, (8,), generator=g)
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()


def test_stats_are_per_step_and_count_the_length_exchange(world_of_one):
    model = small_model()
    state = VGCState.for_model(model, get_compressor("strom", tau=1e-4))
    walls = []
    for step in range(3):
        _backward(model, step)
        stats = sync_gradients(model, state)
        walls.append(stats.wire_bytes)
        payload = sum(stats.bits[i]["packed32"] for i in stats.bits) // 8
        # 4 layers: one int64 length each, plus the payload (one rank: no padding).
        assert stats.wire_bytes == 8 * 4 + payload
    assert max(walls) < 2 * min(walls)  # not a running total


def test_start_step_sums_serve_one_exchange_only(world_of_one):
    model = small_model()
    state = VGCState.for_model(model, get_compressor("variance", alpha=0.5), batch_size=8)
    _backward(model, 0)
    sq = [torch.ones_like(p) for p in model.parameters()]
    sync_gradients(model, state, sqsums=sq)
    _backward(model, 1)
    state.stats = type(state.stats)()
    from vgcsim.traces.training.distributed_hook import exchange

    params = list(model.parameters())
    with pytest.raises(ConfigError, match="register_vgc_hook"):
        exchange(state, [0], [params[0].grad])


def test_register_refuses_unsupported_layers_before_training(world_of_one):
    model = nn.Sequential(nn.Conv1d(2, 2, 3), nn.Flatten(), nn.Linear(2, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    with pytest.raises(ConfigError, match="found Conv1d"):
        register_vgc_hook(ddp, get_compressor("variance"), batch_size=4)
    with pytest.raises(ConfigError, match="needs batch_size"):
        register_vgc_hook(ddp, get_compressor("variance"))


def test_one_rank_hook_at_alpha_zero_leaves_the_gradient_unchanged(world_of_one):
    model, reference = small_model(), small_model()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = register_vgc_hook(
        ddp, get_compressor("variance", alpha=0.0, values="fp32"), batch_size=8
    )
    for step in range(2):
        g = torch.Generator().manual_seed(step)
        x, y = torch.randn(8, 5, generator=g), torch.randint(0, 2, (8,), generator=g)
        ddp.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        reference.zero_grad()
        nn.functional.cross_entropy(reference(x), y).backward()
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad)
        assert sum(state.stats.sent.values()) == sum(p.numel() for p in model.parameters())


def test_direct_squared_sums_are_the_shared_hooks_bit_for_bit():
    from vgcsim.traces.compression.sqsum_hooks import SqsumHooks
    from vgcsim.traces.training.distributed_hook import DirectSqsumHooks

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1, stride=2),
        nn.GroupNorm(2, 4),
        nn.Conv2d(4, 4, 3, padding="same", groups=2, bias=False),
        nn.Tanh(),
        nn.Flatten(),
        nn.Linear(64, 8),
        nn.Tanh(),
        nn.Linear(8, 3, bias=False),
    )
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 2, 8, 8, generator=g), torch.randint(0, 3, (6,), generator=g)
    sums = []
    for cls in (SqsumHooks, DirectSqsumHooks):
        hooks = cls(model, "fast", "float32")
        for _ in range(2):  # two backward passes: the sums accumulate alike
            model.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
        hooks.remove()
        sums.append(hooks.sums)
        assert hooks.backward_calls == 2 * 5
    assert sorted(sums[0]) == sorted(sums[1]) == list(range(8))
    for i, want in sums[0].items():
        assert torch.equal(sums[1][i].reshape(want.shape), want), i
        assert want.abs().sum() > 0, i


def test_the_bound_is_a_high_quantile_of_recent_messages_with_headroom():
    from vgcsim.core import bounded as dh

    # 16 messages 100, 200, ..., 1600 bytes: the 0.75 quantile is the 13th (1300 B),
    # + 10 % = 1430, rounded up to 8 bytes = 1432; the largest alone would give 1760.
    history = [100 * k for k in range(16, 0, -1)]
    assert (dh.BOUND_QUANTILE, dh.BOUND_HEADROOM, dh.BOUND_ALIGN) == (0.75, 1.1, 8)
    assert dh.message_bound_bytes(history) == 1432
    assert dh.message_bound_bytes([10]) == 16  # one message: itself + 10 %, aligned
    assert dh.message_bound_bytes([8, 8, 8, 4000]) == 4400  # the quantile of four is the largest
