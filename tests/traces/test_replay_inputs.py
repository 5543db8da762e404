"""vgcsim.traces.inputs: the [T, P] inputs both models and simulator replay, on a hand-made trace."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.conftest import write_tiny_trace
from vgcsim.core.cluster import get_cluster
from vgcsim.core.errors import TraceError
from vgcsim.traces import devicecost
from vgcsim.traces.inputs import step_inputs
from vgcsim.traces.io import read_trace

V100 = get_cluster("10GbE").device
MEM = 900e9 * 0.83  # V100 datasheet bandwidth x sustained fraction
LAUNCH = 4e-6
TRACE_MODE = dataclasses.replace(get_cluster("10GbE"), compute="trace")

TINY_BITS = np.array(
    [[[800, 160], [1600, 320]], [[804, 0], [80, 8]], [[8000, 1600], [16, 16]]], dtype=np.int64
)


def test_bytes_are_ceil_of_total_bits_over_8(tiny_trace):
    si = step_inputs(tiny_trace, get_cluster("10GbE"), 4)
    totals = TINY_BITS.sum(axis=2)  # [T, W]
    expected = -(-totals // 8)
    assert si.rank_bytes.shape == (3, 4)
    assert si.rank_bytes[:, :2].tolist() == expected.tolist()
    assert si.rank_bytes[:, 2:].tolist() == expected.tolist()  # modulo
    assert si.rank_bytes[1].tolist() == [101, 11, 101, 11]  # 804 bits -> 100.5 -> 101 bytes
    assert si.dense_bytes == 4 * 1250
    assert si.steps.tolist() == [0, 1, 2]


def test_encoding_selects_bits_column(tiny_trace):
    si = step_inputs(tiny_trace, get_cluster("10GbE"), 2, encoding="hand2x")
    assert si.rank_bytes[0].tolist() == [240, 480]


def test_presets_default_to_the_device_model():
    assert get_cluster("10GbE").compute == "model"
    assert get_cluster("dgx1-IB-EDR").compute == "model"


def test_trace_compute_is_per_worker_times_scale(tiny_trace):
    """An old trace (no rank_compute_s, optimizer_s, decode_s): compute_s / W of the batched
    pass; what it lacks is modelled on the cluster's device."""
    cluster = dataclasses.replace(TRACE_MODE, compute_scale=0.5)
    si = step_inputs(tiny_trace, cluster, 3)
    assert np.allclose(si.compute_s, 0.2 / 2 * 0.5)
    assert np.allclose(si.variance_s, 0.02 / 2 * 0.5)
    assert np.allclose(si.codec_s, 0.06 / 2 * 0.5)
    assert "no rank_compute_s" in si.time_sources["compute_s"]
    assert "no decode_s" in si.time_sources["decode_s"]
    # optimizer: no optimizer in the header -> momentum SGD assumed, 20 B/param + 1 launch/layer
    assert np.allclose(si.optimizer_s, 20 * 1250 / MEM + 2 * LAUNCH)
    assert si.device == "synthetic" and si.compute_mode == "trace"


def test_trace_mode_uses_rank_compute_optimizer_and_decode(tmp_path):
    """rank_compute_s on sampled steps (NaN elsewhere: compute_s / W x the mean measured ratio),
    optimizer_s (NaN: the mean), decode = (P - 1) x decode_s / W."""
    rows = [
        {"rank_compute_s": 0.15, "optimizer_s": 0.004, "decode_s": 0.008},
        {"rank_compute_s": float("nan"), "optimizer_s": float("nan"), "decode_s": 0.010},
        {"rank_compute_s": 0.25, "optimizer_s": 0.006, "decode_s": 0.012},
    ]
    run = write_tiny_trace(tmp_path / "t", step_rows=rows)
    si = step_inputs(read_trace(run), TRACE_MODE, 5)
    # batched compute_s / W = 0.1 every step; measured ratios 1.5 and 2.5 -> mean 2.0
    assert si.compute_s[:, 0].tolist() == pytest.approx([0.15, 0.2, 0.25])
    assert si.optimizer_s.tolist() == pytest.approx([0.004, 0.005, 0.006])
    assert si.decode_s[:, 0].tolist() == pytest.approx([4 * 0.004, 4 * 0.005, 4 * 0.006])
    assert "rank_compute_s on 2 of 3 steps" in si.time_sources["compute_s"]
    one = step_inputs(read_trace(run), TRACE_MODE, 1)
    assert (one.decode_s == 0).all()


def test_model_compute_uses_device_flops(tiny_trace):
    cluster = get_cluster("10GbE")
    si = step_inputs(tiny_trace, cluster, 2)
    modelled = 1e9 * 8 / (15.7e12 * 0.4)
    assert np.allclose(si.compute_s, modelled)
    # the estimator keeps its measured share of forward + backward: 0.02 / 0.2
    assert np.allclose(si.variance_s, modelled * 0.1)
    assert si.device == "V100" and si.compute_mode == "model"


