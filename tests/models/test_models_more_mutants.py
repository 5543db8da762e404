"""More checks of ``vgcsim.models`` from hand-worked numbers, documented contracts and
one-line error messages (each written against a mutant that the other tests let through).

Expected numbers come from the formulas in the docstrings (written out here on small, exact
inputs), never from the implementation.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from modelhelpers import star_cluster
from vgcsim.models import collectives as mc
from vgcsim.models.iteration import critical_path, iteration_time_s
from vgcsim.models.linkfit import (
    fit_link,
    gathered_bytes,
    host_coefficient,
    host_points,
    protocol_switch,
)
from vgcsim.models.predict import (
    PredictOptions,
    _dense_breakdown,
    predict_trace,
    rows_for,
)
from vgcsim.models.scenario import best_rows
from vgcsim.traces.calibration import OPS
from vgcsim.traces.replay import StepInputs, step_inputs

from vgcsim.core.cluster import LinkSpec
from vgcsim.core.collectives import ALLGATHERV_ALGORITHMS, ALLREDUCE_ALGORITHMS
from vgcsim.core.errors import ConfigError, UnknownNameError

UNIT = LinkSpec("unit", bandwidth_Bps=1.0, latency_s=1.0)  # α = 1 s, β = 1 s/B


def _message(exc_info) -> str:
    return str(exc_info.value)


# ------------------------------------------------------------------------------------------
# collectives
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        (5.0, "collective sizes must have a rank axis (last axis = P ranks)"),
        (np.zeros((2, 0)), "collective needs at least one rank"),
        ([3.0, -1.0], "payload sizes must be non-negative"),
    ],
)
def test_collective_sizes_are_refused_with_their_exact_message(sizes, message):
    """Every collective checks its sizes: a scalar (no rank axis), no rank, a negative size."""
    with pytest.raises(ConfigError) as e:
        mc.allgatherv_ring(sizes, UNIT)
    assert _message(e) == message


def test_narrow_unsigned_sizes_are_byte_counts_not_wrapped_integers():
    """Direct allgatherv, T = α + β·max_i max((P−1)·m_i, M − m_i): sizes [100, 0, 0, 0] as uint8
    give (P−1)·m_0 = 300 B (which would wrap to 44 in 8 bits), so T = 1 + 300 s on the unit
    link."""
    sizes = np.array([100, 0, 0, 0], dtype=np.uint8)
    assert float(mc.allgatherv_direct(sizes, UNIT)) == 301.0


def test_unknown_collective_operation_and_key_messages():
    with pytest.raises(UnknownNameError) as e:
        mc.collective_key("scatter", "ring")
    assert (
        _message(e)
        == "unknown collective operation 'scatter'; valid: allgatherv, allreduce, sparse_allreduce"
    )
    keys = sorted(
        [f"allreduce/{a}" for a in ALLREDUCE_ALGORITHMS]
        + [f"allgatherv/{a}" for a in ALLGATHERV_ALGORITHMS]
        + ["sparse_allreduce/recursive_doubling"]
    )
    with pytest.raises(UnknownNameError) as e:
        mc.get_collective("allreduce/mesh")
    assert _message(e) == f"unknown collective 'allreduce/mesh'; valid: {', '.join(keys)}"


def test_size_exchange_refuses_zero_ranks_with_its_message():
    with pytest.raises(ConfigError) as e:
        mc.size_exchange_time_s(0, UNIT)
    assert _message(e) == "world size must be >= 1, got 0"


def test_padded_host_time_looks_delta_up_step_by_step():
    """T_host = δ(P·m_max)·Σ m per step, δ from the table: step 0 gathers 2·1 = 2 B (below the
    first point: its value, 1/4 s/B) and copies 2 B → 0.5 s; step 1 gathers 2·10 = 20 B
    (≥ 16: 1/2 s/B) and copies 20 B → 10 s. Each step's own m_max, not the largest over all
    steps."""
    link = LinkSpec(
        "t",
        bandwidth_Bps=1.0,
        latency_s=1.0,
        allgatherv_host_s_per_byte=0.125,
        allgatherv_host_s_per_byte_table=((4.0, 0.25), (16.0, 0.5)),
    )
    got = mc.allgatherv_host_time_s(np.array([[1.0, 1.0], [10.0, 10.0]]), link)
    assert got.tolist() == [0.5, 10.0]


# ------------------------------------------------------------------------------------------
# iteration
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["per_layer", "bucketed"])
def test_bucketed_modes_are_sent_to_bucketed_step_time_s(mode):
    with pytest.raises(ConfigError) as e:
        iteration_time_s([[1.0]], [[0.0]], [[0.0]], [1.0], overlap=mode)
    assert type(e.value) is ConfigError
    assert _message(e) == f"overlap '{mode}' needs per-bucket times: use bucketed_step_time_s"


def test_unknown_overlap_mode_message_lists_the_modes():
    with pytest.raises(UnknownNameError) as e:
        iteration_time_s([[1.0]], [[0.0]], [[0.0]], [1.0], overlap="some")
    assert _message(e) == "unknown overlap mode 'some'; valid: bucketed, full, none, per_layer"


def test_negative_optimizer_time_is_refused_by_name():
    with pytest.raises(ConfigError) as e:
        iteration_time_s([[1.0]], [[0.0]], [[0.0]], [1.0], optimizer_s=-1.0)
    assert _message(e) == "optimizer_s must be finite and >= 0"


@pytest.mark.parametrize("bad", ["compute_s", "variance_s", "codec_s"])
def test_critical_path_names_the_input_of_the_wrong_shape(bad):
    args = {"compute_s": [[1.0]], "variance_s": [[0.0]], "codec_s": [[0.0]]}
    args[bad] = np.zeros((1, 1, 1))
    with pytest.raises(ConfigError) as e:
        critical_path(**args)
    assert _message(e) == f"{bad} must be [steps, ranks], got shape (1, 1, 1)"


def test_one_dimensional_local_times_are_one_rank_per_step():
    """``[T]`` inputs are one rank: the critical rank is that rank at every step."""
    c, v, k = critical_path([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    assert c.tolist() == [1.0, 2.0] and v.tolist() == [3.0, 4.0] and k.tolist() == [5.0, 6.0]


def test_critical_rank_is_chosen_by_the_true_sum_of_narrow_integer_times():
    """Rank 0: 200 + 100 = 300, rank 1: 100 + 100 = 200; rank 0 is critical (300 wraps to 44 in
    8 bits, which would pick rank 1)."""
    c, v, k = critical_path(
        np.array([[200, 100]], dtype=np.uint8),
        np.array([[100, 100]], dtype=np.uint8),
        np.zeros((1, 2), dtype=np.uint8),
    )
    assert (float(c[0]), float(v[0]), float(k[0])) == (200.0, 100.0, 0.0)


def test_decode_is_the_largest_rank_of_each_step_not_of_the_run():
    """none: T = c + v + k + comm + d, d = max over ranks per step: steps' decodes [1, 2] and
    [3, 4] give d = 2 then 4."""
    bd = iteration_time_s(
        [[1.0], [1.0]],
        [[0.0], [0.0]],
        [[0.0], [0.0]],
        [1.0, 1.0],
        decode_s=[[1.0, 2.0], [3.0, 4.0]],
    )
    assert bd.decode_s.tolist() == [2.0, 4.0]
    assert bd.step_s.tolist() == [4.0, 6.0]


def test_decode_times_given_as_decimal_text_are_compared_as_numbers():
    """A decode table read as text ("10", "9") is taken as 10 s and 9 s: the largest is 10 (as
    text, "9" > "10")."""
    bd = iteration_time_s(
        [[1.0, 1.0]], [[0.0, 0.0]], [[0.0, 0.0]], [0.0], decode_s=np.array([["10", "9"]])
    )
    assert bd.decode_s.tolist() == [10.0]
    assert bd.step_s.tolist() == [11.0]


# ------------------------------------------------------------------------------------------
# predict
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"world_sizes": ()}, "world sizes must be integers >= 1"),
        ({"bucket_bytes": 0}, "bucket_bytes must be a finite number > 0, got 0"),
        (
            {"dense_encodings": ("bf16",)},
            "dense_encodings must include fp32 (the speedup baseline)",
        ),
    ],
)
def test_predict_options_messages_are_exact(over, message):
    with pytest.raises(ConfigError) as e:
        PredictOptions(**over)
    assert _message(e) == message


def _trace_cluster():
    return dataclasses.replace(star_cluster(latency_s=1e-3), compute="trace")


def test_predicted_rows_name_the_topology_and_the_closed_form_path(tiny_trace):
    """Rows carry ``path="closed_form"`` and the cluster's topology kind (a star here)."""
    df = predict_trace(tiny_trace, _trace_cluster(), PredictOptions(world_sizes=(2,)))
    assert set(df["path"]) == {"closed_form"}
    assert set(df["topology"]) == {"star"}


