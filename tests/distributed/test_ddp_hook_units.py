"""Single-process checks of the DDP hook's state: no silent defaults, per-step statistics."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch import nn

from vgcsim.core.errors import ConfigError
from vgcsim.ddp import VGCState, get_compressor, register_vgc_hook, sync_gradients
from vgcsim.traces.training.distributed_launch import free_port


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


def test_register_refuses_arguments_of_the_wrong_kind_naming_them(world_of_one):
    """A module that is not wrapped in DDP, a compressor's name, a fractional batch size, a
    seed for a generator, a number for a folder: one line each, before anything is built."""
    model = small_model()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    variance = get_compressor("variance")
    cases = [
        ((model, variance), {"batch_size": 4}, "ddp_model must be the DistributedDataParallel"),
        ((ddp, "variance"), {"batch_size": 4}, "compressor must be a compressor"),
        ((ddp, variance), {"batch_size": 2.5}, "batch_size must be a positive integer"),
        ((ddp, variance), {"batch_size": 0}, "batch_size must be a positive integer"),
        ((ddp, variance), {"batch_size": 4, "generator": 5}, "generator must be a torch.Generator"),
        ((ddp, variance), {"batch_size": 4, "trace_dir": 5}, "trace_dir must be a folder path"),
        ((ddp, variance), {"batch_size": 4, "process_group": "pg"}, "process_group must be"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(ConfigError, match=message) as err:
            register_vgc_hook(*args, **kwargs)
        assert str(err.value).startswith("register_vgc_hook: ") and "\n" not in str(err.value)
    state = register_vgc_hook(ddp, variance, batch_size=np.int64(4))  # numpy's ints are ints
    assert state.batch_size == 4


def test_a_trace_dir_that_is_a_file_is_refused_as_a_file(world_of_one, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    ddp = torch.nn.parallel.DistributedDataParallel(small_model())
    with pytest.raises(ConfigError, match="trace_dir .*afile is a file; give a folder"):
        register_vgc_hook(ddp, get_compressor("variance"), batch_size=4, trace_dir=str(afile))
    assert afile.read_text() == "mine"


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


#: Unit roundoff of float32 (round to nearest): every float32 operation returns x(1 + e), |e| <= U.
U32 = 2.0**-24


def _gamma(k: int) -> float:
    """Higham's gamma_k = k u / (1 - k u): the relative error bound of k float32 operations in
    sequence (Accuracy and Stability of Numerical Algorithms, 2nd ed., Lemma 3.1)."""
    return k * U32 / (1 - k * U32)


def _capture_layer_io(model: nn.Module) -> tuple[list, list]:
    """Forward and tensor hooks that keep each Linear/Conv2d's input and output gradient."""
    seen: list[tuple[nn.Module, torch.Tensor, list]] = []

    def forward(module, inputs, output):
        grads: list[torch.Tensor] = []
        output.register_hook(lambda d: grads.append(d.detach().clone()))
        seen.append((module, inputs[0].detach().clone(), grads))

    handles = [
        m.register_forward_hook(forward)
        for m in model.modules()
        if isinstance(m, nn.Linear | nn.Conv2d)
    ]
    return seen, handles


