"""Calibration: the least-squares fit recovers known links; the command writes a usable cluster."""

from __future__ import annotations

import numpy as np
import pytest
from vgcsim.traces.training.distributed_calibrate import (
    cost_coefficients,
    fit_link,
    read_measurements,
)

from vgcsim.cli import main
from vgcsim.core.errors import ConfigError


def synthetic_measurements(alpha, beta, gamma, world, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for op in ("p2p", "allreduce", "allgather", "allgatherv"):
        for size in (4, 64, 1024, 16384, 262144, 4194304):
            a, b, g = cost_coefficients(op, size, world)
            t = a * alpha + b * beta + g * gamma
            reps = t * (1 + noise * rng.standard_normal(5))
            rows.append({"op": op, "size_bytes": size, "seconds": reps.tolist()})
    return {"world_size": world, "backend": "gloo", "rows": rows}


@pytest.mark.parametrize("world", [2, 4, 8])
def test_fit_recovers_a_known_link_exactly(world):
    fit, table = fit_link(synthetic_measurements(20e-6, 1 / 1.25e9, 2e-10, world))
    assert fit.latency_s == pytest.approx(20e-6, rel=1e-9)
    assert fit.bandwidth_Bps == pytest.approx(1.25e9, rel=1e-9)
    assert fit.gamma_s_per_byte == pytest.approx(2e-10, rel=1e-6)
    assert fit.rms_rel_error < 1e-9
    assert max(abs(r["rel_error"]) for r in table) < 1e-9


def test_fit_keeps_parameters_non_negative_under_noise():
    # gamma = 0 plus noise: an unconstrained fit could go negative; ours clamps to the
    # best non-negative solution and still finds alpha and beta to within the noise.
    fit, _ = fit_link(synthetic_measurements(50e-6, 1 / 1e8, 0.0, 4, noise=0.05, seed=3))
    assert fit.gamma_s_per_byte >= 0
    assert fit.latency_s == pytest.approx(50e-6, rel=0.15)
    assert fit.bandwidth_Bps == pytest.approx(1e8, rel=0.15)
    assert 0 < fit.rms_rel_error < 0.2


def test_ring_coefficients_match_the_textbook_costs():
    # P = 4, n = 1000 bytes: allreduce 6 alpha + 1500 beta + 750 gamma; allgather 3 alpha + 3000 beta.
    assert cost_coefficients("allreduce", 1000, 4) == (6.0, 1500.0, 750.0)
    assert cost_coefficients("allgather", 1000, 4) == (3.0, 3000.0, 0.0)
    assert cost_coefficients("p2p", 1000, 4) == (1.0, 1000.0, 0.0)
    # allgatherv = the padded model: 6 alpha + 3 * (1000 + 8) beta.
    assert cost_coefficients("allgatherv", 1000, 4) == (6.0, 3024.0, 0.0)


def test_reading_a_foreign_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text('{"kind": "something-else"}')
    with pytest.raises(ConfigError, match="re-run the calibration"):
        read_measurements(bad)
    with pytest.raises(ConfigError, match="no calibration measurements"):
        read_measurements(tmp_path / "missing.json")


def test_bad_options_exit_2_before_starting_processes(tmp_path, capsys):
    assert main(["calibrate", "--nprocs", "1", "-o", str(tmp_path / "c.toml")]) == 2
    assert main(["calibrate", "--ops", "bcast", "-o", str(tmp_path / "c.toml")]) == 2
    assert main(["calibrate", "--backend", "mpi", "-o", str(tmp_path / "c.toml")]) == 2
    err = capsys.readouterr().err
    assert "--nprocs must be >= 2" in err and "unknown op 'bcast'" in err and "mpi" in err
    assert not (tmp_path / "c.toml").exists()


@pytest.mark.distributed
def test_calibrate_on_loopback_writes_a_cluster_predict_accepts(tmp_path, capsys):
    from vgcsim.core.cluster import load_cluster

    out = tmp_path / "cluster.toml"
    # Loopback moves GB/s: only 16 MiB messages take long enough to show the per-byte cost;
    # its small-message latency is scheduler noise on a shared machine, hence --force.
    sizes = "64,4KiB,256KiB,4MiB,16MiB"
    flags = ["--sizes", sizes, "--repeats", "3", "--warmup", "1", "--force"]
    code = main(["calibrate", "--nprocs", "2", "--ops", "p2p,allreduce", *flags, "-o", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "rel_error" in text and "alpha =" in text and "typical error per op" in text
    assert text.count("\n") >= 12  # one line per (op, size) plus the summary
    assert (tmp_path / "cluster.fit.png").stat().st_size > 5000
    spec = load_cluster(str(out))
    assert spec.topology["kind"] == "star" and spec.intra_link is None
    assert spec.link.latency_s >= 0 and 1e6 < spec.link.bandwidth_Bps < 1e13
    # Refit from the kept measurements, as a torchrun user would with --from.
    meas = str(tmp_path / "cluster.measurements.json")
    again = tmp_path / "again.toml"
    assert main(["calibrate", "--from", meas, "--force", "-o", str(again)]) == 0
    refit = load_cluster(str(again)).link
    assert (refit.latency_s, refit.bandwidth_Bps) == (spec.link.latency_s, spec.link.bandwidth_Bps)


@pytest.mark.distributed
@pytest.mark.slow
def test_the_sweep_entry_runs_under_torchrun(tmp_path):
    """What a cluster user does: torchrun the sweep, then fit with --from; or torchrun
    ``vgcsim calibrate`` itself, whose rank 0 fits and writes the cluster file."""
    import subprocess
    import sys

    from vgcsim.traces.training.distributed_launch import free_port

    from vgcsim.core.cluster import load_cluster

    def torchrun(*argv: str) -> subprocess.CompletedProcess:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", *argv,
        ]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)

    # A warm-up round keeps connection set-up out of the first (smallest) size, and 4 MiB
    # keeps the bandwidth term well above loopback noise: with no warm-up and 1 MiB the fit
    # once found the small size slower than the large one (beta = 0) in a full test run.
    sweep = ["--sizes", "64,4MiB", "--repeats", "3", "--warmup", "1"]
    meas = tmp_path / "m.json"
    done = torchrun("vgcsim.traces.training.distributed_calibrate", *sweep, "-o", str(meas))
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_measurements(meas)["world_size"] == 2
    assert main(["calibrate", "--from", str(meas), "-o", str(tmp_path / "c.toml")]) == 0

    done = torchrun("vgcsim", "calibrate", "--ops", "p2p", *sweep, "--force", "-o", "t.toml")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("wrote t.toml") == 1  # rank 0 only
    assert read_measurements(tmp_path / "t.measurements.json")["nodes"] == [0, 0]
    assert load_cluster(str(tmp_path / "t.toml")).link.bandwidth_Bps > 0


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--fit-ops", "bcast"], "--fit-ops: unknown op 'bcast'"),
        (["--timeout", "-1"], "--timeout must be a positive number"),
        (["--ops", ""], "give at least one op to time"),
        (["-o", "."], "is a folder"),
    ],
)
def test_bad_fit_ops_or_timeout_exit_2_before_measuring(
    flags, message, tmp_path, capsys, monkeypatch
):
    import vgcsim.traces.training.distributed_launch as launch

    def no_launch(*a, **k):
        raise AssertionError("processes started for a bad option")

    monkeypatch.setattr(launch, "launch_local", no_launch)
    assert main(["calibrate", "-o", str(tmp_path / "c.toml"), *flags]) == 2
    assert message in capsys.readouterr().err


