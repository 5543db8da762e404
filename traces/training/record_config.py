"""What a recording depends on: the torch-free config dataclasses of ``vgcsim record``.

Kept apart from the training loop so that the CLI can list and check keys without importing
torch. Names (datasets, nets, optimizers, compressors) are checked against their registries
by ``vgcsim.traces.training.record.check_config``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GRADIENT_PASSES = ("batched", "separate")
#: where emulated workers run their gradient passes ("auto": cuda when torch sees a GPU)
DEVICES = ("cpu", "cuda", "auto")


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
        if not self.lr > 0:
            raise ValueError(f"optimizer.lr must be > 0, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"optimizer.momentum must be in [0, 1), got {self.momentum}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optimizer.betas must be two numbers in [0, 1), got {self.betas}")
        if self.weight_decay < 0 or self.warmup_steps < 0:
            raise ValueError("optimizer.weight_decay and warmup_steps must be >= 0")


@dataclass(frozen=True)
class DataConfig:
    """Dataset (registry ``vgcsim.traces.training.datasets.DATASETS``) and where to find it."""

    name: str = "mnist"
    root: str | None = None
    test_fraction: float = 0.2
    download: bool = True


@dataclass(frozen=True)
class ModelConfig:
    """Network (registry ``vgcsim.traces.training.nets.NETS``); ``width`` scales channel counts."""

    name: str = "small_cnn"
    width: float = 1.0


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
    ``vgcsim.traces.compression.variance``); sq_dtype: precision of the fast estimator's Conv2d
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
        if self.eval_every < 0 or self.threads < 0:
            raise ValueError("eval_every and threads must be >= 0")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
