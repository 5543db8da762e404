"""What a recording depends on: the torch-free config dataclasses of ``vgcsim record``.

Kept apart from the training loop so that the CLI can list and check keys without importing
torch. Names (datasets, nets, optimizers, compressors) are checked against their registries
by ``vgcsim.traces.training.record.check_config``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

GRADIENT_PASSES = ("batched", "separate")
#: where emulated workers run their gradient passes ("auto": cuda when torch sees a GPU)
DEVICES = ("cpu", "cuda", "auto")
#: seeds are in [0, 2**63): torch's generators take 64-bit seeds and derived seeds add to it
SEED_LIMIT = 2**63
#: torch CPU threads a recording may ask for
MAX_THREADS = 1024


def _finite(name: str, value: float, *, low: float, high: float = math.inf, low_open=False) -> None:
    """Refuse ``value`` unless it is a finite number in [low, high] (low excluded with
    ``low_open``): NaN and Inf fail every comparison they should pass."""
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > low if low_open else value >= low)
        and value <= high
    )
    if not ok:
        side = "(" if low_open else "["
        top = "inf)" if math.isinf(high) else f"{high:g}]"
        raise ValueError(f"{name} must be a finite number in {side}{low:g}, {top}, got {value!r}")


@dataclass(frozen=True)
class OptimConfig:
    """Optimizer and schedule. ``momentum`` applies to momentum_sgd; ``betas`` to adam."""

    name: str = "adam"
    lr: float = 1e-3
    momentum: float = 0.9
    nesterov: bool = False
    betas: tuple[float, ...] = (0.9, 0.999)
    weight_decay: float = 0.0
    schedule: str = "cosine"
    warmup_steps: int = 0
    milestones: tuple[int, ...] = ()
    gamma: float = 0.1

    def __post_init__(self) -> None:
        _finite("optimizer.lr", self.lr, low=0, low_open=True)
        _finite("optimizer.momentum", self.momentum, low=0, high=1)
        if not self.momentum < 1:
            raise ValueError(f"optimizer.momentum must be in [0, 1), got {self.momentum}")
        if len(self.betas) != 2 or not all(
            isinstance(b, (int, float)) and 0 <= b < 1 for b in self.betas
        ):
            raise ValueError(f"optimizer.betas must be two numbers in [0, 1), got {self.betas}")
        _finite("optimizer.weight_decay", self.weight_decay, low=0)
        _finite("optimizer.gamma", self.gamma, low=0, low_open=True)
        if self.warmup_steps < 0:
            raise ValueError(f"optimizer.warmup_steps must be >= 0, got {self.warmup_steps}")
        if not all(isinstance(m, int) and m >= 0 for m in self.milestones):
            raise ValueError(
                f"optimizer.milestones must be steps >= 0, got {list(self.milestones)}"
            )


@dataclass(frozen=True)
class DataConfig:
    """Dataset (registry ``vgcsim.traces.training.datasets.DATASETS``) and where to find it."""

    name: str = "mnist"
    root: str | None = None
    test_fraction: float = 0.2
    download: bool = True

    def __post_init__(self) -> None:
        _finite("data.test_fraction", self.test_fraction, low=0, high=0.9, low_open=True)


@dataclass(frozen=True)
class ModelConfig:
    """Network (registry ``vgcsim.traces.training.nets.NETS``); ``width`` scales channel counts."""

    name: str = "small_cnn"
    width: float = 1.0

    def __post_init__(self) -> None:
        # A width too large for memory is refused with an estimate once the data is known
        # (vgcsim.traces.training.loop.check_memory).
        _finite("model.width", self.width, low=0, low_open=True)


@dataclass(frozen=True)
class CompressorConfig:
    """Compressor by registry name; every other key is a hyperparameter (e.g. alpha=1.5)."""

    EXTRA_KEYS_FIELD = "params"
    name: str = "variance"
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RecordConfig:
    """Everything a recorded trace depends on (written in full into its header).

    workers: W emulated workers; batch_size: samples per worker per step; estimator: the
    squared-gradient estimator when the compressor needs one ("exact" or "fast", see
    ``vgcsim.traces.compression.sqsum_estimators``); sq_dtype: precision of the fast estimator's Conv2d
    squared-sum convolution ("auto": bfloat16 on CPUs with native bf16 dot products, else
    float32; "float32"; "bfloat16"), resolved before recording so the header names what
    ran; gradient_pass: "batched" (one pass for all workers,
    the faster one in ``python benchmarks/recording.py``) or "separate" (W passes);
    threads: torch CPU threads while recording (1 by default: small nets gain little from
    more, and oversubscribed cores lose a lot; 0 keeps torch's default);
    device: where emulated workers run forward, backward and the estimator ("cpu",
    "cuda", or "auto": cuda when available), resolved before recording; compression runs
    on the CPU, where the wire encoders are (torch.distributed: the backend decides);
    rank_time_every: steps between timings of one worker's own forward + backward at
    batch B (the ``rank_compute_s`` column; NaN on the other steps);
    eval_every: steps between evaluations (0: only at the end);
    eval_samples: training samples (fixed subset) and test samples used per evaluation.
    """

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimConfig = field(default_factory=OptimConfig)
    compressor: CompressorConfig = field(default_factory=CompressorConfig)
    workers: int = 4
    batch_size: int = 32
    steps: int = 300
    seed: int = 0
    estimator: str = "exact"
    sq_dtype: str = "auto"
    gradient_pass: str = "batched"
    eval_every: int = 50
    eval_samples: int = 1000
    chunk_steps: int = 50
    probe_every: int = 25
    threads: int = 1
    device: str = "cpu"
    rank_time_every: int = 10

    def __post_init__(self) -> None:
        for name in (
            "workers",
            "batch_size",
            "steps",
            "chunk_steps",
            "eval_samples",
            "probe_every",
            "rank_time_every",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("eval_every", "threads"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.threads > MAX_THREADS:
            raise ValueError(f"threads must be <= {MAX_THREADS}, got {self.threads}")
        if not 0 <= self.seed < SEED_LIMIT:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")