def test_measurements_that_are_not_utf8_are_a_config_error(tmp_path):
    p = tmp_path / "m.json"
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="unreadable calibration measurements"):
        read_measurements(p)


def bucket_link_measurements(alpha, rate_Bps, burst_bytes, world=4, noise=0.02, seed=0):
    """A token-bucket link (tbf): the first ``burst_bytes`` of a message leave at once, the
    rest at ``rate_Bps``; p2p and allreduce from 4 B to 64 MiB, as the sweep measures them."""
    from vgcsim.traces.training.distributed_calibrate import (
        MEASUREMENTS_KIND,
        MEASUREMENTS_VERSION,
        default_sizes_bytes,
    )

    rng = np.random.default_rng(seed)
    rows = []
    for op in ("p2p", "allreduce"):
        for size in default_sizes_bytes():
            k_alpha, k_beta, _ = cost_coefficients(op, size, world)
            per_msg = k_beta / max(1.0, k_alpha)  # bytes per message of the ring
            t = k_alpha * (alpha + max(0.0, per_msg - burst_bytes) / rate_Bps)
            reps = t * (1 + noise * rng.standard_normal(7))
            rows.append({"op": op, "size_bytes": size, "seconds": reps.tolist()})
    return {
        "kind": MEASUREMENTS_KIND,
        "version": MEASUREMENTS_VERSION,
        "world_size": world,
        "backend": "gloo",
        "nodes": list(range(world)),
        "rows": rows,
    }


