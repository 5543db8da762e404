"""``vgcsim calibrate`` across 4 network-namespace hosts behind a tbf shaper with a large burst:
size segments describe the point-to-point sizes better than one line and the bucket's rate is
the last segment's. (The per-call cost is recovered from exact data in
``tests/models/test_linkfit_call.py``; on these links its fit may be any value from 0 up.)

One alpha-beta line missed such a link by 59 % typical error on p2p (a token bucket sends its
burst at the host's speed), and calibrate refused its own fit. Needs root (CI runs as root);
skips with the reason elsewhere, fails under ``CI=true``. Timing on a shared runner scatters
(small messages by 2x and more: one slow median at 4 bytes once outweighed the bucket's two
lines), so this test fits the best case over repetitions (``--statistic min``: the link's
shape without the runner's contention) and compares the fits on the same measurements;
the absolute typical error per op (target 10 %) is what ``benchmarks/calibrate_netns.py
--max-error 0.1`` checks on a quiet machine (docs/distributed.md).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from _netns import calibrate_argv, missing_prerequisite, run_on_hosts, shaped_hosts

from vgcsim.core.cluster import load_cluster
from vgcsim.models.linkfit import fit_link
from vgcsim.traces.calibration import read_measurements

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


def test_calibrate_fits_a_token_bucket_link_with_size_segments(hosts, tmp_path):
    cal = tmp_path / "cal.toml"
    sweep = ["--ops", "p2p,allreduce"]
    sweep += ["--sizes", "4,1KiB,16KiB,64KiB,256KiB,1MiB,2MiB,4MiB,8MiB"]
    sweep += ["--repeats", "10", "--warmup", "1", "--budget", "3", "--passes", "2"]
    sweep += ["--statistic", "min", "--force"]
    done = run_on_hosts(
        hosts,
        [calibrate_argv(hosts, i, 29541, cal, *sweep) for i in range(HOSTS)],
        timeout_s=900,
    )
    out = done[0].stdout
    assert done[0].returncode == 0, out[-3000:]
    per_op = re.search(r"typical error per op[^:]*: (.*)", out)
    assert per_op and {"p2p", "allreduce"} <= set(per_op[1].replace(",", "").split())
    link = load_cluster(str(cal)).link
    assert len(link.segments) >= 2, out[-3000:]  # the bucket is a size segment of its own
    # the last segment's rate is the shaped one: 1 Gbit/s x 1448/1514 of TCP payload, +- 15 %
    assert link.bandwidth_Bps == pytest.approx(1e9 / 8 * 1448 / 1514, rel=0.15), out[-3000:]
    # the segments describe p2p better than one line on the same measurements (the absolute
    # figure, 10 % on a quiet machine, is the benchmark's: timing on a shared runner scatters)
    meas = read_measurements(cal.with_name("cal.measurements.json"))
    segmented, _ = fit_link(meas, "min")
    one_line, _ = fit_link(meas, "min", segments=False)
    assert segmented.typical_error < one_line.typical_error, out[-3000:]
