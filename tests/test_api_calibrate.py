"""The calibration through the notebook API: the cluster file and the printed report of
``vgcsim calibrate --from`` are what :func:`vgcsim.api.calibrate_from` returns and writes, a
fit is recovered from exact times of a known link, and a refused fit carries its report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vgcsim import api
from vgcsim.cli import main
from vgcsim.core.cluster import load_cluster
from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.outdir import OutputError
from vgcsim.models.linkfit import cost_coefficients
from vgcsim.traces.calibration import CalibrateConfig, write_measurements

SIZES = (4, 64, 1024, 16384, 262144, 1 << 20, 4 << 20, 16 << 20)
ALPHA_S, BANDWIDTH_BPS, GAMMA_S_PER_BYTE = 60e-6, 25e6, 2e-9
WORLD = 4


def rows(noise: float = 0.0, seed: int = 3) -> list[dict]:
    """p2p and allreduce times on a link of α, β = 1/bandwidth and γ (the ring costs of
    ``cost_coefficients``), five repetitions each, times a log-normal factor of ``noise``."""
    rng = np.random.default_rng(seed)
    out = []
    for op in ("p2p", "allreduce"):
        for size in SIZES:
            a, b, g = cost_coefficients(op, size, WORLD)
            t = a * ALPHA_S + b / BANDWIDTH_BPS + g * GAMMA_S_PER_BYTE
            seconds = [float(t * np.exp(noise * rng.standard_normal())) for _ in range(5)]
            out.append({"op": op, "size_bytes": size, "seconds": seconds})
    return out


def write_rows(path, measured: list[dict]) -> Path:
    """A measurement file of ``measured`` rows from ``WORLD`` ranks, one per node."""
    write_measurements(Path(path), CalibrateConfig(), WORLD, measured, list(range(WORLD)))
    return Path(path)


def measurement_file(tmp_path, noise: float = 0.0):
    return write_rows(tmp_path / "m.json", rows(noise))


@pytest.mark.parametrize("extra", [[], ["--statistic", "min", "--sizes", "64:4MiB"]])
def test_the_command_writes_and_prints_what_the_api_returns(tmp_path, capsys, extra):
    meas = measurement_file(tmp_path, noise=0.02)
    cli_out = tmp_path / "cli.toml"
    assert main(["calibrate", "--from", str(meas), "-o", str(cli_out), "--force", *extra]) == 0
    printed = capsys.readouterr().out
    options = {"statistic": "min", "sizes": "64:4MiB"} if extra else {}
    run = api.calibrate_from(meas, tmp_path / "api.toml", force=True, **options)
    assert run.out == tmp_path / "api.toml" and run.plot == tmp_path / "api.fit.png"
    assert run.plot.stat().st_size > 0
    assert run.measurements == meas
    assert cli_out.read_text() == run.out.read_text() == run.toml
    assert printed == f"{run.report}\nwrote {cli_out} and cli.fit.png\n"
    # the same fit from the file's contents, without writing anything
    fitted = api.fit_calibration(meas, **options)
    assert fitted.toml == run.toml and fitted.out is None and fitted.plot is None


def test_exact_times_give_back_the_link_they_were_made_with(tmp_path):
    doc = {"world_size": WORLD, "backend": "gloo", "nodes": [0, 1, 2, 3], "rows": rows()}
    run = api.fit_calibration(doc, name="lab", device="cpu")
    assert run.out is None and run.intra is None and run.notes == ()
    assert run.fit.latency_s == pytest.approx(ALPHA_S, rel=1e-6)
    assert run.fit.bandwidth_Bps == pytest.approx(BANDWIDTH_BPS, rel=1e-6)
    assert run.fit.gamma_s_per_byte == pytest.approx(GAMMA_S_PER_BYTE, rel=1e-6)
    assert set(run.errors) == {"p2p", "allreduce"}
    assert max(run.errors.values()) < 1e-6 and run.typical_error < 1e-6
    path = tmp_path / "lab.toml"
    path.write_text(run.toml)
    cluster = load_cluster(path)
    assert cluster.name == "lab" and cluster.topology.kind == "star"
    assert cluster.link.bandwidth_Bps == pytest.approx(BANDWIDTH_BPS, rel=1e-6)
    assert cluster.link.latency_s == pytest.approx(ALPHA_S, rel=1e-6)


def test_shared_cores_divide_the_cpu_terms_and_say_so():
    doc = {"world_size": WORLD, "backend": "gloo", "nodes": [0, 0, 0, 0], "rows": rows()}
    alone = api.fit_calibration(doc)
    shared = api.fit_calibration(doc, hosts=(4, 2))  # 4 ranks on 2 cores: f = 2
    assert shared.notes == (
        "CPU-time terms divided by 2, the host sharing (fullest-core) they were measured under",
    )
    assert shared.fit.gamma_s_per_byte == pytest.approx(alone.fit.gamma_s_per_byte / 2, rel=1e-12)
    assert shared.fit.latency_s == alone.fit.latency_s  # the wire is not shared
    assert 'ranks_per_host = 4\nhost_cores = 2\nhost_sharing = "fullest-core"' in shared.toml


@pytest.mark.parametrize(("rule", "factor"), [("fullest-core", 2.0), ("fair", 1.5)])
def test_the_host_sharing_rule_sets_the_divisor_and_is_written(tmp_path, rule, factor):
    # 3 ranks on 2 cores: the fullest core holds 2 of them; fair sharing gives each 2/3 of one
    doc = {"world_size": WORLD, "backend": "gloo", "nodes": [0] * WORLD, "rows": rows()}
    alone = api.fit_calibration(doc)
    shared = api.fit_calibration(doc, hosts=(3, 2), host_sharing=rule)
    assert shared.fit.gamma_s_per_byte == pytest.approx(
        alone.fit.gamma_s_per_byte / factor, rel=1e-12
    )
    assert f"host_sharing = {rule!r}".replace("'", '"') in shared.toml
    out = tmp_path / "c.toml"
    out.write_text(shared.toml)
    assert load_cluster(out).host_sharing == rule


def test_an_unknown_host_sharing_is_refused_before_anything_is_fitted(tmp_path, capsys):
    doc = {"world_size": WORLD, "backend": "gloo", "rows": rows()}
    with pytest.raises(ConfigError, match="unknown host_sharing 'fifo'"):
        api.fit_calibration(doc, hosts=(3, 2), host_sharing="fifo")
    meas = measurement_file(tmp_path)
    out = tmp_path / "c.toml"
    argv = ["calibrate", "--from", str(meas), "-o", str(out), "--host-sharing", "fifo"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "vgcsim calibrate: error: --host-sharing must be one of fullest-core, fair, got 'fifo'"
    )
    assert not out.exists()


def test_a_refused_fit_carries_its_report_and_writes_no_cluster_file(tmp_path, capsys):
    meas = measurement_file(tmp_path, noise=0.3)
    out = tmp_path / "c.toml"
    with pytest.raises(api.CalibrationError, match="fit error too large") as caught:
        api.calibrate_from(meas, out, max_error=0.01)
    assert not out.exists()
    refused = caught.value.run
    assert refused is not None and refused.typical_error > 0.01
    assert main(["calibrate", "--from", str(meas), "-o", str(out), "--max-error", "0.01"]) == 2
    captured = capsys.readouterr()
    assert captured.out == refused.report + "\n"
    assert captured.err.count("\n") == 1 and "fit error too large" in captured.err


@pytest.mark.parametrize(
    ("options", "word"), [({"statistic": "mean"}, "statistic"), ({"fit_ops": ["bogus"]}, "op")]
)
def test_a_misspelt_option_is_refused_with_the_valid_names(options, word):
    doc = {"world_size": WORLD, "backend": "gloo", "rows": rows()}
    with pytest.raises(UnknownNameError, match=word):
        api.fit_calibration(doc, **options)


@pytest.mark.parametrize(
    ("sweep", "layout", "message"),
    [
        ({"colour": "red"}, {}, "unknown calibration sweep option 'colour'"),
        ({"ops": "p2p,bogus"}, {}, "unknown op 'bogus'"),
        ({"repeats": 3}, {"nprocs": 1}, "--nprocs must be >= 2"),
    ],
)
def test_a_bad_sweep_or_layout_is_refused_before_any_rank_starts(tmp_path, sweep, layout, message):
    out = tmp_path / "c.toml"
    with pytest.raises(ConfigError, match=message):
        api.calibrate(out, sweep, **layout)
    assert list(tmp_path.iterdir()) == []  # no measurement, no cluster file


# -- calibrate end to end with the ranks stood in for: what it starts, fits and writes ---------


@pytest.fixture
def launched(monkeypatch):
    """``calibrate`` outside torchrun with ``launch_local`` stood in for: each call is kept
    (argv, ranks, keywords) and node 0's measurement file is written as the ranks would."""
    from vgcsim.traces.training import distributed_launch

    calls = []

    def launch_local(argv, ranks, **kw):
        calls.append((argv, ranks, kw))
        if kw["node_rank"] == 0:
            write_rows(argv[-1], rows(0.02))

    monkeypatch.setattr(api, "_under_torchrun", lambda: False)
    monkeypatch.setattr(distributed_launch, "launch_local", launch_local)
    return calls


