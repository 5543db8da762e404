"""s, the share of the allgatherv's host time paid per padded byte when the ranks' blocks are
uneven: recovered exactly from synthetic measurements with a known s, kept within [0, 1],
written to the cluster file and priced alike by the closed form, the simulator and
``vgcsim validate``; absent skewed rows, the default."""

from __future__ import annotations

import json

import numpy as np
import pytest
from modelhelpers import exact_rows

from vgcsim.core.cluster import DEFAULT_HOST_PADDED_SHARE, LinkSpec, load_cluster
from vgcsim.core.clusterfile import cluster_toml
from vgcsim.core.collectives import padded_host_time_s
from vgcsim.core.errors import ConfigError
from vgcsim.models.collectives import collective_time_s
from vgcsim.models.linkfit import fit_link, padded_share_given, real_bytes
from vgcsim.simulator.call import simulate_collective
from vgcsim.traces.calibration import MEASUREMENTS_KIND, MEASUREMENTS_VERSION, skewed_sizes

SIZES = (4, 64, 1024, 16384, 262144, 1 << 20, 4 << 20, 16 << 20)
ALPHA, BETA, DELTA = 300e-6, 1 / 25e6, 3e-9


OPS = ("p2p", "allreduce", "allgatherv", "allgatherv_skewed")


def measurements(share: float, world: int = 4) -> dict:
    """Exact times of p2p, allreduce, allgatherv and allgatherv_skewed at every size, on a link
    with α, β, δ and the padded share ``share``: a skewed row's host time is
    δ·(s·P·m + (1 − s)·Σ m_r)."""
    rows = exact_rows(OPS, SIZES, world, ALPHA, BETA, delta=DELTA, share=share)
    return {"world_size": world, "backend": "gloo", "rows": rows}


@pytest.mark.parametrize("share", [0.0, 0.24, 0.5, 1.0])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_fit_recovers_a_known_padded_share_exactly(share, world):
    fit, table = fit_link(measurements(share, world))
    assert fit.allgatherv_host_s_per_byte == pytest.approx(DELTA, rel=1e-6)
    assert fit.allgatherv_host_padded_share == pytest.approx(share, abs=1e-9)
    assert fit.share_op == "allgatherv_skewed"
    # every row, skewed ones included, is priced as measured
    assert max(abs(r["rel_error"]) for r in table) < 1e-6
    roles = {r["size_bytes"] for r in table if r["role"] == "share"}
    assert roles and all(r["op"] == "allgatherv_skewed" for r in table if r["role"] == "share")
    # the latency-bound skewed rows are checked, not fitted
    assert 4 not in roles and 16 << 20 in roles


def test_the_share_is_the_hand_worked_median_of_the_skewed_rows():
    # 4 ranks, m = 8 MB: blocks 2, 4, 6, 8 MB, 32 MB padded, 20 MB real, δ = 3 ns/B. A row
    # whose excess over the ring is 72 ms: 72e-3 - 3e-9·20e6 = 12 ms = s·3e-9·12e6, s = 1/3.
    s = padded_share_given([0.072], [3e-9], [32e6], [20e6])
    assert s == pytest.approx(1 / 3, rel=1e-12)
    # Three rows, δ·(B_pad − B_real) = 36, 72 and 144 ms; their excesses beyond δ·B_real
    # (60, 120, 240 ms) are 12, 36 and 14.4 ms: s = 1/3, 1/2 and 0.1 row by row. The median
    # is 1/3; the least-squares slope through the origin, which the 144 ms row would set,
    # is (0.036·0.012 + 0.072·0.036 + 0.144·0.0144) / (0.036² + 0.072² + 0.144²) = 0.187.
    excess = [0.06 + 0.012, 0.12 + 0.036, 0.24 + 0.0144]
    s3 = padded_share_given(excess, [3e-9] * 3, [32e6, 64e6, 128e6], [20e6, 40e6, 80e6])
    assert s3 == pytest.approx(1 / 3, rel=1e-9)
    # an even count: the mean of the middle two (1/3 and 1/2)
    s4 = padded_share_given(
        [*excess, 0.48 + 0.288 * 0.9],
        [3e-9] * 4,
        [32e6, 64e6, 128e6, 256e6],
        [20e6, 40e6, 80e6, 160e6],
    )
    assert s4 == pytest.approx((1 / 3 + 1 / 2) / 2, rel=1e-9)
    # a row without padding (B_pad = B_real) has no say, even with a wild excess
    s5 = padded_share_given(
        [*excess, 9.0], [3e-9] * 4, [32e6, 64e6, 128e6, 50e6], [20e6, 40e6, 80e6, 50e6]
    )
    assert s5 == pytest.approx(1 / 3, rel=1e-9)


