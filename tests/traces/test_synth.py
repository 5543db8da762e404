"""Synthetic traces: built-in layer lists, target ratio, seeded variation, valid output."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.traces.io import read_trace
from vgcsim.traces.synth import (
    SynthConfig,
    load_layers,
    resnet50_layers,
    synth_trace,
    vgg_like_layers,
)
from vgcsim.traces.validate import compression_ratios, validate_trace


def test_resnet50_layer_list_matches_torchvision_counts():
    layers = resnet50_layers()
    assert len(layers) == 161
    assert sum(layer["numel"] for layer in layers) == 25_557_032
    assert layers[-2]["name"] == "fc.weight" and layers[-2]["shape"] == [1000, 2048]


def test_vgg_like_layer_list():
    layers = vgg_like_layers()
    assert len(layers) == 13 * 3 + 4
    assert layers[0]["shape"] == [64, 3, 3, 3] and layers[-2]["shape"] == [10, 512]


def test_target_ratio_reached_and_marked_synthetic(tmp_path):
    cfg = SynthConfig(layers="vgg_like", workers=4, steps=12, target_ratio=500.0, chunk_steps=5)
    t = validate_trace(synth_trace(cfg, tmp_path / "s"))
    assert t.synthetic and t.header["synthetic"] is True and t.steps_count == 12
    ratio = compression_ratios(t)["packed32"]
    assert 400 < ratio < 520  # headers make it a bit lower than the target
    # per-worker variation: workers do not all send the same
    wb = t.worker_bits().to_numpy()
    assert wb.std(axis=1).mean() > 0


def test_seeded_and_deterministic(tmp_path):
    cfg = SynthConfig(layers="vgg_like", workers=3, steps=4, density=0.01)
    a = read_trace(synth_trace(cfg, tmp_path / "a")).payloads
    b = read_trace(synth_trace(cfg, tmp_path / "b")).payloads
    c = read_trace(
        synth_trace(
            SynthConfig(layers="vgg_like", workers=3, steps=4, density=0.01, seed=1), tmp_path / "c"
        )
    ).payloads
    assert a.equals(b)
    assert not np.array_equal(a["sent"].to_numpy(), c["sent"].to_numpy())


def test_exp_decay_density_falls(tmp_path):
    cfg = SynthConfig(
        layers="vgg_like",
        workers=2,
        steps=40,
        density=0.001,
        density_model="exp_decay",
        density_start=0.1,
        decay_steps=5,
    )
    t = read_trace(synth_trace(cfg, tmp_path / "d"))
    d = t.steps["density"].to_numpy()
    assert d[0] > 10 * d[-1]


def test_layer_file_and_errors(tmp_path):
    f = tmp_path / "layers.json"
    f.write_text(json.dumps([{"name": "a", "shape": [3, 4]}, 7]))
    layers, flops = load_layers(str(f))
    assert [x["numel"] for x in layers] == [12, 7] and flops is None
    with pytest.raises(UnknownNameError, match="resnet50"):
        load_layers("resnet51")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"shape": [0]}]))
    with pytest.raises(ConfigError, match="positive"):
        load_layers(str(bad))
    with pytest.raises(UnknownNameError, match="constant"):
        synth_trace(SynthConfig(layers=str(f), density_model="wavy"), tmp_path / "x")


@pytest.mark.parametrize(
    "field, value",
    [
        ("target_ratio", float("nan")),
        ("target_ratio", float("inf")),
        ("worker_cv", float("nan")),
        ("layer_cv", float("inf")),
        ("density_start", 5.0),
        ("decay_steps", float("nan")),
        ("codec_s_per_worker", -1.0),
    ],
)
def test_non_finite_or_out_of_range_values_are_rejected(field, value):
    # NaN slipped past "< 1" / "< 0" checks and crashed numpy's binomial draw later
    with pytest.raises(ValueError, match=field):
        SynthConfig(**{field: value})


def test_layer_list_that_is_not_utf8_is_a_config_error(tmp_path):
    p = tmp_path / "layers.json"
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="cannot read layer list"):
        load_layers(str(p))