def test_calibrate_starts_the_sweep_ranks_then_fits_and_writes_beside_the_measurements(
    tmp_path, launched
):
    import json

    from vgcsim.core.config import to_dict

    out = tmp_path / "lab.toml"
    run = api.calibrate(out, {"repeats": 3}, overrides=["warmup=2"], name="lab")
    meas = tmp_path / "lab.measurements.json"
    cfg = api.calibration_config(repeats=3, overrides=["warmup=2"])
    assert launched == [
        (
            ["-m", "vgcsim.traces.training.distributed_calibrate", json.dumps(to_dict(cfg)),
             str(meas)],
            2,
            {"timeout_s": 1800.0, "master_addr": "127.0.0.1", "master_port": None,
             "nnodes": 1, "node_rank": 0, "iface": None},
        )
    ]  # fmt: skip
    assert run.out == out and run.measurements == meas and meas.is_file()
    assert run.plot == tmp_path / "lab.fit.png" and run.plot.stat().st_size > 0
    assert out.read_text(encoding="utf-8") == run.toml
    assert "measurements in lab.measurements.json" in run.toml and load_cluster(out).name == "lab"
    # an earlier cluster file of calibrate's is replaced only when asked
    with pytest.raises(OutputError, match="overwrite"):
        api.calibrate(out)
    again = api.calibrate(out, overwrite=True, plot=False, name="lab")
    assert again.plot is None and again.toml == run.toml


