"""Networks for trace recording (registry :data:`NETS`), plain torch, no BatchNorm.

Per-sample gradients (the variance compressor's Σ_z (∇f_z)²) are ill-defined with
BatchNorm, so normalisation is GroupNorm throughout. Every builder takes
``(input_shape, num_classes, width)``; ``width`` scales channel counts.

The convolutional nets are shape-aware: they track the feature-map size from ``input_shape``
and give each GroupNorm as many groups as Wu & He's default (32, or fewer when the channel
count has fewer power-of-two factors) *while every group still normalises at least*
:data:`MIN_GROUP_ELEMENTS` *values per sample* (channels per group × H × W), halving the
group count until it does. Without that floor a narrow net on a small image normalises single
channels of a 1×1 map, which outputs zeros (vgg_like at width 0.25 stayed at chance on
mnist's 28×28 and digits' 8×8 images). On CIFAR-10's 32×32 images at width 1 the floor never
binds, so the paper's net is unchanged; the parameter list never depends on the group count.

* ``mlp``: Flatten → Linear(256w) → ReLU → Linear(128w) → ReLU → Linear(classes).
* ``small_cnn``: Conv3×3(16w) → ReLU → MaxPool2 → Conv3×3(32w) → ReLU → AdaptiveMaxPool(4)
  → Linear(64w) → ReLU → Linear(classes).
* ``vgg_like``: the paper's VGG-like CIFAR-10 net (Chainer's CIFAR example VGG): conv3×3
  blocks (64, 64) (128, 128) (256, 256, 256) (512, 512, 512) (512, 512, 512), each conv
  without bias + GroupNorm + ReLU, max-pool after each block (while the map is larger than
  1×1: mnist's 28×28 runs its last block at 1×1, digits' 8×8 its last two), then
  Linear(512, 512) → ReLU → Linear(512, classes). The original's BatchNorm and
  dropout are replaced by GroupNorm and nothing. Layer list: ``vgcsim.traces.synth.vgg_like_layers``.
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

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.traces.synth import VGG_LIKE_BLOCKS


def _ch(c: int, width: float) -> int:
    return max(1, int(round(c * width)))


#: smallest number of values (channels per group × H × W, one sample) a GroupNorm group
#: normalises; see the module docstring.
MIN_GROUP_ELEMENTS = 32


def norm_groups(channels: int, map_elements: int) -> int:
    """GroupNorm groups for ``channels`` channels of ``map_elements`` (H × W) values each.

    Starts from gcd(channels, 32) (Wu & He 2018's 32 groups) and halves it while a group
    would hold fewer than :data:`MIN_GROUP_ELEMENTS` values; never below one group.
    """
    g = math.gcd(channels, 32)
    while g > 1 and (channels // g) * map_elements < MIN_GROUP_ELEMENTS:
        g //= 2
    return g


def _norm(c: int, map_elements: int) -> nn.GroupNorm:
    return nn.GroupNorm(norm_groups(c, map_elements), c)


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
    def __init__(self, c_in: int, c_out: int, map_elements: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.norm = _norm(c_out, map_elements)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.norm(self.conv(x)))


class VGGLike(nn.Module):
    """The VGG-like CIFAR-10 net (see module docstring); parameter names match the synth list."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> None:
        super().__init__()
        layers = []
        # Layers after which the map is max-pooled (each block's last, while the map is > 1×1).
        self.pool_after: set[int] = set()
        c_in = input_shape[0]
        h, w = input_shape[1], input_shape[2]
        for block in VGG_LIKE_BLOCKS:
            for c in block:
                layers.append(_ConvNormReLU(c_in, _ch(c, width), h * w))
                c_in = _ch(c, width)
            if min(h, w) > 1:
                self.pool_after.add(len(layers) - 1)
                h, w = h // 2, w // 2
        self.features = nn.ModuleList(layers)
        hidden = _ch(512, width)
        self.classifier = nn.ModuleList([nn.Linear(c_in, hidden), nn.Linear(hidden, num_classes)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.features):
            x = layer(x)
            if i in self.pool_after:
                x = F.max_pool2d(x, 2)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return self.classifier[1](F.relu(self.classifier[0](x)))


def vgg_like(input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> nn.Module:
    return VGGLike(input_shape, num_classes, width)


class _BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, out_elements: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = _norm(c_out, out_elements)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = _norm(c_out, out_elements)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), _norm(c_out, out_elements)
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
        h, w = input_shape[1], input_shape[2]
        self.norm = _norm(c[0], h * w)
        blocks = []
        c_in = c[0]
        for stage, c_out in enumerate(c):
            for b in range(3):
                stride = 2 if (stage > 0 and b == 0) else 1
                # A 3×3 convolution with padding 1 and stride s maps n to ceil(n / s).
                h, w = -(-h // stride), -(-w // stride)
                blocks.append(_BasicBlock(c_in, c_out, stride, h * w))
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
    """Build a registered net, or a user's ``MODULE:FUNCTION`` factory
    (:mod:`vgcsim.traces.training.factories`; ``width`` does not apply); unknown names list
    the valid ones."""
    from vgcsim.traces.training import factories

    if factories.is_factory(name):
        return factories.build_model(name)
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