def test_predict_prices_the_encoding_asked_for(tiny_trace):
    """The tiny trace's second encoding, ``hand2x``, has twice the bits of its primary one: at
    step 0 the workers send 960 and 1920 bits, 240 and 480 bytes in hand2x."""
    opts = PredictOptions(world_sizes=(2,), encoding="hand2x", per_step=True)
    df = predict_trace(tiny_trace, _trace_cluster(), opts)
    row = df[(df.method == "compressed") & (df.step == 0)].iloc[0]
    assert row.encoding == "hand2x"
    assert row.payload_bytes_max == 480 and row.payload_bytes_mean == 360


@pytest.mark.parametrize(("rule", "seed"), [("resample", 3), ("resample", 11)])
def test_predict_extrapolates_with_the_rule_and_seed_asked_for(tiny_trace, rule, seed):
    """Per-step payload columns are those of the extrapolation (``step_inputs``) with the
    options' rule and seed, not the default modulo rule or seed 0."""
    cluster = _trace_cluster()
    p = 8
    ref = step_inputs(tiny_trace, cluster, p, rule=rule, seed=seed).rank_bytes
    default = step_inputs(tiny_trace, cluster, p).rank_bytes
    seed0 = step_inputs(tiny_trace, cluster, p, rule=rule, seed=0).rank_bytes
    # the check can only fail the mutants if the extrapolations differ
    assert not np.array_equal(ref.mean(axis=1), default.mean(axis=1))
    assert not np.array_equal(ref.mean(axis=1), seed0.mean(axis=1))
    opts = PredictOptions(world_sizes=(p,), rule=rule, seed=seed, per_step=True)
    df = predict_trace(tiny_trace, cluster, opts)
    comp = df[(df.method == "compressed") & (df.step >= 0)].sort_values("step")
    assert comp.payload_bytes_mean.tolist() == pytest.approx(ref.mean(axis=1).tolist())
    assert comp.payload_bytes_max.tolist() == pytest.approx(ref.max(axis=1).tolist())