def test_calibrate_hands_the_layout_and_the_fit_options_on(tmp_path, launched):
    from vgcsim.traces.calibration import CalibrateConfig as Sweep

    sweep = Sweep(ops=("p2p", "allreduce"), sizes_bytes=(4, 64), repeats=3)
    worker = api.calibrate(
        tmp_path / "w.toml", sweep, overrides=["repeats=5"], nnodes=2, node_rank=1,
        master_addr="10.0.0.1", master_port=29511, iface="eth1", timeout_s=60.0,
    )  # fmt: skip
    assert worker is None and not (tmp_path / "w.toml").exists()
    argv, ranks, kw = launched[-1]
    import json

    assert json.loads(argv[2])["repeats"] == 5 and ranks == 1
    assert kw == {"timeout_s": 60.0, "master_addr": "10.0.0.1", "master_port": 29511,
                  "nnodes": 2, "node_rank": 1, "iface": "eth1"}  # fmt: skip
    api.calibrate(tmp_path / "three.toml", nprocs=3, plot=False)
    assert launched[-1][1] == 3
    # the fit's options reach it, and its limit is kept unless forced
    with pytest.raises(api.CalibrationError, match="exceeds --max-error 0%"):
        api.calibrate(tmp_path / "tight.toml", max_error=1e-4, plot=False)
    assert not (tmp_path / "tight.toml").exists()
    forced = api.calibrate(tmp_path / "tight.toml", max_error=1e-4, force=True, plot=False)
    assert forced.out == tmp_path / "tight.toml"
    shared = api.calibrate(tmp_path / "shared.toml", plot=False, hosts=(4, 2))
    assert "ranks_per_host = 4\nhost_cores = 2\n" in shared.toml


