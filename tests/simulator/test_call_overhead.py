"""The per-call software cost and the hosts' processor sharing, in the cost models and the
simulator alike (this test imports both on purpose, as test_crosscheck_models does).

Hand-worked: a collective call costs its α-β-γ(-δ) time plus ``calls × c`` (c the link's
``call_overhead_s``; 2 calls for ``allgatherv/padded``, 1 otherwise), whatever the number
of algorithm steps; P ranks on a host of C cores stretch the CPU-time terms by
max(1, P·T/C).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from vgcsim.core.cluster import get_cluster, host_share
from vgcsim.core.collectives import COLLECTIVE_KEYS, calls_per_collective
from vgcsim.models import collectives as mc
from vgcsim.models.predict import PredictOptions, predict_trace
from vgcsim.simulator.call import simulate_collective
from vgcsim.simulator.replay import SimulateConfig, simulate_trace
from vgcsim.traces.io import read_trace

SAMPLE_TRACE = Path(__file__).resolve().parents[1] / "data" / "sample_trace"
CALL_S = 300e-6
# a sum of a few dozen terms of at most ~1 s: relative float error well below 1e-12
REL = 1e-12


def _with(cluster, **link):
    return dataclasses.replace(cluster, link=dataclasses.replace(cluster.link, **link))


def _calls(key: str) -> int:
    """Calls one collective of ``key`` makes here: a lone bounded exchange has no history,
    so its bound is the header and every message runs a fallback round (two all_gathers)."""
    return 2 if key == "allgatherv/bounded" else calls_per_collective(key)


def _sizes(key: str, p: int) -> np.ndarray:
    return np.full(p, 1e6) if key.startswith("allreduce") else 1e5 * (1 + np.arange(p))


@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
def test_a_call_pays_its_overhead_once_per_call_not_per_step(key, p):
    base = get_cluster("1GbE")
    if key == "allreduce/hierarchical":
        base = dataclasses.replace(base, gpus_per_node=2, intra_link=base.link)
    sizes = _sizes(key, p)
    t0 = float(mc.collective_time_s(key, sizes[None, :], base)[0])
    t1 = float(mc.collective_time_s(key, sizes[None, :], _with(base, call_overhead_s=CALL_S))[0])
    want = _calls(key) * CALL_S if p > 1 else 0.0
    assert t1 - t0 == pytest.approx(want, rel=1e-9, abs=REL * t1)


@pytest.mark.parametrize("key", COLLECTIVE_KEYS)
@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_the_simulator_charges_the_same_call_overhead(key, p):
    base = get_cluster("10GbE")
    if key == "allreduce/hierarchical":
        base = dataclasses.replace(base, gpus_per_node=2, intra_link=base.link)
    sizes = np.full(p, 1e6)  # equal blocks: every lock-step closed form is exact on a star
    slow = _with(base, call_overhead_s=CALL_S)
    t0 = simulate_collective(key, sizes, base).time_s
    t1 = simulate_collective(key, sizes, slow).time_s
    assert t1 - t0 == pytest.approx(_calls(key) * CALL_S, rel=1e-9)
    if key in ("allgatherv/direct", "allreduce/hierarchical"):
        return  # the closed form is a bound there (fair sharing), not the simulated time
    model = float(mc.collective_time_s(key, sizes[None, :], slow)[0])
    assert t1 == pytest.approx(model, rel=1e-3)


def test_host_share_by_hand():
    c = dataclasses.replace(get_cluster("1GbE"), ranks_per_host=4, host_cores=2)
    assert c.host_sharing == "fullest-core"  # the default rule
    fair = dataclasses.replace(c, host_sharing="fair")
    for rule in (c, fair):
        assert host_share(rule, 4) == 2.0  # 4 ranks on 2 cores
        assert host_share(rule, 8) == 2.0  # hosts hold 4 ranks each
        assert host_share(rule, 2) == 1.0  # 2 ranks, 2 cores
        assert host_share(rule, 1) == 1.0
        assert host_share(dataclasses.replace(rule, threads_per_rank=2), 2) == 2.0
    # 3 ranks on 2 cores: one core holds 2 of them and sets the pace; fair sharing gives 1.5
    assert host_share(c, 3) == 2.0
    assert host_share(fair, 3) == 1.5
    # 3 ranks of 2 threads on 4 cores: 6 threads, the fullest core holds 2; fair 6/4
    six = dataclasses.replace(c, host_cores=4, threads_per_rank=2)
    assert host_share(six, 3) == 2.0
    assert host_share(dataclasses.replace(six, host_sharing="fair"), 3) == 1.5
    # 5 ranks on 2 cores: 3 on the fullest core; fair 2.5
    five = dataclasses.replace(c, ranks_per_host=8)
    assert host_share(five, 5) == 3.0
    assert host_share(dataclasses.replace(five, host_sharing="fair"), 5) == 2.5
    assert host_share(get_cluster("1GbE"), 1024) == 1.0  # default: no sharing


@pytest.mark.parametrize("rule", ["fullest-core", "fair"])
@pytest.mark.parametrize("cores", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_host_share_rules_meet_where_the_threads_divide_evenly(rule, cores, threads):
    # the fullest core never holds less than the fair share, is within one thread of it,
    # and equals it where R·T is a multiple of C
    base = dataclasses.replace(
        get_cluster("1GbE"), ranks_per_host=16, host_cores=cores, threads_per_rank=threads
    )
    for p in range(1, 17):
        full = host_share(base, p)
        fair = host_share(dataclasses.replace(base, host_sharing="fair"), p)
        assert fair <= full < fair + 1
        if (p * threads) % cores == 0:
            assert full == fair
        assert host_share(dataclasses.replace(base, host_sharing=rule), p) in (full, fair)


def test_four_ranks_on_two_cores_double_compute_and_cpu_terms_in_predict_and_simulate():
    trace = read_trace(SAMPLE_TRACE)
    base = _with(get_cluster("1GbE"), gamma_s_per_byte=1e-9, call_overhead_s=CALL_S)
    shared = dataclasses.replace(base, ranks_per_host=4, host_cores=2)
    opts = PredictOptions(world_sizes=(4,), allreduce=("ring",), allgatherv=("ring",))
    cfg = SimulateConfig(allreduce=("ring",), allgatherv=("ring",))
    for frame in (
        lambda c: predict_trace(trace, c, opts),
        lambda c: simulate_trace(trace, c, (4,), cfg)[0],
    ):
        a, b = frame(base), frame(shared)
        ra = a[(a.step == -1) & (a.encoding == "fp32") & (a.method == "dense")].iloc[0]
        rb = b[(b.step == -1) & (b.encoding == "fp32") & (b.method == "dense")].iloc[0]
        assert rb.compute_s == pytest.approx(2 * ra.compute_s, rel=REL)
        assert rb.optimizer_s == pytest.approx(2 * ra.optimizer_s, rel=REL)
        # ring allreduce: c + 2(P-1)α + 2(P-1)/P nβ + (P-1)/P nγ; c and γ double, α, β stay
        n = float(trace.header["dense_bytes_per_step"])
        extra = CALL_S + 0.75 * n * 1e-9
        assert rb.comm_s - ra.comm_s == pytest.approx(extra, rel=1e-6)


# ---------------------------------------------------------------- size segments (SMPI-style)

#: A token bucket of 256 KiB on 1 Gbit/s: messages within it leave at 10 Gbit/s, larger ones
#: pay the bucket back at the rate (extra latency −B·(β − β_fast)).
BUCKET = 262144.0
SEGMENTS = ((0.0, 0.0, 1.25e9), (BUCKET, -BUCKET * (1 / 1.25e8 - 1 / 1.25e9), 1.25e8))


def test_a_message_is_priced_by_its_size_segment_by_hand():
    from vgcsim.core.collectives import message_time_s, wire_bytes

    link = dataclasses.replace(
        get_cluster("1GbE").link, efficiency=1.0, bandwidth_Bps=1.25e8, segments=SEGMENTS
    )
    a = link.latency_s
    assert message_time_s(link, 1000.0) == pytest.approx(a + 1000 / 1.25e9, rel=REL)
    big = 1 << 20
    assert message_time_s(link, big) == pytest.approx(
        a + BUCKET / 1.25e9 + (big - BUCKET) / 1.25e8, rel=1e-12
    )
    # the simulator's wire bytes move in that time at the link's rate
    assert wire_bytes(link, 1000.0) == pytest.approx(1000 * 1.25e8 / 1.25e9, rel=REL)


@pytest.mark.parametrize("key", [k for k in COLLECTIVE_KEYS if k != "allreduce/hierarchical"])
@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("size", [4096.0, 1e5, 4e6])
def test_model_and_simulator_price_size_segments_alike(key, p, size):
    base = get_cluster("1GbE")
    seg = _with(base, efficiency=1.0, bandwidth_Bps=1.25e8, segments=SEGMENTS)
    sizes = np.full(p, size)
    model = float(mc.collective_time_s(key, sizes[None, :], seg)[0])
    sim = simulate_collective(key, sizes, seg).time_s
    assert sim == pytest.approx(model, rel=1e-6)
    if size <= BUCKET / p:  # every message within the bucket: faster than the plain link
        plain = _with(base, efficiency=1.0, bandwidth_Bps=1.25e8)
        assert model < float(mc.collective_time_s(key, sizes[None, :], plain)[0])


def _replay_comm(trace, cluster, path):
    """Per (world size, method, encoding), predict's whole-run comm_s on ``cluster`` at P = 3
    and 4 (ring collectives), and simulate's (on ``path``) minus predict's."""
    opts = PredictOptions(world_sizes=(3, 4), allreduce=("ring",), allgatherv=("ring",))
    cfg = SimulateConfig(allreduce=("ring",), allgatherv=("ring",), path=path)
    keep = ["world_size", "method", "encoding"]
    pred = predict_trace(trace, cluster, opts)
    sim = simulate_trace(trace, cluster, (3, 4), cfg)[0]
    a = pred[pred.step == -1].set_index(keep).comm_s.sort_index()
    b = sim[sim.step == -1].set_index(keep).comm_s.sort_index()
    return a, b - a


@pytest.mark.parametrize("path", ["auto", "message"])
def test_a_replay_prices_segments_and_call_overhead_as_predict_does(path):
    """Replayed on a star, simulate and predict differ by what they differ by on the plain
    link (the compressed rows' uneven blocks; nothing on the dense rows): the size segments
    and the per-call cost add the same seconds to both."""
    trace = read_trace(SAMPLE_TRACE)
    plain = _with(get_cluster("1GbE"), efficiency=1.0, bandwidth_Bps=1.25e8)
    seg = _with(plain, segments=SEGMENTS, call_overhead_s=CALL_S)
    comm, with_segments = _replay_comm(trace, seg, path)
    _, without = _replay_comm(trace, plain, path)
    # float error of sums of a few dozen terms of about a millisecond
    assert np.allclose(with_segments.to_numpy(), without.to_numpy(), rtol=0, atol=1e-12)
    assert comm.min() > CALL_S


# ------------------------------------------------- a token bucket's refill during start-up


def _bucket_link(burst_bytes: float):
    """200 Mbit/s (25 MB/s payload) with a 1 ms start-up and a token bucket of ``burst_bytes``."""
    return dataclasses.replace(
        get_cluster("1GbE").link,
        efficiency=1.0,
        bandwidth_Bps=25e6,
        latency_s=1e-3,
        burst_bytes=burst_bytes,
    )


def test_a_message_leaves_its_start_ups_refill_at_once_by_hand():
    from vgcsim.core.collectives import message_time_s, refill_bytes, wire_bytes

    deep = _bucket_link(262144.0)  # 1 ms refills 25 kB of a 256 KiB bucket
    assert refill_bytes(deep) == pytest.approx(25e3, rel=1e-12)
    assert message_time_s(deep, 16384.0) == pytest.approx(1e-3, rel=1e-12)  # within it
    # 256 KiB: 1 ms + (262144 − 25000) B / 25 MB/s = 10.48576 ms, as back-to-back
    # messages pay it (the bucket's rate, less one start-up's worth of bytes)
    assert message_time_s(deep, 262144.0) == pytest.approx(10.48576e-3, rel=1e-12)
    assert wire_bytes(deep, 262144.0) == pytest.approx(262144 - 25e3, rel=1e-12)
    shallow = _bucket_link(16384.0)  # a bucket shallower than 1 ms of the rate: its depth
    assert refill_bytes(shallow) == 16384.0
    assert message_time_s(shallow, 65536.0) == pytest.approx(1e-3 + 49152 / 25e6, rel=1e-12)
    assert refill_bytes(_bucket_link(0.0)) == 0.0  # no bucket: α + m·β
    assert message_time_s(_bucket_link(0.0), 65536.0) == pytest.approx(1e-3 + 65536 / 25e6)


@pytest.mark.parametrize("key", [k for k in COLLECTIVE_KEYS if k != "allreduce/hierarchical"])
@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("size", [4096.0, 4e6])
def test_model_and_simulator_price_the_refill_alike(key, p, size):
    base = get_cluster("1GbE")
    link = _bucket_link(262144.0)
    bucket = dataclasses.replace(base, link=link)
    sizes = np.full(p, size)
    model = float(mc.collective_time_s(key, sizes[None, :], bucket)[0])
    sim = simulate_collective(key, sizes, bucket).time_s
    assert sim == pytest.approx(model, rel=1e-6)
    plain = dataclasses.replace(base, link=dataclasses.replace(link, burst_bytes=0.0))
    assert model < float(mc.collective_time_s(key, sizes[None, :], plain)[0])


def test_a_ring_allreduce_pays_each_step_beyond_the_refill_by_hand():
    # P = 4, 4 MB: 6 messages of 1 MB, each 1 ms + (1e6 − 25e3) B / 25 MB/s = 40 ms
    bucket = dataclasses.replace(get_cluster("1GbE"), link=_bucket_link(262144.0))
    t = float(mc.collective_time_s("allreduce/ring", np.full((1, 4), 4e6), bucket)[0])
    assert t == pytest.approx(6 * (1e-3 + (1e6 - 25e3) / 25e6), rel=1e-12)


# ------------------------------------------------- an allgather step's own start-up α


@pytest.mark.parametrize("p", [2, 4, 8])
def test_a_gather_step_starts_up_with_its_own_alpha_by_hand(p):
    base = get_cluster("1GbE")
    a = base.link.latency_s
    slow = _with(base, allgather_latency_s=3 * a)
    sizes = np.full(p, 1e4)
    for key in COLLECTIVE_KEYS:
        if key == "allreduce/hierarchical":
            continue
        plain = float(mc.collective_time_s(key, sizes[None, :], base)[0])
        model = float(mc.collective_time_s(key, sizes[None, :], slow)[0])
        sim = simulate_collective(key, sizes, slow).time_s
        assert sim == pytest.approx(model, rel=1e-6)
        if key == "allgatherv/ring":  # P − 1 steps, each 2α later
            assert model - plain == pytest.approx((p - 1) * 2 * a, rel=1e-9)
        elif key == "allgatherv/padded":  # the lengths' ring and the data's ring
            assert model - plain == pytest.approx(2 * (p - 1) * 2 * a, rel=1e-9)
        elif not key.startswith("allgatherv/"):  # an allreduce keeps the link's α
            assert model == plain


@pytest.mark.parametrize("path", ["auto", "message"])
def test_a_replay_prices_the_gather_alpha_as_predict_does(path):
    """The compressed rows' allgatherv steps start up with the gather's α in both engines;
    the dense rows keep the link's α."""
    trace = read_trace(SAMPLE_TRACE)
    plain = _with(get_cluster("1GbE"), efficiency=1.0, bandwidth_Bps=1.25e8)
    slow = _with(plain, allgather_latency_s=4 * plain.link.latency_s)
    before, gap_before = _replay_comm(trace, plain, path)
    after, gap_after = _replay_comm(trace, slow, path)
    assert np.allclose(gap_after.to_numpy(), gap_before.to_numpy(), rtol=0, atol=1e-12)
    moved = (after - before).groupby(level="method").max()
    assert moved["dense"] == 0.0 and moved["compressed"] > 0.0


def test_which_links_price_a_message_by_its_size():
    from vgcsim.core.collectives import prices_by_size

    plain = get_cluster("1GbE").link
    assert not prices_by_size(plain)  # α + m·β
    assert prices_by_size(dataclasses.replace(plain, segments=SEGMENTS))
    assert prices_by_size(_bucket_link(262144.0))  # the start-up refills the bucket
    # a bucket whose start-up refills nothing (α = 0) prices α + m·β again
    assert not prices_by_size(dataclasses.replace(_bucket_link(262144.0), latency_s=0.0))
