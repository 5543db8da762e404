"""The DDP hook on CUDA gradients, one rank (skipped without a GPU; CI has none).

One GPU allows one NCCL rank (NCCL refuses two ranks on one device), so these runs are DDP
with world size 1 in this process, checked against references that hold bit for bit:

* at α = 0 with fp32 values the hook sends every element exactly, so training equals plain
  DDP on the same GPU (NCCL, and gloo, whose all_gather the hook stages through the CPU);
* at α = 2 every message the hook built on the GPU equals, byte for byte, the CPU codec's
  (torch and NumPy) on the same gradients and squared sums, replayed step after step with
  the error feedback and variance state carried over.
"""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from vgcsim.ddp import get_compressor, register_vgc_hook
from vgcsim.traces.compression import torch_codec
from vgcsim.traces.training.distributed_launch import free_port

pytestmark = [
    pytest.mark.distributed,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

BATCH, STEPS, SEED = 16, 5, 3


@pytest.fixture(autouse=True)
def _deterministic_gpu():
    # Two runs compared bit for bit need the same convolution algorithms every time.
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


def world_of_one(backend: str) -> None:
    if backend == "nccl" and not dist.is_nccl_available():
        pytest.skip("this torch build has no NCCL")
    torch.cuda.set_device(0)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{free_port()}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=60),
    )


def build_model() -> nn.Module:
    torch.manual_seed(SEED)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.Tanh(),  # no exactly-zero gradients: at α = 0 every element is sent
        nn.Flatten(),
        nn.Linear(4 * 8 * 8, 16),
        nn.Tanh(),
        nn.Linear(16, 10),
    ).cuda()


def batches():
    g = torch.Generator().manual_seed(SEED)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 1, 8, 8, generator=g)
        y = torch.randint(0, 10, (BATCH,), generator=g)
        yield x.cuda(), y.cuda()


def train(compressor=None) -> tuple[torch.Tensor, list[int]]:
    """STEPS SGD steps of a DDP model on GPU 0; flat parameters after, elements sent per step."""
    model = build_model()
    ddp = DDP(model, device_ids=[0])
    state = None
    if compressor is not None:
        state = register_vgc_hook(ddp, compressor, batch_size=BATCH)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    sent = []
    for x, y in batches():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        if state is not None:
            sent.append(sum(state.stats.sent.values()))
    torch.cuda.synchronize()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu(), sent


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_alpha_zero_with_fp32_values_is_plain_ddp_on_the_gpu(backend):
    world_of_one(backend)
    try:
        plain, _ = train()
        hooked, sent = train(get_compressor("variance", alpha=0.0, values="fp32"))
    finally:
        dist.destroy_process_group()
    numel = sum(p.numel() for p in build_model().parameters())
    assert sent == [numel] * STEPS  # every element crossed the wire, every step
    assert torch.equal(hooked, plain)
    first = torch.cat([p.detach().reshape(-1) for p in build_model().parameters()]).cpu()
    assert not torch.equal(plain, first)  # the model moved


def test_gpu_messages_equal_the_cpu_codec_on_the_same_gradients(monkeypatch):
    calls = []
    gpu_compress = torch_codec.compress_bucket

    def spy(comp, grad, sqsum, bucket, *, batch_size, impl="auto"):
        inputs = grad.detach().cpu().clone(), sqsum.detach().cpu().clone()
        words, lengths, sent = gpu_compress(comp, grad, sqsum, bucket, batch_size=batch_size)
        calls.append((bucket.layers, bucket.numels, *inputs, words.device.type, words.cpu()))
        return words, lengths, sent

    monkeypatch.setattr(torch_codec, "compress_bucket", spy)
    comp = get_compressor("variance", alpha=2.0)
    world_of_one("nccl")
    try:
        _, sent = train(comp)
    finally:
        dist.destroy_process_group()
    numel = sum(p.numel() for p in build_model().parameters())
    assert all(0 < s < numel for s in sent)
    assert calls and {c[4] for c in calls} == {"cuda"}
    for impl in ("torch", "numpy"):
        states, buckets = {}, {}
        for layers, numels, grad, sq, _, words in calls:
            for layer, n in zip(layers, numels, strict=True):
                states.setdefault(layer, comp.init_state(n))
            bucket = buckets.get(layers)
            if bucket is None:  # DDP rebuilds its buckets after the first step
                bucket = torch_codec.bucket_state(
                    [states[i] for i in layers], layers, torch.device("cpu")
                )
                buckets = {k: b for k, b in buckets.items() if set(k).isdisjoint(layers)}
                buckets[layers] = bucket
            cpu_words, _, _ = gpu_compress(comp, grad, sq, bucket, batch_size=BATCH, impl=impl)
            assert torch.equal(cpu_words, words), impl