def test_under_torchrun_this_process_is_one_rank_and_rank_0_fits(tmp_path, monkeypatch):
    from vgcsim.traces.training import distributed_calibrate

    ranks = []

    def run_rank(cfg, path, iface):
        ranks.append((cfg, path, iface))
        write_rows(path, rows(0.02))
        return len(ranks) - 1  # the first call is rank 0, the next one rank 1

    monkeypatch.setattr(api, "_under_torchrun", lambda: True)
    monkeypatch.setattr(distributed_calibrate, "run_rank", run_rank)
    out = tmp_path / "t.toml"
    run = api.calibrate(out, {"repeats": 3}, iface="eth2", plot=False)
    assert ranks == [(api.calibration_config(repeats=3), tmp_path / "t.measurements.json", "eth2")]
    assert run.out == out and out.is_file()
    assert api.calibrate(tmp_path / "r1.toml", plot=False) is None  # rank 1 only measures
    assert not (tmp_path / "r1.toml").exists()
    for layout in ({"nnodes": 2}, {"node_rank": 1}, {"nprocs": 2}):
        with pytest.raises(ConfigError) as err:
            api.calibrate(tmp_path / "x.toml", **layout)
        assert str(err.value) == (
            "started by torchrun: give the layout to torchrun, not --nnodes/--node-rank/--nprocs"
        )


def test_one_rank_on_one_node_is_refused_in_one_exact_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        api.calibrate(tmp_path / "c.toml", nprocs=1)
    assert str(err.value) == (
        "--nprocs must be >= 2 (calibration times traffic between ranks), or give --nnodes >= 2"
    )


def test_the_refusal_names_the_fit_ops_and_the_limit_in_one_line(tmp_path):
    meas = measurement_file(tmp_path, noise=0.3)
    out = tmp_path / "c.toml"
    with pytest.raises(api.CalibrationError) as err:
        api.calibrate_from(meas, out, max_error=0.01, fit_ops=["p2p", "allreduce"])
    worst = err.value.run.worst
    assert worst.fit_ops == ("allreduce", "p2p")
    assert str(err.value) == (
        f"fit error too large: typical error {worst.typical_error:.0%} on allreduce+p2p exceeds "
        f"--max-error 1%; {out} not written (see the table; refit a size range with --from "
        "FILE --sizes MIN:MAX, or --force)"
    )


def test_a_fit_at_its_limit_is_written_and_a_limit_of_zero_is_refused(tmp_path):
    meas = measurement_file(tmp_path, noise=0.02)
    limit = api.fit_calibration(meas).worst.typical_error
    run = api.calibrate_from(meas, tmp_path / "c.toml", max_error=limit, plot=False)
    assert run.out == tmp_path / "c.toml" and run.plot is None
    with pytest.raises(ConfigError) as err:
        api.calibrate_from(meas, tmp_path / "d.toml", max_error=0)
    assert str(err.value) == "max_error must be positive, got 0"


def test_the_fit_plot_is_a_png_at_120_dpi(tmp_path):
    """The plot's pixels are its figure's inches × 120 (read from the PNG's IHDR chunk)."""
    from tests.conftest import png_size
    from vgcsim.reports.calibration import plot_fit

    meas = measurement_file(tmp_path, noise=0.02)
    run = api.calibrate_from(meas, tmp_path / "c.toml")
    width, height = png_size(run.plot)
    inches = plot_fit(run.table).figure.get_size_inches()
    assert (width, height) == (round(inches[0] * 120), round(inches[1] * 120))


# -- the fit's inputs and outputs, from times of a known link ----------------------------------

CALL_S, HOST_S, HOST_S_PER_BYTE = 100e-6, 500e-6, 1e-9


def every_op_rows() -> list[dict]:
    """``rows()`` and allgather and allgatherv rows, every collective call paying
    ``CALL_S`` (the allgatherv's two calls twice) and the allgatherv its host time, ``HOST_S``
    a call and ``HOST_S_PER_BYTE`` per gathered byte."""
    from vgcsim.models.linkfit import host_coefficient

    out = rows()
    for r in out:
        if r["op"] == "allreduce":
            r["seconds"] = [s + CALL_S for s in r["seconds"]]
    for op in ("allgather", "allgatherv"):
        for size in SIZES:
            a, b, _ = cost_coefficients(op, size, WORLD)
            t = a * ALPHA_S + b / BANDWIDTH_BPS + CALL_S
            if op == "allgatherv":
                t += CALL_S + HOST_S + host_coefficient(op, size, WORLD) * HOST_S_PER_BYTE
            out.append({"op": op, "size_bytes": size, "seconds": [t] * 5})
    return out