def test_predict_without_a_batch_size_leaves_throughput_empty(tiny_trace):
    """No ``batch_size_per_worker`` in the header: predictions still come, throughput is NaN."""
    tiny_trace.header.pop("batch_size_per_worker")
    df = predict_trace(tiny_trace, _trace_cluster(), PredictOptions(world_sizes=(2,)))
    assert len(df) > 0 and df["throughput_samples_per_s"].isna().all()


def _bd(values):
    a = np.asarray(values)
    return (a, a, a, a, a)


def test_rows_for_columns_are_float_and_text_stays_object():
    """Numeric columns come out float64 whatever the input's type (exact Fractions here: the
    mean of 1/2 and 1 is 3/4); text constants are object arrays (any length fits) and numeric
    constants stay numeric."""
    from vgcsim.models.iteration import StepBreakdown

    vals = np.array([Fraction(1, 2), Fraction(1)], dtype=object)
    bd = StepBreakdown(*_bd(vals))
    out = rows_for(
        bd, np.array([0, 1]), vals, vals, per_step=False, const={"method": "dense", "world_size": 4}
    )
    for k in ("compute_s", "step_s", "payload_bytes_max", "payload_bytes_mean"):
        assert out[k].dtype == np.float64 and out[k].tolist() == [0.75]
    assert out["method"].dtype == object
    out["method"][0] = "compressed"
    assert out["method"][0] == "compressed"
    assert np.issubdtype(out["world_size"].dtype, np.integer)
    assert pd.api.types.is_integer_dtype(
        pd.Series(np.concatenate([out["world_size"], out["world_size"]]))
    )


