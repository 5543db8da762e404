"""A compressor added as one module plus one registration is seen by every stage that looks
compressors up by name: the recorder, the labels, the device cost model and predict
(docs/extending.md, "Adding a compressor")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from _toy_compressor import EveryNthCompressor

from vgcsim import api
from vgcsim.core.cluster import get_cluster
from vgcsim.core.config import apply_overrides
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.traces import devicecost
from vgcsim.traces.compression.compressors import COMPRESSORS, register_compressor
from vgcsim.traces.io import read_trace
from vgcsim.traces.labels import compressor_reading, method_label
from vgcsim.traces.training.record import RecordConfig, record
from vgcsim.traces.validate import validate_trace


@pytest.fixture
def every_nth():
    register_compressor(EveryNthCompressor)
    try:
        yield EveryNthCompressor
    finally:
        COMPRESSORS.pop(EveryNthCompressor.name)


def test_registration_refuses_a_taken_name_and_a_missing_one(every_nth):
    with pytest.raises(ConfigError, match="taken"):
        register_compressor(type("Clash", (EveryNthCompressor,), {}))
    register_compressor(every_nth)  # the same class again changes nothing
    with pytest.raises(ConfigError, match="no name"):
        register_compressor(type("Nameless", (EveryNthCompressor,), {"name": ""}))
    assert COMPRESSORS["every_nth"] is every_nth


def test_labels_and_the_codec_model_see_the_module(every_nth):
    assert method_label("every_nth", {"stride": 3}) == "every 3th"
    assert compressor_reading("every_nth", {"stride": 3}) is None
    assert devicecost.codec_profile("every_nth") is every_nth.codec_profile
    # T = ((12·n + 16·k) + (8·k + b)) / (B_mem·e_mem) + L·(3 + 2)·t_launch, by hand
    device = get_cluster("IB-EDR").device
    n, k, b, layers = 1000.0, 334.0, 8.0 + 8 * 334, 2
    want = (12 * n + 16 * k + 8 * k + b) / device.sustained_memory_Bps + 10 * device.launch_s
    got = float(devicecost.compress_time_s("every_nth", n, k, b, layers, device))
    assert math.isclose(got, want, rel_tol=1e-12)


def test_record_and_predict_with_the_module_alone(every_nth, tmp_path):
    cfg = apply_overrides(
        RecordConfig(),
        [
            "data.name=synthetic",
            "model.name=mlp",
            "model.width=0.25",
            "workers=2",
            "batch_size=8",
            "steps=3",
            "eval_every=0",
            "compressor.name=every_nth",
            "compressor.stride=3",
        ],
    )
    trace = validate_trace(record(cfg, tmp_path / "t"))
    assert trace.header["compressor"] == {"name": "every_nth", "params": {"stride": 3}}
    p = trace.payloads
    assert (p["sent"] == (p["numel"] + 2) // 3).all()  # elements 0, 3, 6, ... of each layer
    assert (p["bits_coo64"] == 8 * (8 + 8 * p["sent"])).all()  # u32 layer, u32 k, k × 8 B
    df = api.predict(trace, "IB-EDR", [2, 4], compute="model")
    comp = df[df["method"] == "compressed"]
    assert len(comp) and np.isfinite(comp["codec_s"]).all() and (comp["codec_s"] > 0).all()
    # the prediction priced the codec with the module's profile: without it, it cannot
    COMPRESSORS.pop("every_nth")
    try:
        with pytest.raises(UnknownNameError, match="device codec model"):
            api.predict(read_trace(tmp_path / "t"), "IB-EDR", [2], compute="model")
    finally:
        register_compressor(every_nth)


def test_an_unknown_name_is_refused_with_the_registered_ones(every_nth, tmp_path):
    with pytest.raises(UnknownNameError, match="every_nth"):
        record(apply_overrides(RecordConfig(), ["compressor.name=every_ntth"]), tmp_path / "x")
    assert not (tmp_path / "x").exists()