def test_exact_times_give_back_every_host_term_and_sharing_divides_each():
    doc = {"world_size": WORLD, "backend": "gloo", "nodes": [0] * WORLD, "rows": every_op_rows()}
    alone = api.fit_calibration(doc).fit
    assert alone.latency_s == pytest.approx(ALPHA_S, rel=1e-9)
    assert alone.call_overhead_s == pytest.approx(CALL_S, rel=1e-9)
    assert alone.allgatherv_host_s == pytest.approx(HOST_S, rel=1e-9)
    assert alone.allgatherv_host_s_per_byte == pytest.approx(HOST_S_PER_BYTE, rel=1e-9)
    table = alone.allgatherv_host_s_per_byte_table
    assert len(table) >= 2 and all(v == pytest.approx(HOST_S_PER_BYTE) for _, v in table)
    shared = api.fit_calibration(doc, hosts=(4, 2)).fit  # 4 ranks on 2 cores: f = 2
    for field in ("call_overhead_s", "allgatherv_host_s", "allgatherv_host_s_per_byte"):
        assert getattr(shared, field) == pytest.approx(getattr(alone, field) / 2, rel=1e-12)
    assert shared.allgatherv_host_s_per_byte_table == tuple((b, v / 2) for b, v in table)


def test_the_file_says_what_was_fitted_and_only_those_sizes_are(tmp_path):
    doc = {"world_size": WORLD, "backend": "gloo", "rows": rows()}
    given = api.fit_calibration(doc)
    assert given.toml.splitlines()[0] == "# Written by vgcsim calibrate. measurements given"
    assert given.measurements is None and "burst" not in given.toml  # no file, no bucket
    bucket = api.fit_calibration(doc, burst_bytes=262144)
    link = bucket.toml.split("[link]\n")[1].splitlines()
    assert link[-1] == "burst_bytes = 262144.0  # as given (--burst)"  # in the [link] table
    assert bucket.toml.endswith("\n")
    listed = api.fit_calibration(doc, sizes=[64, 16384, 1 << 20, 16 << 20])
    assert listed.toml.splitlines()[0].endswith(
        ". measurements given, sizes 64,16384,1048576,16777216"
    )
    assert {r["size_bytes"] for r in listed.table} == {64, 16384, 1 << 20, 16 << 20}
    # a range keeps every measured size inside it, also one the range's own list lacks
    extra = [*rows(), *[{**r, "size_bytes": 3000} for r in rows() if r["size_bytes"] == 1024]]
    ranged = api.fit_calibration(write_rows(tmp_path / "m.json", extra), sizes="64:4MiB")
    assert ranged.toml.splitlines()[0].endswith(". measurements from m.json, sizes 64:4MiB")
    assert 3000 in {r["size_bytes"] for r in ranged.table}
    noted = api.fit_calibration(doc, note="lab run 3")
    assert noted.toml.splitlines()[0] == "# Written by vgcsim calibrate. lab run 3"


def test_fit_ops_fix_alpha_and_beta_on_those_ops_alone():
    """Every allreduce 100 µs slower than the link: by default α comes from the allreduce's
    small sizes (with the call cost beside it) and γ from its large ones; fitted to p2p
    alone, α is p2p's and there is no γ."""
    doc = {"world_size": WORLD, "backend": "gloo", "rows": every_op_rows()}
    p2p = api.fit_calibration(doc, fit_ops=["p2p"])
    assert p2p.fit.latency_s == pytest.approx(ALPHA_S, rel=1e-9)
    assert p2p.fit.gamma_s_per_byte == 0.0 and p2p.worst.fit_ops == ("p2p",)
    assert api.fit_calibration(doc).fit.gamma_s_per_byte == pytest.approx(GAMMA_S_PER_BYTE)
    with pytest.raises(UnknownNameError) as err:
        api.fit_calibration(doc, fit_ops=["p2p", "bcast"])
    assert str(err.value) == (
        "unknown fit op 'bcast'; valid: allgather, allgatherv, allgatherv_skewed, allreduce, "
        "p2p, p2p_intra"
    )


