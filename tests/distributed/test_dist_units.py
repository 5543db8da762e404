"""Single-process checks of the distributed pieces: environment, state, decode, errors."""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
from torch import nn

from vgcsim.core.errors import ConfigError
from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.training.distributed_hook import (
    VGCState,
    decode_received,
    exchange,
    sync_gradients,
    trainable_parameters,
)
from vgcsim.traces.training.distributed_launch import check_backend, free_port, rank_env


def small_model() -> nn.Module:
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    model[0].bias.requires_grad_(False)  # frozen parameters are not layers
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return model


def test_rank_env_reads_torchrun_variables_and_rejects_bad_ones():
    env = rank_env(
        {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "9"}
    )
    assert (env.rank, env.world_size, env.local_rank, env.master_port) == (2, 4, 0, 9)
    with pytest.raises(ConfigError, match="torchrun"):
        rank_env({"RANK": "0"})
    with pytest.raises(ConfigError, match="outside"):
        rank_env({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "9"})
    with pytest.raises(ConfigError, match="unknown backend 'mpi'; valid: gloo, nccl"):
        check_backend("mpi")


def test_state_maps_trainable_parameters_to_layers():
    model = small_model()
    state = VGCState.for_model(model, get_compressor("strom", tau=0.1))
    params = trainable_parameters(model)
    assert len(params) == 3 and len(state.layer_states) == 3
    assert [state.layer_of[id(p)] for p in params] == [0, 1, 2]
    assert state.collective == "allgatherv"
    assert VGCState.for_model(model, get_compressor("dense")).collective == "allreduce"


def test_a_received_buffer_decodes_like_the_sender_payload():
    comp = get_compressor("qsgd")
    g = torch.randn(300, generator=torch.Generator().manual_seed(1))
    mine = comp.compress(g, comp.init_state(300), layer=3, generator=torch.Generator())
    theirs = comp.compress(2 * g, comp.init_state(300), layer=3, generator=torch.Generator())
    assert torch.equal(decode_received(mine, theirs.data), theirs.decode())


def test_variance_without_squared_sums_is_a_clear_error():
    model = small_model()
    state = VGCState.for_model(model, get_compressor("variance"), batch_size=4)
    state.start_step()
    with pytest.raises(ConfigError, match="needs per-sample squared-gradient sums"):
        exchange(state, [0], [torch.zeros(20)])


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


def test_one_rank_sync_applies_the_compressor_with_error_feedback(world_of_one):
    model = small_model()
    comp = get_compressor("strom", tau=0.5)
    state = VGCState.for_model(model, comp)
    for p in trainable_parameters(model):
        p.grad = torch.full_like(p, 0.3)
    stats = sync_gradients(model, state)
    # 0.3 < tau: nothing sent, all of it stays in the residual.
    assert all(s == 0 for s in stats.sent.values())
    assert all(bool((p.grad == 0).all()) for p in trainable_parameters(model))
    for p in trainable_parameters(model):
        p.grad = torch.full_like(p, 0.3)
    stats = sync_gradients(model, state)
    # 0.6 >= tau: every element sends +tau, and 0.1 remains.
    assert stats.sent == {i: p.numel() for i, p in enumerate(trainable_parameters(model))}
    for p, st in zip(trainable_parameters(model), state.layer_states, strict=True):
        assert torch.allclose(p.grad, torch.full_like(p, 0.5))
        assert torch.allclose(st.residual, torch.full((p.numel(),), 0.1), atol=1e-6)
    assert stats.collective == "allgatherv" and stats.wire_bytes > 0 and stats.comm_s > 0
    with pytest.raises(ConfigError, match="no gradient"):
        model[2].weight.grad = None
        sync_gradients(model, state)
