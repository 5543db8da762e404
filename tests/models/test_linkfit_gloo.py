"""gloo's ring allreduce leaves segments empty below (2P)² elements: the share of its steps an
allreduce pays (hand-worked, and counted by a transcription of gloo's own offset loops), the
fit that prices the small allreduces by it, and the measurements' repeatability per op."""

from __future__ import annotations

import math

import pytest
from modelhelpers import called_measurements

from vgcsim.cli import main
from vgcsim.core.errors import UnknownNameError
from vgcsim.models.linkfit import (
    cost_coefficients,
    fit_link,
    gloo_allreduce_share,
    op_errors,
    step_messages,
)
from vgcsim.traces.calibration import CalibrateConfig, repeatability, write_measurements

ALPHA, BETA, CALL = 800e-6, 1 / 118e6, 300e-6
SIZES = (4, 16, 64, 256, 1024, 16384, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20)


def gloo_sends(n: int, p: int, e: int = 4, max_segment: int = 1 << 20) -> int:
    """Messages with bytes that all ranks send in one gloo ring allreduce of ``n`` bytes,
    counted as ``gloo/allreduce.cc`` ``ring()`` issues them: computeReduceScatterOffsets
    and computeAllgatherOffsets over ``numSegments − numSegmentsPerRank`` iterations, a
    send only where its length is positive."""
    max_seg = e * max(1, max_segment // e)
    num = max((n + max_seg - 1) // max_seg, p * 2)
    num = (num + p - 1) // p * p
    per_rank = num // p
    seg = (n + num - 1) // num
    seg = (seg + e - 1) // e * e
    sends = 0
    for rank in range(p):
        for i in range(num - per_rank):
            rs = (((rank + 1) * per_rank + i) * seg) % (num * seg)
            ag = ((rank * per_rank + i) * seg) % (num * seg)
            sends += min(seg, n - rs) > 0
            sends += min(seg, n - ag) > 0
    return sends, num


@pytest.mark.parametrize(
    ("n", "p", "share"),
    [
        (4, 4, 1 / 8),  # one float32: S = 8 segments of 4 B, one carries it
        (16, 4, 4 / 8),  # b = ⌈16/8⌉ → 4 B: segments 0..3
        (68, 4, 6 / 8),  # 17 float32: b = 12 B, ⌈68/12⌉ = 6
        (64, 4, 1.0),  # b = 8 B, all 8
        (4, 2, 1 / 4),
        (1 << 20, 4, 1.0),
        (1000, 1, 1.0),  # one rank: no ring
    ],
)
def test_share_hand_worked(n, p, share):
    assert gloo_allreduce_share(n, p) == pytest.approx(share)


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
def test_share_is_what_gloo_s_own_loops_send(p):
    # every segment with bytes travels P−1 times in each phase: sends = 2(P−1)·k of 2(P−1)·S
    for n in [*range(4, 4 * (2 * p) ** 2 + 64, 4), 65536, (1 << 20) + 4, 3 << 20]:
        sends, segments = gloo_sends(n, p)
        assert sends / segments == pytest.approx(2 * (p - 1) * gloo_allreduce_share(n, p)), n


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_share_is_one_from_2p_squared_elements(p):
    assert all(gloo_allreduce_share(n, p) == 1.0 for n in range(4 * (2 * p) ** 2, 60000, 4))


def test_only_gloo_allreduces_pay_the_share():
    assert cost_coefficients("allreduce", 4, 4)[0] == pytest.approx(6 / 8)
    assert cost_coefficients("allreduce", 4, 4, "nccl")[0] == 6.0
    assert cost_coefficients("allgather", 4, 4) == cost_coefficients("allgather", 4, 4, "nccl")
    # β and γ's bytes are the ring's at every size
    assert cost_coefficients("allreduce", 4, 4)[1:] == cost_coefficients("allreduce", 4, 4, "x")[1:]


def gloo_rows(world: int) -> dict:
    ops = ("p2p", "allreduce", "allgather", "allgatherv")
    return called_measurements(ops, SIZES, world, ALPHA, BETA, CALL)


@pytest.mark.parametrize("world", [2, 4])
def test_fit_recovers_alpha_and_the_call_cost_from_gloo_s_small_allreduces(world):
    fit, table = fit_link(gloo_rows(world))
    assert fit.latency_s == pytest.approx(ALPHA, rel=1e-6)
    assert fit.call_overhead_s == pytest.approx(CALL, rel=1e-6)
    assert max(abs(r["rel_error"]) for r in table if r["op"] != "p2p") < 1e-6
    # the same rows read as a ring whose every step is paid miss gloo's 4-byte allreduce
    as_ring, ring_table = fit_link({**gloo_rows(world), "backend": "nccl"})
    assert op_errors(ring_table)["allreduce"] > 0.1


def test_repeatability_hand_worked():
    rows = [{"op": "p2p", "size_bytes": 4, "seconds": [1.0, 2.0, 1.0, 2.0]}]
    assert repeatability(rows) == {"p2p": pytest.approx(1.0)}  # median ½ → 100 %
    rows.append({"op": "p2p", "size_bytes": 8, "seconds": [3.0, 3.0, 3.0, 3.0, 3.0]})
    # rms of log 2 and 0: exp(ln 2 / √2) − 1
    assert repeatability(rows)["p2p"] == pytest.approx(math.expm1(math.log(2) / math.sqrt(2)))
    # min: even {1, 1}, odd {2, 2} for the first row
    assert repeatability(rows[:1], "min") == {"p2p": pytest.approx(1.0)}


def test_repeatability_leaves_out_rows_too_short_to_split():
    rows = [{"op": "allreduce", "size_bytes": 4, "seconds": [1.0, 5.0, 1.0]}]
    assert repeatability(rows) == {}
    with pytest.raises(UnknownNameError):
        repeatability(rows, "mean")


def test_calibrate_prints_the_repeatability_beside_the_typical_error(tmp_path, capsys):
    doc = gloo_rows(4)
    for r in doc["rows"]:
        t = r["seconds"][0]
        r["seconds"] = [t, 1.1 * t, t, 1.1 * t]
    meas = tmp_path / "m.json"
    write_measurements(meas, CalibrateConfig(), 4, doc["rows"], [0, 1, 2, 3])
    assert main(["calibrate", "--from", str(meas), "-o", str(tmp_path / "c.toml")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("repeatability per op"))
    # median of {t, t} against {1.1t, 1.1t}: 10 % for every op
    assert line.endswith("p2p 10.0%, allreduce 10.0%, allgather 10.0%, allgatherv 10.0%")


def _bucket_rows(world: int, burst: float) -> dict:
    """Exact gloo times on a link whose token bucket of ``burst`` bytes refills during each
    step's 1 ms start-up: p2p a line of its own (0.1 ms + m·β); every collective message's
    bytes beyond min(burst, α/β) at β, plus α per step (gloo's share) and c per call."""
    alpha, beta, call = 1e-3, 1 / 25e6, 300e-6
    refill = min(burst, alpha / beta)
    rows = []
    for op in ("p2p", "allreduce", "allgather"):
        for n in SIZES:
            if op == "p2p":
                t = 100e-6 + n * beta
            else:
                k_alpha = cost_coefficients(op, n, world)[0]
                wire = sum(c * max(0.0, m - refill) for c, m in step_messages(op, n, world))
                t = k_alpha * alpha + call + wire * beta
            rows.append({"op": op, "size_bytes": n, "seconds": [t]})
    return {"world_size": world, "backend": "gloo", "rows": rows}


@pytest.mark.parametrize("burst", [16384.0, 262144.0])
def test_fit_with_the_bucket_recovers_the_link_that_made_the_rows(burst):
    doc = _bucket_rows(4, burst)
    fit, table = fit_link(doc, burst_bytes=burst)
    assert fit.latency_s == pytest.approx(1e-3, rel=1e-6)
    assert fit.call_overhead_s == pytest.approx(300e-6, rel=1e-5)
    assert fit.bandwidth_Bps == pytest.approx(25e6, rel=1e-6)
    assert fit.segments == ()  # the bucket, not the ping-pong's segments, prices the link
    assert max(abs(r["rel_error"]) for r in table) < 1e-6
    # the same rows priced without the bucket: the large allreduces' steps come out slow
    _, plain = fit_link(doc)
    assert op_errors(plain)["allreduce"] > 0.05
