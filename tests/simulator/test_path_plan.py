"""What every simulator path shares (``vgcsim.simulator.paths.plan``) and the defaults of the
reference, held by hand: a call's software cost (one rank pays none; the bounded exchange
pays a second call only where it has its fallback round), the refusals' messages, and that
the batched collective-level path prices wire bytes and γ as the round-by-round one."""

from __future__ import annotations

import numpy as np
import pytest
from simhelpers import cluster

from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.simulator.collectives import bounded_schedule, get_schedule
from vgcsim.simulator.paths.collective import run_collective
from vgcsim.simulator.paths.message import run_message
from vgcsim.simulator.paths.plan import Phase, RunCache, cache_for, call_s, is_eager
from vgcsim.simulator.paths.reference import run_reference
from vgcsim.simulator.topology import build_topology


@pytest.mark.parametrize("p", [2, 3, 5])
def test_a_call_costs_its_overhead_per_call_and_nothing_for_one_rank(p):
    c = 0.25
    assert call_s(get_schedule("allreduce/ring", p), c) == c  # one call
    assert call_s(get_schedule("allreduce/ring", 1), c) == 0.0  # a collective of one rank
    assert call_s(get_schedule("allreduce/ring", p), 0.0) == 0.0
    # the bounded exchange: one all_gather of the bound blocks (P − 1 ring rounds), a second
    # one where the fallback round runs (2 (P − 1) rounds)
    assert len(bounded_schedule(p, fallback=False).rounds) == p - 1
    assert call_s(bounded_schedule(p, fallback=False), c) == c
    assert call_s(bounded_schedule(p, fallback=True), c) == 2 * c
    assert call_s(bounded_schedule(1, fallback=True), c) == 0.0


def test_unknown_semantics_and_a_cache_of_another_topology_are_refused_by_name():
    assert is_eager("eager") is True and is_eager("rendezvous") is False
    with pytest.raises(UnknownNameError) as err:
        is_eager("lazy")
    assert str(err.value) == "unknown message semantics 'lazy'; valid: eager, rendezvous"
    topo = build_topology(cluster(), 4)
    assert cache_for(topo, None).topology is topo
    cache = RunCache(topo)
    assert cache_for(topo, cache) is cache
    with pytest.raises(ConfigError) as err:
        cache_for(build_topology(cluster(), 4), cache)
    assert str(err.value) == "a RunCache serves the topology it was made for, not another one"


@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_the_batched_collective_path_prices_wire_bytes_and_gamma_as_round_by_round(gamma):
    """A ring allreduce (every round a permutation, so ``check_overlap=False`` takes the
    batched path) of four uneven chunks on a 1 B/s star: with a
    wire function and γ the batched
    and the round-by-round evaluation agree, and the wire bytes are what moves."""
    p = 4
    topo = build_topology(cluster(bandwidth_Bps=1.0, latency_s=0.0), p)
    schedule = get_schedule("allreduce/ring", p)
    units = np.array([40.0, 24.0, 56.0, 8.0])  # the four chunks, uneven
    phase = Phase(np.zeros(p), schedule, units)

    def wire(nbytes):
        return 2.0 * nbytes + 1.0

    batched = run_collective([phase], topo, gamma_s_per_byte=gamma, check_overlap=False, wire=wire)
    rounds = run_collective([phase], topo, gamma_s_per_byte=gamma, check_overlap=True, wire=wire)
    np.testing.assert_allclose(batched, rounds, rtol=1e-12)
    plain = run_collective([phase], topo, gamma_s_per_byte=gamma, check_overlap=False)
    assert np.all(batched > plain)
    reference = run_reference([phase], topo, gamma_s_per_byte=gamma, wire=wire)
    np.testing.assert_allclose(batched, reference, rtol=1e-12)


def test_the_references_defaults_and_its_counts_over_two_runs():
    """Without options the reference is rendezvous, γ = 0, no call cost (the message level's
    defaults, event for event); ``stats`` adds up over the runs given the same dict; one rank
    ends at its ready time."""
    p = 3
    topo = build_topology(cluster(), p)
    phase = Phase(np.array([0.0, 1e-3, 2e-3]), get_schedule("allgatherv/ring", p), np.ones(p))
    stats: dict[str, int] = {}
    first = run_reference([phase], topo, stats=stats)
    np.testing.assert_array_equal(
        first, run_reference([phase], topo, semantics="rendezvous", gamma_s_per_byte=0.0)
    )
    np.testing.assert_array_equal(first, run_message([phase], topo))
    once = dict(stats)
    run_reference([phase], topo, stats=stats)
    assert once["events"] > 0 and stats == {k: 2 * v for k, v in once.items()}
    alone = Phase(np.array([5e-3]), get_schedule("allgatherv/ring", 1), np.ones(1))
    one = build_topology(cluster(), 1)
    assert run_reference([alone], one).tolist() == [[5e-3]]
    assert run_message([alone], one).tolist() == [[5e-3]]
