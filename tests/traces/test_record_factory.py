"""Recording a user's own model and data (``MODULE:FUNCTION`` factories): from the command
line with a factory module written to a temporary folder, from the notebook API, and the
one-line errors of bad names."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from vgcsim import api
from vgcsim.cli import main
from vgcsim.core.errors import ConfigError
from vgcsim.traces.io import read_trace
from vgcsim.traces.training.datasets import load_dataset

FACTORY = """
import torch
from torch import nn


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 12), nn.ReLU(), nn.Linear(12, 3))


def make_data():
    # pixel values 0..255 divided by 255, as a user's script does: no standardisation
    g = torch.Generator().manual_seed(1)
    y = torch.arange(120) % 3
    x = torch.randint(0, 256, (120, 1, 8, 8), generator=g).float() / 255.0
    return x, y


def with_batchnorm():
    return nn.Sequential(nn.Flatten(), nn.BatchNorm1d(64), nn.Linear(64, 3))


def broken():
    raise RuntimeError("no GPU here")


def two_classes():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 2))


def wrong_inputs():
    return nn.Sequential(nn.Flatten(), nn.Linear(100, 3))


def a_tuple():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 3)

        def forward(self, x):
            return self.fc(x.flatten(1)), None

    return Pair()
"""


@pytest.fixture
def factory(tmp_path, monkeypatch) -> str:
    """A factory module in the working directory, under a name no other test imports."""
    name = f"userfactory_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    return name


def test_the_command_line_records_the_users_model_on_the_users_data(factory, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["record", "--model", f"{factory}:make_model", "--dataset", f"{factory}:make_data"]
    rc = main([*argv, "--workers", "2", "--steps", "3", "--quiet", "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    trace = read_trace(out)
    assert [tuple(layer["shape"]) for layer in trace.layers] == [(12, 64), (12,), (3, 12), (3,)]
    header = json.loads((out / "header.json").read_text())
    assert header["dataset"]["name"] == f"{factory}:make_data"
    assert header["dataset"]["input_shape"] == [1, 8, 8] and header["dataset"]["num_classes"] == 3
    assert header["config"]["model"]["name"] == f"{factory}:make_model"
    assert main(["trace", "validate", str(out)]) == 0


def test_the_data_are_used_as_given(factory):
    data = load_dataset(f"{factory}:make_data", seed=0, test_fraction=0.25)
    # /255 data stay in [0, 1]: a standardised copy would have negative values
    assert float(data.x_train.min()) >= 0.0 and float(data.x_train.max()) <= 1.0
    assert len(data.x_train) + len(data.x_test) == 120 and len(data.x_test) == 30
    # stratified: every class in both parts
    assert set(data.y_test.tolist()) == set(data.y_train.tolist()) == {0, 1, 2}


def test_four_tensors_and_a_torch_dataset_are_accepted(tmp_path, monkeypatch):
    name = f"userdata_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import torch\n"
        "from torch.utils.data import TensorDataset\n"
        "def four():\n"
        "    x = torch.ones(10, 5)\n"
        "    return x, torch.zeros(10), x[:4], torch.ones(4)\n"
        "def tds():\n"
        "    return TensorDataset(torch.arange(20.0).reshape(10, 2), torch.arange(10) % 2)\n"
    )
    monkeypatch.chdir(tmp_path)
    four = load_dataset(f"{name}:four", seed=0, test_fraction=0.2)
    assert four.input_shape == (5,) and four.num_classes == 2 and len(four.x_test) == 4
    tds = load_dataset(f"{name}:tds", seed=0, test_fraction=0.2)
    assert tds.input_shape == (2,) and len(tds.x_train) == 8
    rows = np.concatenate([tds.x_train.numpy(), tds.x_test.numpy()])
    assert sorted(rows[:, 0].tolist()) == list(np.arange(0.0, 20.0, 2.0))


def test_the_notebook_api_records_a_factory(factory, tmp_path):
    run = api.record(
        out_dir=tmp_path / "api",
        overrides=[
            f"model.name={factory}:make_model",
            f"data.name={factory}:make_data",
            "workers=2",
            "steps=2",
        ],
    )
    assert read_trace(run).layers[0]["shape"] == [12, 64]


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--model", "{m}:missing", "has no 'missing'"),
        ("--model", "no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        ("--model", "{m}:", "expected MODULE:FUNCTION"),
        ("--model", "{m}:make_data", "not a torch.nn.Module"),
        ("--model", "{m}:with_batchnorm", "BatchNorm"),
        ("--model", "{m}:broken", "raised RuntimeError: no GPU here"),
        ("--dataset", "{m}:make_model", "expected a Dataset"),
        # models that do not fit the data: refused before the first step, nothing written
        ("--model", "{m}:two_classes", "returns 2 logits per sample, fewer than the dataset's 3"),
        ("--model", "{m}:wrong_inputs", "does not take inputs of shape [1, 8, 8] (RuntimeError"),
        ("--model", "{m}:a_tuple", "must return class logits [batch, classes]; it returned tuple"),
    ],
)
def test_bad_factories_are_one_line_and_exit_2(factory, tmp_path, capsys, flag, value, message):
    argv = ["record", flag, value.format(m=factory), "--steps", "1", "--quiet"]
    if flag == "--model":
        argv += ["--dataset", f"{factory}:make_data"]
    rc = main([*argv, "-o", str(tmp_path / "bad")])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "bad").exists()


def test_fractional_labels_and_mismatched_lengths_are_refused(tmp_path, monkeypatch):
    name = f"baddata_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "import torch\n"
        "def halves():\n"
        "    return torch.ones(6, 2), torch.tensor([0.5, 1, 0, 1, 0, 1])\n"
        "def short():\n"
        "    return torch.ones(6, 2), torch.zeros(5)\n"
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="not integer labels"):
        load_dataset(f"{name}:halves", seed=0, test_fraction=0.5)
    with pytest.raises(ConfigError, match="6 inputs but 5 labels"):
        load_dataset(f"{name}:short", seed=0, test_fraction=0.5)