def test_a_sweep_whose_times_do_not_grow_with_size_is_refused():
    flat = [{**r, "seconds": [1e-3] * 5} for r in rows()]
    with pytest.raises(api.CalibrationError) as err:
        api.fit_calibration({"world_size": WORLD, "backend": "gloo", "rows": flat})
    assert str(err.value) == (
        "the fit found no per-byte cost (beta = 0); include larger --sizes so the bandwidth "
        "term shows"
    )


def test_the_statistic_reaches_the_intra_link_and_the_repeatability_and_the_report_says_all(
    tmp_path,
):
    """Repetitions at 1, 2, 3 and 4 times a link's time: the minimum is the link; the
    intra-node link (p2p_intra rows, 10 µs and 1 GB/s) is fitted on the same statistic, and
    so is the repeatability (each size's even-numbered repetitions against its odd ones)."""
    from vgcsim.reports.calibration import calibration_text
    from vgcsim.traces.calibration import repeatability

    spread = [{**r, "seconds": [r["seconds"][0] * k for k in (1, 2, 3, 4)]} for r in rows()]
    intra = [
        {
            "op": "p2p_intra",
            "size_bytes": s,
            "seconds": [(10e-6 + s / 1e9) * k for k in (1, 2, 3, 4)],
        }
        for s in SIZES
    ]
    doc = {"world_size": WORLD, "backend": "gloo", "nodes": [0, 0, 1, 1], "rows": spread + intra}
    run = api.fit_calibration(doc, statistic="min")
    fit = run.intra
    assert fit.latency_s == pytest.approx(10e-6, rel=1e-6)
    assert fit.bandwidth_Bps == pytest.approx(1e9, rel=1e-6)
    assert run.repeatability == repeatability(doc["rows"], "min")
    assert run.repeatability != repeatability(doc["rows"], "median")
    assert run.report == calibration_text(
        run.table, run.fit, run.intra, run.errors, run.switch, run.repeatability
    )
    assert "gpus_per_node = 2" in run.toml
    # the ranks per node are those of rank 0's node, wherever the others are
    uneven = api.fit_calibration({**doc, "nodes": [0, 1, 0, 0]}, statistic="min")
    assert "gpus_per_node = 3" in uneven.toml
    # a token bucket given beside an intra-node link belongs to the host link alone
    bucket = tmp_path / "b.toml"
    bucket.write_text(api.fit_calibration(doc, burst_bytes=65536).toml, encoding="utf-8")
    cluster = load_cluster(bucket)
    assert cluster.link.burst_bytes == 65536 and cluster.intra_link.burst_bytes == 0


def test_the_cluster_file_is_written_into_new_folders_and_never_over_anothers_file(tmp_path):
    """The file's folders are made; a folder given as the file, a file calibrate did not
    write (also one that is not UTF-8) and calibrate's own earlier file without
    ``overwrite`` are each refused in one line, nothing replaced."""
    meas = measurement_file(tmp_path, noise=0.02)
    deep = tmp_path / "a" / "b" / "c.toml"
    assert api.calibrate_from(meas, deep, plot=False).out == deep and deep.is_file()
    with pytest.raises(OutputError) as err:
        api.calibrate_from(meas, deep, plot=False)
    assert str(err.value) == (
        f"{deep} already holds a cluster file from vgcsim calibrate; pass --overwrite to "
        "replace it, or choose another -o"
    )
    with pytest.raises(ConfigError) as err:
        api.calibrate_from(meas, tmp_path / "a", plot=False)
    assert str(err.value) == f"{tmp_path / 'a'} is a folder; give the cluster TOML file to write"
    for name, content in (("mine.toml", b'name = "mine"\n'), ("latin.toml", b"# caf\xe9\n")):
        theirs = tmp_path / name
        theirs.write_bytes(content)
        with pytest.raises(OutputError) as err:
            api.calibrate_from(meas, theirs, overwrite=True, plot=False)
        assert str(err.value) == (
            f"{theirs} exists and was not written by vgcsim calibrate; not replacing it"
        )
        assert theirs.read_bytes() == content
