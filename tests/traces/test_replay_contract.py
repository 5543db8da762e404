"""vgcsim.traces.inputs beyond the numbers of one trace: defaults, refusals and their messages,
what each time source says, the optimizer a trace names, degenerate steps (zero compute, one
step, one rank), payload rows outside the steps table, and the StepInputs accessors.

Every expected number is worked by hand from the device model's formulas
(``bytes / (bandwidth x efficiency) + launches x launch overhead``) on the V100 of the 10GbE
preset, or is a count of the tiny trace's rows (tests/conftest.py).
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pandas as pd
import pytest

from tests.conftest import TINY_BITS, write_tiny_trace
from vgcsim.core.cluster import get_cluster
from vgcsim.core.errors import TraceError, UnknownNameError
from vgcsim.traces import devicecost
from vgcsim.traces.extrapolate import rank_workers
from vgcsim.traces.inputs import StepInputs, compute_scale_factor, recording_device, step_inputs
from vgcsim.traces.io import read_trace
from vgcsim.traces.reading import Trace

CLUSTER = get_cluster("10GbE")
TRACE_MODE = dataclasses.replace(CLUSTER, compute="trace")
MEM = 900e9 * 0.83  # V100 datasheet bandwidth x sustained fraction
LAUNCH = 4e-6
PARAMS = 1000 + 250  # the tiny trace's two layers


def _edit_header(run, **changes):
    path = run / "header.json"
    head = json.loads(path.read_text())
    head.update(changes)
    path.write_text(json.dumps(head))
    return run


def _rebuilt(trace, *, payloads=None, steps=None, header=None):
    """The same trace as an in-memory Trace with some tables replaced (no reader checks)."""
    return Trace(
        trace.path,
        trace.header if header is None else header,
        trace.payloads if payloads is None else payloads,
        trace.steps if steps is None else steps,
        trace.evals,
    )


# ----------------------------------------------------------------------------- defaults


def test_defaults_are_modulo_seed_0_and_no_layer_bytes(tiny_trace):
    plain = step_inputs(tiny_trace, CLUSTER, 5)
    assert plain.layer_bytes is None
    # modulo: rank r sends worker r mod 2's bytes (the default rule)
    assert plain.rank_bytes[0].tolist() == [120, 240, 120, 240, 120]
    default_seed = step_inputs(tiny_trace, CLUSTER, 64, rule="resample")
    seed_0 = step_inputs(tiny_trace, CLUSTER, 64, rule="resample", seed=0)
    assert np.array_equal(default_seed.rank_bytes, seed_0.rank_bytes)


def test_the_seed_reaches_the_rank_to_worker_draw(tiny_trace):
    totals = -(-TINY_BITS.sum(axis=2) // 8)  # [T, W] bytes
    for seed in (1, 2):
        si = step_inputs(tiny_trace, CLUSTER, 64, rule="resample", seed=seed)
        idx = rank_workers(3, 2, 64, "resample", seed)
        assert np.array_equal(si.rank_bytes, np.take_along_axis(totals, idx, axis=1))
    one = step_inputs(tiny_trace, CLUSTER, 64, rule="resample", seed=1).rank_bytes
    two = step_inputs(tiny_trace, CLUSTER, 64, rule="resample", seed=2).rank_bytes
    assert not np.array_equal(one, two)


# ----------------------------------------------------------------------------- refusals


class _WorkerBitsOf(Trace):
    """A Trace whose worker_bits is given (a trace-like that disagrees with itself)."""

    def __init__(self, trace, wide):
        super().__init__(trace.path, trace.header, trace.payloads, trace.steps, trace.evals)
        self._wide = wide

    def worker_bits(self, encoding=None):
        return self._wide


def test_worker_bits_with_the_wrong_worker_count_is_refused(tiny_trace):
    wide = tiny_trace.worker_bits()
    wide[2] = 0
    with pytest.raises(TraceError, match=r"tiny: worker_bits has 3 columns for 2 workers$"):
        step_inputs(_WorkerBitsOf(tiny_trace, wide), CLUSTER, 2)


def test_steps_that_disagree_with_the_payload_steps_are_refused(tiny_trace):
    wide = tiny_trace.worker_bits()
    wide.index = pd.Index([0, 1, 5], name="step")  # same count, one step differs
    with pytest.raises(TraceError, match=r"tiny: steps table and payloads disagree on the steps$"):
        step_inputs(_WorkerBitsOf(tiny_trace, wide), CLUSTER, 2)
    with pytest.raises(TraceError, match="disagree on the steps"):
        step_inputs(_WorkerBitsOf(tiny_trace, wide.iloc[:2]), CLUSTER, 2)  # fewer steps


def test_a_trace_without_steps_is_refused(tiny_trace):
    empty = _rebuilt(
        tiny_trace, payloads=tiny_trace.payloads.iloc[:0], steps=tiny_trace.steps.iloc[:0]
    )
    with pytest.raises(TraceError, match=r"^trace tiny has no recorded steps$"):
        step_inputs(empty, CLUSTER, 2)


def test_a_missing_steps_column_is_named(tiny_trace):
    bare = _rebuilt(tiny_trace, steps=tiny_trace.steps.drop(columns=["variance_s"]))
    with pytest.raises(TraceError, match=r"^trace tiny: steps table lacks column 'variance_s'$"):
        step_inputs(bare, CLUSTER, 2)


def test_layer_bytes_of_an_encoding_the_payloads_lack_are_refused(tiny_trace):
    header = {**tiny_trace.header, "encodings": [*tiny_trace.encodings, "other"]}
    listed = _WorkerBitsOf(_rebuilt(tiny_trace, header=header), tiny_trace.worker_bits())
    with pytest.raises(TraceError, match=r"^trace tiny: payloads lack column 'bits_other'$"):
        step_inputs(listed, CLUSTER, 2, encoding="other", layers=True)


@pytest.mark.parametrize("missing", ["flops_per_sample", "batch_size_per_worker"])
def test_model_compute_needs_flops_and_batch(tiny_trace, missing):
    header = {**tiny_trace.header, missing: None}
    with pytest.raises(TraceError) as info:
        step_inputs(_rebuilt(tiny_trace, header=header), CLUSTER, 2)
    assert str(info.value) == (
        "trace tiny: compute 'model' needs flops_per_sample and batch_size_per_worker in the "
        "header; use --compute trace (the recorded seconds)"
    )


def test_an_unknown_dense_encoding_names_the_valid_ones(tiny_trace):
    si = step_inputs(tiny_trace, CLUSTER, 2)
    with pytest.raises(UnknownNameError) as info:
        si.dense_times("int8")
    assert str(info.value) == "unknown dense encoding 'int8'; valid: bf16, fp16, fp32"


# ----------------------------------------------------------------------------- time sources
# What step_inputs says about each local time is written into every result header
# (options.time_sources): the device, the formula or the measured column, and what was missing.

MODEL_SOURCES = {
    "compute_s": "modelled on V100: flops_per_sample x B / effective FLOP/s",
    "variance_s": "modelled on V100: modelled compute x measured variance_s / compute_s",
    "codec_s": "modelled on V100: vgcsim.traces.devicecost.compress_time_s",
    "decode_s": "modelled on V100: vgcsim.traces.devicecost.decode_time_s of the P - 1 "
    "received payloads",
    "optimizer_s": "modelled on V100: momentum_sgd step over 1250 parameters (momentum SGD "
    "assumed (the trace names no optimizer)), vgcsim.traces.devicecost.optimizer_time_s",
    "dense_cast_s": "modelled on V100: vgcsim.traces.devicecost.cast_time_s",
}


def test_model_mode_names_the_device_and_formula_of_every_time(tiny_trace):
    assert step_inputs(tiny_trace, CLUSTER, 2).time_sources == MODEL_SOURCES


def test_trace_mode_without_the_optional_columns_says_what_was_modelled(tiny_trace):
    sources = step_inputs(tiny_trace, TRACE_MODE, 2).time_sources
    assert sources == {
        "compute_s": "measured: compute_s / W of the batched pass (the trace has no "
        "rank_compute_s; this underestimates one rank's own forward + backward)",
        "variance_s": "measured: variance_s / W",
        "codec_s": "measured: (compress_s + encode_s) / W",
        "decode_s": "modelled on V100 (the trace has no decode_s): "
        "vgcsim.traces.devicecost.decode_time_s",
        "optimizer_s": MODEL_SOURCES["optimizer_s"] + " (the trace has no optimizer_s)",
        "dense_cast_s": MODEL_SOURCES["dense_cast_s"],
    }


def _measured_trace(tmp_path, rows):
    return read_trace(write_tiny_trace(tmp_path / "t", step_rows=rows))


MEASURED = [
    {"rank_compute_s": 0.15, "optimizer_s": 0.004, "decode_s": 0.008},
    {"rank_compute_s": float("nan"), "optimizer_s": float("nan"), "decode_s": float("nan")},
    {"rank_compute_s": 0.25, "optimizer_s": 0.006, "decode_s": 0.012},
]


def test_trace_mode_with_measured_columns_names_them(tmp_path):
    sources = step_inputs(_measured_trace(tmp_path, MEASURED), TRACE_MODE, 3).time_sources
    assert sources == {
        "compute_s": "measured: rank_compute_s on 2 of 3 steps; other steps compute_s / W "
        "x 2 (mean measured ratio)",
        "variance_s": "measured: variance_s / W",
        "codec_s": "measured: (compress_s + encode_s) / W",
        "decode_s": "measured: (P - 1) x decode_s / 2 (decodes per recorded step: one per payload)",
        "optimizer_s": "measured: optimizer_s (steps not sampled take the mean)",
        "dense_cast_s": MODEL_SOURCES["dense_cast_s"],
    }


# ----------------------------------------------------------------------------- measured times


def test_measured_times_are_scaled_and_gaps_take_the_mean(tmp_path):
    """compute_scale multiplies every measured time; a step without a measurement takes the
    mean of the measured ones (decode: mean of 0.008 and 0.012 = 0.010)."""
    cluster = dataclasses.replace(TRACE_MODE, compute_scale=0.5)
    si = step_inputs(_measured_trace(tmp_path, MEASURED), cluster, 3)
    # rank compute: 0.15, 0.1 x mean(1.5, 2.5), 0.25, each x 0.5
    assert si.compute_s[:, 2].tolist() == pytest.approx([0.075, 0.1, 0.125])
    assert si.optimizer_s.tolist() == pytest.approx([0.002, 0.0025, 0.003])
    # decode: (P - 1) x decode_s / W x scale, P = 3, W = 2
    assert si.decode_s[:, 1].tolist() == pytest.approx([0.004, 0.005, 0.006])


def test_a_step_with_zero_batched_compute_is_not_a_sample(tmp_path):
    """rank_compute_s measured only on a step whose compute_s is 0: no usable ratio, so the
    other steps take compute_s / W x 1."""
    rows = [
        {"compute_s": 0.0, "rank_compute_s": 0.3},
        {"rank_compute_s": float("nan")},
        {"rank_compute_s": float("nan")},
    ]
    si = step_inputs(_measured_trace(tmp_path, rows), TRACE_MODE, 2)
    assert si.compute_s[:, 0].tolist() == pytest.approx([0.3, 0.1, 0.1])
    assert "on 1 of 3 steps; other steps compute_s / W x 1 (mean" in si.time_sources["compute_s"]


def test_trace_mode_without_decode_s_models_the_decode(tiny_trace):
    trace_mode = step_inputs(tiny_trace, TRACE_MODE, 2)
    modelled = step_inputs(tiny_trace, CLUSTER, 2)
    assert trace_mode.decode_s.dtype == np.float64
    assert np.array_equal(trace_mode.decode_s, modelled.decode_s)
    # rank 0 decodes worker 1's step-0 payload: 240 B + 16 B x 60 sent, 2 launches per layer
    assert trace_mode.decode_s[0, 0] == pytest.approx((240 + 16 * 60) / MEM + 4 * LAUNCH)


def test_a_decode_column_without_any_value_is_modelled(tmp_path):
    rows = [{"decode_s": float("nan")}] * 3
    si = step_inputs(_measured_trace(tmp_path, rows), TRACE_MODE, 2)
    assert np.isfinite(si.decode_s).all()
    assert si.decode_s[0, 0] == pytest.approx((240 + 16 * 60) / MEM + 4 * LAUNCH)
    assert "the trace has no decode_s" in si.time_sources["decode_s"]


# ----------------------------------------------------------------------------- model mode


def test_zero_measured_compute_keeps_the_variance_seconds(tmp_path):
    """Model mode carries the estimator's measured share of compute to the device; with no
    measured compute there is no share, and the measured variance seconds / W are kept."""
    rows = [{"compute_s": 0.0}] * 3
    si = step_inputs(_measured_trace(tmp_path, rows), CLUSTER, 2)
    assert si.variance_s[:, 0].tolist() == pytest.approx([0.01] * 3)


def test_a_one_step_trace_is_replayed(tmp_path):
    run = write_tiny_trace(tmp_path / "one", bits=TINY_BITS[:1])
    si = step_inputs(read_trace(run), CLUSTER, 2)
    modelled = 1e9 * 8 / (15.7e12 * 0.4)
    assert si.steps.tolist() == [0]
    assert si.variance_s[0].tolist() == pytest.approx([modelled * 0.1] * 2)


def test_one_rank_decodes_nothing(tiny_trace):
    si = step_inputs(tiny_trace, CLUSTER, 1)
    assert si.decode_s.shape == (3, 1) and not si.decode_s.any()


def test_compute_scale_factor_of_a_trace_without_steps(tiny_trace):
    empty = _rebuilt(
        tiny_trace, payloads=tiny_trace.payloads.iloc[:0], steps=tiny_trace.steps.iloc[:0]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no mean of an empty slice
        compute, factor = compute_scale_factor(empty, CLUSTER)
    assert compute.shape == (0,) and factor == 1.0


@pytest.mark.parametrize(
    ("optimizer", "bytes_per_param", "named"),
    [
        ({"name": "adam"}, 28, "adam step over 1250 parameters (the trace's optimizer)"),
        ({"name": "sgd", "momentum": 0.9}, 20, "sgd step over 1250 parameters (the trace's"),
        ({"name": "sgd", "momentum": None}, 12, "sgd step over 1250 parameters (the trace's"),
        ({"name": "sgd"}, 12, "sgd step over 1250 parameters (the trace's optimizer)"),
        ({"name": ""}, 20, "momentum_sgd step over 1250 parameters (momentum SGD assumed"),
        ("adam", 20, "momentum_sgd step over 1250 parameters (momentum SGD assumed"),
    ],
)
def test_the_modelled_optimizer_is_the_one_the_trace_names(
    tiny_trace, optimizer, bytes_per_param, named
):
    """One fused update kernel per layer (2) over 1250 fp32 parameters: Adam reads and writes
    28 B per parameter, SGD with momentum 20 B, plain SGD 12 B."""
    header = {**tiny_trace.header, "config": {"optimizer": optimizer}}
    si = step_inputs(_rebuilt(tiny_trace, header=header), CLUSTER, 2)
    expected = bytes_per_param * PARAMS / MEM + 2 * LAUNCH
    assert si.optimizer_s.tolist() == pytest.approx([expected] * 3)
    assert named in si.time_sources["optimizer_s"]


@pytest.mark.parametrize("config", [None, ["not", "a", "table"], {"optimizer": None}])
def test_a_config_without_an_optimizer_table_assumes_momentum_sgd(tiny_trace, config):
    header = {**tiny_trace.header, "config": config}
    si = step_inputs(_rebuilt(tiny_trace, header=header), CLUSTER, 2)
    assert si.optimizer_s[0] == pytest.approx(20 * PARAMS / MEM + 2 * LAUNCH)
    assert si.time_sources["optimizer_s"] == MODEL_SOURCES["optimizer_s"]


# ----------------------------------------------------------------------------- dense baseline


def test_dense_casts_of_every_encoding(tiny_trace):
    si = step_inputs(tiny_trace, CLUSTER, 2)
    cast = 6 * PARAMS / MEM + LAUNCH  # read fp32, write 2 B: 6 B per element, one bucket
    assert si.dense_cast_s == {
        "fp32": (0.0, 0.0),
        "bf16": pytest.approx((cast, cast)),
        "fp16": pytest.approx((cast, cast)),
    }
    assert si.dense_times("fp16") == (2 * PARAMS, pytest.approx(cast), pytest.approx(cast))


def test_a_dense_encoding_without_a_cast_entry_costs_no_cast(tiny_trace):
    si = dataclasses.replace(step_inputs(tiny_trace, CLUSTER, 2), dense_cast_s={})
    assert si.dense_times("bf16") == (2 * PARAMS, 0.0, 0.0)
    assert si.dense_times("fp32") == (4 * PARAMS, 0.0, 0.0)


def test_the_header_dense_bytes_win_over_the_layer_sum(tiny_trace):
    header = {**tiny_trace.header, "dense_bytes_per_step": 12_344}
    assert step_inputs(_rebuilt(tiny_trace, header=header), CLUSTER, 2).dense_bytes == 12_344
    header = {k: v for k, v in tiny_trace.header.items() if k != "dense_bytes_per_step"}
    # without it: 4 B per element of the two layers
    assert step_inputs(_rebuilt(tiny_trace, header=header), CLUSTER, 2).dense_bytes == 5000


# ----------------------------------------------------------------------------- payload rows


def test_payload_rows_of_steps_outside_the_steps_table_are_ignored(tiny_trace):
    """A Trace built in memory may carry payload rows of steps its steps table does not have
    (before the first, between, after the last); the sent counts and layer bytes of the
    recorded steps are those of the recorded rows alone."""
    extra = tiny_trace.payloads[tiny_trace.payloads["step"] == 0].copy()
    outside = pd.concat(
        [extra.assign(step=-1), extra.assign(step=7), tiny_trace.payloads], ignore_index=True
    )
    si = step_inputs(_rebuilt(tiny_trace, payloads=outside), CLUSTER, 3, layers=True)
    # model-mode codec from the recorded rows: numel 1250 per worker, sent = bits / 32
    sent = (TINY_BITS // 32).sum(axis=2).astype(float)  # [T, W]
    payload = -(-TINY_BITS.sum(axis=2) // 8)
    idx = np.array([[0, 1, 0]] * 3)
    expected = devicecost.compress_time_s(
        "variance",
        np.full((3, 3), 1250.0),
        np.take_along_axis(sent, idx, axis=1),
        np.take_along_axis(payload, idx, axis=1).astype(float),
        2,
        CLUSTER.device,
    )
    assert np.allclose(si.codec_s, expected, rtol=1e-12)
    assert si.layer_bytes[:, 0].tolist() == (-(-TINY_BITS[:, 0] // 8)).tolist()


# ----------------------------------------------------------------------------- accessors


def _inputs(**fields):
    base = dict(
        steps=np.arange(3),
        rank_bytes=np.ones((3, 2), dtype=np.int64),
        dense_bytes=16,
        compute_s=np.ones((3, 2)),
        variance_s=np.zeros((3, 2)),
        codec_s=np.full((3, 2), 0.5),
    )
    return StepInputs(**{**base, **fields})


def test_decode_and_optimizer_default_to_zeros_of_the_right_shape():
    si = _inputs()
    assert si.decode().shape == (3, 2) and not si.decode().any()
    assert si.optimizer().shape == (3,) and not si.optimizer().any()
    assert si.world_size == 2


def test_decode_and_optimizer_return_what_was_given():
    decode, optimizer = np.full((3, 2), 0.25), np.array([1.0, 2.0, 3.0])
    si = _inputs(decode_s=decode, optimizer_s=optimizer)
    assert si.decode() is decode and si.optimizer() is optimizer


# ----------------------------------------------------------------------------- device name


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"device": {"name": "AMD EPYC 7B13"}, "synthetic": False}, "AMD EPYC 7B13"),
        ({"device": None, "synthetic": False}, "cpu"),
        ({"device": None, "synthetic": True}, "synthetic"),
    ],
)
def test_recording_device_without_a_full_table(tiny_trace, changes, expected):
    header = {**tiny_trace.header, **changes}
    assert recording_device(_rebuilt(tiny_trace, header=header)) == expected