def _reference_sums(seen: list, index: dict) -> dict[int, tuple[torch.Tensor, torch.Tensor, int]]:
    """Per layer the fast-estimator sums in float64, the same sums with every term replaced by
    its absolute value (Higham's |p|(|x|), the scale of the rounding error), and the number of
    float32 operations k on the longest path to one output element.

    For the weights and a Linear bias every term is a product of squares, so both are equal;
    a Conv2d bias squares a signed sum over the L output positions, Σ_z (Σ_l δ_zl)², whose
    absolute evaluation is Σ_z (Σ_l |δ_zl|)².
    """
    out: dict[int, list] = {}

    def add(i, value, scale, k):
        if i is None:
            return
        if i in out:
            out[i][0] = out[i][0] + value
            out[i][1] = out[i][1] + scale
            out[i][2] += k
        else:
            out[i] = [value, scale, k]

    for module, a, (delta,) in seen:
        a64, d64 = a.double(), delta.double()
        n = a.shape[0]
        wi, bi = index.get(id(module.weight)), None
        if module.bias is not None:
            bi = index.get(id(module.bias))
        if isinstance(module, nn.Conv2d):
            L = d64.shape[2] * d64.shape[3]
            padding = module.padding
            if padding == "same":  # odd kernels, stride 1: (k - 1) / 2 · dilation each side
                padding = [
                    (k - 1) // 2 * d
                    for k, d in zip(module.kernel_size, module.dilation, strict=True)
                ]
            w = torch.ops.aten.convolution_backward(
                d64.square(),
                a64.square(),
                module.weight.double(),
                None,
                module.stride,
                padding,
                module.dilation,
                False,
                [0],
                module.groups,
                (False, True, False),
            )[1]
            # squares (2), product (1), a sum of n·L terms per weight element
            add(wi, w, w, n * L + 3)
            s = d64.sum((2, 3))
            add(bi, s.square().sum(0), d64.abs().sum((2, 3)).square().sum(0), L + n + 1)
        else:
            w = d64.square().t() @ a64.square()
            add(wi, w, w, n + 3)
            b = d64.square().sum(0)
            add(bi, b, b, n + 2)
    # one more addition per backward pass after the first (the running sums)
    return {i: (v, s, k + 1) for i, (v, s, k) in out.items()}


def test_direct_squared_sums_agree_with_the_shared_hooks_within_float32_rounding():
    """The direct products and the shared per-worker code compute the same sums in another
    order (one ``mm`` or ``convolution_backward`` against a batched product): they agree to
    within the float32 rounding bound of the computation, on any CPU.

    Each path's result is within gamma_k · |p|(|x|) of the exact value (Higham, Lemma 3.1 and
    eq. 3.5: a sum of products evaluated in any order), so the two paths differ by at most twice
    that. Layers the direct path does not serve run the same code on the same inputs in both
    classes and are equal bit for bit (one machine, one code path)."""
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
    index = {id(p): i for i, p in enumerate(model.parameters())}
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 2, 8, 8, generator=g), torch.randint(0, 2, (6,), generator=g)
    sums, references = [], []
    for cls in (SqsumHooks, DirectSqsumHooks):
        hooks = cls(model, "fast", "float32")
        seen, handles = _capture_layer_io(model)
        for _ in range(2):  # two backward passes: the sums accumulate alike
            model.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
        for h in handles:
            h.remove()
        hooks.remove()
        sums.append(hooks.sums)
        references.append(_reference_sums(seen, index))
        assert hooks.backward_calls == 2 * 5
    assert sorted(sums[0]) == sorted(sums[1]) == list(range(8))
    # the layers and their inputs are the same in both runs (a deterministic forward)
    assert sorted(references[0]) == sorted(references[1]) == [0, 1, 4, 5, 6, 7]
    for i, want in sums[0].items():
        got = sums[1][i].reshape(want.shape)
        assert want.abs().sum() > 0, i
        if i not in references[0]:  # GroupNorm: the shared code in both classes
            assert torch.equal(got, want), i
            continue
        exact, scale, k = references[0][i]
        bound = _gamma(k) * scale.reshape(want.shape) + k * 2.0**-149  # + subnormal spacing
        for path in (want, got):
            assert ((path.double() - exact.reshape(want.shape)).abs() <= bound).all(), i
        # the bound is tight enough to matter: far below the values themselves
        assert (bound <= 1e-4 * scale.reshape(want.shape) + 1e-30).all(), i


def test_the_bound_is_a_high_quantile_of_recent_messages_with_headroom():
    from vgcsim.core import bounded as dh

    # 16 messages 100, 200, ..., 1600 bytes: the 0.75 quantile is the 13th (1300 B),
    # + 10 % = 1430, rounded up to 8 bytes = 1432; the largest alone would give 1760.
    history = [100 * k for k in range(16, 0, -1)]
    assert (dh.BOUND_QUANTILE, dh.BOUND_HEADROOM, dh.BOUND_ALIGN) == (0.75, 1.1, 8)
    assert dh.message_bound_bytes(history) == 1432
    assert dh.message_bound_bytes([10]) == 16  # one message: itself + 10 %, aligned
    assert dh.message_bound_bytes([8, 8, 8, 4000]) == 4400  # the quantile of four is the largest