def test_bandwidth_comes_from_large_messages_and_latency_from_small_ones():
    # The case: a 25 MB/s link whose 1 MiB bucket swallows most small sizes. A fit
    # that weighs every size alike made it 3-4x too fast; the regimes find the rate.
    m = bucket_link_measurements(alpha=100e-6, rate_Bps=25e6, burst_bytes=1 << 20)
    fit, table = fit_link(m)
    assert fit.bandwidth_Bps == pytest.approx(25e6, rel=0.03)
    assert fit.latency_s == pytest.approx(100e-6, rel=0.1)
    assert fit.fit_ops == ("p2p",) and fit.gamma_op == "allreduce"
    roles = {r["size_bytes"]: r["role"] for r in table if r["op"] == "p2p"}
    assert roles[4] == "latency" and roles[64 << 20] == "bandwidth"
    # The bucket is real: the sizes it swallows are predicted too slow, so the typical error
    # says that one alpha-beta line does not describe this link at every size.
    assert fit.typical_error > 0.5
    # Above the bucket the line is right.
    large = [r for r in table if r["op"] == "p2p" and r["size_bytes"] >= 16 << 20]
    assert all(abs(r["rel_error"]) < 0.1 for r in large)


def test_a_poor_fit_is_refused_with_one_line_unless_forced(tmp_path, capsys):
    import json

    meas = tmp_path / "m.json"
    meas.write_text(json.dumps(bucket_link_measurements(100e-6, 25e6, 1 << 20)))
    out = tmp_path / "c.toml"
    assert main(["calibrate", "--from", str(meas), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fit error too large" in err[0] and "--max-error 25%" in err[0]
    assert not out.exists()
    # Refit far above the bucket: the line fits, the file is written.
    assert main(["calibrate", "--from", str(meas), "--sizes", "16MiB:64MiB", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert " 4194304 " not in text and " 67108864 " in text
    from vgcsim.core.cluster import load_cluster

    assert load_cluster(str(out)).link.bandwidth_Bps == pytest.approx(25e6, rel=0.1)
    # Or write it anyway.
    forced = tmp_path / "f.toml"
    assert main(["calibrate", "--from", str(meas), "--force", "-o", str(forced)]) == 0
    assert forced.exists()


def test_size_ranges_are_log_spaced_and_inclusive():
    from vgcsim.traces.training.distributed_calibrate import default_sizes_bytes, parse_sizes

    assert default_sizes_bytes()[0] == 4 and default_sizes_bytes()[-1] == 64 << 20
    assert len(default_sizes_bytes()) == 13
    sizes, bounds = parse_sizes("1KiB:10KiB")
    assert sizes == (1024, 4096, 10240) and bounds == (1024, 10240)
    assert parse_sizes("4,1KiB") == ((4, 1024), None)
    with pytest.raises(ConfigError, match="MIN <= MAX"):
        parse_sizes("1MiB:1KiB")
    with pytest.raises(ConfigError, match="bad --sizes"):
        parse_sizes("4:lots")


def test_p2p_pairs_cross_nodes_and_pair_inside_one():
    from vgcsim.traces.training.distributed_calibrate import p2p_pairs

    assert p2p_pairs([0, 0]) == {"p2p": (0, 1)}  # one node: the only pair there is
    assert p2p_pairs([0, 1, 2, 3]) == {"p2p": (0, 1)}  # one rank per node
    # Two ranks per node (torchrun fills node by node): 0-2 crosses, 0-1 stays inside.
    assert p2p_pairs([0, 0, 1, 1]) == {"p2p": (0, 2), "p2p_intra": (0, 1)}


def test_intra_and_inter_node_links_are_fitted_apart(tmp_path):
    """Two ranks on each of two nodes: the cluster file gets both links, hierarchical."""
    import json

    from vgcsim.traces.training.distributed_calibrate import (
        MEASUREMENTS_KIND,
        MEASUREMENTS_VERSION,
        default_sizes_bytes,
    )

    from vgcsim.core.cluster import load_cluster

    links = {"p2p": (50e-6, 1e8), "p2p_intra": (5e-6, 5e9)}
    rows = [
        {"op": op, "size_bytes": n, "seconds": [a + n / bw] * 3}
        for op, (a, bw) in links.items()
        for n in default_sizes_bytes()
    ]
    doc = {"kind": MEASUREMENTS_KIND, "version": MEASUREMENTS_VERSION, "world_size": 4}
    doc.update(backend="gloo", nodes=[0, 0, 1, 1], rows=rows)
    meas = tmp_path / "m.json"
    meas.write_text(json.dumps(doc))
    assert main(["calibrate", "--from", str(meas), "-o", str(tmp_path / "c.toml")]) == 0
    spec = load_cluster(str(tmp_path / "c.toml"))
    assert spec.topology["kind"] == "hierarchical" and spec.gpus_per_node == 2
    assert spec.link.bandwidth_Bps == pytest.approx(1e8, rel=1e-6)
    assert spec.link.latency_s == pytest.approx(50e-6, rel=1e-6)
    assert spec.intra_link.bandwidth_Bps == pytest.approx(5e9, rel=1e-6)
    assert spec.intra_link.latency_s == pytest.approx(5e-6, rel=1e-6)


def test_launcher_options_are_checked_before_any_process(tmp_path, capsys):
    out = str(tmp_path / "c.toml")
    assert main(["calibrate", "--nnodes", "2", "--master-addr", "10.0.0.1", "-o", out]) == 2
    assert "--master-port" in capsys.readouterr().err
    assert (
        main(["calibrate", "--nnodes", "2", "--node-rank", "2", "--master-port", "1", "-o", out])
        == 2
    )
    assert "--node-rank must be in 0..1" in capsys.readouterr().err
    assert main(["calibrate", "--iface", "eth0 eth1", "-o", out]) == 2
    assert "not a network interface name" in capsys.readouterr().err


def test_under_torchrun_the_layout_belongs_to_torchrun(tmp_path, capsys, monkeypatch):
    for k, v in dict(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="1").items():
        monkeypatch.setenv(k, v)
    assert main(["calibrate", "--nnodes", "2", "-o", str(tmp_path / "c.toml")]) == 2
    assert "give the layout to torchrun" in capsys.readouterr().err


def test_a_step_in_the_p2p_line_is_reported_where_it_is():
    from vgcsim.traces.training.distributed_calibrate import default_sizes_bytes, protocol_switch

    def table(step_at):
        rows = []
        for n in default_sizes_bytes():
            # Eager below the switch, a rendezvous round trip (+300 us) from it on.
            t = 20e-6 + n / 1e9 + (300e-6 if n >= step_at else 0.0)
            rows.append({"op": "p2p", "size_bytes": n, "measured_s": t, "fitted_s": t})
        return rows

    found = protocol_switch(table(65536))
    assert found is not None
    assert (found["below_bytes"], found["above_bytes"]) == (16384, 65536)
    assert found["below"][0] == pytest.approx(20e-6, rel=0.05)
    assert found["above"][0] == pytest.approx(320e-6, rel=0.05)
    assert protocol_switch(table(1 << 40)) is None  # one straight line: nothing to report
