"""SparCML's sparse allreduce (Renggli et al. SC'19, §5.1): stages, closed form worked by
hand, the dense switch, its bounds, and the union extrapolation against recorded unions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vgcsim.core.cluster import LinkSpec, load_cluster
from vgcsim.core.collectives import sparse_stage_bytes, sparse_stages
from vgcsim.models import predict
from vgcsim.models.collectives import collective_time_s
from vgcsim.traces.io import read_trace
from vgcsim.traces.sparseunion import fit_hot_cold, hot_cold_union, union_curve, unions_at

KEY = "sparse_allreduce/recursive_doubling"
TRACE = Path(__file__).resolve().parents[1] / "data" / "topk_w8_trace"
A, BETA, G = 1e-5, 1e-9, 1e-10  # α s, β s/B, γ s/B


def cluster():
    cl = load_cluster("10GbE")
    link = LinkSpec(
        name="hand",
        bandwidth_Bps=1e9,
        latency_s=A,
        efficiency=1.0,
        gamma_s_per_byte=G,
        source="a test link",
    )
    return type(cl)(**{**cl.__dict__, "link": link})


def test_stages_power_of_two_and_folded():
    groups, reduce = sparse_stages(8)
    assert groups.tolist() == [1, 2, 4] and reduce.all()
    groups, reduce = sparse_stages(6)  # p' = 4, r = 2: fold, 1+1, 2+2, unfold of all 6
    assert groups.tolist() == [1, 2, 4, 6] and reduce.tolist() == [True, True, True, False]
    assert sparse_stages(1)[0].size == 0


def test_four_ranks_by_hand_with_and_without_the_dense_switch():
    """Sizes 8, 16, 24, 32 B, disjoint sets: stage 0 sends each own set (largest 32), stage 1
    the pair unions {0,1} = 24 and {2,3} = 56 (largest 56): T = 2α + 88β + 88γ. With the
    dense vector at 40 B, stage 1 sends 40 instead: T = 2α + 72β + 72γ."""
    sizes = [8.0, 16.0, 24.0, 32.0]
    assert sparse_stage_bytes(sizes).tolist() == [32.0, 56.0]
    cl = cluster()
    t = float(collective_time_s(KEY, sizes, cl))
    assert t == pytest.approx(2 * A + 88 * BETA + 88 * G, rel=1e-12)
    from vgcsim.models.collectives import get_collective

    t40 = float(get_collective(KEY).time_s(np.array(sizes), cl.link, dense_bytes=40.0))
    assert t40 == pytest.approx(2 * A + 72 * BETA + 72 * G, rel=1e-12)


def test_three_ranks_fold_and_unfold_by_hand():
    """P = 3: rank 2 folds its 30 B into rank 0 (reduced), ranks 0 (10 + 30) and 1 (20)
    exchange (largest 40), rank 0 unfolds the 60 B result to rank 2 (no reduction)."""
    sizes = [10.0, 20.0, 30.0]
    assert sparse_stage_bytes(sizes).tolist() == [30.0, 40.0, 60.0]
    t = float(collective_time_s(KEY, sizes, cluster()))
    assert t == pytest.approx(3 * A + 130 * BETA + 70 * G, rel=1e-12)


@pytest.mark.parametrize("p", [2, 8, 64])
def test_sparcml_bounds_same_and_disjoint_sets(p):
    """SparCML §5.1: identical sets of c·k bytes cost lg P·(α + ckβ (+ ckγ)); disjoint
    ones lg P·α + (P − 1)·ckβ (+ γ alike)."""
    from vgcsim.models.collectives import get_collective

    ck = 800.0
    lg = int(np.log2(p))
    model = get_collective(KEY)
    same = float(model.time_s(np.zeros(p), cluster().link, stage_bytes=np.full(lg, ck)))
    assert same == pytest.approx(lg * (A + ck * (BETA + G)), rel=1e-12)
    disjoint = float(model.time_s(np.full(p, ck), cluster().link))
    assert disjoint == pytest.approx(lg * A + (p - 1) * ck * (BETA + G), rel=1e-12)


def test_hot_cold_fit_recovers_its_own_curve_and_the_limits():
    n, w = np.array([1000.0]), 4
    # a curve of the model itself (H = 30, q = 0.02) is fitted back
    h, q = np.array([30.0]), np.array([0.02])
    k = hot_cold_union(h, q, n, 1)
    hot, qq = fit_hot_cold(k, hot_cold_union(h, q, n, w), n, w)
    assert hot[0] == pytest.approx(30.0, rel=1e-9) and qq[0] == pytest.approx(0.02, rel=1e-9)
    # every worker the same set: H = k, the union stays k
    hot, qq = fit_hot_cold(np.array([50.0]), np.array([50.0]), n, w)
    assert hot_cold_union(hot, qq, n, 64)[0] == pytest.approx(50.0, abs=1e-6)
    # disjoint sets (more spread than independent picks): H = 0, exact at W, grows beyond
    hot, qq = fit_hot_cold(np.array([50.0]), np.array([200.0]), n, w)
    assert hot[0] == 0.0
    assert hot_cold_union(hot, qq, n, w)[0] == pytest.approx(200.0, rel=1e-12)
    assert hot_cold_union(hot, qq, n, 8)[0] > 200.0


def test_extrapolation_from_2_and_4_workers_against_the_recorded_8():
    """The rule fitted on the first W' workers of an 8-worker top-k recording, checked
    against the recorded unions of 4 and 8 workers (totals over layers, every step): it
    overestimates, by a median of 5-16 % on this recording (docs/models.md), never by more
    than half, and never underestimates by more than 5 %."""
    trace = read_trace(TRACE)
    steps = trace.steps["step"].to_numpy()
    union, sent = union_curve(trace, steps)
    numel = np.array([layer["numel"] for layer in trace.layers], dtype=float)
    for fit_w, target in ((2, 4), (2, 8), (4, 8)):
        got = unions_at(union[..., :fit_w], sent[..., :fit_w], numel, np.array([target]))
        err = got[..., 0].sum(axis=1) / union[..., target - 1].sum(axis=1) - 1
        assert np.median(err) <= 0.25, (fit_w, target, err)
        assert err.max() <= 0.5 and err.min() >= -0.05, (fit_w, target, err)
    # within the recording the curve is the recorded one
    same = unions_at(union, sent, numel, np.arange(1, 9))
    np.testing.assert_array_equal(same, union)


def test_recorded_unions_are_consistent():
    p = read_trace(TRACE).payloads
    first = p[p["worker"] == 0]
    assert (first["union_prefix"] == first["sent"]).all()
    totals = p.groupby(["step", "layer"])["sent"].sum()
    last = p[p["worker"] == 7].set_index(["step", "layer"])["union_prefix"]
    assert (last <= totals.loc[last.index]).all() and (
        last >= first.set_index(["step", "layer"])["sent"]
    ).all()


def test_predict_reports_sparse_rows_and_where_they_stop_paying():
    trace = read_trace(TRACE)
    df = predict.predict_trace(
        trace, load_cluster("100GbE"), predict.PredictOptions(world_sizes=(2, 16, 256, 4096))
    )
    rows = df[(df["collective"] == KEY) & (df["step"] == -1)]
    assert sorted(rows["world_size"]) == [2, 16, 256, 4096]
    assert set(rows["encoding"]) == {"coo64"} and set(rows["method"]) == {"compressed"}
    line = predict.sparse_crossover(df)
    assert line is not None and line.startswith("sparse allreduce")
    # the message of the last stage grows with P until the dense switch caps it
    pay = rows.sort_values("world_size")["payload_bytes_max"].to_numpy()
    dense = 4.0 * sum(layer["numel"] for layer in trace.layers)
    assert np.all(np.diff(pay) >= 0) and pay.max() <= dense


def test_crossover_line_names_where_sparse_stops_paying():
    import pandas as pd

    rows = []
    for p, dense, sparse in ((2, 1.0, 1.5), (4, 1.0, 0.5), (8, 1.0, 0.9), (16, 1.0, 1.2)):
        rows.append(
            {
                "step": -1,
                "world_size": p,
                "method": "dense",
                "encoding": "fp32",
                "collective": "allreduce/ring",
                "step_s": dense,
            }
        )
        rows.append(
            {
                "step": -1,
                "world_size": p,
                "method": "compressed",
                "encoding": "coo64",
                "collective": KEY,
                "step_s": sparse,
            }
        )
    line = predict.sparse_crossover(pd.DataFrame(rows))
    assert line == (
        "sparse allreduce beats dense fp32 allreduce at P = 4, 8; it stops beating it from "
        "P = 16 (slower below P = 4: its local work outweighs the saving)"
    )


def simulate_sparcml(sizes):
    """SparCML's recursive doubling run rank by rank on disjoint index sets (§5.1): per
    stage, the largest message's bytes and set count and whether it is reduced."""
    p = len(sizes)
    q = 1 << (p.bit_length() - 1)
    held = [{v} | ({q + v} if q + v < p else set()) for v in range(q)]  # after the fold
    stages = []
    if p > q:
        stages.append((max(sizes[q:]), 1, True))  # rank q + i sends its own set to rank i
    step = 1
    while step < q:
        sent = [held[v] for v in range(q)]  # each virtual rank sends what it holds
        stages.append(
            (max(sum(sizes[i] for i in g) for g in sent), max(len(g) for g in sent), True)
        )
        held = [held[v] | held[v ^ step] for v in range(q)]
        step *= 2
    if p > q:
        assert all(h == set(range(p)) for h in held)
        stages.append((float(sum(sizes)), p, False))  # rank i sends the result to rank q + i
    return stages


