"""The α-β-γ link fit: it recovers known links exactly, stays non-negative under noise, takes
bandwidth from large messages and latency from small ones, finds a step in the p2p line and
summarises the error per op."""

from __future__ import annotations

import numpy as np
import pytest
from vgcsim.models.linkfit import cost_coefficients, fit_link, op_errors, protocol_switch
from vgcsim.traces.calibration import (
    MEASUREMENTS_KIND,
    MEASUREMENTS_VERSION,
    default_sizes_bytes,
)

from vgcsim.core.collectives import SIZE_HEADER_BYTES


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
    from vgcsim.core.errors import UnknownNameError

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
    for size in (4, 1024, 65536, 1 << 20, 16 << 20, 64 << 20):
        rows.append({"op": "p2p", "size_bytes": size, "seconds": [alpha + size * beta] * 3})
        a, b, g = cost_coefficients("allreduce", size, world)
        t = a * alpha + b * beta + g * gamma + overhead
        rows.append({"op": "allreduce", "size_bytes": size, "seconds": [t] * 3})
    fit, table = fit_link({"world_size": world, "backend": "gloo", "rows": rows})
    assert fit.fit_ops_latency_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(25e6, rel=1e-9)
    assert fit.gamma_s_per_byte == pytest.approx(gamma, rel=1e-6)
    # The link's alpha is a collective step's, from the small allreduces (4 B, 1 KiB):
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
    for size in (4, 1024, 65536, 1 << 20, 16 << 20, 64 << 20):
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
