"""The iteration model where variance and codec time matter: full overlap and the critical rank.

References are hand-worked timelines with dyadic numbers (exact in binary floating point):

* full overlap: the forward pass (f·c) runs first; communication starts with the backward
  pass; the backward pass, the variance estimate and the codec run one after the other on
  the device. The step ends when both the device work and the communication are done:
  ``T = f·c + max((1 − f)·c + v + k, comm)`` — variance and codec are *inside* the max.
* critical rank: a synchronous step waits for the rank whose *whole* local work (compute +
  variance + codec) is longest, so a rank with less compute can still be the one that sets
  the step through its codec (or variance) time.
"""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim.models.iteration import bucketed_step_time_s, critical_path, iteration_time_s

F = 0.25  # forward fraction


@pytest.mark.parametrize(
    ("comm", "step"),
    [
        # c = 3: forward 0.75, backward 2.25; v = 0.5, k = 0.25: device busy until 3.75
        (5.0, 0.75 + 5.0),  # comm longer than backward + v + k: comm sets the step
        (2.5, 3.75),  # comm longer than backward alone, shorter than backward + v + k
        (1.0, 3.75),  # comm shorter than backward: hidden entirely
    ],
)
def test_full_overlap_keeps_variance_and_codec_inside_the_max(comm, step):
    out = iteration_time_s([[3.0]], [[0.5]], [[0.25]], [comm], overlap="full", forward_fraction=F)
    assert out.step_s[0] == step
    assert (out.compute_s[0], out.variance_s[0], out.codec_s[0], out.comm_s[0]) == (
        3.0,
        0.5,
        0.25,
        comm,
    )


def test_full_overlap_equals_the_later_of_device_work_and_communication():
    # an independent statement of the same timeline: device work ends at c + v + k, the
    # communication (started after the forward pass) at f·c + comm; the step at the later.
    rng = np.random.default_rng(11)
    c = rng.uniform(0.1, 2.0, (50, 1))
    v = rng.uniform(0.0, 0.5, (50, 1))
    k = rng.uniform(0.0, 0.5, (50, 1))
    comm = rng.uniform(0.0, 4.0, 50)
    out = iteration_time_s(c, v, k, comm, overlap="full", forward_fraction=F)
    expected = np.maximum((c + v + k)[:, 0], F * c[:, 0] + comm)
    np.testing.assert_allclose(out.step_s, expected, rtol=1e-12)
    # never worse than no overlap, never better than the local work alone
    none = iteration_time_s(c, v, k, comm, overlap="none")
    assert (out.step_s <= none.step_s + 1e-12).all()
    assert (out.step_s >= (c + v + k)[:, 0] - 1e-12).all()


# rank 0 computes longest (2.0) but does no compression work; rank 1 computes 1.5 and spends
# 1.0 in its codec: 2.5 > 2.0, so rank 1 is critical only through its codec time.
COMPUTE = [[2.0, 1.5]]
VARIANCE = [[0.0, 0.0]]
CODEC = [[0.0, 1.0]]


def test_critical_rank_can_be_set_by_codec_time_alone():
    c, v, k = critical_path(COMPUTE, VARIANCE, CODEC)
    assert (c[0], v[0], k[0]) == (1.5, 0.0, 1.0)


def test_critical_rank_can_be_set_by_variance_time_alone():
    c, v, k = critical_path([[2.0, 1.5]], [[0.0, 0.75]], [[0.0, 0.0]])
    assert (c[0], v[0], k[0]) == (1.5, 0.75, 0.0)


def test_no_overlap_step_follows_the_codec_critical_rank():
    out = iteration_time_s(COMPUTE, VARIANCE, CODEC, [0.5], overlap="none")
    assert out.step_s[0] == 1.5 + 1.0 + 0.5
    assert (out.compute_s[0], out.codec_s[0]) == (1.5, 1.0)


def test_full_overlap_step_follows_the_codec_critical_rank():
    # rank 1: forward 0.375, then backward 1.125 + codec 1.0 -> device done at 2.5; comm 0.5
    # from 0.375 ends at 0.875: the step is 2.5 (rank 0 alone would give 2.0)
    out = iteration_time_s(COMPUTE, VARIANCE, CODEC, [0.5], overlap="full", forward_fraction=F)
    assert out.step_s[0] == 2.5


def test_bucketed_step_follows_the_codec_critical_rank():
    # rank 1 by hand, two buckets at backward shares 0.5 and 1: after the forward 0.375 the
    # device does 1.125 + 1.0 = 2.125 of backward-side work; bucket 0 ready at
    # 0.375 + 0.5 × 2.125 = 1.4375, comm 0.25 -> 1.6875; bucket 1 ready at 2.5, comm 0.25 ->
    # 2.75. (Rank 0 would give 2.0 + 0.25 = 2.25.)
    out = bucketed_step_time_s(
        COMPUTE, VARIANCE, CODEC, [[0.25, 0.25]], [0.5, 1.0], forward_fraction=F
    )
    assert out.step_s[0] == 2.75
    assert out.comm_s[0] == 0.5
