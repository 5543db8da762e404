"""Optimizers (the paper's two: Adam and momentum SGD) and learning-rate schedules, by name.

Schedules map (step, total steps) to a multiplier of the base learning rate:

* ``constant``: 1;
* ``cosine``: ½(1 + cos(π·t/T)) after a linear warm-up of ``warmup_steps``;
* ``step``: ``gamma`` ** (number of ``milestones`` ≤ step), the paper-era step decay.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.traces.training.record_config import OptimConfig


def _adam(params: Iterable[torch.nn.Parameter], cfg: OptimConfig) -> torch.optim.Optimizer:
    return torch.optim.Adam(
        params, lr=cfg.lr, betas=tuple(cfg.betas), weight_decay=cfg.weight_decay
    )


def _momentum_sgd(params: Iterable[torch.nn.Parameter], cfg: OptimConfig) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        params,
        lr=cfg.lr,
        momentum=cfg.momentum,
        nesterov=cfg.nesterov,
        weight_decay=cfg.weight_decay,
    )


#: optimizer name -> builder(params, config)
OPTIMIZERS: dict[
    str, Callable[[Iterable[torch.nn.Parameter], OptimConfig], torch.optim.Optimizer]
] = {
    "adam": _adam,
    "momentum_sgd": _momentum_sgd,
}


def _constant(step: int, total: int, cfg: OptimConfig) -> float:
    return 1.0


def _cosine(step: int, total: int, cfg: OptimConfig) -> float:
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, total - cfg.warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(step - cfg.warmup_steps, span) / span))


def _step(step: int, total: int, cfg: OptimConfig) -> float:
    return cfg.gamma ** sum(1 for m in cfg.milestones if step >= m)


#: schedule name -> multiplier(step, total_steps, config)
SCHEDULES: dict[str, Callable[[int, int, OptimConfig], float]] = {
    "constant": _constant,
    "cosine": _cosine,
    "step": _step,
}


def build_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimConfig, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Optimizer and a LambdaLR scheduler stepping once per training step."""
    if cfg.name not in OPTIMIZERS:
        raise unknown_name("optimizer", cfg.name, OPTIMIZERS)
    if cfg.schedule not in SCHEDULES:
        raise unknown_name("learning-rate schedule", cfg.schedule, SCHEDULES)
    if cfg.schedule == "step" and not cfg.milestones:
        raise ConfigError(
            "schedule 'step' needs optimizer.milestones, e.g. optimizer.milestones=100,200"
        )
    opt = OPTIMIZERS[cfg.name](params, cfg)
    rule = SCHEDULES[cfg.schedule]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: rule(s, total_steps, cfg))
    return opt, sched