def test_model_codec_and_decode_by_hand(tiny_trace):
    """Step 0: worker 0 sends 800 + 160 bits (25 + 5 elements, 120 B), worker 1 1600 + 320
    bits (50 + 10 elements, 240 B); 2 layers of 1000 and 250 elements."""
    si = step_inputs(tiny_trace, get_cluster("10GbE"), 2)
    n = 1250
    # variance profile: 34 B/element + 20 B/sent + encode 8 B/sent + payload; 8 launches/layer
    codec0 = (34 * n + 20 * 30 + 8 * 30 + 120) / MEM + 2 * 8 * LAUNCH
    codec1 = (34 * n + 20 * 60 + 8 * 60 + 240) / MEM + 2 * 8 * LAUNCH
    assert si.codec_s[0].tolist() == pytest.approx([codec0, codec1])
    # rank 0 decodes rank 1's payload (240 B + 16 B x 60 sent) and vice versa; 2 launches/layer
    dec0 = (240 + 16 * 60) / MEM + 2 * 2 * LAUNCH
    dec1 = (120 + 16 * 30) / MEM + 2 * 2 * LAUNCH
    assert si.decode_s[0].tolist() == pytest.approx([dec0, dec1])


def test_model_decode_grows_with_the_payloads_received(tiny_trace):
    """Decode bytes are the sum over the other P - 1 ranks; launches stay per layer."""
    cluster = get_cluster("10GbE")
    per = devicecost.decode_bytes("variance", 1250, 30, 120)  # worker 0 at step 0
    d2 = step_inputs(tiny_trace, cluster, 2).decode_s[0, 1]
    d8 = step_inputs(tiny_trace, cluster, 8).decode_s[0, 1]
    # rank 1 (worker 1) receives 1 payload of worker 0 at P = 2; at P = 8 (modulo) 4 of
    # worker 0 and 3 of worker 1
    per1 = devicecost.decode_bytes("variance", 1250, 60, 240)
    assert d2 == pytest.approx(per / MEM + 4 * LAUNCH)
    assert d8 == pytest.approx((4 * per + 3 * per1) / MEM + 4 * LAUNCH)


def test_dense_casts_are_modelled(tiny_trace):
    si = step_inputs(tiny_trace, get_cluster("10GbE"), 2)
    payload, cast, uncast = si.dense_times("bf16")
    assert payload == 2 * 1250
    assert cast == uncast == pytest.approx(6 * 1250 / MEM + LAUNCH)  # one 25 MiB bucket
    assert si.dense_times("fp32") == (4 * 1250, 0.0, 0.0)


def test_layer_bytes_and_groups(tiny_trace):
    si = step_inputs(tiny_trace, get_cluster("10GbE"), 3, layers=True)
    assert si.layer_bytes.shape == (3, 3, 2)
    assert si.layer_bytes[0].tolist() == [[100, 20], [200, 40], [100, 20]]
    grouped = step_inputs(tiny_trace, get_cluster("10GbE"), 3, layers=[[0, 1]])
    assert grouped.layer_bytes.shape == (3, 3, 1)
    assert np.array_equal(grouped.layer_bytes[..., 0], grouped.rank_bytes)


def test_resample_rule_is_seeded(tiny_trace):
    a = step_inputs(tiny_trace, get_cluster("10GbE"), 64, rule="resample", seed=1)
    b = step_inputs(tiny_trace, get_cluster("10GbE"), 64, rule="resample", seed=1)
    assert np.array_equal(a.rank_bytes, b.rank_bytes)
    assert set(a.rank_bytes[0]) == {120, 240}


def test_bad_layer_group(tiny_trace):
    with pytest.raises(TraceError):
        step_inputs(tiny_trace, get_cluster("10GbE"), 2, layers=[[5]])


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ({"type": "cuda", "name": "NVIDIA H100", "threads": 1}, "cuda (NVIDIA H100)"),
        ({"type": "cpu"}, "cpu"),
        ("cpu", "cpu"),
    ],
)
def test_recording_device_names_the_machine(tmp_path, device, expected):
    import json

    from vgcsim.traces.inputs import recording_device

    run = write_tiny_trace(tmp_path / "t")
    head = json.loads((run / "header.json").read_text())
    head.update(device=device, synthetic=False)
    (run / "header.json").write_text(json.dumps(head))
    assert recording_device(read_trace(run)) == expected


def test_distributed_allgatherv_decode_is_per_payload(tmp_path):
    """A torch.distributed recording sums the ranks' decode_s, and every rank decoded all W
    payloads: one payload's decode is decode_s / W²."""
    import json

    rows = [{"decode_s": 0.008}] * 3
    run = write_tiny_trace(tmp_path / "t", step_rows=rows)
    head = json.loads((run / "header.json").read_text())
    head["distributed"] = {"backend": "gloo", "world_size": 2, "collective": "allgatherv"}
    (run / "header.json").write_text(json.dumps(head))
    si = step_inputs(read_trace(run), TRACE_MODE, 9)
    assert si.decode_s[:, 0].tolist() == pytest.approx([8 * 0.008 / 4] * 3)
    assert "/ 4" in si.time_sources["decode_s"]
