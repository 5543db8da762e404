"""``vgcsim calibrate``: the sweep on real ranks writes a cluster file predict accepts; bad
options and bad measurement files are one line and exit 2 before any process starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.models.test_linkfit import bucket_link_measurements
from vgcsim.cli import main
from vgcsim.traces.calibration import read_measurements


def test_bad_options_exit_2_before_starting_processes(tmp_path, capsys):
    assert main(["calibrate", "--nprocs", "1", "-o", str(tmp_path / "c.toml")]) == 2
    assert main(["calibrate", "--ops", "bcast", "-o", str(tmp_path / "c.toml")]) == 2
    assert main(["calibrate", "--backend", "mpi", "-o", str(tmp_path / "c.toml")]) == 2
    err = capsys.readouterr().err
    assert "--nprocs must be >= 2" in err and "unknown op 'bcast'" in err and "mpi" in err
    assert not (tmp_path / "c.toml").exists()


@pytest.mark.slow
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
    from vgcsim.traces.training.distributed_calibrate import back_to_back

    rows = json.loads(Path(meas).read_text())["rows"]
    for op in ("p2p", "allreduce"):
        counts = {r["size_bytes"]: r["back_to_back"] for r in rows if r["op"] == op}
        assert counts == {n: back_to_back(n) for n in (64, 4096, 262144, 4 << 20, 16 << 20)}
    again = tmp_path / "again.toml"
    assert main(["calibrate", "--from", meas, "--force", "-o", str(again)]) == 0
    refit = load_cluster(str(again)).link
    assert (refit.latency_s, refit.bandwidth_Bps) == (spec.link.latency_s, spec.link.bandwidth_Bps)


@pytest.mark.distributed
@pytest.mark.slow
def test_the_sweep_entry_runs_under_torchrun(tmp_path):
    """What a cluster user does: torchrun ``vgcsim calibrate``, whose rank 0 fits and writes
    the cluster file and the measurements, which ``--from`` fits again later. (The rank entry
    ``vgcsim calibrate`` starts, ``python -m vgcsim.traces.training.distributed_calibrate``,
    runs in the torchrun environment in test_calibrate_on_loopback_writes_a_cluster_predict_accepts.)"""
    import subprocess
    import sys

    from vgcsim.core.cluster import load_cluster
    from vgcsim.traces.training.distributed_launch import free_port

    # p2p alone fits beta from its largest size: 16 MiB keeps it far above the small one's
    # time on a loaded machine (at 4 MiB a run under load once found beta = 0); a warm-up
    # round keeps connection set-up out of the first (smallest) size
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "vgcsim",
        "calibrate", "--ops", "p2p", "--sizes", "64,16MiB", "--repeats", "3", "--warmup", "1",
        "--force", "-o", "t.toml",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("wrote t.toml") == 1  # rank 0 only
    meas = tmp_path / "t.measurements.json"
    written = read_measurements(meas)
    assert written["nodes"] == [0, 0] and written["world_size"] == 2
    assert load_cluster(str(tmp_path / "t.toml")).link.bandwidth_Bps > 0
    assert main(["calibrate", "--from", str(meas), "-o", str(tmp_path / "c.toml")]) == 0
    assert (
        load_cluster(str(tmp_path / "c.toml")).link == load_cluster(str(tmp_path / "t.toml")).link
    )


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


def test_a_poor_fit_is_refused_with_one_line_unless_forced(tmp_path, capsys):
    meas = tmp_path / "m.json"
    doc = bucket_link_measurements(100e-6, 25e6, 1 << 20)
    # p2p below 4 MiB zigzags by 2.5x up and down from size to size: no line, and no size
    # segments of three sizes or more, describes it (a bucket alone is fitted by segments)
    zigzag = [r for r in doc["rows"] if r["op"] == "p2p" and r["size_bytes"] < 4 << 20]
    for i, r in enumerate(zigzag):
        r["seconds"] = [v * (2.5 if i % 2 else 0.4) for v in r["seconds"]]
    meas.write_text(json.dumps(doc))
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


def test_p2p_pairs_cross_nodes_and_pair_inside_one():
    from vgcsim.traces.training.distributed_calibrate import p2p_pairs

    assert p2p_pairs([0, 0]) == {"p2p": (0, 1)}  # one node: the only pair there is
    assert p2p_pairs([0, 1, 2, 3]) == {"p2p": (0, 1)}  # one rank per node
    # Two ranks per node (torchrun fills node by node): 0-2 crosses, 0-1 stays inside.
    assert p2p_pairs([0, 0, 1, 1]) == {"p2p": (0, 2), "p2p_intra": (0, 1)}


def test_intra_and_inter_node_links_are_fitted_apart(tmp_path):
    """Two ranks on each of two nodes: the cluster file gets both links, hierarchical."""
    from vgcsim.core.cluster import load_cluster
    from vgcsim.traces.calibration import (
        MEASUREMENTS_KIND,
        MEASUREMENTS_VERSION,
        default_sizes_bytes,
    )

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


@pytest.mark.parametrize(
    "text, message",
    [
        ("[]", "must be a JSON object, got list"),
        ("{}", "is not a version-2 calibration file"),
        ("", "unreadable calibration measurements"),
        (
            '{"kind": "vgcsim-calibration", "version": 2, "world_size": 2, "rows": []}',
            "rows: must be a non-empty list",
        ),
        (
            '{"kind": "vgcsim-calibration", "version": 2, "world_size": 2, '
            '"rows": [{"op": "p2p", "size_bytes": 64, "seconds": [NaN]}]}',
            "rows[0].seconds: every time must be a positive finite number, got nan",
        ),
        (
            '{"kind": "vgcsim-calibration", "version": 2, "world_size": 2, '
            '"rows": [{"op": "p2p", "size_bytes": "big", "seconds": [1e-5]}]}',
            "rows[0].size_bytes: must be a whole number of bytes",
        ),
    ],
)
def test_from_a_malformed_file_is_one_line_and_exit_2(tmp_path, capsys, text, message):
    """Issue 14, reproduction 12: ``--from`` a file holding ``[]`` was an AttributeError."""
    meas = tmp_path / "f.json"
    meas.write_text(text)
    out = tmp_path / "c.toml"
    assert main(["calibrate", "--from", str(meas), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and str(meas) in err[0], err
    assert not out.exists()
    # vgcsim validate reads the same files through the same reader.
    assert main(["validate", str(meas), "--cluster", "10GbE"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "expected CONFIG_JSON and OUTPUT"),
        (["{}", "m.json", "extra"], "expected CONFIG_JSON and OUTPUT"),
        (["--ops p2p", "m.json"], "CONFIG_JSON is not JSON"),
        (['{"ops": ["bcast"]}', "m.json"], "unknown op 'bcast'"),
        (['{"repeats": 0}', "m.json"], "repeats must be >= 1"),
        (['{"sizes": [4]}', "m.json"], "unknown config key 'sizes'"),
    ],
)
def test_the_rank_entry_refuses_a_bad_config_before_joining_a_group(argv, message, capsys):
    from vgcsim.traces.training.distributed_calibrate import main as rank_main

    assert rank_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_small_messages_are_timed_over_several_back_to_back_operations():
    from vgcsim.traces.training.distributed_calibrate import (
        BACK_TO_BACK_BYTES,
        MAX_BACK_TO_BACK,
        back_to_back,
    )

    # clamp(256 KiB / n, 1, 16): 16 ops up to 16 KiB, 4 at 64 KiB, one from 256 KiB on.
    assert (MAX_BACK_TO_BACK, BACK_TO_BACK_BYTES) == (16, 262144)
    assert [back_to_back(n) for n in (1, 4, 16384, 16385, 65536, 262144, 1 << 26)] == [
        16,
        16,
        16,
        15,
        4,
        1,
        1,
    ]


def _scripted_sweep(monkeypatch, cfg, warmup_s=1e-3):
    """``measure`` with the timing replaced by a script: each call to ``_time_op`` is logged
    as (op, size) and returns its call number. The slowest rank's times are ``warmup_s`` each
    (what the budget reads from the warm-up), or with ``warmup_s=None`` this rank's own: the
    call numbers, rows' times included (one rank's view)."""
    import vgcsim.traces.training.distributed_calibrate as dc

    calls: list[tuple[str, int]] = []

    def time_op(op, size, rank, world, device, pair, busy_before_s=0.0):
        calls.append((op, size))
        return float(len(calls))

    def slowest(values, device):
        return list(values) if warmup_s is None else [warmup_s] * len(values)

    monkeypatch.setattr(dc, "_time_op", time_op)
    monkeypatch.setattr(dc, "_slowest", slowest)
    rows = dc.measure(cfg, rank=0, world=2)
    return calls, rows


def test_the_sweep_spreads_each_sizes_repetitions_over_its_passes(monkeypatch):
    from vgcsim.traces.calibration import CalibrateConfig

    cfg = CalibrateConfig(
        ops=("p2p", "allreduce"),
        sizes_bytes=(4, 64),
        repeats=5,
        warmup=2,
        passes=2,
        budget_s=1e9,  # the warm-ups "take" their call numbers in seconds
    )
    calls, rows = _scripted_sweep(monkeypatch, cfg, warmup_s=None)
    visits = [("p2p", 4), ("p2p", 64), ("allreduce", 4), ("allreduce", 64)]
    # Pass 1: two warm-ups and 3 of the 5 repetitions per visit; pass 2: one warm-up, 2 more.
    expected = [v for v in visits for _ in range(2 + 3)] + [v for v in visits for _ in range(1 + 2)]
    assert calls == expected
    # Each row's repetitions are its timed calls (call numbers, 1-based), pass by pass.
    first = {v: 5 * i + 1 for i, v in enumerate(visits)}  # a visit's first call in pass 1
    second = {v: 20 + 3 * i + 1 for i, v in enumerate(visits)}
    for row in rows:
        v = (row["op"], row["size_bytes"])
        assert row["seconds"] == [
            first[v] + 2,
            first[v] + 3,
            first[v] + 4,
            second[v] + 1,
            second[v] + 2,
        ]
    assert [(r["op"], r["size_bytes"]) for r in rows] == visits
    assert rows[0]["pair"] == [0, 1] and "pair" not in rows[2]


def test_one_pass_times_every_repetition_of_a_size_back_to_back(monkeypatch):
    from vgcsim.traces.calibration import CalibrateConfig

    cfg = CalibrateConfig(ops=("allreduce",), sizes_bytes=(4, 64), repeats=3, warmup=1, passes=1)
    calls, rows = _scripted_sweep(monkeypatch, cfg)
    assert calls == [("allreduce", 4)] * 4 + [("allreduce", 64)] * 4
    assert [len(r["seconds"]) for r in rows] == [3, 3]


def test_without_warm_up_no_pass_has_an_untimed_repetition(monkeypatch):
    from vgcsim.traces.calibration import CalibrateConfig

    cfg = CalibrateConfig(ops=("allreduce",), sizes_bytes=(4, 64), repeats=4, warmup=0, passes=2)
    calls, rows = _scripted_sweep(monkeypatch, cfg)
    assert (
        calls
        == [("allreduce", 4)] * 2
        + [("allreduce", 64)] * 2
        + [("allreduce", 4)] * 2
        + [("allreduce", 64)] * 2
    )
    assert [len(r["seconds"]) for r in rows] == [4, 4]


def test_the_budget_cuts_a_slow_sizes_repetitions_before_they_are_shared_out(monkeypatch):
    from vgcsim.traces.calibration import CalibrateConfig

    # 1 MiB is one operation per repetition. A warm-up of 2.5 s: the 10 s budget fits 4 of
    # the 10 repetitions, 2 per pass; at 6 s it fits 1 and the floor of 3 holds (2 + 1).
    for warmup_s, shares in ((2.5, [2, 2]), (6.0, [2, 1])):
        cfg = CalibrateConfig(
            ops=("allreduce",), sizes_bytes=(1 << 20,), repeats=10, warmup=1, passes=2
        )
        calls, rows = _scripted_sweep(monkeypatch, cfg, warmup_s=warmup_s)
        assert len(calls) == 1 + shares[0] + 1 + shares[1]
        assert len(rows[0]["seconds"]) == sum(shares)


@pytest.mark.slow
@pytest.mark.distributed
def test_busy_before_works_on_every_rank_then_times_one_operation(tmp_path, capsys):
    """``--busy-before 20ms``: each repetition is one operation (``back_to_back`` 1 on every
    row) after 20 ms of CPU work on every rank, so the ranks' CPU clocks advance by at least
    that per repetition, warm-ups included; the file records the setting."""
    import resource

    out = tmp_path / "busy.toml"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the large sizes, as on loopback only they show the per-byte cost the fit needs
    flags = ["--sizes", "64,4KiB,4MiB,16MiB", "--ops", "p2p,allreduce", "--repeats", "3"]
    flags += ["--warmup", "1", "--busy-before", "20ms", "--force", "-o", str(out)]
    assert main(["calibrate", "--nprocs", "2", *flags]) == 0
    capsys.readouterr()
    doc = read_measurements(tmp_path / "busy.measurements.json")
    assert doc["config"]["busy_before_s"] == pytest.approx(0.02)
    assert {r["back_to_back"] for r in doc["rows"]} == {1}
    assert all(len(r["seconds"]) == 3 for r in doc["rows"])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    # 2 ops × 4 sizes × (1 warm-up + 3 timed over 3 passes + 2 untimed opening the later
    # passes) × 2 ranks
    assert cpu_s >= 2 * 4 * 6 * 2 * 0.02


@pytest.mark.parametrize("value", ["abc", "11s", "nan", "-1ms"])
def test_busy_before_out_of_range_is_one_line_and_exit_2(tmp_path, capsys, value):
    code = main(["calibrate", "-o", str(tmp_path / "c.toml"), f"--busy-before={value}"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("busy_before_s" in err[0] or "time" in err[0])
    assert not list(tmp_path.iterdir())