def test_zero_byte_dense_gradient_buckets_carry_no_bytes():
    """A model of 0 dense bytes: each bucket's ring allreduce moves nothing and costs its
    latency alone, 2(P−1)·α = 2 ms at P = 2 and α = 1 ms; two buckets report Σ t_k = 4 ms."""
    cluster = star_cluster(latency_s=1e-3, bandwidth_Bps=1e3)
    si = StepInputs(
        steps=np.array([0]),
        rank_bytes=np.zeros((1, 2)),
        dense_bytes=0,
        compute_s=np.full((1, 2), 0.5),
        variance_s=np.zeros((1, 2)),
        codec_s=np.zeros((1, 2)),
    )
    numel = np.array([1000.0, 250.0])
    buckets = ([[1], [0]], np.array([0.2, 1.0]), numel)
    opts = PredictOptions(world_sizes=(2,), overlap="bucketed")
    bd = _dense_breakdown(si, "allreduce/ring", cluster, opts, buckets)
    assert float(bd.comm_s[0]) == pytest.approx(4e-3, rel=1e-12)


# ------------------------------------------------------------------------------------------
# scenario
# ------------------------------------------------------------------------------------------


def test_best_rows_keeps_the_first_listed_of_tied_algorithms():
    """17 mean rows: every third (trace "a") at 0.5 s, the others (trace "b") tied at 1 s; the
    best row of "b" is the first one listed (row 1), as a stable sort keeps ties in order."""
    n = 17
    df = pd.DataFrame(
        {
            "trace": ["a" if i % 3 == 0 else "b" for i in range(n)],
            "cluster": "c",
            "world_size": 4,
            "method": "compressed",
            "compressor": "x",
            "step": -1,
            "step_s": [0.5 if i % 3 == 0 else 1.0 for i in range(n)],
            "collective": [f"alg{i}" for i in range(n)],
        }
    )
    best = best_rows(df)
    assert best.set_index("trace")["collective"].to_dict() == {"a": "alg0", "b": "alg1"}


# ------------------------------------------------------------------------------------------
# linkfit helpers
# ------------------------------------------------------------------------------------------


def test_gathered_bytes_is_p_times_m_for_allgatherv_and_zero_otherwise():
    assert gathered_bytes("allgatherv", 100, 4) == 400.0
    assert gathered_bytes("allgatherv_skewed", 100, 4) == 400.0
    for op in ("p2p", "allreduce", "allgather"):
        assert gathered_bytes(op, 100, 4) == 0.0


@pytest.mark.parametrize("fn", [gathered_bytes, host_coefficient])
def test_unknown_op_message_lists_the_ops(fn):
    with pytest.raises(ConfigError) as e:
        fn("bcast", 100, 4)
    assert _message(e) == f"unknown op 'bcast'; valid: {', '.join(OPS)}"


def test_host_points_cover_every_positive_size_including_one_byte():
    """(k, median(max(rest, 0)/k)) per distinct k > 0: k = 0 has no point, k = 1 → 2/1 = 2,
    k = 4 → median(8/4, 4/4) = 1.5."""
    k = np.array([0.0, 1.0, 4.0, 4.0])
    rest = np.array([5.0, 2.0, 8.0, 4.0])
    assert host_points(k, rest) == ((1.0, 2.0), (4.0, 1.5))


# ------------------------------------------------------------------------------------------
# fit_link: which op gives γ, α and δ, and from which rows (module docstring of linkfit)
# ------------------------------------------------------------------------------------------

# p2p: α = 100 µs, β = 1e-8 s/B, exact (the fit recovers them, test_linkfit_contract)
ALPHA, BETA = 100e-6, 1e-8
SIZES = (4, 1024, 4096, 16384, 65536, 1 << 20)


def _rows(op, time_of, sizes=SIZES):
    return [{"op": op, "size_bytes": n, "seconds": [time_of(n)]} for n in sizes]


P2P = _rows("p2p", lambda n: ALPHA + n * BETA)


def test_gamma_op_among_the_fit_ops_is_not_fitted_again():
    """γ's op gives γ only when it is *not* among the fit ops: an allreduce-only fit of an
    exact α-β allreduce (P = 4: t = 6·1 ms + 1.5·n·β) names no γ op and no gamma rows."""
    rows = _rows("allreduce", lambda n: 6e-3 + 1.5 * n * BETA, sizes=(0, 4, 1 << 22, 1 << 24))
    fit, table = fit_link({"world_size": 4, "rows": rows}, ops=("allreduce",))
    assert fit.gamma_op == ""
    assert "gamma" not in {r["role"] for r in table}


