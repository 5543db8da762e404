"""The α-β-γ link fit: it recovers known links exactly, stays non-negative under noise, takes
bandwidth from large messages and latency from small ones, finds a step in the p2p line and
summarises the error per op."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.core.collectives import SIZE_HEADER_BYTES
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.models.linkfit import (
    cost_coefficients,
    fit_link,
    gathered_bytes,
    host_coefficient,
    host_points,
    op_errors,
    protocol_switch,
)
from vgcsim.traces.calibration import (
    MEASUREMENTS_KIND,
    MEASUREMENTS_VERSION,
    OPS,
    default_sizes_bytes,
)


def synthetic_measurements(alpha, beta, gamma, world, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for op in ("p2p", "allreduce", "allgather", "allgatherv"):
        for size in (4, 64, 1024, 16384, 262144, 4194304):
            a, b, g = cost_coefficients(op, size, world)
            t = a * alpha + b * beta + g * gamma
            reps = t * (1 + noise * rng.standard_normal(5))
            rows.append({"op": op, "size_bytes": size, "seconds": reps.tolist()})
    return {"world_size": world, "backend": "gloo", "rows": rows}


@pytest.mark.parametrize("world", [2, 4, 8])
def test_fit_recovers_a_known_link_exactly(world):
    fit, table = fit_link(synthetic_measurements(20e-6, 1 / 1.25e9, 2e-10, world))
    assert fit.latency_s == pytest.approx(20e-6, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(1.25e9, rel=1e-9)
    assert fit.gamma_s_per_byte == pytest.approx(2e-10, rel=1e-6)
    assert fit.rms_rel_error < 1e-9
    assert max(abs(r["rel_error"]) for r in table) < 1e-9


def test_fit_keeps_parameters_non_negative_under_noise():
    # gamma = 0 plus noise: an unconstrained fit could go negative; ours clamps to the
    # best non-negative solution and still finds alpha and beta to within the noise.
    fit, _ = fit_link(synthetic_measurements(50e-6, 1 / 1e8, 0.0, 4, noise=0.05, seed=3))
    assert fit.gamma_s_per_byte >= 0
    assert fit.latency_s == pytest.approx(50e-6, rel=0.15)
    assert fit.bandwidth_Bps == pytest.approx(1e8, rel=0.15)
    assert 0 < fit.rms_rel_error < 0.2


def test_ring_coefficients_match_the_textbook_costs():
    # P = 4, n = 1000 bytes: allreduce 6 alpha + 1500 beta + 750 gamma; allgather 3 alpha + 3000 beta.
    assert cost_coefficients("allreduce", 1000, 4) == (6.0, 1500.0, 750.0)
    assert cost_coefficients("allgather", 1000, 4) == (3.0, 3000.0, 0.0)
    assert cost_coefficients("p2p", 1000, 4) == (1.0, 1000.0, 0.0)
    # allgatherv = the padded model: 6 alpha + 3 * (1000 + 8) beta, 8 the int64 size header.
    assert SIZE_HEADER_BYTES == 8
    assert cost_coefficients("allgatherv", 1000, 4) == (6.0, 3024.0, 0.0)


def bucket_link_measurements(alpha, rate_Bps, burst_bytes, world=4, noise=0.02, seed=0):
    """A token-bucket link (tbf): the first ``burst_bytes`` of a message leave at once, the
    rest at ``rate_Bps``; p2p and allreduce from 4 B to 64 MiB, as the sweep measures them."""
    rng = np.random.default_rng(seed)
    rows = []
    for op in ("p2p", "allreduce"):
        for size in default_sizes_bytes():
            k_alpha, k_beta, _ = cost_coefficients(op, size, world)
            per_msg = k_beta / max(1.0, k_alpha)  # bytes per message of the ring
            t = k_alpha * (alpha + max(0.0, per_msg - burst_bytes) / rate_Bps)
            reps = t * (1 + noise * rng.standard_normal(7))
            rows.append({"op": op, "size_bytes": size, "seconds": reps.tolist()})
    return {
        "kind": MEASUREMENTS_KIND,
        "version": MEASUREMENTS_VERSION,
        "world_size": world,
        "backend": "gloo",
        "nodes": list(range(world)),
        "rows": rows,
    }


def test_bandwidth_comes_from_large_messages_and_latency_from_small_ones():
    # The case: a 25 MB/s link whose 1 MiB bucket swallows most small sizes. A fit
    # that weighs every size alike made it 3-4x too fast; the regimes find the rate.
    m = bucket_link_measurements(alpha=100e-6, rate_Bps=25e6, burst_bytes=1 << 20)
    fit, table = fit_link(m, segments=False)  # one line (size segments: the test below)
    assert fit.bandwidth_Bps == pytest.approx(25e6, rel=0.03)
    assert fit.latency_s == pytest.approx(100e-6, rel=0.1)
    assert fit.fit_ops == ("p2p",) and fit.gamma_op == "allreduce"
    roles = {r["size_bytes"]: r["role"] for r in table if r["op"] == "p2p"}
    assert roles[4] == "latency" and roles[64 << 20] == "bandwidth"
    # The bucket is real: the sizes it swallows are predicted too slow, so the typical error
    # says that one alpha-beta line does not describe this link at every size.
    assert fit.typical_error > 0.5
    # Above the bucket the line is right.
    large = [r for r in table if r["op"] == "p2p" and r["size_bytes"] >= 16 << 20]
    assert all(abs(r["rel_error"]) < 0.1 for r in large)


def test_a_step_in_the_p2p_line_is_reported_where_it_is():
    def table(step_at):
        rows = []
        for n in default_sizes_bytes():
            # Eager below the switch, a rendezvous round trip (+300 us) from it on.
            t = 20e-6 + n / 1e9 + (300e-6 if n >= step_at else 0.0)
            rows.append({"op": "p2p", "size_bytes": n, "measured_s": t, "fitted_s": t})
        return rows

    found = protocol_switch(table(65536))
    assert found is not None
    assert (found["below_bytes"], found["above_bytes"]) == (16384, 65536)
    assert found["below"][0] == pytest.approx(20e-6, rel=0.05)
    assert found["above"][0] == pytest.approx(320e-6, rel=0.05)
    assert protocol_switch(table(1 << 40)) is None  # one straight line: nothing to report


def test_op_errors_are_the_typical_factor_per_op():
    # Fitted twice the measurement on every p2p row: exp(|log 2|) - 1 = 100 %; allreduce exact.
    table = [
        {"op": "p2p", "size_bytes": 8, "measured_s": 1.0, "fitted_s": 2.0},
        {"op": "p2p", "size_bytes": 64, "measured_s": 3.0, "fitted_s": 1.5},
        {"op": "allreduce", "size_bytes": 8, "measured_s": 5.0, "fitted_s": 5.0},
    ]
    errors = op_errors(table)
    assert list(errors) == ["p2p", "allreduce"]
    assert errors["p2p"] == pytest.approx(1.0) and errors["allreduce"] == 0.0


def test_a_bad_statistic_is_refused_before_fitting():

    with pytest.raises(UnknownNameError, match="unknown statistic 'mean'"):
        fit_link(synthetic_measurements(20e-6, 1e-9, 0.0, 2), "mean")


def test_gamma_is_the_per_byte_slope_not_a_per_message_overhead():
    # A 4-rank link alpha = 100 us, beta = 1/(25 MB/s), whose allreduce pays gamma = 1 ns/B
    # plus a per-call overhead of 5 ms that p2p does not pay (extra handshakes per ring
    # step). Hand arithmetic for n = 64 KiB: 6 alpha + 1.5 n beta + 0.75 n gamma + 5 ms
    # = 0.6 + 3.93216 + 0.049152 + 5 ms; the overhead is half the time there but 0.1 % at
    # 64 MiB. gamma is the slope of the excess over alpha and beta's terms: exactly 1 ns/B.
    # (Fitting relative errors, as before, the small rows' overhead gave gamma = 3.07 ns/B here.)
    alpha, beta, gamma, world, overhead = 100e-6, 1 / 25e6, 1e-9, 4, 5e-3
    rows = []
    for size in (64, 1024, 65536, 1 << 20, 16 << 20, 64 << 20):
        rows.append({"op": "p2p", "size_bytes": size, "seconds": [alpha + size * beta] * 3})
        a, b, g = cost_coefficients("allreduce", size, world)
        t = a * alpha + b * beta + g * gamma + overhead
        rows.append({"op": "allreduce", "size_bytes": size, "seconds": [t] * 3})
    fit, table = fit_link({"world_size": world, "backend": "gloo", "rows": rows})
    assert fit.fit_ops_latency_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(25e6, rel=1e-9)
    assert fit.gamma_s_per_byte == pytest.approx(gamma, rel=1e-6)
    # The link's alpha is a collective step's, from the small allreduces (64 B, 1 KiB):
    # alpha + 5 ms / 6 steps = 933.3 us, so the overhead is priced at every size
    assert fit.latency_op == "allreduce"
    assert fit.latency_s == pytest.approx(alpha + overhead / 6, rel=1e-6)
    big = next(r for r in table if r["op"] == "allreduce" and r["size_bytes"] == 64 << 20)
    assert big["role"] == "gamma" and abs(big["rel_error"]) < 1e-6
    small = next(r for r in table if r["op"] == "allreduce" and r["size_bytes"] == 1024)
    assert small["role"] == "latency" and abs(small["rel_error"]) < 1e-6
    # with alpha from p2p alone the overhead is left out: half the 64 KiB allreduce's time
    p2p_alpha, _ = fit_link({"world_size": world, "backend": "gloo", "rows": rows}, latency_op=None)
    assert p2p_alpha.latency_s == pytest.approx(alpha, rel=1e-9)


def test_gamma_from_one_bandwidth_bound_size_is_its_excess_per_byte():
    # One allreduce size only: 6 alpha + 1.5 n beta + 0.75 n gamma with n = 4 MB, P = 4.
    alpha, beta, gamma, world, n = 50e-6, 1e-8, 3e-10, 4, 4_000_000
    a, b, g = cost_coefficients("allreduce", n, world)
    rows = [
        {"op": "p2p", "size_bytes": s, "seconds": [alpha + s * beta] * 3}
        for s in (4, 1024, 1 << 20, 16 << 20)
    ]
    rows.append({"op": "allreduce", "size_bytes": n, "seconds": [a * alpha + b * beta + g * gamma]})
    fit, _ = fit_link({"world_size": world, "backend": "gloo", "rows": rows})
    assert fit.gamma_s_per_byte == pytest.approx(gamma, rel=1e-6)


def _overhead_rows(gamma: float, overhead: float = 5e-3) -> dict:
    """p2p at α = 100 µs, β = 1/(25 MB/s); allreduce on 4 ranks with γ and a per-call overhead
    (6α + 1.5nβ + 0.75nγ + overhead), exact times."""
    alpha, beta, world = 100e-6, 1 / 25e6, 4
    rows = []
    for size in (64, 1024, 65536, 1 << 20, 16 << 20, 64 << 20):
        rows.append({"op": "p2p", "size_bytes": size, "seconds": [alpha + size * beta]})
        a, b, g = cost_coefficients("allreduce", size, world)
        rows.append(
            {
                "op": "allreduce",
                "size_bytes": size,
                "seconds": [a * alpha + b * beta + g * gamma + overhead],
            }
        )
    return {"world_size": world, "backend": "gloo", "rows": rows}


def test_p2p_rows_keep_their_own_alpha_when_the_link_takes_the_collective_step():
    # the link's α is 100 µs + 5 ms / 6 (hand), yet the p2p rows, which fix β and the
    # typical error, are priced with p2p's own 100 µs: exact, so no error at all
    fit, table = fit_link(_overhead_rows(1e-9))
    assert fit.latency_s == pytest.approx(100e-6 + 5e-3 / 6, rel=1e-6)
    assert fit.fit_ops_latency_s == pytest.approx(100e-6, rel=1e-9)
    assert fit.rms_rel_error < 1e-9 and fit.typical_error < 1e-9
    for r in table:
        if r["op"] == "p2p":
            assert abs(r["rel_error"]) < 1e-9, r


def test_without_a_latency_op_the_link_keeps_the_fit_ops_alpha():
    fit, _ = fit_link(_overhead_rows(1e-9), latency_op=None)
    assert fit.latency_op == "" and fit.latency_s == pytest.approx(100e-6, rel=1e-9)
    # allreduce among the ops that fix alpha and beta: it is fitted, not a latency source
    fit, table = fit_link(_overhead_rows(1e-9), ops=("p2p", "allreduce"))
    assert fit.latency_op == ""
    assert fit.latency_s == pytest.approx(fit.fit_ops_latency_s, rel=1e-12)
    # and when allreduce was not measured at all
    m = _overhead_rows(1e-9)
    m["rows"] = [r for r in m["rows"] if r["op"] == "p2p"]
    fit, _ = fit_link(m)
    assert fit.latency_op == "" and fit.latency_s == pytest.approx(100e-6, rel=1e-9)


def test_the_collective_step_latency_does_not_need_a_reduction_cost():
    # γ = 0: the allreduce's small messages still give the link's α
    fit, _ = fit_link(_overhead_rows(0.0))
    assert fit.gamma_s_per_byte == pytest.approx(0.0, abs=1e-15)
    assert fit.latency_op == "allreduce"
    assert fit.latency_s == pytest.approx(100e-6 + 5e-3 / 6, rel=1e-6)


def test_size_segments_describe_the_bucket_that_one_line_cannot():
    m = bucket_link_measurements(alpha=100e-6, rate_Bps=25e6, burst_bytes=1 << 20)
    fit, table = fit_link(m)
    assert len(fit.segments) >= 2
    assert fit.bandwidth_Bps == pytest.approx(25e6, rel=0.03)
    # 2 % noise per repetition: the medians' rms log error stays near it
    assert fit.typical_error < 0.05


# Hand-worked checks of the linkfit model: expected numbers from the formulas in its docstrings
# on small, exact inputs, documented contracts and one-line error messages.


def _message(exc_info) -> str:
    return str(exc_info.value)


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
    0-byte row (6 ms → 1 ms) and the 64-byte row (12 ms + 96·β → 2 ms) give 1.5 ms."""
    rows = P2P + [
        {"op": "allreduce", "size_bytes": 0, "seconds": [6e-3]},
        {"op": "allreduce", "size_bytes": 64, "seconds": [12e-3 + 96 * BETA]},
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