def test_the_share_stays_within_zero_and_one():
    # an excess above the padded bytes' price says "all padded", below the real bytes' "none"
    assert padded_share_given([0.2], [3e-9], [32e6], [20e6]) == 1.0
    assert padded_share_given([0.01], [3e-9], [32e6], [20e6]) == 0.0
    # nothing to fit: no row, no padding, no host cost
    assert padded_share_given([], [], [], []) is None
    assert padded_share_given([0.1], [3e-9], [32e6], [32e6]) is None
    assert padded_share_given([0.1], [0.0], [32e6], [20e6]) is None


def test_real_bytes_are_the_blocks_sent():
    assert real_bytes("allgatherv_skewed", 1000, 4) == sum(skewed_sizes(1000, 4)) == 2500
    assert real_bytes("allgatherv", 1000, 4) == 4000
    assert real_bytes("allreduce", 1000, 4) == 0.0


def test_without_skewed_rows_the_share_is_the_default_and_not_written(tmp_path):
    meas = measurements(0.24)
    meas["rows"] = [r for r in meas["rows"] if r["op"] != "allgatherv_skewed"]
    fit, _ = fit_link(meas)
    assert fit.share_op == "" and fit.allgatherv_host_padded_share == DEFAULT_HOST_PADDED_SHARE
    text = cluster_toml("cal", fit, "cpu", "synthetic")
    assert "allgatherv_host_padded_share" not in text
    # nor without δ: a share of nothing is not fitted
    fit, _ = fit_link(measurements(0.24), host_op=None)
    assert fit.share_op == "" and fit.allgatherv_host_padded_share == DEFAULT_HOST_PADDED_SHARE


def test_the_cluster_file_carries_the_share_and_every_pricing_uses_it(tmp_path):
    share = 0.24
    fit, _ = fit_link(measurements(share))
    path = tmp_path / "cal.toml"
    path.write_text(cluster_toml("cal", fit, "cpu", "synthetic"))
    assert "allgatherv_host_padded_share = " in path.read_text()
    cluster = load_cluster(str(path))
    link = cluster.link
    assert link.allgatherv_host_padded_share == fit.allgatherv_host_padded_share  # repr: exact
    # 8 MB per rank, blocks 2, 4, 6, 8 MB: padded ring, host δ·(s·32 MB + (1 − s)·20 MB)
    m = 8_000_000
    sizes = np.asarray(skewed_sizes(m, 4), dtype=float)
    ring = 6 * link.latency_s + 3 * (m + 8) * link.beta_s_per_byte
    host = link.allgatherv_host_s_per_byte * (share * 32e6 + (1 - share) * 20e6)
    predicted = float(collective_time_s("allgatherv/padded", sizes[None, :], cluster)[0])
    assert predicted == pytest.approx(ring + host, rel=1e-6)
    simulated = simulate_collective("allgatherv/padded", sizes, cluster).time_s
    assert simulated == pytest.approx(predicted, rel=1e-9)
    # equal blocks pay δ·P·m whatever the share
    even = padded_host_time_s(4, float(m), 3e-9, copied_bytes=4.0 * m, padded_share=0.0)
    assert even == pytest.approx(3e-9 * 4 * m, rel=1e-12)


