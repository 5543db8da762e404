"""``vgcsim.models.predict`` helpers against their documented contracts.

Expected values are worked out by hand on the unit link of ``test_models_collectives`` (α = 1 s,
β = 1 s/B, so a collective's time is a small integer) and from the option and column
definitions of the module, not read back from the implementation.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from vgcsim.core.cluster import ClusterSpec, LinkSpec, get_cluster
from vgcsim.core.collectives import ALLGATHERV_ALGORITHMS
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.results import RESULT_COLUMNS
from vgcsim.models.iteration import StepBreakdown
from vgcsim.models.predict import (
    PredictOptions,
    allgatherv_time_s,
    frame_from_rows,
    options_dict,
    parse_algorithms,
    predict_trace,
    rows_for,
    summarize,
)

UNIT = LinkSpec("unit", bandwidth_Bps=1.0, latency_s=1.0)


def _unit_cluster():
    base = get_cluster("10GbE")
    return ClusterSpec(**{**base.__dict__, "name": "unit", "link": UNIT, "intra_link": None})


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"world_sizes": ()}, "world sizes must be integers >= 1"),
        ({"world_sizes": (2, 0)}, "world sizes must be integers >= 1"),
        ({"allreduce": ("mesh",)}, "unknown allreduce algorithm 'mesh'"),
        ({"allgatherv": ("mesh",)}, "unknown allgatherv algorithm 'mesh'"),
        ({"rule": "nearest"}, "unknown extrapolation rule 'nearest'"),
        ({"overlap": "some"}, "unknown overlap mode 'some'"),
        ({"bucket_bytes": 0}, r"bucket_bytes must be a number of bytes in \[1, 1e15\], got 0"),
        (
            {"bucket_bytes": float("nan")},
            r"bucket_bytes must be a number of bytes in \[1, 1e15\], got nan",
        ),
        ({"seed": -1}, "seed must be >= 0, got -1"),
        (
            {"dense_encodings": ("bf16",)},
            r"dense_encodings must include fp32 \(the speedup baseline\)",
        ),
        ({"dense_encodings": ("fp32", "int8")}, "unknown dense encoding 'int8'"),
        ({"size_exchange": 1}, "size_exchange must be true or false, got 1"),
    ],
)
def test_predict_options_refuse_each_bad_value_with_its_message(over, message):
    with pytest.raises(ConfigError, match=message):
        PredictOptions(**over)


def test_predict_options_accept_the_edges():
    # P = 1, seed 0 and a one-byte bucket are valid
    PredictOptions(world_sizes=(1,), seed=0, bucket_bytes=1, dense_encodings=("fp32",))


def test_options_dict_is_what_the_result_header_records():
    opts = PredictOptions(
        world_sizes=(2, 8),
        allreduce=("ring", "rabenseifner"),
        allgatherv=("bruck",),
        encoding="hand",
        per_step=True,
        overlap="bucketed",
        bucket_bytes=1e6,
        dense_encodings=("fp32", "bf16"),
        size_exchange=False,
        sparse_allreduce=(),
        extra={"note": "x"},
    )
    assert options_dict(opts) == {
        "sparse_allreduce": [],
        "world_sizes": [2, 8],
        "allreduce": ["ring", "rabenseifner"],
        "allgatherv": ["bruck"],
        "encoding": "hand",
        "rule": "modulo",
        "seed": 0,
        "per_step": True,
        "overlap": "bucketed",
        "bucket_bytes": 1e6,
        "dense_encodings": ["fp32", "bf16"],
        "size_exchange": False,
        "note": "x",
    }


def test_parse_algorithms_all_lists_and_empty():
    assert parse_algorithms(" all ", "allgatherv") == ALLGATHERV_ALGORITHMS
    assert parse_algorithms(" ring , bruck ,", "allgatherv") == ("ring", "bruck")
    assert parse_algorithms("ring", "allreduce") == ("ring",)
    for empty in ("", " , "):
        with pytest.raises(ConfigError, match="--allreduce: give at least one algorithm or 'all'"):
            parse_algorithms(empty, "allreduce")
    with pytest.raises(UnknownNameError, match="unknown allreduce algorithm 'bruck'"):
        parse_algorithms("bruck", "allreduce")


# sizes [1, 2, 3, 4] on the unit link: ring data 3·(1 + 4) = 15; size exchange 3·(1 + 8) = 27;
# bruck: round 1 windows of 1 → 1 + 4, round 2 windows of 2 → 1 + 7: 13.
@pytest.mark.parametrize(
    ("key", "exchange", "expected"),
    [
        ("allgatherv/ring", True, 42.0),
        ("allgatherv/ring", False, 15.0),
        ("allgatherv/bruck", True, 40.0),
        ("allgatherv/bruck", False, 13.0),
        ("allgatherv/padded", True, 42.0),  # its own exchange, not a second one
        ("allgatherv/padded", False, 15.0),  # the data phase alone
    ],
)
def test_allgatherv_time_adds_the_size_exchange_once(key, exchange, expected):
    got = allgatherv_time_s(
        key, np.array([[1.0, 2.0, 3.0, 4.0]]), _unit_cluster(), size_exchange=exchange
    )
    assert got.shape == (1,)
    assert float(got[0]) == pytest.approx(expected, rel=1e-12)


def _breakdown():
    # two steps: compute 1, 3; variance 0.5, 0.5; codec 0, 2; comm 4, 6; steps 5.5, 11.5
    return StepBreakdown(
        compute_s=np.array([1.0, 3.0]),
        variance_s=np.array([0.5, 0.5]),
        codec_s=np.array([0.0, 2.0]),
        comm_s=np.array([4.0, 6.0]),
        step_s=np.array([5.5, 11.5]),
    )


def test_rows_for_one_mean_row_and_one_row_per_step():
    const = {"trace": "t", "world_size": 4, "method": "compressed"}
    steps = np.array([7, 8])
    per = rows_for(_breakdown(), steps, np.array([10.0, 30.0]), 5.0, per_step=True, const=const)
    assert list(per["step"]) == [-1, 7, 8]
    assert list(per["compute_s"]) == [2.0, 1.0, 3.0]
    assert list(per["codec_s"]) == [1.0, 0.0, 2.0]
    assert list(per["step_s"]) == [8.5, 5.5, 11.5]
    assert list(per["payload_bytes_max"]) == [20.0, 10.0, 30.0]
    assert list(per["payload_bytes_mean"]) == [5.0, 5.0, 5.0]
    # no decode or optimizer in the breakdown: zeros
    assert list(per["decode_s"]) == [0.0] * 3 and list(per["optimizer_s"]) == [0.0] * 3
    assert list(per["trace"]) == ["t"] * 3 and list(per["world_size"]) == [4] * 3
    for k in ("speedup_vs_dense", "scaling_efficiency", "throughput_samples_per_s"):
        assert np.isnan(per[k]).all() and len(per[k]) == 3
    mean = rows_for(_breakdown(), steps, 10.0, 5.0, per_step=False, const=const)
    assert list(mean["step"]) == [-1] and list(mean["step_s"]) == [8.5]
    assert list(mean["comm_s"]) == [5.0] and list(mean["trace"]) == ["t"]


def test_rows_for_takes_decode_and_optimizer_from_the_breakdown():
    bd = StepBreakdown(
        np.ones(2),
        np.zeros(2),
        np.zeros(2),
        np.zeros(2),
        np.ones(2),
        np.array([0.5, 1.5]),
        np.array([2.0, 4.0]),
    )
    out = rows_for(bd, np.array([0, 1]), 1.0, 1.0, per_step=False, const={})
    assert list(out["decode_s"]) == [1.0] and list(out["optimizer_s"]) == [3.0]


def test_frame_from_rows_concatenates_in_result_column_order():
    const = {c: "x" for c in ("source", "path", "trace", "compressor", "encoding", "cluster")}
    const.update(
        topology="star",
        compute_mode="trace",
        device="d",
        world_size=2,
        method="dense",
        collective="c",
    )
    a = rows_for(_breakdown(), np.array([0, 1]), 1.0, 1.0, per_step=True, const=const)
    b = rows_for(
        _breakdown(), np.array([0, 1]), 1.0, 1.0, per_step=False, const={**const, "world_size": 4}
    )
    df = frame_from_rows([a, b])
    assert list(df.columns) == list(RESULT_COLUMNS)
    assert list(df.world_size) == [2, 2, 2, 4] and list(df.step) == [-1, 0, 1, -1]


def test_summarize_prints_the_mean_rows_of_the_chosen_sizes():
    df = pd.DataFrame(
        {
            "step": [-1, 0, -1, -1],
            "world_size": [2, 2, 2, 8],
            "method": ["dense", "dense", "compressed", "dense"],
            "encoding": ["fp32", "fp32", "hand", "fp32"],
            "collective": ["allreduce/ring", "allreduce/ring", "allgatherv/ring", "allreduce/ring"],
            "comm_s": [0.0015, 9.0, 0.00025, 0.004],
            "decode_s": [0.0, 9.0, 0.0123, 0.0],
            "step_s": [0.1015, 9.0, 0.05035, 0.2],
            "speedup_vs_dense": [1.0, 9.0, 2.0158888, 1.0],
            "compute_mode": ["trace", "trace", "trace", "trace"],
            "device": ["synthetic", "synthetic", "synthetic", "synthetic"],
        }
    )
    lines = summarize(df, world_sizes=[2]).splitlines()
    assert lines[0] == "local times: compute trace on synthetic"
    assert lines[1] == (
        "     P  method      encoding          collective                        comm      "
        "decode        step   speedup"
    )
    assert lines[2] == (
        "     2  dense       fp32              allreduce/ring                 1.500ms     "
        "0.000ms   101.500ms     1.000"
    )
    assert lines[3] == (
        "     2  compressed  hand              allgatherv/ring                0.250ms    "
        "12.300ms    50.350ms     2.016"
    )
    assert len(lines) == 4
    assert len(summarize(df).splitlines()) == 5  # every mean row without a size filter


def test_summarize_lists_every_compute_mode_and_device_once_sorted():
    df = pd.DataFrame(
        {
            "step": [-1, -1, -1],
            "world_size": [2, 2, 2],
            "method": ["dense"] * 3,
            "encoding": ["fp32"] * 3,
            "collective": ["allreduce/ring"] * 3,
            "comm_s": [0.0] * 3,
            "decode_s": [0.0] * 3,
            "step_s": [1.0] * 3,
            "speedup_vs_dense": [1.0] * 3,
            "compute_mode": ["trace", "model", "trace"],
            "device": ["synthetic", "V100", "synthetic"],
        }
    )
    assert summarize(df).splitlines()[0] == "local times: compute model on V100, trace on synthetic"


def test_predict_refuses_an_encoding_the_trace_lacks(tiny_trace):
    with pytest.raises(UnknownNameError, match="unknown encoding of this trace 'zip'"):
        predict_trace(
            tiny_trace, get_cluster("10GbE"), PredictOptions(world_sizes=(2,), encoding="zip")
        )


def test_predict_logs_each_world_size(tiny_trace, caplog):
    with caplog.at_level(logging.INFO, logger="vgcsim.models.predict"):
        predict_trace(tiny_trace, get_cluster("10GbE"), PredictOptions(world_sizes=(4, 2)))
    assert [r.getMessage() for r in caplog.records if r.name == "vgcsim.models.predict"] == [
        "predicted P=2 (3 steps)",
        "predicted P=4 (3 steps)",
    ]


def test_time_sources_head_with_the_compute_mode_and_device(tiny_trace):
    from vgcsim.models.predict import time_sources

    cluster = get_cluster("10GbE")
    ts = time_sources(tiny_trace, cluster)
    assert list(ts)[:2] == ["compute_mode", "device"]
    assert ts["compute_mode"] == cluster.compute and ts["device"] == cluster.device.name
    assert (
        ts["compute_s"]
        == f"modelled on {cluster.device.name}: flops_per_sample x B / effective FLOP/s"
    )


def test_allgatherv_time_prices_the_last_axis_as_the_ranks():
    # sizes [2, 1, 4]: P = 4 whatever the leading axes; ring 3·(1 + 4) + exchange 3·(1 + 8) = 42
    sizes = np.tile(np.array([1.0, 2.0, 3.0, 4.0]), (2, 1, 1))
    got = allgatherv_time_s("allgatherv/ring", sizes, _unit_cluster(), size_exchange=True)
    assert got.shape == (2, 1)
    assert got.ravel().tolist() == pytest.approx([42.0, 42.0], rel=1e-12)


def test_one_rank_casts_and_decodes_nothing(tiny_trace):
    # P = 1: no collective, so a 2-byte dense baseline has no cast before nor after it
    cluster = get_cluster("10GbE")
    df = predict_trace(tiny_trace, cluster, PredictOptions(world_sizes=(1,)))
    dense = df[df.method == "dense"]
    assert set(dense.encoding) == {"fp32", "bf16", "fp16"}
    assert (dense.codec_s == 0).all() and (dense.decode_s == 0).all() and (dense.comm_s == 0).all()
    assert np.allclose(dense.step_s, dense.compute_s + dense.optimizer_s, rtol=1e-12)


@pytest.mark.parametrize("overlap", ["none", "bucketed"])
def test_dense_allreduce_on_a_hierarchical_cluster_uses_its_intra_node_link(tiny_trace, overlap):
    # 4 ranks per node, P = 8 (2 nodes), fp32: the whole 5000-byte gradient (one bucket).
    # Hierarchical allreduce: ⌈lg 4⌉·(2α' + 2n·β' + n·γ') over the intra-node link, plus a
    # ring over 2 nodes, 2α + 2·(1/2)·n·β + (1/2)·n·γ, over the inter-node link
    cluster = get_cluster("4xP100-IB-FDR56")
    opts = PredictOptions(
        world_sizes=(8,), allreduce=("hierarchical",), dense_encodings=("fp32",), overlap=overlap
    )
    df = predict_trace(tiny_trace, cluster, opts)
    row = df[(df.method == "dense") & (df.step == -1)].iloc[0]
    il, ol, n = cluster.intra_link, cluster.link, 5000.0
    expected = 2 * (2 * il.latency_s + 2 * n * il.beta_s_per_byte + n * il.gamma_s_per_byte) + (
        2 * ol.latency_s + n * ol.beta_s_per_byte + 0.5 * n * ol.gamma_s_per_byte
    )
    assert row.comm_s == pytest.approx(expected, rel=1e-12)
