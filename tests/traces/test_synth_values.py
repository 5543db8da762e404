"""trace synth and simulate refuse out-of-range settings up front, in one line (issue
reproductions 7 and 9): no traceback, no trace that validates and predicts nonsense, no
allocation that cannot fit."""

from __future__ import annotations

import pytest

from vgcsim.cli import main
from vgcsim.core import memory
from vgcsim.traces.synth import SynthConfig, estimate_bytes, load_layers


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("chunk_steps=0", "chunk_steps must be >= 1"),
        ("batch_size_per_worker=-5", "batch_size_per_worker must be >= 1"),
        ("flops_per_sample=nan", "flops_per_sample must be a finite number > 0"),
        ("flops_per_sample=-1", "flops_per_sample must be a finite number > 0"),
    ],
)
def test_synth_settings_out_of_range(tmp_path, capsys, setting, needle):
    out = tmp_path / "t"
    assert (
        main(
            [
                "trace",
                "synth",
                "--layers",
                "vgg_like",
                "--steps",
                "2",
                "--set",
                setting,
                "-o",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not (out / "header.json").exists()


def test_synth_refuses_a_trace_larger_than_memory_with_the_estimate(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2**30)
    out = tmp_path / "t"
    assert main(["trace", "synth", "--workers", "1000000", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "100 steps x 1,000,000 workers x 161 layers needs about" in err
    assert "more than the 1.0 GiB available" in err
    assert not out.exists()


def test_the_estimate_counts_rows_and_columns():
    layers, _ = load_layers("vgg_like")
    cfg = SynthConfig(
        layers="vgg_like",
        workers=4,
        steps=10,
        chunk_steps=5,
        encodings=("packed32",),
        primary_encoding="packed32",
    )
    rows = 10 * 4 * len(layers)
    assert estimate_bytes(cfg, layers, ("packed32",)) == 2 * 8 * 6 * rows  # read whole, twice
    # gap-coded encodings draw one gap per sent element: a dense compressor sends them all
    dense = SynthConfig(layers="vgg_like", workers=4, steps=1, compressor="dense")
    numel = sum(layer["numel"] for layer in layers)
    assert estimate_bytes(dense, layers, ("gap_elias_gamma",)) >= 3 * 8 * 4 * numel


def test_a_small_synth_is_not_refused(tmp_path):
    assert (
        main(["trace", "synth", "--layers", "vgg_like", "--steps", "2", "-o", str(tmp_path / "t")])
        == 0
    )
    assert main(["trace", "validate", str(tmp_path / "t")]) == 0


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("jitter=1e308", "jitter must be a number in [0, 10]"),
        ("jitter=nan", "jitter"),
        ("bucket_bytes=inf", "bucket_bytes"),
    ],
)
def test_simulate_settings_out_of_range(tmp_path, capsys, setting, needle):
    argv = [
        "simulate",
        "tests/data/sample_trace",
        "--cluster",
        "10GbE",
        "--world-sizes",
        "2",
        "--set",
        setting,
        "-o",
        str(tmp_path / "s"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
