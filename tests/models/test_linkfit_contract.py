"""The link fit and the point-to-point model against hand-worked links.

Every expected value is worked out from the formulas of the ``vgcsim.models.linkfit`` module
docstring (``t = α + n·β`` for one message; the regimes: bandwidth from 4× the fastest time,
latency while β's term is at most a fifth of the time) on exact α-β lines, not read back from
the implementation.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from vgcsim.core.cluster import LinkSpec
from vgcsim.core.errors import ConfigError, VgcsimError
from vgcsim.models.linkfit import LinkFit, fit_intra_link, fit_link, protocol_switch
from vgcsim.models.pointtopoint import p2p_time_s

# α = 100 µs, β = 1e-8 s/B (100 MB/s). Fastest time ≈ 100 µs, so the bandwidth regime starts
# at 4 × 100 µs: β·n ≥ 300 µs ⇔ n ≥ 30 000 B; the latency regime holds while
# β·n ≤ 0.2·(α + β·n) ⇔ n ≤ 2 500 B. 4 096 and 16 384 B lie between.
ALPHA, BETA = 100e-6, 1e-8
SIZES = (4, 1024, 4096, 16384, 65536, 1 << 20)
ROLES = {
    4: "latency",
    1024: "latency",
    4096: "between",
    16384: "between",
    65536: "bandwidth",
    1 << 20: "bandwidth",
}


def _rows(op, alpha=ALPHA, beta=BETA, sizes=SIZES, spread=(1.0, 1.0, 1.0)):
    return [
        {"op": op, "size_bytes": n, "seconds": [(alpha + n * beta) * f for f in spread]}
        for n in sizes
    ]


def test_p2p_time_is_latency_plus_bytes_over_the_payload_rate():
    # 1 GB/s at 80 % efficiency: 800 MB/s payload; 1 MB -> 1.25 ms + 10 µs
    link = LinkSpec("l", bandwidth_Bps=1e9, latency_s=10e-6, efficiency=0.8)
    got = p2p_time_s([0, 1_000_000], link)
    assert got[0] == pytest.approx(10e-6, rel=1e-12)  # a zero-byte message still pays α
    assert got[1] == pytest.approx(10e-6 + 1.25e-3, rel=1e-12)


def test_regimes_recover_an_exact_line_and_name_each_rows_role():
    fit, table = fit_link({"world_size": 2, "backend": "gloo", "rows": _rows("p2p")})
    assert fit.method == "regimes" and fit.fit_ops == ("p2p",)
    assert fit.latency_s == pytest.approx(ALPHA, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(1 / BETA, rel=1e-9)
    assert fit.gamma_s_per_byte == 0.0 and fit.gamma_op == ""
    assert fit.world_size == 2 and fit.backend == "gloo"
    assert fit.rms_rel_error < 1e-9 and fit.rms_log_error < 1e-9
    assert {r["size_bytes"]: r["role"] for r in table} == ROLES
    for r in table:
        assert r["measured_s"] == pytest.approx(ALPHA + r["size_bytes"] * BETA, rel=1e-12)
        assert r["fitted_s"] == pytest.approx(r["measured_s"], rel=1e-9)
        assert isinstance(r["size_bytes"], int) and r["op"] == "p2p"


def test_the_statistic_picks_the_median_or_the_minimum_of_the_repetitions():
    # repetitions t, 2t, 4t: the median is 2t (α, β doubled), the minimum t
    m = {"world_size": 2, "backend": "gloo", "rows": _rows("p2p", spread=(1.0, 2.0, 4.0))}
    med, _ = fit_link(m, "median")
    low, _ = fit_link(m, "min")
    assert med.latency_s == pytest.approx(2 * ALPHA, rel=1e-9)
    assert med.bandwidth_Bps == pytest.approx(1 / (2 * BETA), rel=1e-9)
    assert low.latency_s == pytest.approx(ALPHA, rel=1e-9)
    assert low.bandwidth_Bps == pytest.approx(1 / BETA, rel=1e-9)


def test_fit_link_leaves_out_the_intra_node_rows_and_fit_intra_link_takes_only_them():
    # inter-node: α = 100 µs, β = 1e-8; intra-node: α = 5 µs, β = 1e-10 (10 GB/s)
    intra = _rows("p2p_intra", alpha=5e-6, beta=1e-10, sizes=(4, 1024, 1 << 16, 1 << 20, 1 << 24))
    m = {"world_size": 8, "backend": "nccl", "rows": _rows("p2p") + intra}
    inter, table = fit_link(m)
    assert inter.latency_s == pytest.approx(ALPHA, rel=1e-9)
    assert inter.bandwidth_Bps == pytest.approx(1 / BETA, rel=1e-9)
    assert all(r["op"] == "p2p" for r in table)
    fit, itable = fit_intra_link(m)
    assert fit.latency_s == pytest.approx(5e-6, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(1e10, rel=1e-9)
    assert fit.gamma_s_per_byte == 0.0
    assert fit.world_size == 8 and fit.backend == "nccl"
    assert fit.fit_ops == ("p2p_intra",) and fit.method == "regimes"
    assert fit.rms_rel_error < 1e-9 and fit.rms_log_error < 1e-9
    assert [r["op"] for r in itable] == ["p2p_intra"] * 5
    assert itable[0]["role"] == "latency" and itable[-1]["role"] == "bandwidth"
    assert fit_intra_link({"world_size": 2, "rows": _rows("p2p")}) is None


def test_intra_fit_errors_are_the_rms_of_the_relative_and_log_errors():
    # Two latency-bound sizes measured 1 µs and 3 µs above the line α = 5 µs, β = 1e-10 that
    # the two large sizes lie on exactly: the fit takes β from the large sizes and α from the
    # small ones, so the small rows keep an error that the rms errors must show.
    rows = [
        {"op": "p2p_intra", "size_bytes": 4, "seconds": [6e-6]},
        {"op": "p2p_intra", "size_bytes": 8, "seconds": [8e-6]},
        {"op": "p2p_intra", "size_bytes": 1 << 20, "seconds": [5e-6 + (1 << 20) * 1e-10]},
        {"op": "p2p_intra", "size_bytes": 1 << 24, "seconds": [5e-6 + (1 << 24) * 1e-10]},
    ]
    fit, table = fit_intra_link({"world_size": 2, "rows": rows})
    # bandwidth rows: the two large ones (≥ 4 × 6 µs); their line: β = 1e-10, intercept 5 µs.
    # latency rows: 4 and 8 B (β·n ≈ 1e-9 s ≪ a fifth); α = median(6e-6 − 4e-10, 8e-6 − 8e-10)
    alpha = (6e-6 - 4e-10 + 8e-6 - 8e-10) / 2
    assert fit.latency_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(1e10, rel=1e-6)
    fitted = np.array([alpha + n * 1e-10 for n in (4, 8, 1 << 20, 1 << 24)])
    measured = np.array([r["seconds"][0] for r in rows])
    rel = (fitted - measured) / measured
    assert fit.rms_rel_error == pytest.approx(math.sqrt(np.mean(rel**2)), rel=1e-6)
    logs = np.log(fitted / measured)
    assert fit.rms_log_error == pytest.approx(math.sqrt(np.mean(logs**2)), rel=1e-6)
    assert [r["rel_error"] for r in table] == pytest.approx(list(rel), rel=1e-6, abs=1e-12)


def test_non_positive_times_and_missing_rows_are_refused():
    bad = _rows("p2p")
    bad[0]["seconds"] = [0.0]
    with pytest.raises(VgcsimError, match="a measured time is not positive"):
        fit_link({"world_size": 2, "rows": bad})
    bad_intra = _rows("p2p_intra")
    bad_intra[2]["seconds"] = [-1.0]
    with pytest.raises(VgcsimError, match="a measured time is not positive"):
        fit_intra_link({"world_size": 2, "rows": bad_intra})
    with pytest.raises(ConfigError, match="hold no rows for the inter-node link"):
        fit_link({"world_size": 2, "rows": _rows("p2p_intra")})
    msg = r"none of the ops to fit \(allgather, allreduce\) was measured \(measured: p2p\)"
    with pytest.raises(ConfigError, match=msg):
        fit_link({"world_size": 2, "rows": _rows("p2p")}, ops=("allgather", "allreduce"))


def test_without_p2p_every_measured_collective_fixes_the_link():
    # allgather (P = 4): 3α + 3n·β; allgatherv: 6α + 3(n + 8)·β; no p2p, no γ term
    rows = []
    for op, coef in (
        ("allgather", lambda n: (3, 3 * n)),
        ("allgatherv", lambda n: (6, 3 * (n + 8))),
    ):
        for n in SIZES:
            ka, kb = coef(n)
            rows.append({"op": op, "size_bytes": n, "seconds": [ka * ALPHA + kb * BETA]})
    fit, table = fit_link({"world_size": 4, "rows": rows})
    assert fit.fit_ops == ("allgather", "allgatherv")
    assert fit.latency_s == pytest.approx(ALPHA, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(1 / BETA, rel=1e-9)
    assert fit.backend == ""
    # ops= names the fitting ops; the others are checks only
    fit2, table2 = fit_link({"world_size": 4, "rows": rows}, ops=("allgatherv", "p2p"))
    assert fit2.fit_ops == ("allgatherv",)
    assert {r["role"] for r in table2 if r["op"] == "allgather"} == {"check"}
    assert fit2.latency_s == pytest.approx(ALPHA, rel=1e-9)


def test_gamma_op_none_leaves_gamma_at_zero_and_allreduce_rows_as_checks():
    # allreduce on P = 4 with γ = 1e-9: 6α + 1.5n·β + 0.75n·γ
    rows = _rows("p2p")
    for n in SIZES:
        rows.append(
            {
                "op": "allreduce",
                "size_bytes": n,
                "seconds": [6 * ALPHA + 1.5 * n * BETA + 0.75 * n * 1e-9],
            }
        )
    m = {"world_size": 4, "rows": rows}
    no_gamma, table = fit_link(m, gamma_op=None, latency_op=None)
    assert no_gamma.gamma_s_per_byte == 0.0 and no_gamma.gamma_op == ""
    assert {r["role"] for r in table if r["op"] == "allreduce"} == {"check"}
    with_gamma, table = fit_link(m)
    assert with_gamma.gamma_s_per_byte == pytest.approx(1e-9, rel=1e-9)
    assert with_gamma.gamma_op == "allreduce"
    # the errors count only the rows of the ops that fixed α and β (p2p: exact)
    assert with_gamma.rms_rel_error < 1e-9
    # γ comes from the rows where β's term is at least half the time: 1.5n·β ≥ 0.5·t
    roles = {r["size_bytes"]: r["role"] for r in table if r["op"] == "allreduce"}
    assert roles[1 << 20] == "gamma"
    # the smallest, latency-bound, give the link's α (equal to p2p's here: no overhead)
    assert roles[4] == "latency" and with_gamma.latency_op == "allreduce"
    assert with_gamma.latency_s == pytest.approx(ALPHA, rel=1e-6)


def test_typical_error_is_exp_of_the_rms_log_error_minus_one():
    fit = LinkFit(1e-6, 1e9, 0.0, 0.1, math.log(1.5), 2, "gloo")
    assert fit.typical_error == pytest.approx(0.5, rel=1e-12)
    assert fit.method == "regimes" and fit.fit_ops == () and fit.gamma_op == ""


def _p2p(times):
    return {
        "world_size": 2,
        "rows": [{"op": "p2p", "size_bytes": n, "seconds": [t]} for n, t in times],
    }


def test_a_negative_bandwidth_intercept_is_allowed_so_a_burst_leaves_the_slope_exact():
    # A token bucket: the first 1e6 B leave at once, the rest at 25 MB/s:
    # t = 100 µs + max(0, n − 1e6) / 25e6. Bandwidth rows (≥ 4 × 100 µs): n ≥ 1 007 500 B, all
    # on the line t = (100 µs − 40 ms) + n·4e-8, whose intercept is negative. Latency rows
    # (β·n ≤ t/5): only 4 B, so α = 100 µs − 4·4e-8.
    sizes = (4, 1024, 65536, 1 << 20, 4 << 20, 16 << 20)
    m = _p2p([(n, 100e-6 + max(0, n - 1e6) / 25e6) for n in sizes])
    fit, table = fit_link(m)
    assert fit.bandwidth_Bps == pytest.approx(25e6, rel=1e-9)
    assert fit.latency_s == pytest.approx(100e-6 - 4 * 4e-8, rel=1e-9)
    roles = [r["role"] for r in table]
    assert roles == ["latency", "between", "between", "bandwidth", "bandwidth", "bandwidth"]


def test_without_latency_rows_alpha_is_the_bandwidth_intercept():
    # α = 1 µs, β = 1e-8: at 64 KiB β·n is 99.8 % of t, so no row is latency-bound; the
    # bandwidth rows (t ≥ 4 × t(64 KiB) = 2.625 ms; 256 KiB takes 2.622 ms) are 1 MiB and
    # 4 MiB, on the exact line: α = 1 µs.
    sizes = (1 << 16, 1 << 17, 1 << 18, 1 << 20, 1 << 22)
    fit, table = fit_link(_p2p([(n, 1e-6 + n * 1e-8) for n in sizes]))
    assert fit.latency_s == pytest.approx(1e-6, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(1e8, rel=1e-9)
    assert [r["role"] for r in table] == ["between"] * 3 + ["bandwidth"] * 2


def test_alpha_is_never_negative():
    # as above with a bandwidth intercept of −10 µs and no latency rows: α = max(−10 µs, 0) = 0
    sizes = (1 << 16, 1 << 17, 1 << 18, 1 << 20, 1 << 22)
    fit, _ = fit_link(_p2p([(n, -10e-6 + n * 1e-8) for n in sizes]))
    assert fit.latency_s == 0.0
    assert fit.bandwidth_Bps == pytest.approx(1e8, rel=1e-9)


def test_small_messages_only_use_the_joint_log_ratio_fit():
    # α = 100 µs, β = 1e-8 up to 16 KiB: t ≤ 264 µs < 4 × 100 µs, no bandwidth regime. The
    # joint fit minimises the log ratio; on an exact line that minimum is the line itself.
    sizes = (4, 64, 1024, 4096, 16384)
    fit, table = fit_link(_p2p([(n, 100e-6 + n * 1e-8) for n in sizes]))
    assert fit.method == "joint"
    assert [r["role"] for r in table] == ["joint"] * 5
    assert fit.latency_s == pytest.approx(100e-6, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(1e8, rel=1e-6)


def test_a_bandwidth_regime_without_a_positive_slope_falls_back_to_the_joint_fit():
    # times that fall with size among the large messages: the bandwidth rows' best slope is 0
    m = _p2p([(4, 1e-4), (64, 1e-4), (1 << 20, 1e-3), (1 << 24, 5e-4)])
    fit, table = fit_link(m)
    assert fit.method == "joint"
    assert {r["role"] for r in table} == {"joint"}


def test_p2p_and_allreduce_fitted_together_separate_beta_and_gamma():
    # P = 4: allreduce 6α + 1.5n·β + 0.75n·γ; p2p α + n·β. Exact rows: every latency row
    # gives exactly α (its bandwidth and reduction terms are subtracted), so the median is α.
    alpha, beta, gamma = 100e-6, 1e-8, 1e-9
    rows = _rows("p2p", alpha, beta)
    for n in SIZES:
        t = 6 * alpha + 1.5 * n * beta + 0.75 * n * gamma
        rows.append({"op": "allreduce", "size_bytes": n, "seconds": [t]})
    fit, _ = fit_link({"world_size": 4, "rows": rows}, ops=("p2p", "allreduce"))
    assert fit.fit_ops == ("p2p", "allreduce") and fit.method == "regimes"
    assert fit.latency_s == pytest.approx(alpha, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(1 / beta, rel=1e-9)
    assert fit.gamma_s_per_byte == pytest.approx(gamma, rel=1e-6)
    assert fit.gamma_op == ""  # γ came from the fit itself


def _allreduce_on_exact_p2p(sizes, extra_s, alpha=100e-6, beta=1 / 25e6, gamma=1e-9):
    rows = [
        {"op": "p2p", "size_bytes": s, "seconds": [alpha + s * beta]}
        for s in (4, 1024, 1 << 20, 16 << 20)
    ]
    for n in sizes:
        t = 6 * alpha + 1.5 * n * beta + 0.75 * n * gamma + extra_s
        rows.append({"op": "allreduce", "size_bytes": n, "seconds": [t]})
    return {"world_size": 4, "rows": rows}


def test_gamma_from_two_sizes_is_their_slope_not_one_rows_excess():
    # two bandwidth-bound allreduce sizes with a 5 ms per-call overhead: the slope of the
    # excess over α and β's terms between them is exactly γ = 1 ns/B
    fit, _ = fit_link(_allreduce_on_exact_p2p((16 << 20, 64 << 20), 5e-3))
    assert fit.gamma_s_per_byte == pytest.approx(1e-9, rel=1e-6)


def test_gamma_slope_with_an_allreduce_faster_than_its_terms():
    # a per-call time of −2 ms (the intercept may be negative): still the slope, 1 ns/B
    fit, _ = fit_link(_allreduce_on_exact_p2p((4 << 20, 16 << 20, 64 << 20), -2e-3))
    assert fit.gamma_s_per_byte == pytest.approx(1e-9, rel=1e-6)


def test_a_gamma_op_without_a_reduction_term_gives_gamma_zero():
    # allgather has no γ term (k_γ = 0): γ = 0, and its bandwidth-bound rows are "gamma" rows
    rows = [{"op": "p2p", "size_bytes": s, "seconds": [1e-4 + s * 1e-8]} for s in SIZES]
    rows += [{"op": "allgather", "size_bytes": s, "seconds": [3e-4 + 3 * s * 1e-8]} for s in SIZES]
    fit, table = fit_link({"world_size": 4, "rows": rows}, gamma_op="allgather")
    assert fit.gamma_s_per_byte == 0.0 and fit.gamma_op == "allgather"
    assert {r["role"] for r in table if r["op"] == "allgather" and r["size_bytes"] >= 65536} == {
        "gamma"
    }


def test_gamma_of_one_byte_on_a_link_without_latency():
    # α = 0: a 1-byte allreduce on P = 4 is bandwidth-bound, t = 1.5β + 0.75γ; its excess
    # over β's term per γ coefficient is γ exactly (k_γ² = 0.5625 < 1 is no reason to drop it)
    beta, gamma = 1e-8, 4e-9
    rows = [{"op": "p2p", "size_bytes": s, "seconds": [s * beta]} for s in (1, 1024, 1 << 20)]
    rows.append({"op": "allreduce", "size_bytes": 1, "seconds": [1.5 * beta + 0.75 * gamma]})
    fit, _ = fit_link({"world_size": 4, "rows": rows})
    assert fit.latency_s == pytest.approx(0.0, abs=1e-18)
    assert fit.gamma_s_per_byte == pytest.approx(gamma, rel=1e-6)


def test_p2p_time_is_float64_even_for_float32_sizes():
    # 1e6 B in float32 on a 1 GB/s link with α = 10 µs: 1.01 ms in float64 arithmetic
    link = LinkSpec("l", bandwidth_Bps=1e9, latency_s=10e-6)
    got = p2p_time_s(np.array([1e6, 3.0], dtype=np.float32), link)
    assert got.dtype == np.float64
    assert got[0] == 10e-6 + 1e6 * 1e-9 and got[1] == 10e-6 + 3.0 * 1e-9


def test_a_row_at_exactly_four_times_the_fastest_time_is_in_the_bandwidth_regime():
    # times in powers of two, so 4 × the fastest (2⁻¹³ s) is exactly the 1 MiB row's 2⁻¹¹ s:
    # with the 4 MiB row that makes two bandwidth sizes, enough for the regimes fit
    rows = [(4, 2.0**-13), (1 << 20, 2.0**-11), (1 << 22, 2.0**-11 + 3 * 2.0**-10)]
    fit, table = fit_link(_p2p(rows))
    assert fit.method == "regimes"
    assert [r["role"] for r in table] == ["latency", "bandwidth", "bandwidth"]


def _intra(times, **extra):
    return {
        "world_size": 2,
        "rows": [{"op": "p2p_intra", "size_bytes": n, "seconds": list(t)} for n, t in times],
        **extra,
    }


def test_intra_fit_reads_the_statistic_and_defaults_the_backend_to_empty():
    # repetitions t, 2t, 4t of α = 5 µs, β = 1e-10: the minimum is the line, the median twice it
    sizes = (4, 1024, 1 << 16, 1 << 20, 1 << 24)
    times = [(n, [f * (5e-6 + n * 1e-10) for f in (1.0, 2.0, 4.0)]) for n in sizes]
    low, _ = fit_intra_link(_intra(times), "min")
    med, _ = fit_intra_link(_intra(times))
    assert low.latency_s == pytest.approx(5e-6, rel=1e-9)
    assert med.latency_s == pytest.approx(10e-6, rel=1e-9)
    assert low.backend == ""  # no backend in the file


def test_intra_fit_of_a_flat_line_has_infinite_bandwidth_and_says_joint():
    # 7 µs at every size: no bandwidth regime (nothing reaches 4 × 7 µs), the joint fit
    # finds no per-byte cost: β = 0, so the bandwidth is infinite, without a division warning
    times = [(n, [7e-6]) for n in (4, 1024, 65536)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit, table = fit_intra_link(_intra(times, backend="nccl"))
    assert fit.method == "joint" and fit.backend == "nccl"
    assert fit.bandwidth_Bps == math.inf
    assert fit.latency_s == pytest.approx(7e-6, rel=1e-6)
    assert [r["role"] for r in table] == ["joint"] * 3


def test_an_intra_node_time_of_zero_is_refused_with_its_message():
    times = [(4, [1e-6]), (1024, [0.0]), (1 << 20, [1e-4])]
    with pytest.raises(
        VgcsimError, match=r"^a measured time is not positive; the timer or the sweep is broken$"
    ):
        fit_intra_link(_intra(times))


# -- the two solvers against scipy's, and the summaries -------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("free", [(), (0,)])
def test_small_nnls_is_the_constrained_least_squares_optimum(seed, free):
    # reference: scipy's bounded least squares (free columns unbounded, the others >= 0)
    from scipy.optimize import lsq_linear

    from vgcsim.models.linkfit import _nnls_small

    rng = np.random.default_rng(seed)
    a = rng.uniform(0.1, 1.0, size=(7, 3))
    b = a @ np.array([0.5, -1.0, 2.0]) + 0.3 * rng.standard_normal(7)
    lower = np.array([-np.inf if j in free else 0.0 for j in range(3)])
    ref = lsq_linear(a, b, bounds=(lower, np.full(3, np.inf)), tol=1e-14, lsmr_tol="auto")
    got = _nnls_small(a, b, free=free)
    assert np.all(got[[j for j in range(3) if j not in free]] >= 0)
    res_got = float(np.sum((a @ got - b) ** 2))
    assert res_got == pytest.approx(float(np.sum((a @ ref.x - b) ** 2)), rel=1e-9, abs=1e-15)
    assert got == pytest.approx(ref.x, rel=1e-6, abs=1e-9)


def test_joint_fit_is_the_least_squared_log_ratio():
    # noisy small messages (no bandwidth regime): the joint fit must reach the minimum of
    # Σ (log(α + n·β) − log t)² over α, β ≥ 0, found here independently by scipy
    from scipy.optimize import least_squares

    sizes = np.array([4, 64, 512, 2048, 8192, 16384], dtype=float)
    noise = np.array([1.3, 0.8, 1.1, 0.7, 1.25, 0.9])
    t = (100e-6 + sizes * 1e-8) * noise
    fit, _ = fit_link(_p2p(list(zip(sizes.astype(int).tolist(), t.tolist(), strict=True))))
    assert fit.method == "joint"

    def resid(p):
        return np.log(p[0] * 1e-4 + sizes * p[1] * 1e-8) - np.log(t)

    ref = least_squares(
        resid, x0=[2.0, 2.0], bounds=([0, 0], [np.inf, np.inf]), xtol=1e-15, ftol=1e-15, gtol=1e-15
    )
    assert fit.latency_s == pytest.approx(ref.x[0] * 1e-4, rel=1e-5)
    assert 1 / fit.bandwidth_Bps == pytest.approx(ref.x[1] * 1e-8, rel=1e-5)
    # and its error summaries are those of the fitted line
    fitted = fit.latency_s + sizes / fit.bandwidth_Bps
    assert fit.rms_log_error == pytest.approx(math.sqrt(np.mean(np.log(fitted / t) ** 2)), rel=1e-9)
    assert fit.rms_rel_error == pytest.approx(math.sqrt(np.mean(((fitted - t) / t) ** 2)), rel=1e-9)


def test_fit_link_of_a_flat_line_has_infinite_bandwidth_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit, _ = fit_link(_p2p([(4, 7e-6), (1024, 7e-6), (65536, 7e-6)]))
    assert fit.bandwidth_Bps == math.inf and fit.method == "joint"


def test_refusals_name_the_problem_exactly():
    from vgcsim.models.linkfit import cost_coefficients

    with pytest.raises(
        ConfigError,
        match=r"^unknown op 'bcast'; valid: p2p, p2p_intra, allreduce, allgather, allgatherv, "
        r"allgatherv_skewed$",
    ):
        cost_coefficients("bcast", 8, 2)
    with pytest.raises(
        ConfigError, match=r"^calibration measurements hold no rows for the inter-node link$"
    ):
        fit_link({"world_size": 2, "rows": _rows("p2p_intra")})
    both = _rows("p2p") + [
        {"op": "allreduce", "size_bytes": 8, "seconds": [1e-3]},
    ]
    with pytest.raises(
        ConfigError,
        match=r"^none of the ops to fit \(allgather\) was measured \(measured: allreduce, p2p\)$",
    ):
        fit_link({"world_size": 2, "rows": both}, ops=("allgather",))
    zero = _rows("p2p")
    zero[3]["seconds"] = [0.0]
    with pytest.raises(
        VgcsimError, match=r"^a measured time is not positive; the timer or the sweep is broken$"
    ):
        fit_link({"world_size": 2, "rows": zero})


# -- protocol_switch: where one α-β line becomes another -------------------------------------


def _line_table(sizes, step_at, below=(20e-6, 1e-9), above=(320e-6, 1e-9)):
    rows = []
    for n in sizes:
        a, b = below if n < step_at else above
        t = a + n * b
        rows.append({"op": "p2p", "size_bytes": n, "measured_s": t, "fitted_s": t})
    return rows


SIX = (1024, 4096, 16384, 65536, 262144, 1048576)


def test_six_sizes_are_enough_for_a_switch_with_three_on_each_side():
    found = protocol_switch(_line_table(SIX, 65536))
    assert found is not None
    assert (found["below_bytes"], found["above_bytes"]) == (16384, 65536)
    assert found["below"] == pytest.approx((20e-6, 1e-9), rel=1e-5)
    assert found["above"] == pytest.approx((320e-6, 1e-9), rel=1e-5)
    assert protocol_switch(_line_table(SIX[:5], 65536)) is None  # 5 sizes: too few


@pytest.mark.parametrize(("step_at", "below"), [(16384, 4096), (65536, 16384)])
def test_the_switch_is_found_at_each_allowed_split_of_seven_sizes(step_at, below):
    # 7 sizes: the splits after the 3rd and after the 4th size leave at least 3 on each side
    found = protocol_switch(_line_table((256, *SIX), step_at))
    assert (found["below_bytes"], found["above_bytes"]) == (below, step_at)


def test_a_flat_latency_side_still_reports_the_switch():
    # below: 20 µs whatever the size (β = 0), above: 320 µs + n·1e-9; the split is reported
    found = protocol_switch(_line_table(SIX, 65536, below=(20e-6, 0.0)))
    assert found is not None
    assert (found["below_bytes"], found["above_bytes"]) == (16384, 65536)
    assert found["below"][0] == pytest.approx(20e-6, rel=1e-5)
    assert found["below"][1] == pytest.approx(0.0, abs=1e-15)


def test_the_reported_lines_are_the_log_ratio_fits_of_each_side():
    # a noisy first size: the below line is the least squared log ratio over the 3 sizes below
    from scipy.optimize import least_squares

    rows = _line_table(SIX, 65536)
    rows[0]["measured_s"] *= 1.2
    found = protocol_switch(rows)
    n = np.array(SIX[:3], dtype=float)
    t = np.array([r["measured_s"] for r in rows[:3]])
    ref = least_squares(
        lambda p: np.log(p[0] * 1e-5 + n * p[1] * 1e-9) - np.log(t),
        x0=[1.0, 1.0],
        bounds=([0, 0], [np.inf, np.inf]),
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    assert found["below"][0] == pytest.approx(ref.x[0] * 1e-5, rel=1e-5)
    assert found["below"][1] == pytest.approx(ref.x[1] * 1e-9, rel=1e-4)


SEVEN = (256, *SIX)


def _curve(f, sizes=SEVEN):
    return [{"op": "p2p", "size_bytes": n, "measured_s": f(n), "fitted_s": f(n)} for n in sizes]


def test_no_switch_where_two_lines_do_not_halve_the_error():
    # ±20-30 % noise around one line: a single line is > 10 % off, but no split halves that
    noise = dict(zip(SEVEN, (1.3, 0.75, 1.25, 0.8, 1.3, 0.7, 1.2), strict=True))
    assert protocol_switch(_curve(lambda n: (20e-6 + n * 1e-9) * noise[n])) is None


def test_two_latency_plateaus_are_not_a_protocol_switch():
    # 20 µs below 16 KiB, 2 ms from it: neither side has a per-byte cost
    assert protocol_switch(_curve(lambda n: 20e-6 if n < 16384 else 2e-3)) is None


def test_a_line_that_turns_flat_is_a_switch():
    found = protocol_switch(_curve(lambda n: 20e-6 + n * 1e-9 if n < 16384 else 5e-3))
    assert (found["below_bytes"], found["above_bytes"]) == (4096, 16384)
    assert found["above"] == pytest.approx((5e-3, 0.0), rel=1e-9, abs=1e-15)


def test_a_switch_is_never_reported_with_fewer_than_three_sizes_on_a_side():
    # a step after the 2nd size: the split the rule may report starts after the 3rd
    found = protocol_switch(_curve(lambda n: 20e-6 + n * 1e-9 if n < 4096 else 320e-6 + n * 1e-9))
    assert found["below_bytes"] >= 4096
    # a step after the 5th size (2 above): none of the allowed splits halves the error
    assert (
        protocol_switch(_curve(lambda n: 20e-6 + n * 1e-9 if n < 262144 else 2e-3 + n * 1e-9))
        is None
    )


def test_joint_fit_of_size_zero_rows_is_the_geometric_mean_latency():
    # only α has a coefficient: minimising Σ log²(α / t) gives α = (t1·t2·t3)^(1/3)
    rows = [{"op": "p2p", "size_bytes": 0, "seconds": [s]} for s in (1e-4, 2e-4, 3e-4)]
    fit, _ = fit_link({"world_size": 2, "rows": rows})
    assert fit.method == "joint"
    assert fit.latency_s == pytest.approx((1e-4 * 2e-4 * 3e-4) ** (1 / 3), rel=1e-6)
    assert fit.bandwidth_Bps == math.inf


def test_joint_fit_with_a_size_zero_row_recovers_the_line():
    rows = [{"op": "p2p", "size_bytes": n, "seconds": [1e-4 + n * 1e-8]} for n in (0, 4, 64, 1024)]
    fit, _ = fit_link({"world_size": 2, "rows": rows})
    assert fit.method == "joint"
    assert fit.latency_s == pytest.approx(1e-4, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(1e8, rel=1e-6)
