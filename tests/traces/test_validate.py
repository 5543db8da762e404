"""validate's invariants: each violation is caught with a clear message; info summarises."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.errors import TraceError
from vgcsim.traces.io import read_trace
from vgcsim.traces.synth import SynthConfig, synth_trace
from vgcsim.traces.validate import check_trace, trace_info, validate_trace


@pytest.fixture(scope="module")
def synth_run(tmp_path_factory):
    cfg = SynthConfig(layers="vgg_like", workers=2, steps=6, density=0.01, chunk_steps=3)
    return synth_trace(cfg, tmp_path_factory.mktemp("v") / "run")


def _copy(src, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def _rewrite_payloads(run, fn):
    parts = sorted((run / "payloads").glob("part-*.parquet"))
    for part in parts:
        df = pd.read_parquet(part)
        fn(df)
        df.to_parquet(part, index=False)


def test_valid_trace_passes(synth_run):
    assert check_trace(read_trace(synth_run)) == []


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda df: df.__setitem__("sent", df["numel"] + 1), "0 <= sent <= numel"),
        (
            lambda df: df.__setitem__("bits_packed32", df["bits_packed32"] + 10_000),
            "packed32 size formula",
        ),
        (lambda df: df.__setitem__("bits_coo64", df["bits_coo64"] // 3), "coo64 size formula"),
        (lambda df: df.__setitem__("numel", df["numel"] + 1), "header's layer numel"),
        (lambda df: df.__setitem__("worker", 7), "worker outside"),
    ],
)
def test_payload_violations(synth_run, tmp_path, mutate, message):
    run = _copy(synth_run, tmp_path)
    _rewrite_payloads(run, mutate)
    with pytest.raises(TraceError, match=message):
        validate_trace(run)


def test_missing_step_and_nan(synth_run, tmp_path):
    run = _copy(synth_run, tmp_path)
    part = run / "steps" / "part-000000.parquet"
    df = pd.read_parquet(part)
    df.loc[1, "loss"] = float("nan")
    df.drop(index=2).to_parquet(part, index=False)
    problems = " | ".join(check_trace(read_trace(run, check=False)))
    assert "not contiguous" in problems and "NaN" in problems
    # every reader refuses it, in one line naming the trace and the first rule it breaks
    with pytest.raises(TraceError, match=r"copy is not a valid trace: steps column loss") as err:
        read_trace(run)
    assert "\n" not in str(err.value) and "4 more" in str(err.value)


def test_header_inconsistency(synth_run, tmp_path):
    run = _copy(synth_run, tmp_path)
    h = json.loads((run / "header.json").read_text())
    h["dense_bytes_per_step"] += 4
    (run / "header.json").write_text(json.dumps(h))
    with pytest.raises(TraceError, match="dense_bytes_per_step"):
        validate_trace(run)


def test_cli_validate_exit_codes(synth_run, tmp_path, capsys):
    assert main(["trace", "validate", str(synth_run)]) == 0
    run = _copy(synth_run, tmp_path)
    part = run / "payloads" / "part-000001.parquet"
    part.write_bytes(part.read_bytes()[:100])  # truncated chunk
    assert main(["trace", "validate", str(run)]) == 2
    assert "truncated or corrupt" in capsys.readouterr().err
    assert main(["trace", "validate", str(tmp_path / "nothing")]) == 2


def test_info_json(synth_run, capsys):
    assert main(["trace", "info", str(synth_run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["steps"] == 6 and info["workers"] == 2 and info["synthetic"] is True
    assert info["compression_ratio"]["packed32"] > 50
    assert len(info["per_layer"]) == 43
    assert main(["trace", "info", str(synth_run), "--per-layer"]) == 0
    assert "features.0.conv.weight" in capsys.readouterr().out
    assert trace_info(read_trace(synth_run))["density"] == pytest.approx(0.01, rel=0.3)


def test_header_only_trace_is_invalid_not_a_crash(synth_run, tmp_path, capsys):
    # a recording stopped before its first chunk leaves header.json alone; validate crashed
    # with an IndexError on the empty payload table
    run = tmp_path / "header_only"
    run.mkdir()
    shutil.copy(synth_run / "header.json", run / "header.json")
    assert main(["trace", "validate", str(run)]) == 2
    out = capsys.readouterr()
    assert "no recorded steps" in out.out + out.err and "Traceback" not in out.err


def test_info_json_is_strict_json_when_a_ratio_is_infinite(synth_run, tmp_path, capsys):
    # an encoding that sent no bits has ratio inf; json.dumps wrote the non-JSON token
    # Infinity that jq and browsers reject. (An encoding without a size formula may be 0 bits.)
    run = _copy(synth_run, tmp_path)
    h = json.loads((run / "header.json").read_text())
    h["encodings"] = ["zero"]
    h["primary_encoding"] = "zero"
    (run / "header.json").write_text(json.dumps(h))
    _rewrite_payloads(run, lambda df: df.__setitem__("bits_zero", 0))
    assert main(["trace", "info", str(run), "--json"]) == 0

    def reject(token):
        raise ValueError(f"non-JSON token {token}")

    info = json.loads(capsys.readouterr().out, parse_constant=reject)
    assert set(info["compression_ratio"].values()) == {"inf"}
