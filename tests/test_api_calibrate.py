"""The calibration through the notebook API: the cluster file and the printed report of
``vgcsim calibrate --from`` are what :func:`vgcsim.api.calibrate_from` returns and writes, a
fit is recovered from exact times of a known link, and a refused fit carries its report."""

from __future__ import annotations

import numpy as np
import pytest

from vgcsim import api
from vgcsim.cli import main
from vgcsim.core.cluster import load_cluster
from vgcsim.core.errors import ConfigError, UnknownNameError
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


def measurement_file(tmp_path, noise: float = 0.0):
    path = tmp_path / "m.json"
    write_measurements(path, CalibrateConfig(), WORLD, rows(noise), list(range(WORLD)))
    return path


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
        "CPU-time terms divided by 2, the processor sharing they were measured under",
    )
    assert shared.fit.gamma_s_per_byte == pytest.approx(alone.fit.gamma_s_per_byte / 2, rel=1e-12)
    assert shared.fit.latency_s == alone.fit.latency_s  # the wire is not shared
    assert "ranks_per_host = 4\nhost_cores = 2\n" in shared.toml


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