@pytest.mark.parametrize("p", range(2, 34))
def test_stages_and_bytes_equal_a_rank_by_rank_run(p):
    rng = np.random.default_rng(p)
    sizes = rng.integers(1, 1000, p).astype(float).tolist()
    ref = simulate_sparcml(sizes)
    groups, reduce = sparse_stages(p)
    assert groups.dtype == np.int64 and reduce.dtype == np.bool_
    assert groups.tolist() == [g for _, g, _ in ref]
    assert reduce.tolist() == [r for _, _, r in ref]
    stage = sparse_stage_bytes(sizes)
    assert stage.dtype == np.float64
    assert stage.tolist() == [b for b, _, _ in ref]
    # batched over leading axes: each row as on its own; the dense switch caps every stage
    batch = np.array([sizes, sizes[::-1]], dtype=np.float32)
    rows = sparse_stage_bytes(batch, dense_bytes=1500.0)
    assert rows.dtype == np.float64 and rows.shape == (2, len(ref))
    for row, one in zip(rows, batch, strict=True):
        assert row.tolist() == np.minimum(sparse_stage_bytes(one.tolist()), 1500.0).tolist()


def test_one_rank_has_no_stage():
    groups, reduce = sparse_stages(1)
    assert groups.shape == (0,) and groups.dtype == np.int64
    assert reduce.shape == (0,) and reduce.dtype == np.bool_
    out = sparse_stage_bytes(np.ones((2, 3, 1)))
    assert out.shape == (2, 3, 0) and out.dtype == np.float64