def test_gamma_rows_are_those_where_betas_term_is_half_the_time():
    """P = 4 allreduce, t = 6·1 ms + 1.5·n·β: β's term 1.5·n·β is ≥ half of t from n = 4 MiB
    (62.9 of 68.9 ms) but not at 256 KiB (3.9 of 9.9 ms): that row is only checked."""
    rows = P2P + _rows(
        "allreduce", lambda n: 6e-3 + 1.5 * n * BETA, sizes=(4, 1 << 18, 1 << 22, 1 << 24)
    )
    fit, table = fit_link({"world_size": 4, "rows": rows})
    roles = {r["size_bytes"]: r["role"] for r in table if r["op"] == "allreduce"}
    assert roles == {4: "latency", 1 << 18: "check", 1 << 22: "gamma", 1 << 24: "gamma"}
    assert fit.gamma_op == "allreduce"


def test_latency_rows_include_a_zero_byte_allreduce():
    """α = median over allreduce's latency rows of (t − β, γ terms)/k_α, k_α = 6 at P = 4: the
    0-byte row (6 ms → 1 ms) and the 4-byte row (12 ms + 6·β → 2 ms) give 1.5 ms."""
    rows = P2P + [
        {"op": "allreduce", "size_bytes": 0, "seconds": [6e-3]},
        {"op": "allreduce", "size_bytes": 4, "seconds": [12e-3 + 6 * BETA]},
        *_rows("allreduce", lambda n: 6e-3 + 1.5 * n * BETA, sizes=(1 << 22, 1 << 24)),
    ]
    fit, _ = fit_link({"world_size": 4, "rows": rows})
    assert fit.latency_op == "allreduce"
    assert fit.latency_s == pytest.approx(1.5e-3, rel=1e-9)


def test_one_rank_allreduce_has_no_latency_to_give():
    """At P = 1 an allreduce has no step (k_α = 2(P−1) = 0): α stays p2p's."""
    rows = P2P + _rows("allreduce", lambda n: 1e-3, sizes=(4, 1024))
    fit, _ = fit_link({"world_size": 1, "rows": rows})
    assert fit.latency_op == ""
    assert fit.latency_s == pytest.approx(ALPHA, rel=1e-9)


def test_latency_op_with_one_alpha_per_call_gives_alpha():
    """latency_op = allgather at P = 2: t = (P−1)·α' + (P−1)·m·β = α' + m·β, k_α = 1; its small
    messages give α' = 300 µs."""
    rows = P2P + _rows("allgather", lambda n: 3e-4 + n * BETA)
    fit, _ = fit_link({"world_size": 2, "rows": rows}, latency_op="allgather")
    assert fit.latency_op == "allgather"
    assert fit.latency_s == pytest.approx(3e-4, rel=1e-9)


def test_host_op_among_the_fit_ops_gives_no_delta():
    """δ comes from the host op only when it is not a fit op: an allgatherv-only fit (P = 4,
    t = 6α + 3·(m + 8)·β) has no host op, δ = 0 and no host rows."""
    rows = _rows("allgatherv", lambda n: 6 * ALPHA + 3 * (n + 8) * BETA)
    fit, table = fit_link({"world_size": 4, "rows": rows}, ops=("allgatherv",))
    assert fit.host_op == "" and fit.allgatherv_host_s_per_byte == 0.0
    assert "host" not in {r["role"] for r in table}


def test_zero_byte_allgatherv_does_not_enter_deltas_slope():
    """P = 2, t = 2α + (m + 8)·β + 2m·δ, δ = 2 ns/B, at 1 and 4 MiB: δ is the slope of the
    excess against P·m, 2 ns/B; a 0-byte row with a 10 ms excess (k_δ = 0) is left out."""
    delta = 2e-9
    rows = P2P + [
        *_rows(
            "allgatherv",
            lambda n: 2 * ALPHA + (n + 8) * BETA + 2 * n * delta,
            sizes=(1 << 20, 1 << 22),
        ),
        {"op": "allgatherv", "size_bytes": 0, "seconds": [2 * ALPHA + 8 * BETA + 1e-2]},
    ]
    fit, table = fit_link({"world_size": 2, "rows": rows})
    assert fit.host_op == "allgatherv"
    assert fit.allgatherv_host_s_per_byte == pytest.approx(delta, rel=1e-6)
    assert [r["role"] for r in table if r["op"] == "allgatherv"] == ["host", "host", "check"]


