"""A recording's training state, saved with each closed chunk so that ``record --resume``
continues an interrupted run exactly where its last chunk ended.

The state is what the next step depends on: the net's parameters, the optimizer's moments
and step counts, the learning-rate schedule's position, every worker's compressor state
(residual ``r``, variance ``v``), the data sampler's order and position, and every random
generator (the recorder's own, torch's, numpy's and Python's global ones).

No pickle: tensors go to ``state.pt`` (``torch.save`` of a flat ``{name: tensor}`` dict, read
back with ``torch.load(weights_only=True)``, which refuses anything but tensors and plain
containers) and everything else to ``state.json``. :class:`vgcsim.traces.io.TraceWriter`
writes both into the chunk's checkpoint folder before the chunk commits.
"""

from __future__ import annotations

import io
import json
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vgcsim.core.errors import TraceError

#: the two files of a checkpoint folder
TENSORS_FILE = "state.pt"
SCALARS_FILE = "state.json"
#: bumped when the layout of the two files changes
STATE_FORMAT = 1


def save_state(folder: Path, tensors: dict[str, torch.Tensor], scalars: dict[str, Any]) -> None:
    """Write ``tensors`` (CPU copies) and ``scalars`` (JSON) into ``folder``."""
    flat = {name: t.detach().to("cpu", copy=True) for name, t in tensors.items()}
    # Serialised in memory first: torch.save reports a failed write (a full disk) as a
    # RuntimeError, a plain file write as the OSError the trace writer handles.
    buffer = io.BytesIO()
    torch.save(flat, buffer)
    with open(folder / TENSORS_FILE, "wb") as fh:
        fh.write(buffer.getbuffer())
    text = json.dumps({"format": STATE_FORMAT, **scalars})
    (folder / SCALARS_FILE).write_text(text + "\n", encoding="utf-8")


def load_state(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors and scalars :func:`save_state` wrote (:class:`TraceError` when unreadable)."""
    try:
        with open(folder / TENSORS_FILE, "rb") as fh:
            tensors = torch.load(fh, map_location="cpu", weights_only=True)
        scalars = json.loads((folder / SCALARS_FILE).read_text(encoding="utf-8"))
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as exc:
        raise TraceError(f"checkpoint {folder} is unreadable ({exc})") from None
    if not (
        isinstance(tensors, dict)
        and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items())
    ):
        raise TraceError(f"checkpoint {folder / TENSORS_FILE} is not a table of tensors")
    if not isinstance(scalars, dict) or scalars.get("format") != STATE_FORMAT:
        raise TraceError(
            f"checkpoint {folder / SCALARS_FILE} has format {scalars.get('format')!r}, "
            f"this vgcsim reads {STATE_FORMAT}; record the run again"
            if isinstance(scalars, dict)
            else f"checkpoint {folder / SCALARS_FILE} is not a JSON object"
        )
    return tensors, scalars


def prefixed(prefix: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` under ``prefix/`` (one namespace per owner in the flat file)."""
    return {f"{prefix}/{k}": v for k, v in tensors.items()}


def unprefixed(prefix: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors saved under ``prefix/``, without it."""
    head = prefix + "/"
    return {k[len(head) :]: v for k, v in tensors.items() if k.startswith(head)}


# -- optimizer and schedule ---------------------------------------------------------------------


def optimizer_state(
    optimizer: torch.optim.Optimizer,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimizer's state dict split into tensors and JSON."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    other: dict[str, dict[str, Any]] = {}
    for pid, entry in sd["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{pid}/{key}"] = value
            else:
                other.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "state": other}


def load_optimizer_state(
    optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], scalars: dict[str, Any]
) -> None:
    """Inverse of :func:`optimizer_state` (tuples, which JSON makes lists, come back)."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        pid, key = name.split("/", 1)
        state.setdefault(int(pid), {})[key] = value
    for pid, entry in scalars["state"].items():
        state.setdefault(int(pid), {}).update(entry)
    groups = []
    for saved, current in zip(scalars["param_groups"], optimizer.param_groups, strict=True):
        groups.append(
            {
                k: tuple(v) if isinstance(current.get(k), tuple) and isinstance(v, list) else v
                for k, v in saved.items()
            }
        )
    optimizer.load_state_dict({"state": state, "param_groups": groups})


# -- global generators --------------------------------------------------------------------------


def global_rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """torch's, numpy's and Python's global generator states."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, words, gauss = random.getstate()
    return {"torch": torch.get_rng_state()}, {
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        "python": [version, list(words), gauss],
    }


def set_global_rng_state(tensors: dict[str, torch.Tensor], scalars: dict[str, Any]) -> None:
    """Inverse of :func:`global_rng_state`."""
    torch.set_rng_state(tensors["torch"])
    kind, keys, pos, has_gauss, cached = scalars["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, words, gauss = scalars["python"]
    random.setstate((version, tuple(words), gauss))
