"""Compressed gradient exchange for ``torch.nn.parallel.DistributedDataParallel``.

The public import path of the DDP communication hook (implemented in
:mod:`vgcsim.traces.training.distributed_hook`)::

    from vgcsim.ddp import get_compressor, register_vgc_hook

    state = register_vgc_hook(ddp_model, get_compressor("variance", alpha=2.0), batch_size=B)
    # ... ordinary training loop; state.stats holds the last step's bytes and seconds

With ``trace_dir="runs/myjob"`` rank 0 writes a trace of the job (close each step with
``state.step_done(loss=...)``, time phases with ``state.timed("forward_backward")``, end
with ``state.close_trace()``; docs/distributed.md).

Importing this module imports torch.
"""

from __future__ import annotations

from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.training.distributed_hook import (
    StepCommStats,
    VGCState,
    register_vgc_hook,
    sync_gradients,
    vgc_hook,
)

__all__ = [
    "StepCommStats",
    "VGCState",
    "get_compressor",
    "register_vgc_hook",
    "sync_gradients",
    "vgc_hook",
]