def test_one_rank_allgatherv_of_one_byte_enters_deltas_slope():
    """P = 1: no ring terms, k_δ = P·m = m; rows of 1 and 2 B at 3 and 5 ms: slope
    (5 − 3) ms / 1 B = 2 ms/B (the 1-byte row counts)."""
    rows = P2P + [
        {"op": "allgatherv", "size_bytes": 1, "seconds": [3e-3]},
        {"op": "allgatherv", "size_bytes": 2, "seconds": [5e-3]},
    ]
    fit, _ = fit_link({"world_size": 1, "rows": rows})
    assert fit.allgatherv_host_s_per_byte == pytest.approx(2e-3, rel=1e-9)


def test_without_a_per_byte_cost_no_other_op_gives_alpha_or_delta():
    """p2p times flat in size: β = 0 (infinite bandwidth), a degenerate link on which α and
    δ are not taken from other ops (they are fitted with β fixed): α stays p2p's 100 µs."""
    flat = [{"op": "p2p", "size_bytes": n, "seconds": [ALPHA]} for n in SIZES]
    rows = (
        flat + _rows("allreduce", lambda n: 6e-3) + _rows("allgatherv", lambda n: 6e-3 + 1e-9 * n)
    )
    fit, _ = fit_link({"world_size": 4, "rows": rows})
    assert fit.bandwidth_Bps == float("inf")
    assert fit.latency_op == "" and fit.latency_s == pytest.approx(ALPHA, rel=1e-9)
    assert fit.host_op == "" and fit.allgatherv_host_s_per_byte == 0.0


def test_protocol_switch_reports_the_best_of_several_qualifying_splits():
    """p2p times on 1 KiB·2^i, i = 0..9: 20 µs + 8 ns/B below 32 KiB, a flatter line (1 ns/B)
    from 32 KiB that meets the first 1 % above it there. Splitting one or two sizes off the
    switch also halves one line's error (a near-crossing point misfits by 1 % only), but the
    true split, 16 KiB | 32 KiB, fits both sides exactly and is the one reported."""
    switch = 1024 * 2**5

    def steep(n):
        return 20e-6 + 8e-9 * n

    flat_alpha = 1.01 * steep(switch) - 1e-9 * switch
    table = []
    for n in (1024 * 2**i for i in range(10)):
        t = steep(n) if n < switch else flat_alpha + 1e-9 * n
        table.append({"op": "p2p", "size_bytes": n, "measured_s": t, "fitted_s": t})
    found = protocol_switch(table)
    assert found is not None
    assert (found["below_bytes"], found["above_bytes"]) == (16384, 32768)
    assert found["below"] == pytest.approx((20e-6, 8e-9), rel=1e-5)
    assert found["above"] == pytest.approx((flat_alpha, 1e-9), rel=1e-5)


def test_a_row_whose_alpha_terms_are_exactly_a_tenth_enters_deltas_fit():
    """δ's rows: α's terms *at most* a tenth of the time. Dyadic p2p (α = 2^-13 s, β = 2^-27
    s/B) gives α exactly; at P = 2 an allgatherv row pays 2α = 2^-12 s of α, exactly a tenth
    of a measured 10·2^-12 s: that row is a host row, like the large ones."""
    alpha, beta = 2.0**-13, 2.0**-27
    p2p = _rows("p2p", lambda n: alpha + n * beta, sizes=[2**k for k in (2, 10, 12, 14, 16, 20)])
    rows = p2p + [
        *_rows(
            "allgatherv",
            lambda m: 2 * alpha + (m + 8) * beta + 2 * m * 2.0**-30,
            sizes=(1 << 20, 1 << 22),
        ),
        {"op": "allgatherv", "size_bytes": 1 << 14, "seconds": [10 * 2.0**-12]},
    ]
    fit, table = fit_link({"world_size": 2, "rows": rows})
    assert fit.latency_s == alpha  # exact: the boundary is met to the bit
    roles = {r["size_bytes"]: r["role"] for r in table if r["op"] == "allgatherv"}
    assert roles == {1 << 20: "host", 1 << 22: "host", 1 << 14: "host"}


