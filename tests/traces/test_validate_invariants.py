"""``trace validate``: one test per invariant, each breaking exactly that invariant.

Every case starts from a copy of the committed sample trace (valid: no problems), changes the
least that violates one invariant while keeping every other invariant true, and asserts that
:func:`check_trace` reports exactly one problem, the right one. A check that is removed or
weakened therefore fails its own test instead of hiding behind another check that happens
to fire on the same edit.

Edits that change a payload row's size keep the row consistent with the wire formats by
hand (``vgcsim.traces.wire.encoders``): one more sent value costs 32 bits in ``packed32``
(fp32 value + packed index), 64 in ``coo64`` (u32 index + fp32 value), at
least 5 and at most 33 more in the gap codes (value + Elias code of a gap of 1), and one
more element of a layer costs one more bitmap bit.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from trace_parts import SAMPLE, trace_parts, trace_problems

from vgcsim.cli import main
from vgcsim.traces.io import Trace, read_trace
from vgcsim.traces.validate import check_trace

ENCODINGS = ("packed32", "coo64", "gap_elias_gamma", "gap_elias_delta", "bitmap")


@pytest.fixture(scope="module")
def sample() -> Trace:
    return read_trace(SAMPLE)


def _only(parts: dict, needle: str) -> str:
    problems = trace_problems(parts)
    assert len(problems) == 1, problems
    assert problems[0].startswith(needle), problems
    return problems[0]


def test_the_sample_trace_is_valid(sample):
    assert sample.encodings == list(ENCODINGS)
    assert check_trace(sample) == []
    assert trace_problems(trace_parts(sample)) == []


# -- header ----------------------------------------------------------------------------------


def test_unknown_status(sample):
    t = trace_parts(sample)
    t["header"]["status"] = "paused"
    assert _only(t, "") == (
        "header field status: input should be 'running', 'complete' or 'stopped' (got 'paused')"
    )


def test_layers_not_indexed_in_order(sample):
    t = trace_parts(sample)
    t["header"]["layers"][1]["index"] = 5
    assert _only(t, "") == "header layers are not indexed 0..L-1 in order"


def test_layer_without_an_index(sample):
    t = trace_parts(sample)
    del t["header"]["layers"][1]["index"]
    assert _only(t, "") == "header field layers[1].index: field required"


def test_numel_differs_from_the_product_of_the_shape(sample):
    # 16 × 1 × 3 × 4 = 192, but the layer (and every payload row of it) says 144
    t = trace_parts(sample)
    assert t["header"]["layers"][0]["shape"] == [16, 1, 3, 3]
    t["header"]["layers"][0]["shape"] = [16, 1, 3, 4]
    assert _only(t, "") == "header layer '0.weight': numel 144 != prod(shape [16, 1, 3, 4])"


def test_dense_bytes_differ_from_four_bytes_per_parameter(sample):
    t = trace_parts(sample)
    t["header"]["dense_bytes_per_step"] += 4
    assert _only(t, "") == "header dense_bytes_per_step 153132 != 4 x total numel 153128"


def test_primary_encoding_not_among_the_encodings(sample):
    t = trace_parts(sample)
    t["header"]["primary_encoding"] = "fp32"
    _only(t, "primary encoding 'fp32'")


def test_no_workers(sample):
    # with no workers there can be no payload rows: an empty payload table keeps the row
    # count (steps × 0 × layers = 0) and every per-row check true
    t = trace_parts(sample)
    t["header"]["workers"] = 0
    t["payloads"] = t["payloads"].iloc[0:0]
    assert _only(t, "") == (
        "header field workers: input should be greater than or equal to 1 (got 0)"
    )


def test_steps_recorded_differs_from_the_steps_table(sample):
    t = trace_parts(sample)
    t["header"]["steps_recorded"] = 99
    _only(t, "header says 99 steps were recorded")


# -- steps -----------------------------------------------------------------------------------


def test_no_recorded_steps(sample):
    t = trace_parts(sample)
    t["header"]["steps_recorded"] = 0
    for table in ("steps", "payloads", "evals"):
        t[table] = t[table].iloc[0:0]
    _only(t, "the trace has no recorded steps")


@pytest.mark.parametrize("value", (float("nan"), float("inf")))
def test_nan_or_inf_in_steps(sample, value):
    t = trace_parts(sample)
    t["steps"].loc[3, "loss"] = value
    _only(t, "steps column loss contains NaN or Inf")


def test_optional_step_columns_may_be_missing_but_not_infinite(sample):
    # optional columns (decode_s, ...) hold NaN where a value was not measured
    t = trace_parts(sample)
    t["steps"].loc[[3, 4], "decode_s"] = float("nan")
    assert trace_problems(t) == []
    t["steps"].loc[5, "decode_s"] = float("inf")
    assert _only(t, "") == "steps column decode_s contains NaN or Inf"


def test_missing_value_in_a_nullable_integer_column(sample):
    t = trace_parts(sample)
    p = t["payloads"]
    p["sent"] = p["sent"].astype("Int64")
    p.loc[6, "sent"] = pd.NA
    assert _only(t, "") == "payloads column sent contains NaN or Inf"


def test_a_single_worker_trace_is_valid(sample):
    t = trace_parts(sample)
    t["header"]["workers"] = 1
    t["payloads"] = t["payloads"][t["payloads"]["worker"] == 0].reset_index(drop=True)
    assert trace_problems(t) == []


def test_densities_and_accuracies_at_zero_and_one_are_valid(sample):
    t = trace_parts(sample)
    t["steps"].loc[1, "density"] = 0.0
    t["steps"].loc[2, "density"] = 1.0
    t["evals"].loc[0, ["train_acc", "test_acc"]] = [0.0, 1.0]
    t["evals"].loc[1, ["train_acc", "test_acc"]] = [1.0, 0.0]
    assert trace_problems(t) == []


def test_steps_out_of_order(sample):
    # swap the numbers of steps 3 and 4: the same set of steps, not contiguous in order
    t = trace_parts(sample)
    s = t["steps"]
    s.loc[[3, 4], "step"] = [4, 3]
    _only(t, "steps are not contiguous from 0")


def test_negative_seconds(sample):
    t = trace_parts(sample)
    t["steps"].loc[2, "compute_s"] = -0.5
    _only(t, "steps column compute_s has negative seconds")


@pytest.mark.parametrize("density", (-0.25, 1.5))
def test_density_outside_unit_interval(sample, density):
    t = trace_parts(sample)
    t["steps"].loc[2, "density"] = density
    assert _only(t, "") == "steps column density is outside [0, 1]"


# -- payloads --------------------------------------------------------------------------------


def test_nan_in_payloads(sample):
    t = trace_parts(sample)
    p = t["payloads"]
    p["bits_coo64"] = p["bits_coo64"].astype(float)
    p.loc[7, "bits_coo64"] = float("nan")
    _only(t, "payloads column bits_coo64 contains NaN or Inf")


def test_missing_payload_row(sample):
    t = trace_parts(sample)
    t["payloads"] = t["payloads"].drop(index=10).reset_index(drop=True)
    _only(t, "payloads has 3199 rows; expected")


def test_duplicate_payload_rows(sample):
    # row 1 (step 0, worker 1, layer 0) is relabelled worker 0: the row count stays right,
    # (0, 0, 0) is now recorded twice with different contents (and (0, 1, 0) not at all)
    t = trace_parts(sample)
    p = t["payloads"]
    assert p.loc[0, ["step", "worker", "layer"]].tolist() == [0, 0, 0]
    assert p.loc[1, ["step", "worker", "layer"]].tolist() == [0, 1, 0]
    assert p.loc[0, "sent"] != p.loc[1, "sent"]
    p.loc[1, "worker"] = 0
    assert _only(t, "") == "payloads has repeated (step, worker, layer) rows"


def test_payload_rows_of_an_unknown_step(sample):
    t = trace_parts(sample)
    t["payloads"].loc[5, "step"] = 100
    assert _only(t, "") == "payloads has rows for steps that are not in the steps table"


def test_payload_worker_out_of_range(sample):
    t = trace_parts(sample)
    t["payloads"].loc[5, "worker"] = 4
    _only(t, "payloads worker outside 0..3")


def test_payload_layer_out_of_range(sample):
    t = trace_parts(sample)
    t["payloads"].loc[5, "layer"] = 8
    _only(t, "payloads layer outside 0..7")


def test_payload_numel_differs_from_the_header(sample):
    # a row of a layer 8 elements larger than the header says, otherwise consistent: its
    # bitmap has the 8 more bits such a layer needs
    t = trace_parts(sample)
    p = t["payloads"]
    p.loc[9, "numel"] += 8
    p.loc[9, "bits_bitmap"] += 8
    _only(t, "payloads numel differs from the header's layer numel")


def test_more_sent_than_the_layer_holds(sample):
    # a row that sent every element sends one more, with the bits one more value costs
    t = trace_parts(sample)
    p = t["payloads"]
    full = p.index[p["sent"] == p["numel"]]
    assert len(full), "the sample trace has rows that sent a whole layer"
    i = full[0]
    p.loc[i, "sent"] += 1
    for enc, extra in (
        ("packed32", 32),
        ("coo64", 64),
        ("gap_elias_gamma", 32),
        ("gap_elias_delta", 32),
        ("bitmap", 32),
    ):
        p.loc[i, f"bits_{enc}"] += extra
    _only(t, "payloads violate 0 <= sent <= numel")


def test_negative_sent(sample):
    # a row that sent nothing claims -1 elements, with the bits of one value fewer
    t = trace_parts(sample)
    p = t["payloads"]
    none = p.index[p["sent"] == 0]
    assert len(none)
    i = none[0]
    p.loc[i, "sent"] = -1
    for enc, fewer in (
        ("packed32", 32),
        ("coo64", 64),
        ("gap_elias_gamma", 32),
        ("gap_elias_delta", 32),
        ("bitmap", 32),
    ):
        p.loc[i, f"bits_{enc}"] -= fewer
    _only(t, "payloads violate 0 <= sent <= numel")


def test_negative_bits(sample):
    t = trace_parts(sample)
    t["payloads"].loc[4, "bits_coo64"] = -1
    _only(t, "payloads column bits_coo64 has negative bits")


def test_zero_bits_are_outside_the_formula_not_negative(sample):
    t = trace_parts(sample)
    t["payloads"].loc[4, "bits_coo64"] = 0
    _only(t, "payloads column bits_coo64: 1 rows have bits outside the coo64 size formula")


def test_every_encoding_is_checked_after_a_bad_one(sample):
    # negative bits in coo64 (2nd encoding) or a missing packed32 column (1st) must not
    # stop the checks of the encodings after them
    t = trace_parts(sample)
    p = t["payloads"]
    p.loc[4, "bits_coo64"] = -1
    p.loc[8, "bits_bitmap"] = 1
    problems = trace_problems(t)
    assert len(problems) == 2, problems
    assert problems[0] == "payloads column bits_coo64 has negative bits"
    assert problems[1].startswith("payloads column bits_bitmap: 1 rows have bits outside")
    t["payloads"] = p.drop(columns=["bits_packed32"])
    problems = trace_problems(t)
    assert len(problems) == 3, problems
    assert problems[0] == "payloads lacks column bits_packed32 for encoding 'packed32'"


def test_an_encoding_without_a_size_formula_does_not_stop_the_checks(sample):
    # an encoding this version has no formula for is checked for negative bits only, and
    # the encodings after it are still checked
    t = trace_parts(sample)
    t["header"]["encodings"] = ["fp8_custom", *ENCODINGS]
    p = t["payloads"]
    p["bits_fp8_custom"] = 12
    assert trace_problems(t) == []
    p.loc[8, "bits_bitmap"] = 1
    _only(t, "payloads column bits_bitmap: 1 rows have bits outside")


def test_missing_bits_column(sample):
    t = trace_parts(sample)
    t["payloads"] = t["payloads"].drop(columns=["bits_bitmap"])
    assert _only(t, "") == "payloads lacks column bits_bitmap for encoding 'bitmap'"


def _outside(enc: str, numel: int, sent: int) -> int:
    """A bit count the wire format of ``enc`` cannot produce for (numel, sent), by hand:
    packed32 is exactly 96 + 32·sent (u32 layer, count, scale; 32-bit packed entries);
    coo64 at most 96 + 64·sent; the gap codes at least 64 + 5·sent (4-bit value codes and
    one bit per gap); bitmap at most 96 + numel + 32·sent + 16 bits of padding."""
    return {
        "packed32": 96 + 32 * sent + 1,
        "coo64": 96 + 64 * sent + 1,
        "gap_elias_gamma": 64 + 5 * sent - 1,
        "gap_elias_delta": 64 + 5 * sent - 1,
        "bitmap": 96 + numel + 32 * sent + 16 + 1,
    }[enc]


@pytest.mark.parametrize("enc", ENCODINGS)
def test_bits_outside_the_size_formula(sample, enc):
    t = trace_parts(sample)
    p = t["payloads"]
    i = 11
    p.loc[i, f"bits_{enc}"] = _outside(enc, int(p.loc[i, "numel"]), int(p.loc[i, "sent"]))
    _only(t, f"payloads column bits_{enc}: 1 rows have bits outside the {enc} size formula")


# -- evals -----------------------------------------------------------------------------------


def test_nan_in_evals(sample):
    t = trace_parts(sample)
    t["evals"].loc[1, "test_loss"] = float("nan")
    _only(t, "evals column test_loss contains NaN or Inf")


def test_eval_of_an_unrecorded_step(sample):
    t = trace_parts(sample)
    t["evals"].loc[1, "step"] = 200
    assert _only(t, "") == "evals refer to steps that are not in the steps table"


@pytest.mark.parametrize("col", ("train_acc", "test_acc"))
@pytest.mark.parametrize("value", (-0.125, 1.25))
def test_accuracy_outside_unit_interval(sample, col, value):
    t = trace_parts(sample)
    t["evals"].loc[2, col] = value
    assert _only(t, "") == f"evals column {col} is outside [0, 1]"


# -- through files and the command line ------------------------------------------------------


def _file_copy(tmp_path):
    run = tmp_path / "sample_copy"
    shutil.copytree(SAMPLE, run)
    return run


def test_cli_rejects_a_trace_file_with_a_duplicate_payload_row(tmp_path, capsys):
    run = _file_copy(tmp_path)
    part = sorted((run / "payloads").glob("part-*.parquet"))[1]
    df = pd.read_parquet(part)
    df.iloc[1] = df.iloc[0]
    df.to_parquet(part, index=False)
    assert main(["trace", "validate", str(run)]) == 2
    err = capsys.readouterr().err
    assert "repeated (step, worker, layer)" in err and "Traceback" not in err
    assert len(check_trace(read_trace(run, check=False))) == 1


def test_cli_rejects_a_header_whose_shape_disagrees_with_numel(tmp_path, capsys):
    run = _file_copy(tmp_path)
    h = json.loads((run / "header.json").read_text())
    h["layers"][6]["shape"] = [64, 10]  # 640 either way: still valid
    (run / "header.json").write_text(json.dumps(h))
    assert main(["trace", "validate", str(run)]) == 0
    h["layers"][6]["shape"] = [10, 65]
    (run / "header.json").write_text(json.dumps(h))
    assert main(["trace", "validate", str(run)]) == 2
    assert "numel 640 != prod(shape [10, 65])" in capsys.readouterr().err
    assert np.prod(h["layers"][6]["shape"]) != h["layers"][6]["numel"]
