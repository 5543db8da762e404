"""``vgcsim calibrate`` across 4 network-namespace hosts behind a tbf shaper with a large burst:
size segments describe the point-to-point sizes, so calibrate writes its file without
``--force``, and the collectives are priced with the per-call cost.

One alpha-beta line missed such a link by 59 % typical error on p2p (a token bucket sends its
burst at the host's speed), and calibrate refused its own fit. Needs root (CI runs as root);
skips with the reason elsewhere, fails under ``CI=true``. The error bound here is calibrate's
p2p's typical error is held to 10 %; the collectives' to a loose bound, as their small sizes
scatter on a shared CI runner; the per-op figures come from
``benchmarks/calibrate_netns.py`` on a quiet machine (docs/distributed.md).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from _netns import calibrate_argv, missing_prerequisite, run_on_hosts, shaped_hosts

from vgcsim.core.cluster import load_cluster

pytestmark = [pytest.mark.netns, pytest.mark.distributed, pytest.mark.slow]

RATE, BURST_BYTES, HOSTS = "1gbit", 256 * 1024, 4


@pytest.fixture
def hosts():
    reason = missing_prerequisite()
    if reason is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the network-namespace test, but {reason}")
        pytest.skip(reason)
    with shaped_hosts(HOSTS, RATE, burst=BURST_BYTES, latency="400ms") as built:
        yield built
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert built.switch not in left and not any(n in left for n in built.names)


def test_calibrate_fits_a_token_bucket_link_within_its_own_threshold(hosts, tmp_path):
    cal = tmp_path / "cal.toml"
    sweep = ["--ops", "p2p,allreduce,allgather"]
    sweep += ["--sizes", "4,1KiB,16KiB,64KiB,128KiB,256KiB,512KiB,1MiB,2MiB,4MiB,8MiB,16MiB"]
    # the fastest repetition of each size: what the link does, without the scheduler's waits
    # of a shared runner (which the median of 7 still showed at 2x on small sizes)
    sweep += ["--repeats", "7", "--warmup", "1", "--budget", "1", "--statistic", "min"]
    done = run_on_hosts(
        hosts,
        [calibrate_argv(hosts, i, 29541, cal, *sweep) for i in range(HOSTS)],
        timeout_s=600,
    )
    out = done[0].stdout
    assert done[0].returncode == 0, out[-3000:]  # not refused: typical error <= 25 %
    per_op = re.search(r"typical error per op[^:]*: (.*)", out)
    assert per_op, out[-3000:]
    errors = {
        item.rsplit(" ", 1)[0]: float(item.rsplit(" ", 1)[1].rstrip("%")) / 100
        for item in per_op[1].split(", ")
    }
    assert set(errors) == {"p2p", "allreduce", "allgather"}
    # p2p, which calibrate judges its fit by: one line was 59 % off on such a link
    assert errors["p2p"] <= 0.10, out[-3000:]
    # the collectives' small sizes scatter by 2x on a busy runner (4 ranks on its cores):
    # a loose bound here, the 10 % figures from the benchmark on a quiet machine
    assert max(errors.values()) <= 1.0, out[-3000:]
    link = load_cluster(str(cal)).link
    assert len(link.segments) >= 2, out[-3000:]  # the bucket is a size segment of its own
    # the last segment's rate is the shaped one: 1 Gbit/s x 1448/1514 of TCP payload, +- 15 %
    assert link.bandwidth_Bps == pytest.approx(1e9 / 8 * 1448 / 1514, rel=0.15), out[-3000:]
