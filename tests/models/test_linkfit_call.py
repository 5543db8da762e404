"""The per-call software cost c of a collective: recovered with α from the small messages of
collectives that pay different numbers of steps per call, zero where the data hold none,
written to the cluster file, and refused flags exit 2."""

from __future__ import annotations

import pytest
from modelhelpers import exact_time_s

from vgcsim.cli import main
from vgcsim.core.cluster import load_cluster
from vgcsim.core.clusterfile import cluster_toml
from vgcsim.models.linkfit import call_coefficient, cost_coefficients, fit_link, op_errors
from vgcsim.traces.calibration import CalibrateConfig, write_measurements

SIZES = (4, 64, 1024, 16384, 262144, 1 << 20, 4 << 20, 16 << 20)
ALPHA, BETA, GAMMA = 60e-6, 1 / 25e6, 2e-9


def synthetic(call_s, world, ops=("p2p", "allreduce", "allgather", "allgatherv")):
    """Exact times on a link with α, β, γ and a per-call cost ``call_s`` (p2p pays none)."""
    rows = []
    for op in ops:
        for size in SIZES:
            t = exact_time_s(op, size, world, ALPHA, BETA, gamma=GAMMA)
            t += call_coefficient(op, world) * call_s
            rows.append({"op": op, "size_bytes": size, "seconds": [t]})
    return {"world_size": world, "backend": "gloo", "rows": rows}


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("call_s", [0.0, 500e-6])
def test_fit_recovers_the_per_call_cost_and_the_step_latency(world, call_s):
    fit, table = fit_link(synthetic(call_s, world))
    # gloo's small allreduces (steps scaled by their share of segments that carry bytes)
    # tell α from c alone; the allgather's steps then give its own α, here the same
    assert fit.call_ops == ("allreduce",)
    assert fit.call_overhead_s == pytest.approx(call_s, rel=1e-6, abs=1e-12)
    assert fit.latency_s == pytest.approx(ALPHA, rel=1e-6)
    assert fit.allgather_latency_op == "allgather"
    assert fit.allgather_latency_s == pytest.approx(ALPHA, rel=1e-6)
    # every collective row then priced within the float error of exact data
    worst = max(abs(r["rel_error"]) for r in table if r["op"] != "p2p")
    assert worst < 1e-6
    # without the gather's own α: α and c from the allreduce and allgather together
    joint, _ = fit_link(synthetic(call_s, world), gather_op=None)
    assert joint.call_ops == ("allreduce", "allgather") and joint.allgather_latency_s == 0.0
    assert joint.call_overhead_s == pytest.approx(call_s, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("world", [3, 4])
def test_an_allgather_whose_steps_start_slower_gets_its_own_alpha(world):
    """The allgather-type rows' steps start 1.3 × α (gloo's all_gather waits on each
    message; its allreduce keeps two in flight): the fit finds 1.3 × α for them, and the
    allgatherv rows, priced with it, fit exactly too."""
    doc = synthetic(300e-6, world)
    for r in doc["rows"]:
        if r["op"] in ("allgather", "allgatherv"):
            k_alpha = cost_coefficients(r["op"], r["size_bytes"], world)[0]
            r["seconds"] = [r["seconds"][0] + 0.3 * ALPHA * k_alpha]
    fit, table = fit_link(doc)
    assert fit.latency_s == pytest.approx(ALPHA, rel=1e-6)
    assert fit.allgather_latency_s == pytest.approx(1.3 * ALPHA, rel=1e-6)
    assert fit.call_overhead_s == pytest.approx(300e-6, rel=1e-6)
    assert max(abs(r["rel_error"]) for r in table if r["op"] != "p2p") < 1e-6
    # one α for both: the allgather's small rows come out fast
    _, joint = fit_link(doc, gather_op=None)
    assert op_errors(joint)["allgather"] > 0.02


def test_one_collective_cannot_tell_per_call_from_per_step():
    fit, _ = fit_link(synthetic(500e-6, 4, ops=("p2p", "allreduce")))
    assert fit.call_ops == () and fit.call_overhead_s == 0.0


def _write(tmp_path, doc):
    path = tmp_path / "m.json"
    world = doc["world_size"]
    write_measurements(path, CalibrateConfig(), world, doc["rows"], [0] * world)
    return path


def test_the_cluster_file_carries_the_per_call_cost(tmp_path):
    fit, _ = fit_link(synthetic(500e-6, 4))
    path = tmp_path / "c.toml"
    path.write_text(cluster_toml("x", fit, "cpu", "synthetic"))
    assert load_cluster(path).link.call_overhead_s == pytest.approx(500e-6, rel=1e-6)


def test_calibrate_divides_cpu_terms_by_the_sharing_it_measured_under(tmp_path, capsys):
    meas = _write(tmp_path, synthetic(500e-6, 4))
    out = tmp_path / "c.toml"
    args = ["calibrate", "--from", str(meas), "-o", str(out), "--force"]
    assert main([*args, "--ranks-per-host", "4", "--host-cores", "2"]) == 0
    c = load_cluster(out)
    assert (c.ranks_per_host, c.host_cores) == (4, 2)
    assert c.link.call_overhead_s == pytest.approx(250e-6, rel=1e-6)  # 4 ranks on 2 cores
    assert c.link.gamma_s_per_byte == pytest.approx(GAMMA / 2, rel=1e-3)


def test_calibrate_writes_the_given_token_bucket(tmp_path):
    meas = _write(tmp_path, synthetic(500e-6, 4))
    out = tmp_path / "c.toml"
    args = ["calibrate", "--from", str(meas), "-o", str(out), "--force", "--burst", "256KiB"]
    assert main(args) == 0
    assert load_cluster(out).link.burst_bytes == 262144.0
    plain = tmp_path / "plain.toml"
    assert main(["calibrate", "--from", str(meas), "-o", str(plain), "--force"]) == 0
    assert load_cluster(plain).link.burst_bytes == 0.0


@pytest.mark.parametrize(
    "flag",
    [
        ["--host-cores", "-1"],
        ["--ranks-per-host", "0"],
        ["--burst", "lots"],
        ["--burst=-1kB"],
        ["--burst", "16kb"],  # tc's 16 KiB, or 16 kilobits: refused, not guessed
    ],
)
def test_bad_host_flags_exit_2(tmp_path, capsys, flag):
    meas = _write(tmp_path, synthetic(0.0, 2))
    assert main(["calibrate", "--from", str(meas), "-o", str(tmp_path / "c.toml"), *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert flag[0].split("=")[0] in err  # the flag is what is refused, not the file
    assert not (tmp_path / "c.toml").exists()


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        (["--ops", "p2p"], "--ops is"),
        (["--repeats", "5", "--budget", "3"], "--repeats, --budget are"),
        (["--codec"], "--codec is"),
        (["--set", "repeats=3"], "--set is"),
        (["--nprocs", "4", "--iface", "eth0"], "--nprocs, --iface are"),
    ],
)
def test_from_refuses_the_flags_of_a_measurement_it_does_not_make(tmp_path, capsys, flag, named):
    meas = _write(tmp_path, synthetic(0.0, 2))
    out = tmp_path / "c.toml"
    assert main(["calibrate", "--from", str(meas), "-o", str(out), "--force", *flag]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and named in err and "--from measures nothing" in err
    assert not out.exists() and not (tmp_path / "c.fit.png").exists()


def test_an_unknown_device_preset_leaves_the_earlier_file_as_it_was(tmp_path, capsys):
    meas = _write(tmp_path, synthetic(0.0, 2))
    out = tmp_path / "c.toml"
    assert main(["calibrate", "--from", str(meas), "-o", str(out), "--force"]) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    argv = ["calibrate", "--from", str(meas), "-o", str(out), "--force", "--overwrite"]
    assert main([*argv, "--device-preset", "nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("unknown device preset 'nosuch'; valid: A100, H100, P100, V100, cpu")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# ---------------------------------------------------------------- size segments


def bucket_seconds(n, alpha=60e-6, burst=262144, fast_Bps=1.25e9, rate_Bps=1.25e8):
    """A ping-pong's half round trip behind a token bucket of ``burst`` bytes: the bucket
    leaves at the host's speed, the rest at the shaped rate."""
    return alpha + min(n, burst) / fast_Bps + max(0.0, n - burst) / rate_Bps


def tbf_measurements(world=4, call_s=300e-6):
    from vgcsim.traces.calibration import default_sizes_bytes

    rows = []
    for op in ("p2p", "allreduce", "allgather"):
        for size in default_sizes_bytes():
            if op == "p2p":
                t = bucket_seconds(size)
            elif op == "allreduce":
                t = call_s + 2 * (world - 1) * bucket_seconds(size / world)
            else:
                t = call_s + (world - 1) * bucket_seconds(size)
            rows.append({"op": op, "size_bytes": size, "seconds": [t]})
    # a textbook ring at every size: gloo's empty segments below (2P)² elements are
    # tests/models/test_linkfit_gloo.py's
    return {"world_size": world, "backend": "nccl", "rows": rows}


def test_a_token_bucket_is_fitted_as_size_segments_with_the_data_s_breakpoint():
    fit, table = fit_link(tbf_measurements())
    assert len(fit.segments) >= 2
    # a breakpoint at the bucket, where the two lines cross
    assert any(s[0] == pytest.approx(262144, rel=1e-6) for s in fit.segments), fit.segments
    assert fit.bandwidth_Bps == pytest.approx(1.25e8, rel=0.02)
    errors = {}
    for r in table:
        errors.setdefault(r["op"], []).append(abs(r["rel_error"]))
    # one line was ~60 % off on such a link; the segments price every op within 10 %
    assert max(max(v) for v in errors.values()) < 0.10, errors


def test_one_line_is_kept_where_it_fits():
    fit, _ = fit_link(synthetic(0.0, 4))
    assert fit.segments == ()
