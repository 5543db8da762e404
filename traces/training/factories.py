"""A user's own model and dataset in a recording: ``MODULE:FUNCTION`` factories.

``vgcsim record --model MODULE:FUNCTION`` (``model.name``) and ``--dataset MODULE:FUNCTION``
(``data.name``), and the same names in ``vgcsim.api.record``, record the user's own
``nn.Module`` on the user's own data instead of a registered net or dataset. MODULE is
imported as Python imports it (the current directory first, then ``sys.path``); FUNCTION is
called without arguments.

* A model factory returns an ``nn.Module`` whose forward maps a batch of the dataset's
  inputs to class logits ``[batch, classes]`` (the recorder's loss is cross-entropy).
  BatchNorm is refused (per-sample squared sums need per-sample independence: use GroupNorm).
  ``model.width`` does not apply.
* A dataset factory returns one of: a ``vgcsim.traces.training.datasets.Dataset``; a tuple
  ``(x_train, y_train, x_test, y_test)``; a tuple ``(x, y)``, split by ``data.test_fraction``
  (seeded, stratified by class); or a map-style ``torch.utils.data.Dataset`` of ``(x, y)``
  items, stacked and split the same way. Inputs are float tensors (or arrays) ``[N, ...]``,
  labels integers ``[N]`` in 0..C−1 (C = the largest label + 1). The data are used **as
  given**: no normalisation, so that the trace sends what the user's job sends (the
  registered datasets standardise each channel with training-set statistics instead).

A name that cannot be imported or called, a result of the wrong kind, or a model that does
not fit the data (:func:`check_fits`, before anything is written) is a :class:`ConfigError`
naming it (one line, exit 2 on the command line).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from vgcsim.core.errors import ConfigError

__all__ = ["build_model", "check_fits", "is_factory", "load_data", "load_factory"]


def is_factory(name: str) -> bool:
    """Whether a model or dataset name is a ``MODULE:FUNCTION`` factory."""
    return ":" in str(name)


def load_factory(spec: str, kind: str) -> Callable[[], Any]:
    """The callable named by ``spec`` = ``MODULE:FUNCTION`` (``kind``: "model" or "dataset",
    for the messages)."""
    module_name, _, attr = str(spec).partition(":")
    if not module_name or not attr or ":" in attr:
        raise ConfigError(f"{kind} factory {spec!r}: expected MODULE:FUNCTION")
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a user's module: any import-time failure is theirs to fix
        raise ConfigError(
            f"{kind} factory {spec!r}: cannot import {module_name!r} ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{kind} factory {spec!r}: {module_name} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"{kind} factory {spec!r}: {attr} is not callable")
    return target


def _call(spec: str, kind: str) -> Any:
    factory = load_factory(spec, kind)
    try:
        return factory()
    except Exception as exc:
        raise ConfigError(f"{kind} factory {spec!r} raised {type(exc).__name__}: {exc}") from None


def build_model(spec: str) -> nn.Module:
    """The ``nn.Module`` a model factory returns (checked: a module with parameters, no
    BatchNorm)."""
    net = _call(spec, "model")
    if not isinstance(net, nn.Module):
        raise ConfigError(
            f"model factory {spec!r} returned {type(net).__name__}, not a torch.nn.Module"
        )
    if not any(p.requires_grad for p in net.parameters()):
        raise ConfigError(f"model factory {spec!r} returned a module without trainable parameters")
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules()):
        raise ConfigError(
            f"model factory {spec!r}: BatchNorm layers are not supported (per-sample "
            "squared sums need samples that do not mix; use GroupNorm)"
        )
    return net


def check_fits(model: nn.Module, x: torch.Tensor, num_classes: int, what: str) -> None:
    """Refuse (ConfigError, one line) a model that does not map two of the dataset's inputs
    ``x`` to logits ``[2, C]`` with C ≥ ``num_classes``, before anything is written: the
    loss would fail inside the first step otherwise. ``what`` names the model and data."""
    try:
        with torch.no_grad():
            out = model(x[:2])
    except Exception as exc:  # a user's model: torch says why in its first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"{what}: the model does not take inputs of shape {list(x.shape[1:])} "
            f"({type(exc).__name__}: {first})"
        ) from None
    shape = list(getattr(out, "shape", []))
    if not torch.is_tensor(out) or len(shape) != 2 or shape[0] != min(2, len(x)):
        raise ConfigError(
            f"{what}: the model must return class logits [batch, classes]; it returned "
            f"{type(out).__name__} of shape {shape}"
        )
    if shape[1] < num_classes:
        raise ConfigError(
            f"{what}: the model returns {shape[1]} logits per sample, fewer than the "
            f"dataset's {num_classes} classes"
        )


def _tensor(value: Any, spec: str, what: str, dtype: torch.dtype) -> torch.Tensor:
    try:
        t = torch.as_tensor(np.asarray(value) if not torch.is_tensor(value) else value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"dataset factory {spec!r}: {what} is not an array ({exc})") from None
    if t.dim() < 1 or t.shape[0] == 0:
        raise ConfigError(f"dataset factory {spec!r}: {what} is empty")
    if dtype == torch.int64:
        if t.is_floating_point() and not torch.equal(t, t.round()):
            raise ConfigError(f"dataset factory {spec!r}: {what} are not integer labels")
        t = t.reshape(-1).to(torch.int64)
        if (t < 0).any():
            raise ConfigError(f"dataset factory {spec!r}: {what} has negative labels")
        return t
    t = t.to(torch.float32)
    if not torch.isfinite(t).all():
        raise ConfigError(f"dataset factory {spec!r}: {what} holds NaN or Inf")
    return t.contiguous()


def _stack(ds: Any, spec: str) -> tuple[Any, Any]:
    try:
        items = [ds[i] for i in range(len(ds))]
        xs = torch.stack([torch.as_tensor(item[0]) for item in items])
        ys = torch.as_tensor([int(item[1]) for item in items])
    except Exception as exc:
        raise ConfigError(
            f"dataset factory {spec!r}: its items are not (input, label) pairs "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return xs, ys


def load_data(spec: str, seed: int, test_fraction: float, split: Callable) -> Any:
    """What a dataset factory returns, checked: a ``Dataset`` as it is (anything with
    ``x_train``, ``y_train``, ``x_test``, ``y_test`` and ``num_classes``), otherwise
    ``(x_train, y_train, x_test, y_test, num_classes)`` as tensors; ``(x, y)`` are cut by
    ``split(x, y, test_fraction, seed)`` (the registered datasets' seeded stratified split,
    handed in by ``vgcsim.traces.training.datasets``). See the module docstring."""
    got = _call(spec, "dataset")
    if all(hasattr(got, a) for a in ("x_train", "y_train", "x_test", "y_test", "num_classes")):
        return got
    if isinstance(got, torch.utils.data.Dataset) and hasattr(got, "__len__"):
        got = _stack(got, spec)
    if not isinstance(got, (tuple, list)) or len(got) not in (2, 4):
        raise ConfigError(
            f"dataset factory {spec!r} returned {type(got).__name__}; expected a Dataset, "
            "(x, y), (x_train, y_train, x_test, y_test) or a map-style torch Dataset"
        )
    if len(got) == 2:
        x = _tensor(got[0], spec, "x", torch.float32)
        y = _tensor(got[1], spec, "y", torch.int64)
        if len(x) != len(y):
            raise ConfigError(f"dataset factory {spec!r}: {len(x)} inputs but {len(y)} labels")
        got = split(x.numpy(), y.numpy(), test_fraction, seed)
    xtr = _tensor(got[0], spec, "x_train", torch.float32)
    ytr = _tensor(got[1], spec, "y_train", torch.int64)
    xte = _tensor(got[2], spec, "x_test", torch.float32)
    yte = _tensor(got[3], spec, "y_test", torch.int64)
    for x, y, part in ((xtr, ytr, "train"), (xte, yte, "test")):
        if len(x) != len(y):
            raise ConfigError(
                f"dataset factory {spec!r}: {len(x)} {part} inputs but {len(y)} labels"
            )
    if xtr.shape[1:] != xte.shape[1:]:
        raise ConfigError(f"dataset factory {spec!r}: train and test inputs differ in shape")
    classes = int(max(ytr.max(), yte.max())) + 1
    return xtr, ytr, xte, yte, classes