def test_joint_fit_reaches_the_least_squared_log_ratio_on_a_hard_start():
    """Four p2p rows whose one bandwidth-regime size sends the fit to the joint method: α, β ≥ 0
    minimising Σ (log(α + n·β) − log t)². Its cost is no worse than scipy's bounded least
    squares of the same residuals (a damping schedule that gives up early stops at β ≈ 0, at
    over twice the cost)."""
    from scipy.optimize import least_squares

    sizes = np.array([8.0, 2.0**19, 2.0**21, 2.0**22])
    t = np.array([1.25e-3, 1.25e-3, 0.75e-3, 5e-3])

    def residual(x):
        return np.log(x[0] + sizes * x[1]) - np.log(t)

    ref = least_squares(
        residual,
        x0=[1e-3, 1e-10],
        bounds=([0.0, 0.0], [np.inf, np.inf]),
        x_scale=[1e-3, 1e-9],
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    rows = [
        {"op": "p2p", "size_bytes": int(n), "seconds": [s]} for n, s in zip(sizes, t, strict=True)
    ]
    fit, _ = fit_link({"world_size": 2, "rows": rows})
    assert fit.method == "joint"
    got = residual([fit.latency_s, 1.0 / fit.bandwidth_Bps])
    assert float(got @ got) <= float(ref.fun @ ref.fun) * (1 + 1e-9)


# Dyadic p2p link, α = 2^-13 s and β = 2^-27 s/B, on sizes whose fit recovers both to the bit
# (two bandwidth-regime sizes, 64 and 256 KiB): the regime boundaries can then be met exactly.
DY_ALPHA, DY_BETA = 2.0**-13, 2.0**-27
DY_P2P = _rows("p2p", lambda n: DY_ALPHA + n * DY_BETA, sizes=(4, 1024, 4096, 1 << 16, 1 << 18))


def test_a_p2p_row_whose_bytes_are_exactly_a_fifth_is_in_the_latency_regime():
    """Latency regime: β's term *at most* a fifth of the time. At 4096 B, n·β = 2^-15 s and
    t = 2^-13 + 2^-15 = 5·2^-15 s: exactly a fifth, so that row is a latency row."""
    fit, table = fit_link({"world_size": 2, "rows": DY_P2P})
    assert (fit.latency_s, 1.0 / fit.bandwidth_Bps) == (DY_ALPHA, DY_BETA)  # exact fit
    roles = {r["size_bytes"]: r["role"] for r in table}
    assert roles == {
        4: "latency",
        1024: "latency",
        4096: "latency",
        1 << 16: "bandwidth",
        1 << 18: "bandwidth",
    }


def test_an_allreduce_row_whose_beta_term_is_exactly_half_gives_gamma():
    """γ's rows: β's term *at least* half the time. P = 2 allreduce, k_β = n: at 1 MiB,
    n·β = 2^-7 s, measured 2^-6 s, exactly half: a gamma row, and γ = its excess per k_γ =
    n/2: (2^-6 − 2·2^-13 − 2^-7)/2^19."""
    rows = [*DY_P2P, {"op": "allreduce", "size_bytes": 1 << 20, "seconds": [2.0**-6]}]
    fit, table = fit_link({"world_size": 2, "rows": rows}, latency_op=None)
    assert [r["role"] for r in table if r["op"] == "allreduce"] == ["gamma"]
    assert fit.gamma_op == "allreduce"
    expected = (2.0**-6 - 2 * DY_ALPHA - 2.0**-7) / 2.0**19
    assert fit.gamma_s_per_byte == pytest.approx(expected, rel=1e-12)


def test_an_allreduce_row_whose_bytes_are_exactly_a_fifth_gives_alpha():
    """latency_op's rows: β and γ's terms *at most* a fifth of the time. P = 2 allreduce of
    1 KiB: n·β = 2^-17 s, measured 5·2^-17 s (exactly a fifth); γ not fitted (gamma_op None):
    α = (t − n·β)/k_α = 4·2^-17/2 = 2^-16 s."""
    rows = [*DY_P2P, {"op": "allreduce", "size_bytes": 1024, "seconds": [5 * 2.0**-17]}]
    fit, table = fit_link({"world_size": 2, "rows": rows}, gamma_op=None)
    assert fit.latency_op == "allreduce"
    assert fit.latency_s == 2.0**-16
    assert [r["role"] for r in table if r["op"] == "allreduce"] == ["latency"]
