"""``trace validate`` size formulas and messages, and ``trace info`` numbers, by hand.

The size formulas are the wire formats of ``vgcsim.traces.wire.encoders`` written out
(u32 layer + u32 count (+ f32 scale) header = 64 (96) bits; values as 4-bit codes or fp32):

    packed32   exactly 96 + 32·sent  (+ 32 per 2^28-element chunk when a layer has several)
    coo64      64 + 64·sent .. 96 + 64·sent
    bitmap     64 + numel + 4·sent .. 96 + numel + 32·sent + 16
    gap codes  64 + 5·sent .. 96 + 32·sent + ⌈sent · L(log2(numel / sent))⌉ + 16,
               L_γ(x) = 2x + 1, L_δ(x) = x + 2·log2(x + 1) + 1
    qsgd       64 .. 64 + 128·numel + 16
    fp32/fp16  exactly 64 + 32·numel / 64 + 16·numel

``trace info`` on a hand-built trace of 2 layers × 2 workers × 3 steps: every figure is
worked out below from the rows.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest

from vgcsim.core.errors import TraceError
from vgcsim.traces.io import Trace, read_trace
from vgcsim.traces.validate import (
    ENCODING_BOUNDS,
    check_trace,
    compression_ratios,
    density_over_time,
    layer_ratios,
    trace_info,
    validate_trace,
)

SAMPLE = "tests/data/sample_trace"


def _bounds(enc, numel, sent):
    lo, hi = ENCODING_BOUNDS[enc](np.array([float(numel)]), np.array([float(sent)]))
    return float(lo[0]), float(hi[0])


@pytest.mark.parametrize(
    ("enc", "numel", "sent", "lo", "hi"),
    [
        ("packed32", 1000, 7, 96 + 32 * 7, 96 + 32 * 7),
        ("packed32", 2**28, 3, 96 + 96, 96 + 96),  # one chunk: no chunk counts
        ("packed32", 2**28 + 1, 3, 96 + 96 + 64, 96 + 96 + 64),  # two chunks: two counts
        ("coo64", 1000, 7, 64 + 64 * 7, 96 + 64 * 7),
        ("bitmap", 1000, 7, 64 + 1000 + 28, 96 + 1000 + 224 + 16),
        ("fp32", 10, 3, 64 + 320, 64 + 320),
        ("fp16", 10, 3, 64 + 160, 64 + 160),
        ("qsgd_fixed", 10, 3, 64, 64 + 1280 + 16),
        ("qsgd_elias", 10, 3, 64, 64 + 1280 + 16),
        # numel / sent = 256: log2 = 8, L_γ = 17
        ("gap_elias_gamma", 1024, 4, 64 + 20, 96 + 128 + 4 * 17 + 16),
        # L_δ(8) = 8 + 2·log2(9) + 1 = 15.339...: ⌈4 × 15.339⌉ = 62
        ("gap_elias_delta", 1024, 4, 64 + 20, 96 + 128 + 62 + 16),
        # nothing sent: no gap codes at all
        ("gap_elias_gamma", 1024, 0, 64, 96 + 16),
        ("gap_elias_delta", 1024, 0, 64, 96 + 16),
        # everything sent: every gap is 1 (log2 ratio 0), one bit per gap
        ("gap_elias_gamma", 16, 16, 64 + 80, 96 + 512 + 16 + 16),
        ("gap_elias_delta", 16, 16, 64 + 80, 96 + 512 + 16 + 16),
        # numel / sent = 3: log2 3 = 1.585, L_γ = 4.17 -> ⌈3 × 4.17⌉ = 13
        ("gap_elias_gamma", 9, 3, 64 + 15, 96 + 96 + 13 + 16),
        # one value: one gap of up to 1024, log2 = 10, L_γ = 21
        ("gap_elias_gamma", 1024, 1, 64 + 5, 96 + 32 + 21 + 16),
        # a negative count (itself a violation): no gap to code, ratio taken as 1 (L = 1)
        ("gap_elias_gamma", 10, -1, 64 - 5, 96 - 32 - 1 + 16),
        # an empty layer
        ("qsgd_fixed", 0, 0, 64, 64 + 16),
    ],
)
def test_size_formulas_by_hand(enc, numel, sent, lo, hi):
    assert _bounds(enc, numel, sent) == (lo, hi)


def test_delta_code_length_by_hand():
    # numel / sent = 2^20: L_δ(20) = 20 + 2·log2(21) + 1 = 29.78...; ⌈2 × 29.78⌉ = 60
    expected = 20 + 2 * math.log2(21) + 1
    assert math.ceil(2 * expected) == 60
    assert _bounds("gap_elias_delta", 2**21, 2) == (64 + 10, 96 + 64 + 60 + 16)


# -- messages --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> Trace:
    return read_trace(SAMPLE)


def _trace(sample, **tables) -> Trace:
    header = copy.deepcopy(sample.header)
    parts = {"payloads": sample.payloads, "steps": sample.steps, "evals": sample.evals}
    parts = {k: v.copy() for k, v in parts.items()}
    parts.update(tables)
    return Trace(sample.path, header, parts["payloads"], parts["steps"], parts["evals"])


def test_validate_accepts_a_trace_in_memory(sample):
    t = _trace(sample)
    assert validate_trace(t) is t


def test_violations_quote_the_first_three_offending_rows(sample):
    t = _trace(sample)
    p = t.payloads
    rows = [3, 40, 41, 900]
    p.loc[rows, "bits_coo64"] = 1  # below the 64-bit header
    (msg,) = check_trace(t)
    cols = ["step", "worker", "layer", "numel", "sent", "bits_coo64"]
    quoted = [str({c: int(p.loc[i, c]) for c in cols}) for i in rows[:3]]
    assert msg == (
        "payloads column bits_coo64: 4 rows have bits outside the coo64 size formula; e.g. "
        + ", ".join(quoted)
    )


def test_validate_lists_eight_problems_and_counts_the_rest(sample):
    t = _trace(sample)
    h = t.header
    h["layers"][0]["index"] = 3
    h["layers"][1]["shape"] = [17]
    h["dense_bytes_per_step"] = 4
    h["steps_recorded"] = 7
    s = t.steps
    s.loc[1, "loss"] = float("nan")
    s.loc[2, "compute_s"] = -1.0
    s.loc[2, "density"] = 2.0
    e = t.evals
    e.loc[0, "step"] = 1000
    e.loc[1, "train_acc"] = 2.0
    e.loc[1, "test_acc"] = -1.0
    problems = check_trace(t)
    assert len(problems) == 10
    with pytest.raises(TraceError) as err:
        validate_trace(t)
    text = str(err.value)
    head = f"{t.path} is not a valid trace:\n  - "
    assert text == head + "\n  - ".join(problems[:8]) + "\n  ... and 2 more"


def test_validate_lists_exactly_eight_problems_without_a_remainder(sample):
    t = _trace(sample)
    h = t.header
    h["layers"][0]["index"] = 3
    h["layers"][1]["shape"] = [17]
    h["dense_bytes_per_step"] = 4
    h["steps_recorded"] = 7
    t.steps.loc[1, "loss"] = float("nan")
    t.steps.loc[2, "compute_s"] = -1.0
    t.steps.loc[2, "density"] = 2.0
    t.evals.loc[0, "step"] = 1000
    problems = check_trace(t)
    assert len(problems) == 8
    with pytest.raises(TraceError) as err:
        validate_trace(t)
    assert str(err.value) == f"{t.path} is not a valid trace:\n  - " + "\n  - ".join(problems)


def test_validate_lists_all_of_up_to_eight_problems(sample):
    t = _trace(sample)
    t.header["dense_bytes_per_step"] = 4
    t.header["steps_recorded"] = 7
    problems = check_trace(t)
    assert len(problems) == 2
    with pytest.raises(TraceError) as err:
        validate_trace(t)
    assert str(err.value) == f"{t.path} is not a valid trace:\n  - " + "\n  - ".join(problems)


# -- trace info on a hand-built trace ---------------------------------------------------------


def _tiny(sample) -> Trace:
    """2 layers (8 and 4 elements) × 2 workers × 3 steps, encodings packed32 and coo64."""
    header = copy.deepcopy(sample.header)
    header.update(
        workers=2,
        layers=[
            {"index": 0, "name": "w", "shape": [2, 4], "numel": 8},
            {"index": 1, "name": "b", "shape": [4], "numel": 4},
        ],
        encodings=["packed32", "coo64"],
        primary_encoding="packed32",
        dense_bytes_per_step=48,
        steps_recorded=3,
        status="complete",
    )
    rows = []
    sent = {  # (step, worker, layer) -> elements sent
        (0, 0, 0): 2, (0, 0, 1): 0, (0, 1, 0): 1, (0, 1, 1): 1,
        (1, 0, 0): 4, (1, 0, 1): 2, (1, 1, 0): 0, (1, 1, 1): 0,
        (2, 0, 0): 8, (2, 0, 1): 4, (2, 1, 0): 3, (2, 1, 1): 1,
    }  # fmt: skip
    for (step, worker, layer), k in sent.items():
        rows.append(
            {
                "step": step,
                "worker": worker,
                "layer": layer,
                "numel": (8, 4)[layer],
                "sent": k,
                "bits_packed32": 96 + 32 * k,
                "bits_coo64": 64 + 64 * k,
            }
        )
    payloads = pd.DataFrame(rows)
    steps = pd.DataFrame(
        {
            "step": [0, 1, 2],
            "loss": [2.5, 2.0, 1.25],
            "lr": [0.1, 0.1, 0.1],
            "grad_norm": [1.0, 1.0, 1.0],
            "density": [4 / 24, 6 / 24, 16 / 24],
            "compute_s": [0.5, 0.25, 0.25],
            "variance_s": [0.0, 0.125, 0.125],
            "compress_s": [0.0, 0.0, 0.5],
            "encode_s": [0.25, 0.0, 0.0],
            "decode_s": [0.0, 0.0, 0.0],
        }
    )
    evals = pd.DataFrame(
        {
            "step": [1, 2],
            "train_loss": [2.0, 1.5],
            "train_acc": [0.5, 0.75],
            "test_loss": [2.5, 1.75],
            "test_acc": [0.25, 0.625],
        }
    )
    return Trace(sample.path.parent / "tiny", header, payloads, steps, evals)


def test_tiny_trace_is_valid(sample):
    assert check_trace(_tiny(sample)) == []


def test_compression_ratios_by_hand(sample):
    # dense: 32 bits × 6 rows per step × ... = 32 × (3 × 2 × (8 + 4)) = 2304 bits
    # sent 26 elements in 12 rows: packed32 12 × 96 + 32 × 26 = 1984; coo64 768 + 1664 = 2432
    assert compression_ratios(_tiny(sample)) == {"packed32": 2304 / 1984, "coo64": 2304 / 2432}


def test_compression_ratio_of_a_trace_that_sent_nothing_is_infinite(sample):
    t = _tiny(sample)
    t.payloads["bits_coo64"] = 0
    assert compression_ratios(t)["coo64"] == math.inf


def test_layer_ratios_by_hand(sample):
    df = layer_ratios(_tiny(sample))
    assert list(df.columns) == [
        "layer",
        "name",
        "numel",
        "density",
        "ratio_packed32",
        "ratio_coo64",
    ]
    assert df["layer"].tolist() == [0, 1] and df["name"].tolist() == ["w", "b"]
    assert df["numel"].tolist() == [8, 4]
    # layer 0: sent 2+1+4+0+8+3 = 18 of 6 × 8 = 48; layer 1: 0+1+2+0+4+1 = 8 of 24
    assert df["density"].tolist() == [18 / 48, 8 / 24]
    # layer 0: dense 32 × 48 = 1536; packed32 6 × 96 + 32 × 18 = 1152; coo64 384 + 1152 = 1536
    assert df["ratio_packed32"].tolist() == [1536 / 1152, 768 / (576 + 256)]
    assert df["ratio_coo64"].tolist() == [1.0, 768 / (384 + 512)]


def test_layer_ratio_without_bits_is_missing_not_infinite(sample):
    t = _tiny(sample)
    t.payloads.loc[t.payloads["layer"] == 1, "bits_coo64"] = 0
    df = layer_ratios(t)
    assert df["ratio_coo64"].isna().tolist() == [False, True]
    assert df["ratio_coo64"].dtype == np.float64  # a number column with NaN, not objects


def test_layer_ratios_name_a_layer_missing_from_the_header_by_its_index(sample):
    t = _tiny(sample)
    t.header["layers"] = t.header["layers"][:1]
    t.layers = t.header["layers"]
    assert layer_ratios(t)["name"].tolist() == ["w", "1"]


def test_compression_ratio_of_a_single_bit(sample):
    t = _tiny(sample)
    t.payloads["bits_coo64"] = 0
    t.payloads.loc[5, "bits_coo64"] = 1
    assert compression_ratios(t)["coo64"] == 2304.0


def test_density_of_a_one_parameter_trace(sample):
    t = _tiny(sample)
    t.payloads = t.payloads.iloc[:1].assign(numel=1, sent=1)
    assert trace_info(t)["density"] == 1.0


def test_trace_info_takes_the_last_eval_and_the_stop_reason(sample):
    t = _tiny(sample)
    t.header["stop_reason"] = "loss is NaN at step 2"
    t.evals = pd.concat([t.evals.iloc[:1], t.evals], ignore_index=True)
    t.evals.loc[0, "step"] = 0
    info = trace_info(t)
    assert info["stop_reason"] == "loss is NaN at step 2"
    assert info["final_eval"]["step"] == 2 and info["final_eval"]["test_acc"] == 0.625


def test_density_over_time_bins_by_hand(sample):
    t = _tiny(sample)
    # 3 steps, 2 bins: edges 0, 1.5 -> 1, 3: steps [0, 0] and [1, 2]
    assert density_over_time(t, bins=2) == [
        {"steps": [0, 0], "density": 4 / 24},
        {"steps": [1, 2], "density": (6 / 24 + 16 / 24) / 2},
    ]
    # the default: 10 bins, at most one per step
    assert density_over_time(t) == [
        {"steps": [i, i], "density": d} for i, d in enumerate([4 / 24, 6 / 24, 16 / 24])
    ]


def test_density_over_time_default_is_ten_ranges(sample):
    out = density_over_time(sample)
    assert [r["steps"] for r in out] == [[10 * i, 10 * i + 9] for i in range(10)]
    means = sample.steps["density"].to_numpy().reshape(10, 10).mean(axis=1)
    np.testing.assert_allclose([r["density"] for r in out], means, rtol=1e-12)


def test_density_over_time_of_no_steps_is_empty(sample):
    t = _tiny(sample)
    t.steps = t.steps.iloc[0:0]
    assert density_over_time(t) == []


def test_trace_info_by_hand(sample):
    t = _tiny(sample)
    info = trace_info(t)
    h = t.header
    assert info["path"] == str(t.path) and info["name"] == "tiny"
    assert info["status"] == "complete" and info["stop_reason"] == h.get("stop_reason")
    assert info["synthetic"] is False
    assert info["compressor"] == h["compressor"]
    assert info["workers"] == 2 and info["steps"] == 3 and info["layers"] == 2
    assert info["batch_size_per_worker"] == h["batch_size_per_worker"]
    assert info["parameters"] == 12 and info["dense_bytes_per_step"] == 48
    assert info["flops_per_sample"] == h["flops_per_sample"]
    assert info["encodings"] == ["packed32", "coo64"] and info["primary_encoding"] == "packed32"
    assert info["compression_ratio"] == {"packed32": 2304 / 1984, "coo64": 2304 / 2432}
    assert info["density"] == 26 / 72
    assert info["final_loss"] == 1.25
    assert info["final_eval"] == {
        "step": 2,
        "train_loss": 1.5,
        "train_acc": 0.75,
        "test_loss": 1.75,
        "test_acc": 0.625,
    }
    assert isinstance(info["final_eval"]["step"], int)
    assert info["seconds"] == {
        "compute_s": 1.0,
        "variance_s": 0.25,
        "compress_s": 0.5,
        "encode_s": 0.25,
        "decode_s": 0.0,
    }
    assert info["density_over_time"] == density_over_time(t)
    assert [r["name"] for r in info["per_layer"]] == ["w", "b"]
    assert info["per_layer"][0]["density"] == 18 / 48


def test_trace_info_without_evals_or_steps(sample):
    t = _tiny(sample)
    t.evals = t.evals.iloc[0:0]
    assert trace_info(t)["final_eval"] == {}
    t.steps = t.steps.iloc[0:0]
    info = trace_info(t)
    assert info["final_loss"] is None and info["density_over_time"] == []
