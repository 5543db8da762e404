"""Networks for trace recording (registry :data:`NETS`), plain torch, no BatchNorm.

Per-sample gradients (the variance compressor's Σ_z (∇f_z)²) are ill-defined with
BatchNorm, so normalisation is GroupNorm throughout. Every builder takes
``(input_shape, num_classes, width)``; ``width`` scales channel counts.

* ``mlp``: Flatten → Linear(256w) → ReLU → Linear(128w) → ReLU → Linear(classes).
* ``small_cnn``: Conv3×3(16w) → ReLU → MaxPool2 → Conv3×3(32w) → ReLU → AdaptiveMaxPool(4)
  → Linear(64w) → ReLU → Linear(classes).
* ``vgg_like``: the paper's VGG-like CIFAR-10 net (Chainer's CIFAR example VGG): conv3×3
  blocks (64, 64) (128, 128) (256, 256, 256) (512, 512, 512) (512, 512, 512), each conv
  without bias + GroupNorm + ReLU, max-pool after each block (while the map is larger than
  1×1), then Linear(512, 512) → ReLU → Linear(512, classes). The original's BatchNorm and
  dropout are replaced by GroupNorm and nothing. Layer list: ``traces.synth.vgg_like_layers``.
* ``resnet20``: CIFAR ResNet-20 (He et al. 2016, §4.2): conv3×3(16) then 3 stages × 3 basic
  blocks (16, 32, 64 channels, stride 2 between stages, 1×1 projection shortcuts),
  GroupNorm, global average pool, Linear(classes).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from traces.errors import ConfigError, unknown_name
from traces.synth import VGG_LIKE_BLOCKS


def _ch(c: int, width: float) -> int:
    return max(1, int(round(c * width)))


def _norm(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(math.gcd(c, 32), c)


def mlp(input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> nn.Module:
    n_in = math.prod(input_shape)
    h1, h2 = _ch(256, width), _ch(128, width)
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(n_in, h1),
        nn.ReLU(),
        nn.Linear(h1, h2),
        nn.ReLU(),
        nn.Linear(h2, num_classes),
    )


def small_cnn(input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> nn.Module:
    c_in = input_shape[0]
    c1, c2, h = _ch(16, width), _ch(32, width), _ch(64, width)
    return nn.Sequential(
        nn.Conv2d(c_in, c1, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveMaxPool2d(4),
        nn.Flatten(),
        nn.Linear(c2 * 16, h),
        nn.ReLU(),
        nn.Linear(h, num_classes),
    )


class _ConvNormReLU(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.norm = _norm(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.norm(self.conv(x)))


class VGGLike(nn.Module):
    """The VGG-like CIFAR-10 net (see module docstring); parameter names match the synth list."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> None:
        super().__init__()
        layers = []
        self.block_ends: set[int] = set()
        c_in = input_shape[0]
        for block in VGG_LIKE_BLOCKS:
            for c in block:
                layers.append(_ConvNormReLU(c_in, _ch(c, width)))
                c_in = _ch(c, width)
            self.block_ends.add(len(layers) - 1)
        self.features = nn.ModuleList(layers)
        hidden = _ch(512, width)
        self.classifier = nn.ModuleList([nn.Linear(c_in, hidden), nn.Linear(hidden, num_classes)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.features):
            x = layer(x)
            if i in self.block_ends and x.shape[-1] > 1:
                x = F.max_pool2d(x, 2)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.classifier[1](F.relu(self.classifier[0](x)))


def vgg_like(input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> nn.Module:
    return VGGLike(input_shape, num_classes, width)


class _BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = _norm(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), _norm(c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(nn.Module):
    """CIFAR ResNet-20 with GroupNorm (see module docstring)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> None:
        super().__init__()
        c = [_ch(16, width), _ch(32, width), _ch(64, width)]
        self.conv = nn.Conv2d(input_shape[0], c[0], 3, padding=1, bias=False)
        self.norm = _norm(c[0])
        blocks = []
        c_in = c[0]
        for stage, c_out in enumerate(c):
            for b in range(3):
                blocks.append(_BasicBlock(c_in, c_out, 2 if (stage > 0 and b == 0) else 1))
                c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.conv(x)))
        x = self.blocks(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet20(input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> nn.Module:
    return ResNet20(input_shape, num_classes, width)


#: net name -> builder(input_shape, num_classes, width)
NETS: dict[str, Callable[..., nn.Module]] = {
    "mlp": mlp,
    "small_cnn": small_cnn,
    "vgg_like": vgg_like,
    "resnet20": resnet20,
}


def build_net(
    name: str, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0
) -> nn.Module:
    """Build a registered net; unknown names list the valid ones."""
    if name not in NETS:
        raise unknown_name("model", name, NETS)
    if not width > 0:
        raise ConfigError(f"model.width must be > 0, got {width}")
    net = NETS[name](tuple(input_shape), num_classes, width)
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules()):
        raise AssertionError(f"net {name} uses BatchNorm; per-sample gradients need GroupNorm")
    return net


def flops_per_sample(
    model: nn.Module, input_shape: tuple[int, ...], loss_fn: Callable, num_classes: int
) -> float:
    """Forward+backward FLOPs of one sample, counted by ``torch.utils.flop_counter``."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros((2, *input_shape))
    y = torch.zeros(2, dtype=torch.int64)
    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        loss_fn(model(x), y).mean().backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / 2.0