def test_calibrate_prints_and_writes_the_share_and_validate_prices_with_it(tmp_path, capsys):
    from vgcsim.cli import main

    doc = {"kind": MEASUREMENTS_KIND, "version": MEASUREMENTS_VERSION, "nodes": [0, 1, 2, 3]}
    doc.update(measurements(0.25))
    meas = tmp_path / "m.json"
    meas.write_text(json.dumps(doc))
    out = tmp_path / "c.toml"
    assert main(["calibrate", "--from", str(meas), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert ", 0.25 of it per padded byte" in printed
    assert "its padded share from allgatherv_skewed" in out.read_text()
    link = load_cluster(str(out)).link
    assert link.allgatherv_host_padded_share == pytest.approx(0.25, abs=1e-9)
    # a skewed allgatherv of 40 MB per rank, measured as the share prices it, passes at 0.1 %;
    # the same file without the share (the default, ½) prices it 0.9 % high and fails
    m = 40_000_000
    real = sum(skewed_sizes(m, 4))
    ring = 6 * link.latency_s + 3 * (m + 8) * link.beta_s_per_byte
    truth = ring + link.allgatherv_host_s_per_byte * (0.25 * 4 * m + 0.75 * real)
    check = tmp_path / "check.json"
    rows = [{"op": "allgatherv_skewed", "size_bytes": m, "seconds": [truth]}]
    check.write_text(json.dumps({**doc, "rows": rows}))
    assert main(["validate", str(check), "--cluster", str(out), "--tolerance", "0.001"]) == 0
    capsys.readouterr()
    default = tmp_path / "default.toml"
    lines = out.read_text().splitlines(keepends=True)
    default.write_text("".join(x for x in lines if "allgatherv_host_padded_share" not in x))
    assert main(["validate", str(check), "--cluster", str(default), "--tolerance", "0.001"]) != 0
    assert "+0.9%" in capsys.readouterr().out


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan")])
def test_a_share_outside_zero_and_one_is_refused(value):
    with pytest.raises(ConfigError, match=r"allgatherv_host_padded_share must be a finite number"):
        LinkSpec("l", 1e9, 1e-5, allgatherv_host_padded_share=value)


def test_a_cluster_file_share_is_read_and_a_bad_one_refused_in_one_line(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "c"\n[link]\npreset = "10GbE"\nallgatherv_host_padded_share = 0.3\n')
    assert load_cluster(str(path)).link.allgatherv_host_padded_share == 0.3
    assert load_cluster("10GbE").link.allgatherv_host_padded_share == DEFAULT_HOST_PADDED_SHARE
    path.write_text('name = "c"\n[link]\npreset = "10GbE"\nallgatherv_host_padded_share = "x"\n')
    with pytest.raises(ConfigError, match="allgatherv_host_padded_share: expected a number"):
        load_cluster(str(path))


def test_skewed_rows_among_the_fit_ops_give_no_share():
    # rows that fix α and β do not also give s (as γ's and δ's ops): the default stays
    fit, _ = fit_link(measurements(0.24), ops=("p2p", "allgatherv_skewed"))
    assert fit.share_op == "" and fit.allgatherv_host_padded_share == DEFAULT_HOST_PADDED_SHARE
    # nor when the share's op was not measured, or is not asked for
    meas = measurements(0.24)
    meas["rows"] = [r for r in meas["rows"] if r["op"] != "allgatherv_skewed"]
    assert fit_link(meas, share_op="allgatherv_skewed")[0].share_op == ""
    assert fit_link(measurements(0.24), share_op=None)[0].share_op == ""


def _stepped_delta(gathered: float) -> float:
    """δ that steps up past 64 MiB gathered (a buffer outgrowing a cache)."""
    return 2e-9 if gathered <= 64 << 20 else 5e-9


def test_the_share_prices_each_skewed_row_at_delta_of_its_own_size():
    # δ 2 ns/B up to 64 MiB gathered, 5 ns/B beyond; s = 0.3 is recovered exactly only if
    # each skewed row's δ is the table's value at its own P·m, not one slope for all
    rows = exact_rows(OPS, (*SIZES, 32 << 20), 4, ALPHA, BETA, delta=_stepped_delta, share=0.3)
    fit, table = fit_link({"world_size": 4, "backend": "gloo", "rows": rows})
    assert fit.allgatherv_host_padded_share == pytest.approx(0.3, abs=1e-9)
    assert max(abs(r["rel_error"]) for r in table) < 1e-9


def test_a_skewed_row_whose_alpha_terms_are_exactly_a_tenth_gives_the_share():
    """The share's rows: α's terms *at most* a tenth of the time, as δ's. A dyadic p2p link
    (α = 2^-13 s, β = 2^-27 s/B) gives α exactly; at P = 2 a skewed row pays 2α = 2^-12 s of
    α, exactly a tenth of a measured 10·2^-12 s: that row gives s, like the large ones."""
    alpha, beta, delta = 2.0**-13, 2.0**-27, 2.0**-30

    def rows(op, sizes):
        return exact_rows((op,), sizes, 2, alpha, beta, delta=delta, share=0.25)

    p2p = [
        {"op": "p2p", "size_bytes": n, "seconds": [alpha + n * beta]}
        for n in (2**k for k in (2, 10, 12, 14, 16, 20))
    ]
    meas = p2p + rows("allgatherv", (1 << 20, 1 << 22)) + rows("allgatherv_skewed", (1 << 22,))
    meas.append({"op": "allgatherv_skewed", "size_bytes": 1 << 14, "seconds": [10 * 2.0**-12]})
    fit, table = fit_link({"world_size": 2, "rows": meas})
    assert fit.latency_s == alpha  # exact: the boundary is met to the bit
    roles = {r["size_bytes"]: r["role"] for r in table if r["op"] == "allgatherv_skewed"}
    assert roles == {1 << 22: "share", 1 << 14: "share"}


def test_with_one_host_size_the_share_uses_the_one_slope():
    # allgatherv timed at 4 B (latency-bound) and 16 MiB only: δ is one slope, no table, and
    # the skewed rows are priced with it
    meas = measurements(0.3)
    meas["rows"] = [
        r for r in meas["rows"] if r["op"] != "allgatherv" or r["size_bytes"] in (4, 16 << 20)
    ]
    fit, table = fit_link(meas)
    assert fit.allgatherv_host_s_per_byte_table == ()
    assert fit.allgatherv_host_s_per_byte == pytest.approx(DELTA, rel=1e-9)
    assert fit.allgatherv_host_padded_share == pytest.approx(0.3, abs=1e-9)
    assert max(abs(r["rel_error"]) for r in table) < 1e-6
