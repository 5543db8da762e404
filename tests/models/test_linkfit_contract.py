"""The link fit and the point-to-point model against hand-worked links.

Every expected value is worked out from the formulas of the ``vgcsim.models.linkfit`` module
docstring (``t = α + n·β`` for one message; the regimes: bandwidth from 4× the fastest time,
latency while β's term is at most a fifth of the time) on exact α-β lines, not read back from
the implementation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from vgcsim.models.linkfit import LinkFit, fit_intra_link, fit_link
from vgcsim.models.pointtopoint import p2p_time_s

from vgcsim.core.cluster import LinkSpec
from vgcsim.core.errors import ConfigError, VgcsimError

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
    no_gamma, table = fit_link(m, gamma_op=None)
    assert no_gamma.gamma_s_per_byte == 0.0 and no_gamma.gamma_op == ""
    assert {r["role"] for r in table if r["op"] == "allreduce"} == {"check"}
    with_gamma, table = fit_link(m)
    assert with_gamma.gamma_s_per_byte == pytest.approx(1e-9, rel=1e-9)
    assert with_gamma.gamma_op == "allreduce"
    # the errors count only the rows of the ops that fixed α and β (p2p: exact)
    assert with_gamma.rms_rel_error < 1e-9
    # γ comes from the rows where β's term is at least half the time: 1.5n·β ≥ 0.5·t
    roles = {r["size_bytes"]: r["role"] for r in table if r["op"] == "allreduce"}
    assert roles[4] == "check" and roles[1 << 20] == "gamma"


def test_typical_error_is_exp_of_the_rms_log_error_minus_one():
    fit = LinkFit(1e-6, 1e9, 0.0, 0.1, math.log(1.5), 2, "gloo")
    assert fit.typical_error == pytest.approx(0.5, rel=1e-12)
    assert fit.method == "regimes" and fit.fit_ops == () and fit.gamma_op == ""
