"""simulate_collective (one collective call at message level) against hand-worked timelines.

Every number is dyadic (bandwidth 2^20 B/s, latency 2^-10 s, block sizes powers of two), so
the times are exact in binary floating point and compared with ``==``. The references are the
Hockney α-β(-γ) costs of the schedules written out flow by flow, and the documented contract of
the per-link table (one row per directed link that carried bytes; busy = seconds with a flow on
it; utilization = busy / time).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from simhelpers import cluster

from vgcsim.core.cluster import LinkSpec
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.simulator.call import LINK_COLUMNS, CollectiveRun, simulate_collective

B = 2.0**20  # bytes/s
A = 2.0**-10  # s, host -> switch -> host
N = 2**20  # bytes: one second on a link


def _star(**kw):
    return cluster(bandwidth_Bps=B, latency_s=A, **kw)


def _links(run: CollectiveRun) -> dict[str, tuple[float, float, float]]:
    assert list(run.links.columns) == list(LINK_COLUMNS)
    return {row.link: (row.bytes, row.busy_s, row.utilization) for row in run.links.itertuples()}


def test_two_rank_ring_allgatherv_eager_finish_times_and_links():
    # rank 0 sends N bytes to rank 1 and receives 1 byte. Eager: a send completes when its
    # last byte has left (N/B = 1 s), a receive on arrival (bytes/B + α).
    run = simulate_collective("allgatherv/ring", [N, 1], _star(), semantics="eager")
    assert isinstance(run, CollectiveRun)
    assert (run.key, run.cluster, run.topology, run.world_size) == (
        "allgatherv/ring",
        "test",
        "star",
        2,
    )
    # rank 0: max(send left at 1, 1 byte arrived at 2^-20 + α) = 1
    # rank 1: max(its byte left at 2^-20, N arrived at 1 + α) = 1 + α
    assert run.finish_s.tolist() == [1.0, 1.0 + A]
    assert run.time_s == 1.0 + A
    assert float(run) == 1.0 + A
    t = 1.0 + A
    # each flow is alone on its two channels for bytes / B seconds
    assert _links(run) == {
        "h0->sw": (N, 1.0, 1.0 / t),
        "sw->h1": (N, 1.0, 1.0 / t),
        "h1->sw": (1.0, 2.0**-20, 2.0**-20 / t),
        "sw->h0": (1.0, 2.0**-20, 2.0**-20 / t),
    }


def test_two_rank_ring_allgatherv_rendezvous_both_complete_at_arrival():
    # rendezvous: send and receive both complete when the last byte arrives
    run = simulate_collective("allgatherv/ring", [N // 2, N // 4], _star())
    assert run.finish_s.tolist() == [0.5 + A, 0.5 + A]
    assert run.time_s == 0.5 + A  # below one second: the utilization divides by it
    assert _links(run)["h0->sw"] == (N // 2, 0.5, 0.5 / (0.5 + A))
    assert _links(run)["h1->sw"] == (N // 4, 0.25, 0.25 / (0.5 + A))


def test_links_that_carried_no_bytes_are_left_out():
    # rank 1's block is empty: its message is a zero-byte flow (latency only) and its two
    # channels carried nothing, so the table has the two channels of rank 0's flow only
    run = simulate_collective("allgatherv/ring", [N, 0], _star(), semantics="eager")
    assert sorted(_links(run)) == ["h0->sw", "sw->h1"]
    assert run.finish_s.tolist() == [1.0, 1.0 + A]


def test_fifo_and_fair_sharing_on_a_three_rank_direct_allgatherv():
    # every rank sends its N bytes to both others at t = 0 (six flows; each uplink and each
    # downlink carries two of them).
    # fair: all six flows share every channel in halves and end together at 2N/B, + α.
    fair = simulate_collective("allgatherv/direct", [N] * 3, _star(), semantics="eager")
    assert fair.finish_s.tolist() == [2.0 + A] * 3
    assert set(_links(fair).values()) == {(2.0 * N, 2.0, 2.0 / (2.0 + A))}
    # fifo: a flow holds its whole route at full rate. At t = 0 the first two flows granted
    # (1->0 with 0->1, say) take two uplinks and two downlinks, and the third uplink's flows
    # both need one of those downlinks: only two flows run in [0, 1]. The four left form two
    # more rounds, [1, 2] and [2, 3]: the last arrival is at 3N/B + α, one rank finishes a
    # round earlier, and each channel is busy 2 s of the 3.
    fifo = simulate_collective(
        "allgatherv/direct", [N] * 3, _star(), mode="fifo", semantics="eager"
    )
    assert sorted(fifo.finish_s.tolist()) == [2.0 + A, 3.0 + A, 3.0 + A]
    assert fifo.time_s == 3.0 + A
    assert set(_links(fifo).values()) == {(2.0 * N, 2.0, 2.0 / (3.0 + A))}


def test_ring_allreduce_with_reduction_cost_gamma():
    # P = 2, n = N: reduce-scatter sends n/2 each way (0.5 s + α), the receiver reduces its
    # n/2 bytes at γ = 2^-21 s/B (0.25 s), then the allgather round (0.5 s + α):
    # Hockney 2(P-1)(α + n/(P·B)) + (P-1)/P·n·γ = 1.25 + 2α
    run = simulate_collective("allreduce/ring", [N, N], _star(gamma_s_per_byte=2.0**-21))
    assert run.finish_s.tolist() == [1.25 + 2 * A] * 2
    assert run.time_s == 1.25 + 2 * A


def test_hierarchical_allreduce_uses_the_gpus_per_node():
    # two ranks on one node (gpus_per_node = 2): binomial reduce 1 -> 0 of the whole vector
    # over the node fabric, then the broadcast 0 -> 1: 2(α_i + n/B_i). With gpus_per_node
    # ignored it would be a two-node ring over the NIC instead.
    intra = LinkSpec("fabric", 4 * B, 2.0**-12)
    spec = cluster(
        {"kind": "hierarchical"}, bandwidth_Bps=B, latency_s=A, intra=intra, gpus_per_node=2
    )
    run = simulate_collective("allreduce/hierarchical", [N, N], spec)
    assert run.time_s == 2 * (2.0**-12 + 0.25)
    assert run.topology == "hierarchical"
    assert set(_links(run)) == {"h1->node0", "node0->h0", "h0->node0", "node0->h1"}


def test_padded_allgatherv_adds_the_host_time_on_every_rank():
    # δ·(½·P·m_max + ½·Σ m) on every rank after the transfers
    # (vgcsim.core.collectives.padded_host_time_s): δ = 2^-20 s/B, P = 2, blocks of N/2 and
    # N/4: the backend copies the 2·2^19 = 2^20 padded bytes, the copy out the 3·2^18 real
    # ones, ½·2^20 + ½·3·2^18 = 7·2^17 bytes: 0.875 s more than the same call without host
    # cost (not δ·P·m_max = 1 s, nor δ·Σ m = 0.75 s)
    assert N == 2**20
    sizes = [N // 2, N // 4]
    plain = simulate_collective("allgatherv/padded", sizes, _star())
    spec = dataclasses.replace(
        _star(), link=LinkSpec("nic", B, A, allgatherv_host_s_per_byte=2.0**-20)
    )
    host = simulate_collective("allgatherv/padded", sizes, spec)
    np.testing.assert_array_equal(host.finish_s, plain.finish_s + 0.875)
    assert host.time_s == plain.time_s + 0.875
    # the unpadded schedule has no host cost
    ring = simulate_collective("allgatherv/ring", sizes, spec)
    assert ring.time_s == 0.5 + A
    # the link's padded share s = 1/4: ¼·2^20 + ¾·3·2^18 = 13·2^16 bytes, 0.8125 s
    shared = dataclasses.replace(
        spec, link=dataclasses.replace(spec.link, allgatherv_host_padded_share=0.25)
    )
    host = simulate_collective("allgatherv/padded", sizes, shared)
    np.testing.assert_array_equal(host.finish_s, plain.finish_s + 0.8125)


@pytest.mark.parametrize(
    ("scalar", "table", "delta"),
    [
        # gathered buffer P·m_max = 2^20 bytes: on the table's second point, 2^-19 s/B
        (0.0, ((2.0**10, 2.0**-21), (2.0**20, 2.0**-19), (2.0**30, 2.0**-18)), 2.0**-19),
        # below the first point: the first value; the scalar δ is not used where a table is
        (2.0**-20, ((2.0**21, 2.0**-22), (2.0**22, 2.0**-18)), 2.0**-22),
    ],
    ids=["on-a-point", "below-the-first"],
)
def test_padded_allgatherv_takes_delta_from_the_links_table(scalar, table, delta):
    # δ(P·m_max)·(½·P·m_max + ½·Σ m) (the table's step function,
    # vgcsim.core.collectives.host_s_per_byte_at): P = 2, m_max = 2^19, Σ m = 3·2^18, so
    # ½·2^20 + ½·3·2^18 = 7·2^17 bytes copied, by hand
    sizes = [N // 2, N // 4]
    plain = simulate_collective("allgatherv/padded", sizes, _star())
    link = LinkSpec(
        "nic",
        B,
        A,
        allgatherv_host_s_per_byte=scalar,
        allgatherv_host_s_per_byte_table=table,
    )
    host = simulate_collective("allgatherv/padded", sizes, dataclasses.replace(_star(), link=link))
    np.testing.assert_array_equal(host.finish_s, plain.finish_s + delta * 7 * 2**17)
    assert host.time_s == plain.time_s + delta * 7 * 2**17


def test_one_rank_is_free_and_uses_no_link():
    run = simulate_collective("allreduce/ring", [N], _star())
    assert run.world_size == 1
    assert run.time_s == 0.0
    assert run.finish_s.tolist() == [0.0]
    assert run.links.empty
    assert list(run.links.columns) == list(LINK_COLUMNS)


@pytest.mark.parametrize("sizes", [[], [[N, N], [N, N]], N])
def test_sizes_must_be_one_value_per_rank(sizes):
    with pytest.raises(ConfigError, match=r"^sizes_bytes must be a list of per-rank sizes"):
        simulate_collective("allreduce/ring", sizes, _star())


def test_unknown_network_mode_is_refused():
    with pytest.raises(UnknownNameError, match="network mode"):
        simulate_collective("allgatherv/ring", [N, N], _star(), mode="bogus")


def test_unknown_message_semantics_is_refused():
    with pytest.raises(UnknownNameError, match="message semantics"):
        simulate_collective("allgatherv/ring", [N, N], _star(), semantics="rendevous")
