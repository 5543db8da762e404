"""A token bucket's start-up refill and what follows from it, worked by hand: ``min(b, α/β)``
(``start_refill_bytes``, ``refill_bytes``), the depth beyond it (``idle_burst_bytes``),
whether a link prices by size (``prices_by_size``), and the links stripped to their bytes
(``wire_link``) or met by an allgather (``gather_cluster``)."""

from __future__ import annotations

import dataclasses

import pytest

from vgcsim.core.cluster import gather_cluster, get_cluster, wire_link
from vgcsim.core.collectives import idle_burst_bytes, prices_by_size
from vgcsim.core.specs import refill_bytes, start_refill_bytes


def _link(**changes):
    # 100 MB/s payload (β = 10 ns per byte), α = 100 µs: α/β = 10,000 bytes
    base = dataclasses.replace(
        get_cluster("1GbE").link, bandwidth_Bps=1e8, efficiency=1.0, latency_s=1e-4
    )
    return dataclasses.replace(base, **changes)


def test_the_refill_is_the_bucket_or_alpha_over_beta_whichever_is_less():
    assert start_refill_bytes(1e6, 1e-4, 1e-8) == pytest.approx(1e4, rel=1e-12)  # α/β
    assert start_refill_bytes(1.0, 1e-4, 1e-8) == 1.0  # a one-byte bucket refills one byte
    assert start_refill_bytes(0.0, 1e-4, 1e-8) == 0.0  # no bucket
    assert start_refill_bytes(1e6, 1e-4, 0.0) == 0.0  # no rate: nothing to refill at
    assert refill_bytes(_link(burst_bytes=1e6)) == pytest.approx(1e4, rel=1e-12)
    assert refill_bytes(_link()) == 0.0


def test_a_link_stripped_to_its_bytes_keeps_its_refill_and_has_no_start_up():
    # α/β = 0.5 byte: less than one byte refills while a step starts
    link = _link(latency_s=5e-9, burst_bytes=1e6, allgather_latency_s=1e-3, call_overhead_s=1e-4)
    wired = wire_link(link)
    assert refill_bytes(link) == pytest.approx(0.5, rel=1e-12)
    assert refill_bytes(wired) == pytest.approx(0.5, rel=1e-12)  # kept, though α is now 0
    assert (wired.latency_s, wired.allgather_latency_s, wired.call_overhead_s) == (0.0, 0.0, 0.0)
    assert prices_by_size(link)  # a refill of half a byte still prices by size
    assert not prices_by_size(_link())


def test_the_idle_depth_is_the_bucket_beyond_one_refill():
    assert idle_burst_bytes(_link(burst_bytes=1e6)) == pytest.approx(1e6 - 1e4, rel=1e-12)
    assert idle_burst_bytes(_link(burst_bytes=5e3)) == 0.0  # the refill fills it
    assert idle_burst_bytes(_link()) == 0.0


def test_an_allgather_meets_the_same_cluster_where_its_start_up_is_the_links():
    c = get_cluster("1GbE")
    assert c.link.allgather_latency_s == 0.0
    assert gather_cluster(c) is c
    slow = dataclasses.replace(c, link=dataclasses.replace(c.link, allgather_latency_s=1e-3))
    assert gather_cluster(slow).link.latency_s == 1e-3
