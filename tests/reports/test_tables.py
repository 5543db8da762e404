"""Report tables on hand-built result frames whose answers are known in closed form."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from report_data import DENSE_BYTES, LINKS, build_payloads, build_results

from vgcsim.core.errors import ResultsError
from vgcsim.reports import tables

LABELS = {"var2": "variance α=2", "strom": "strom τ=0.01", "qsgd": "qsgd s=4"}


def _dense_step(cluster: str, p: int) -> float:
    bw, lat = LINKS[cluster]
    return 0.05 + 2 * (p - 1) * lat + 2 * (p - 1) / p * DENSE_BYTES / bw


def test_what_if_speedup_matches_alpha_beta_by_hand(results):
    t = tables.what_if(results, LABELS)
    row = t[
        (t.source == "predicted")
        & (t.cluster == "1GbE")
        & (t.trace == "var2")
        & (t.world_size == 16)
    ].iloc[0]
    dense = 0.05 + 2 * 15 * 50e-6 + 2 * 15 / 16 * 4e6 / 125e6  # 0.1115 s
    comp = 0.05 + 0.002 + 0.003 + 15 * 50e-6 + 15 * 1e4 / 125e6  # 0.05695 s
    assert row.dense_step_s == pytest.approx(dense)
    assert row.compressed_step_s == pytest.approx(comp)
    assert row.speedup == pytest.approx(dense / comp)
    assert row.winner == "compressed"
    assert row.compression_ratio == pytest.approx(400.0)
    assert row.method_label == "variance α=2"
    assert list(t.columns) == list(tables.WHAT_IF_COLUMNS)


def test_largest_winning_world_size(results):
    t = tables.what_if(results, LABELS)
    strom = t[(t.source == "predicted") & (t.cluster == "10GbE") & (t.trace == "strom")]
    # by hand: P=64 dense 58.82 ms vs strom 58.29 ms (wins); P=128 61.43 vs 63.67 (loses)
    assert set(strom.largest_winning_world_size) == {64}
    ib = t[(t.source == "predicted") & (t.cluster == "IB-EDR") & (t.trace == "qsgd")]
    assert ib.largest_winning_world_size.isna().all()
    assert (ib.winner == "dense").all()


def test_what_if_ignores_dense_traces_compressed_side():
    df = build_results(
        traces={"dense": ("dense", 1.0, 0.0, 0.0), "var2": ("variance", 400.0, 0.0, 0.0)}
    )
    t = tables.what_if(df)
    assert set(t.trace) == {"var2"}


def test_crossover_ratio_ties_dense_step(results):
    c = tables.crossover(results, LABELS)
    row = c[
        (c.source == "predicted")
        & (c.cluster == "1GbE")
        & (c.trace == "var2")
        & (c.world_size == 16)
    ].iloc[0]
    # comm = 15·α + 15·bytes/β exactly (three traces give an exact affine fit)
    a, b = 15 * 50e-6, 15 / 125e6
    expected = b * DENSE_BYTES / (_dense_step("1GbE", 16) - 0.055 - a)
    assert row.required_ratio == pytest.approx(expected, rel=1e-6)
    assert row.achieved_ratio == pytest.approx(400.0)
    assert bool(row.wins)
    # every finite r* reproduces the dense step time when plugged back in
    pred = c[(c.source == "predicted") & np.isfinite(c.required_ratio) & (c.world_size > 1)]
    for r in pred.itertuples():
        bw, lat = LINKS[r.cluster]
        p = r.world_size
        step = r.overhead_s + (p - 1) * lat + (p - 1) * DENSE_BYTES / r.required_ratio / bw
        assert step == pytest.approx(r.dense_step_s, rel=1e-6)


def test_crossover_infinite_when_overhead_exceeds_dense(results):
    c = tables.crossover(results, LABELS)
    # on IB-EDR the variance trace's 5 ms overhead exceeds all of dense communication
    ib = c[(c.source == "predicted") & (c.cluster == "IB-EDR") & (c.trace == "var2")]
    assert ib.required_ratio.map(math.isinf).all()
    assert not ib.wins.any()


def test_crossover_agrees_with_what_if_winner(results):
    c = tables.crossover(results, LABELS).set_index(["source", "cluster", "trace", "world_size"])
    w = tables.what_if(results, LABELS).set_index(["source", "cluster", "trace", "world_size"])
    joined = c.join(w[["winner"]])
    assert ((joined["winner"] == "compressed") == joined["wins"]).all()


def test_mean_rows_averages_per_step_rows(results):
    per_step = []
    for step, scale in ((0, 0.5), (1, 1.5)):
        part = results.copy()
        part["step"] = step
        part["step_s"] = part["step_s"] * scale
        per_step.append(part)
    m = tables.mean_rows(pd.concat(per_step, ignore_index=True))
    assert (m["step"] == -1).all()
    base = tables.mean_rows(results)
    assert np.allclose(m["step_s"].to_numpy(), base["step_s"].to_numpy())


def test_missing_columns_is_a_results_error(results):
    with pytest.raises(ResultsError, match="lacks columns"):
        tables.what_if(results.drop(columns=["comm_s"]))


def test_breakdown_parts_sum_to_step(results):
    b = tables.breakdown(results, LABELS)
    parts = b[["compute_s", "variance_s", "codec_s", "comm_s"]].sum(axis=1)
    assert np.allclose(parts + b["other_s"], b["step_s"])
    assert np.allclose(b["other_s"], 0.0)
    assert set(b["method"]) == {"dense", "compressed"}


def test_agreement_relative_error(results):
    a = tables.agreement(results)
    assert len(a) == len(results) // 2
    assert np.allclose(a.rel_error, (a.simulated_step_s - a.predicted_step_s) / a.simulated_step_s)
    one = a[(a.cluster == "1GbE") & (a.world_size == 1)]
    assert np.allclose(one.rel_error, 0.0)  # no communication, so no skew at P = 1


def test_headline_names_10gbe_variance_first(results):
    lines = tables.headline_order(tables.headline(tables.what_if(results, LABELS)))
    assert lines[0].startswith("On 10GbE, variance α=2 beats dense allreduce")
    assert "(at P = 256, simulated)" in lines[0]
    assert any("IB-EDR, variance α=2 never beats" in s for s in lines)


def test_layer_density_and_compression_ratio():
    p = build_payloads(steps=2, workers=2, layers=(100, 1000), density=0.1)
    d = tables.layer_density(p)
    assert d.shape == (2, 2)
    # step 1: sent = int(n·0.1·2/2)
    assert d.loc[1, 0] == pytest.approx(0.1)
    assert d.loc[1, 1] == pytest.approx(0.1)
    r = tables.compression_over_steps(p, "packed32")
    bits1 = 2 * ((32 * 10 + 64) + (32 * 100 + 64))
    assert r.loc[r.step == 1, "bits"].item() == bits1
    assert r.loc[r.step == 1, "compression_ratio"].item() == pytest.approx(2 * 32 * 1100 / bits1)
    with pytest.raises(ResultsError, match="packed32"):
        tables.compression_over_steps(p, "coo64")


def test_method_table_relative_to_dense():
    ov = pd.DataFrame(
        [
            {
                "trace": "d",
                "method_label": "dense",
                "compressor": "dense",
                "workers": 4,
                "steps": 10,
                "final_test_acc": 0.9,
                "bits": 3200,
                "dense_bits": 3200,
                "mean_density": 1.0,
            },
            {
                "trace": "v",
                "method_label": "variance α=2",
                "compressor": "variance",
                "workers": 4,
                "steps": 10,
                "final_test_acc": 0.88,
                "bits": 32,
                "dense_bits": 3200,
                "mean_density": 0.01,
            },
        ]
    )
    t = tables.method_table(ov)
    v = t[t.trace == "v"].iloc[0]
    assert v.compression_ratio == pytest.approx(100.0)
    assert v.acc_vs_dense == pytest.approx(-0.02)


def test_speedup_matrix_prefers_simulated_and_orders_slow_links_first(results):
    wi = tables.what_if(results, LABELS)
    m = tables.speedup_matrix(wi)
    assert set(m.source) == {"simulated"}
    assert list(dict.fromkeys(m.interconnect)) == ["1GbE", "10GbE", "IB-EDR"]
    row = m[(m.interconnect == "10GbE") & (m.method == "strom τ=0.01")].iloc[0]
    sim = wi[(wi.source == "simulated") & (wi.cluster == "10GbE") & (wi.trace == "strom")]
    assert row["P=16"] == pytest.approx(sim.set_index("world_size").loc[16, "speedup"])
    assert row["largest P where compression wins"] == 64


def test_speedup_matrix_tells_traces_with_the_same_label_apart(results):
    labels = {"var2": "variance α=2", "strom": "variance α=2", "qsgd": "qsgd"}
    m = tables.speedup_matrix(tables.what_if(results, labels))
    assert len(m) == 9
    assert {"variance α=2 (var2)", "variance α=2 (strom)", "qsgd"} == set(m.method)


def test_headline_tells_traces_with_the_same_label_apart(results):
    # `vgcsim report` on `vgcsim scenario paper` printed two "On 10GbE, hybrid τ=0.1 ..."
    # sentences with different numbers (ResNet-50 and VGG-like) and no way to tell them apart
    labels = {"var2": "variance α=2", "strom": "variance α=2", "qsgd": "qsgd"}
    lines = tables.headline(tables.what_if(results, labels))
    on_10gbe = [x for x in lines if x.startswith("On 10GbE, variance")]
    assert len(on_10gbe) == 2
    assert any("(var2)" in x for x in on_10gbe) and any("(strom)" in x for x in on_10gbe)


# --- time to accuracy -------------------------------------------------------------------

EVALS = {
    # step s is the 0-based step after which the model was evaluated: s + 1 steps trained
    "d": pd.DataFrame({"step": [9, 19, 29], "test_acc": [0.80, 0.91, 0.93]}),
    "var2": pd.DataFrame({"step": [9, 19, 29], "test_acc": [0.85, 0.89, 0.925]}),
    "strom": pd.DataFrame({"step": [9, 19, 29], "test_acc": [0.92, 0.90, 0.91]}),
    "qsgd": pd.DataFrame({"step": [9, 19, 29], "test_acc": [0.50, 0.70, 0.88]}),
}


@pytest.mark.parametrize(
    ("target", "steps"),
    [(0.80, 10), (0.85, 20), (0.91, 30), (0.925, 30), (0.93, None)],
)
def test_steps_to_accuracy_is_first_eval_at_or_above_target(target, steps):
    # variance curve 85 %, 89 %, 92.5 %: no interpolation, ties count as reached
    got = tables.steps_to_accuracy(EVALS["var2"].assign(test_acc=[0.80, 0.85, 0.925]), target)
    assert got == steps


def test_steps_to_accuracy_uses_first_crossing_not_final_value():
    # Strom is at 92 % after 10 steps and dips below later: reached at 10
    assert tables.steps_to_accuracy(EVALS["strom"], 0.915) == 10
    assert tables.steps_to_accuracy(pd.DataFrame(columns=["step", "test_acc"]), 0.5) is None


def test_default_target_is_dense_final_minus_one_point():
    assert tables.default_target_accuracy(EVALS["d"]) == pytest.approx(0.92)
    assert math.isnan(tables.default_target_accuracy(None))


def test_time_to_accuracy_by_hand(results):
    target = tables.default_target_accuracy(EVALS["d"])  # 0.92
    t = tables.time_to_accuracy(results, EVALS, target, dense_trace="d", labels=LABELS)
    assert list(t.columns) == list(tables.TIME_TO_ACCURACY_COLUMNS)
    wi = tables.what_if(results, LABELS)
    assert len(t) == len(wi)  # nobody dropped, also the method that misses the target
    row = t[
        (t.source == "predicted")
        & (t.cluster == "1GbE")
        & (t.trace == "var2")
        & (t.world_size == 16)
    ].iloc[0]
    dense_step = _dense_step("1GbE", 16)
    comp_step = 0.05 + 0.002 + 0.003 + 15 * 50e-6 + 15 * 1e4 / 125e6
    # dense first ≥ 92 % after step 29 (30 steps); variance 92.5 % after step 29 (30 steps)
    assert row.dense_steps_to_target == 30 and row.compressed_steps_to_target == 30
    assert row.dense_time_to_target_s == pytest.approx(30 * dense_step)
    assert row.compressed_time_to_target_s == pytest.approx(30 * comp_step)
    assert row.speedup_to_accuracy == pytest.approx(dense_step / comp_step)
    strom = t[t.trace == "strom"]
    assert (strom.compressed_steps_to_target == 10).all()  # 92 % after 10 steps
    assert np.allclose(strom.speedup_to_accuracy, 3 * strom.dense_step_s / strom.compressed_step_s)
    qsgd = t[t.trace == "qsgd"]  # ends at 88 %: kept, marked as never reaching it
    assert len(qsgd) == len(wi[wi.trace == "qsgd"])
    assert not qsgd.reached.any()
    assert qsgd.compressed_steps_to_target.isna().all()
    assert qsgd.speedup_to_accuracy.isna().all()
    assert (qsgd.compressed_final_test_acc == 0.88).all()
    assert (qsgd.compressed_steps_recorded == 30).all()


def test_time_to_accuracy_without_dense_trace_keeps_compressed_side(results):
    t = tables.time_to_accuracy(results, EVALS, 0.85, labels=LABELS)
    assert t.dense_steps_to_target.isna().all() and t.speedup_to_accuracy.isna().all()
    assert (t[t.trace == "var2"].compressed_steps_to_target == 10).all()


def test_time_to_accuracy_headline(results):
    t = tables.time_to_accuracy(results, EVALS, 0.92, dense_trace="d", labels=LABELS)
    lines = tables.time_to_accuracy_headline(t)
    never = [x for x in lines if "never reaches" in x]
    assert never == [
        "qsgd s=4 never reaches 92.0 % test accuracy (88.0 % after 30 steps), so it is "
        "slower to accuracy on every interconnect."
    ]
    # strom: 10 steps against dense's 30, with every per-step speedup > 1/3 it wins
    strom_10 = [x for x in lines if x.startswith("On 10GbE, to 92.0 % test accuracy (10 steps")]
    assert len(strom_10) == 1 and "strom τ=0.01 is faster than dense" in strom_10[0]


def test_headline_and_matrix_put_test_accuracy_beside_speedup(results):
    wi = tables.what_if(results, LABELS)
    acc = {"var2": 0.925, "strom": 0.91, "qsgd": 0.88}
    lines = tables.headline(wi, acc, dense_accuracy=0.93)
    assert len(lines) == 9
    var = [x for x in lines if x.startswith("On 10GbE, variance α=2")][0]
    assert var.startswith(
        "On 10GbE, variance α=2 (test accuracy 92.5 % vs dense 93.0 %) beats dense allreduce"
    )
    assert all("test accuracy" in x for x in lines)
    assert tables.headline_order(lines)[0] == var
    m = tables.speedup_matrix(wi, acc)
    assert list(m.columns[:4]) == ["source", "interconnect", "method", "final_test_acc"]
    assert dict(zip(m.method, m.final_test_acc, strict=True))["qsgd s=4"] == 0.88
    assert "final_test_acc" not in tables.speedup_matrix(wi).columns


def test_dense_baseline_is_fp32_even_when_bf16_rows_are_faster(results):
    bf16 = results[results.method == "dense"].copy()
    bf16["encoding"] = "bf16"
    bf16["step_s"] = bf16["step_s"] / 10  # faster, but not the fp32 baseline
    t = tables.what_if(pd.concat([results, bf16], ignore_index=True), LABELS)
    base = tables.what_if(results, LABELS)
    t = t[t.trace != "dense-bf16"].reset_index(drop=True)
    assert np.allclose(t.dense_step_s, base.dense_step_s)


def test_breakdown_charges_optimizer_and_decode(results):
    r = results.copy()
    r["optimizer_s"] = 0.001
    comp = r.method == "compressed"
    r.loc[comp, "decode_s"] = 0.0005 * (r.loc[comp, "world_size"] - 1)  # per received payload
    r["step_s"] = r["step_s"] + r["optimizer_s"] + r["decode_s"]
    b = tables.breakdown(r, LABELS)
    assert np.allclose(b["other_s"], 0.0)
    row = b[(b.source == "predicted") & (b.cluster == "1GbE") & (b.trace == "var2")]
    row = row[(row.world_size == 16) & (row.method == "compressed")].iloc[0]
    assert row.decode_s == pytest.approx(15 * 0.0005) and row.optimizer_s == 0.001


def test_clusters_in_two_compute_modes_are_kept_apart(results):
    trace_mode = results.assign(compute_mode="trace", device="this CPU")
    trace_mode["compute_s"] = trace_mode["compute_s"] * 10
    trace_mode["step_s"] = trace_mode["step_s"] + 9 * results["compute_s"]
    both = pd.concat([results, trace_mode], ignore_index=True)
    t = tables.what_if(both, LABELS)
    assert set(t.cluster) == {
        f"{c} ({m})" for c in ("1GbE", "10GbE", "IB-EDR") for m in ("model", "trace")
    }
    base = tables.what_if(results, LABELS)
    model = t[t.cluster == "1GbE (model)"].reset_index(drop=True)
    assert np.allclose(model.speedup, base[base.cluster == "1GbE"].speedup)
    lt = tables.local_times(both)
    assert len(lt) == 6 and set(lt.device) == {"V100", "this CPU"}


def test_bf16_dense_is_a_method_of_its_own_against_fp32(results):
    # half the bytes of the fp32 allreduce on every link (a 2-byte dense baseline)
    bf16 = results[results.method == "dense"].copy()
    bf16["encoding"] = "bf16"
    p = bf16["world_size"]
    bw = bf16["cluster"].map({k: v[0] for k, v in LINKS.items()})
    lat = bf16["cluster"].map({k: v[1] for k, v in LINKS.items()})
    half = np.where(p == 1, 0.0, 2 * (p - 1) * lat + 2 * (p - 1) / p * (DENSE_BYTES / 2) / bw)
    bf16["comm_s"] = half
    bf16["step_s"] = 0.05 + half
    fp16 = bf16.assign(encoding="fp16")  # same cost: shown once, as bf16
    t = tables.what_if(pd.concat([results, bf16, fp16], ignore_index=True), LABELS)
    assert not (t.trace == "dense-fp16").any()
    low = t[t.trace == "dense-bf16"]
    # one row per (source, cluster, P): taken from one trace's dense rows, not three
    assert len(low) == 2 * 3 * 9
    assert set(low.method_label) == {"dense bf16"}
    row = low[(low.source == "predicted") & (low.cluster == "1GbE") & (low.world_size == 16)]
    dense = _dense_step("1GbE", 16)
    bf = 0.05 + 2 * 15 * 50e-6 + 2 * 15 / 16 * 2e6 / 125e6
    assert row.speedup.item() == pytest.approx(dense / bf)
    assert (low[low.world_size > 1].winner == "compressed").all()
    lines = tables.headline(t, {"var2": 0.9}, dense_accuracy=0.91)
    assert (
        "On 1GbE, dense allreduce of bf16 (test accuracy not recorded) beats fp32 at every P "
        "up to 256" in " ".join(lines)
    )
    # the compressed methods are unchanged
    base = tables.what_if(results, LABELS)
    assert np.allclose(t[t.trace != "dense-bf16"].speedup, base.speedup)
