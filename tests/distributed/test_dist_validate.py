"""`vgcsim validate`: measured comm_s against the models and the simulator, per step and overall."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vgcsim.api import (
    ValidateOptions,
    collective_frame,
    validation_frame,
    verdict,
)
from vgcsim.cli import main
from vgcsim.core.cluster import load_cluster
from vgcsim.core.errors import ConfigError
from vgcsim.reports.validation import validation_summary
from vgcsim.traces.io import read_trace

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_trace"


def with_comm(tmp_path: Path, comm_s, source: Path = SAMPLE, name: str = "run") -> Path:
    """A committed trace (the sample trace unless ``source``) copied to ``name`` with a comm_s
    column, ``comm_s(steps)``, written into its steps chunks."""
    run = tmp_path / name
    shutil.copytree(source, run)
    for part in sorted((run / "steps").glob("part-*.parquet")):
        df = pd.read_parquet(part)
        df["comm_s"] = comm_s(df["step"].to_numpy())
        df.to_parquet(part, index=False)
    return run


def test_errors_are_relative_to_the_measurement(tmp_path):
    cluster = load_cluster("10GbE")
    run = with_comm(tmp_path, lambda steps: np.ones(len(steps)))
    base = validation_frame(read_trace(run), cluster, ValidateOptions(simulate=False))
    # Now pretend the network measured exactly twice the closed-form prediction.
    doubled = dict(zip(base["step"], 2 * base["predicted_s"], strict=True))
    run2 = with_comm(tmp_path / "b", lambda steps: np.array([doubled[s] for s in steps]))
    df = validation_frame(read_trace(run2), cluster, ValidateOptions(simulate=True))
    assert df.attrs["collective"] == "allgatherv/padded" and df.attrs["world_size"] == 4
    np.testing.assert_allclose(df["predicted_rel_error"], -0.5, rtol=1e-9)
    summary = validation_summary(df).set_index("source")
    assert summary.loc["predicted", "mean_rel_error"] == pytest.approx(-0.5)
    assert summary.loc["predicted", "within_25pct"] == 0.0
    # On a non-blocking star with no contention the simulator agrees with the closed form.
    np.testing.assert_allclose(df["simulated_s"], df["predicted_s"], rtol=0.02)
    assert (df["payload_bytes_max"] >= df["payload_bytes_mean"]).all()


def test_cli_writes_table_and_plot(tmp_path, capsys):
    run = with_comm(tmp_path, lambda steps: np.full(len(steps), 5e-3))
    out = tmp_path / "val"
    # 5 ms measured where the model says about 1 ms: the table and files are written, and the
    # verdict fails (exit 1) naming the collective.
    assert (
        main(["validate", str(run), "--cluster", "1GbE", "-o", str(out), "--show-steps", "3"]) == 1
    )
    text = capsys.readouterr().out
    assert "FAIL: worst case allgatherv/padded mean over steps" in text
    assert "measured" in text and "predicted" in text and "simulated" in text
    per_step = pd.read_csv(out / "validation.csv")
    assert len(per_step) == 100 and (per_step["measured_s"] == 5e-3).all()
    assert (out / "validation.png").stat().st_size > 5000
    assert set(pd.read_csv(out / "validation_summary.csv")["source"]) == {
        "measured",
        "predicted",
        "simulated",
    }


def test_a_closed_pipe_loses_none_of_the_files(tmp_path):
    """-o is written before anything is printed: with the reader gone (``| head -1``) the
    command ends with 141 and its files are there."""
    from tests.conftest import closed_stdout

    run = with_comm(tmp_path, lambda steps: np.full(len(steps), 2e-3))
    out = tmp_path / "v"
    with closed_stdout(tmp_path):
        rc = main(["validate", str(run), "--cluster", "1GbE", "--no-simulate", "-o", str(out)])
    assert rc == 141
    assert {"validation.csv", "validation_summary.csv", "validation.png"} <= {
        p.name for p in out.iterdir()
    }


def test_trace_without_measurements_is_a_clear_error(capsys):
    assert main(["validate", str(SAMPLE), "--cluster", "10GbE"]) == 2
    assert "no measured comm_s" in capsys.readouterr().err


def test_output_path_that_is_a_file_is_a_clear_error(tmp_path, capsys):
    run = with_comm(tmp_path, lambda steps: np.full(len(steps), 1e-3))
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["validate", str(run), "--cluster", "1GbE", "--no-simulate", "-o", str(afile)]) == 2
    err = capsys.readouterr().err
    assert "not a folder" in err and "Traceback" not in err


def test_verdict_names_the_worst_case():
    v = verdict({"a": 0.04, "b": -0.12, "c": float("nan")}, 0.10)
    assert not v.passed and v.worst_case == "b" and v.worst_error == -0.12
    assert v.line() == "FAIL: worst case b, error -12.0% (tolerance 10%)"
    assert verdict({"a": 0.04, "b": -0.05}, 0.10).passed


def measurements_on(cluster_name: str, world: int, scale: dict[str, float]):
    """A calibration measurement file whose times are the closed forms on ``cluster_name``,
    each op's multiplied by ``scale[op]``."""
    from vgcsim.models.collectives import collective_time_s
    from vgcsim.models.pointtopoint import p2p_time_s
    from vgcsim.traces.calibration import MEASUREMENTS_KIND, MEASUREMENTS_VERSION

    cluster = load_cluster(cluster_name)
    keys = {"allreduce": "allreduce/ring", "allgatherv": "allgatherv/padded"}
    rows = []
    for op in ("p2p", "allreduce", "allgatherv"):
        for n in (8_000_000, 40_000_000):
            if op == "p2p":
                t = float(p2p_time_s(n, cluster.link))
            else:
                t = float(collective_time_s(keys[op], np.full((1, world), float(n)), cluster)[0])
            rows.append({"op": op, "size_bytes": n, "seconds": [t * scale.get(op, 1.0)] * 3})
    return {
        "kind": MEASUREMENTS_KIND,
        "version": MEASUREMENTS_VERSION,
        "world_size": world,
        "backend": "gloo",
        "nodes": list(range(world)),
        "rows": rows,
    }


def test_collectives_of_a_calibration_sweep_against_models_and_simulator():
    df = collective_frame(measurements_on("1GbE", 4, {}), load_cluster("1GbE"))
    assert list(df["collective"].unique()) == ["p2p", "allreduce/ring", "allgatherv/padded"]
    np.testing.assert_allclose(df["predicted_rel_error"], 0.0, atol=1e-12)
    coll = df[df["collective"] != "p2p"]
    # The simulator on a non-blocking star agrees with the closed forms; p2p is not simulated.
    np.testing.assert_allclose(coll["simulated_rel_error"], 0.0, atol=0.02)
    assert df.loc[df["collective"] == "p2p", "simulated_s"].isna().all()


def test_validate_a_sweep_passes_within_tolerance_and_names_the_worst_case(tmp_path, capsys):
    import json

    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(measurements_on("1GbE", 4, {"allreduce": 1.04})))
    assert main(["validate", str(ok), "--cluster", "1GbE", "--tolerance", "0.05"]) == 0
    assert "PASS" in capsys.readouterr().out
    # allgatherv measured 20 % slower than the model predicts: -16.7 % is past 10 %.
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(measurements_on("1GbE", 4, {"allgatherv": 1.2})))
    assert main(["validate", str(slow), "--cluster", "1GbE"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("FAIL: worst case allgatherv") and "-16.7%" in last
    # Only the sizes asked for are judged.
    assert main(["validate", str(slow), "--cluster", "1GbE", "--ops", "p2p,allreduce"]) == 0
    assert main(["validate", str(slow), "--cluster", "1GbE", "--tolerance", "0"]) == 2


def with_ranks(run: Path) -> Path:
    """``run`` with a ranks table (as the DDP hook writes one): every term measured on every
    rank, drawn from a seeded generator."""
    t = read_trace(run)
    steps = t.steps["step"].to_numpy()
    rng = np.random.default_rng(7)
    rows = pd.DataFrame(
        {"step": np.repeat(steps, t.workers), "rank": np.tile(np.arange(t.workers), len(steps))}
    )
    for col in ("forward_backward_s", "compute_s", "sqsum_s", "compress_s", "encode_s"):
        rows[col] = 1e-3 * (1 + rng.random(len(rows)))
    for col in ("comm_s", "decode_s", "optimizer_s"):
        rows[col] = 2e-3 * (1 + rng.random(len(rows)))
    rows["wire_bytes"] = 4096
    rows["fallback_rounds"] = 0
    (run / "ranks").mkdir()
    rows.to_parquet(run / "ranks" / "part-000000.parquet")
    return run


def assert_csv_holds(path: Path, frame: pd.DataFrame) -> None:
    """The CSV at ``path`` holds ``frame``: to_csv writes each float's shortest round-trip
    text; pandas before 3.0 parses it to within one unit in the last place by default."""
    expected = frame.copy()
    expected.attrs = {}
    pd.testing.assert_frame_equal(pd.read_csv(path), expected, rtol=1e-15, atol=0)


def test_the_api_returns_what_the_command_prints_and_writes(tmp_path, capsys):
    """``api.validate`` from Python: the frames, the summary, the per-term frame and the
    verdict that ``vgcsim validate -o`` prints and writes, number for number."""
    from vgcsim import api

    rng = np.random.default_rng(3)
    run = with_ranks(with_comm(tmp_path, lambda steps: 1e-3 * (1 + 0.3 * rng.random(len(steps)))))
    out = tmp_path / "val"
    rc = main(["validate", str(run), "--cluster", "1GbE", "-o", str(out), "--tolerance", "0.2"])
    printed = capsys.readouterr().out
    result = api.validate(str(run), "1GbE", tolerance=0.2)
    assert result.kind == "trace" and result.winner is None
    assert_csv_holds(out / "validation.csv", result.frame)
    assert_csv_holds(out / "validation_summary.csv", result.summary)
    assert_csv_holds(out / "validation_terms.csv", result.terms)
    terms = result.terms
    assert len(terms) == 7 * len(result.frame)
    # the measured exchange of a step is its fastest rank's
    exchange = terms[terms["term"] == "exchange"].set_index("step")["measured_s"]
    fastest = read_trace(run).ranks.groupby("step")["comm_s"].min()
    assert (exchange == fastest).all()
    # the verdict judges the mean over steps of each source, as the command printed it
    v = result.verdict
    mean_error = result.summary.set_index("source")["mean_rel_error"]
    assert abs(v.worst_error) == mean_error.drop("measured").abs().max()
    assert rc == (0 if v.passed else 1)
    wrote = f"wrote {out / 'validation.csv'}, validation_summary.csv, validation.png"
    assert printed == f"{result.text}\n{wrote}\n{v.line()}\n"
    # save_validation writes the same files from the result
    again = tmp_path / "again"
    written = api.save_validation(result, again)
    assert sorted(p.name for p in written) == sorted(result.files)
    for name in ("validation.csv", "validation_summary.csv", "validation_terms.csv"):
        assert (again / name).read_bytes() == (out / name).read_bytes()


def test_the_api_validates_a_measurement_file_as_the_command_does(tmp_path, capsys):
    import json

    from vgcsim import api

    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(measurements_on("1GbE", 4, {"allgatherv": 1.2})))
    out = tmp_path / "val"
    assert main(["validate", str(slow), "--cluster", "1GbE", "-o", str(out)]) == 1
    printed = capsys.readouterr().out
    result = api.validate(slow, "1GbE")
    assert result.kind == "measurements" and result.summary is None and result.terms is None
    assert_csv_holds(out / "validation_collectives.csv", result.frame)
    v = result.verdict
    # allgatherv measured 1.2 times the closed form: -1/6 relative to the measurement
    assert not v.passed and v.worst_case.startswith("allgatherv ")
    assert v.worst_error == pytest.approx(1 / 1.2 - 1, rel=1e-9)
    assert printed.endswith(f"{v.line()}\n") and printed.startswith(result.text)
    only = api.validate(slow, "1GbE", ops=["p2p", "allreduce"], sizes="8MB", simulate=False)
    assert set(only.frame["op"]) == {"p2p", "allreduce"}
    assert set(only.frame["size_bytes"]) == {8_000_000} and only.verdict.passed
    with pytest.raises(ConfigError, match="second run is compared only with a trace"):
        api.validate(slow, "1GbE", SAMPLE)
    with pytest.raises(ConfigError, match="unknown statistic 'mean'"):
        api.validate(slow, "1GbE", statistic="mean")
    with pytest.raises(ConfigError, match="tolerance must be positive"):
        api.validate(slow, "1GbE", tolerance=0)


def test_a_measurement_file_is_judged_on_the_statistic_sizes_and_cluster_asked_for(tmp_path):
    """Each size's three repetitions are 1, 2 and 3 times the closed form, so the minimum
    matches the model and the median is twice it; a size range keeps the measured sizes
    within it (8 MB of 8 and 40 MB in 1–10 MB); the head names the link's figures in the
    units it prints them in."""
    import json

    from vgcsim import api

    doc = measurements_on("1GbE", 4, {})
    for row in doc["rows"]:
        row["seconds"] = [row["seconds"][0] * k for k in (1.0, 2.0, 3.0)]
    run = tmp_path / "m.json"
    run.write_text(json.dumps(doc))
    best = api.validate(run, "1GbE", statistic="min", simulate=False)
    np.testing.assert_allclose(best.frame["predicted_rel_error"], 0.0, atol=1e-12)
    assert best.frame["simulated_s"].isna().all() and best.verdict.passed
    median = api.validate(run, "1GbE", ops=["p2p"], simulate=False)
    np.testing.assert_allclose(median.frame["predicted_rel_error"], -0.5, rtol=1e-12)
    simulated = api.validate(run, "1GbE", ops=["allreduce"], statistic="min")
    assert simulated.frame["simulated_s"].notna().all()
    ranged = api.validate(run, "1GbE", sizes="1MB:10MB", statistic="min", simulate=False)
    assert set(ranged.frame["size_bytes"]) == {8_000_000}
    assert set(ranged.cases) == {
        f"{op} 8000000 B {src}"
        for op in ("p2p", "allreduce", "allgatherv")
        for src in ("predicted", "simulated")
    }
    with pytest.raises(ConfigError):
        api.validate(run, "1GbE", compute="measured")  # not a compute mode

    mine = tmp_path / "mine.toml"
    mine.write_text(
        'name = "mine"\nbase = "1GbE"\n[link]\nlatency = "50us"\nbandwidth_Bps = 1.25e8\nefficiency = 0.8\n'
        "gamma_s_per_byte = 2e-10\nallgatherv_host_s_per_byte = 1e-9\n"
        "allgatherv_host_s_per_byte_table = [[1000000, 1e-9], [16000000, 2e-9]]\n"
        "allgatherv_host_s = 1.5e-3\n",
        encoding="utf-8",
    )
    head = api.validate(run, str(mine), simulate=False).text.splitlines()[0]
    assert head == (
        f"{run}: 6 measurements on 4 ranks (gloo), cluster mine (alpha 50.0 us, 100.00 MB/s, "
        "gamma 2e-10 s/B, allgatherv host 1e-09 s/B, by gathered size at 2 points, "
        "1500.0 us a call)"
    )
    plain = api.validate(run, "1GbE", simulate=False).text.splitlines()[0]
    assert plain.endswith("(alpha 50.0 us, 117.69 MB/s, gamma 0 s/B, allgatherv host 0 s/B)")


def test_collective_frame_prices_each_row_on_the_link_and_host_it_crossed(tmp_path):
    """A file without a backend is gloo's: its ``allgather`` row pays the ring allgather,
    3·(50 µs + 8 MB · 10 ns/B) = 240.15 ms on P = 4 ranks (a 100 MB/s payload rate: 125 MB/s
    at efficiency 0.8), plus torch's one copy of the 32 MB gathered buffer at half of δ read
    off the cluster's table (2 ns/B from 16 MB up): ½ · 2e-9 · 32e6 = 32 ms. A ``p2p_intra``
    row crosses the intra-node link where the cluster has one and is left out where it has
    none (the rows after it still priced)."""
    from vgcsim.models.pointtopoint import p2p_time_s

    mine = tmp_path / "mine.toml"
    mine.write_text(
        'name = "mine"\nbase = "1GbE"\n[link]\nlatency = "50us"\nbandwidth_Bps = 1.25e8\n'
        "efficiency = 0.8\nallgatherv_host_s_per_byte = 1e-9\n"
        "allgatherv_host_s_per_byte_table = [[1000000, 1e-9], [16000000, 2e-9]]\n",
        encoding="utf-8",
    )
    n = 8_000_000
    doc = {
        "world_size": 4,
        "rows": [
            {"op": "p2p_intra", "size_bytes": n, "seconds": [1.0]},
            {"op": "allgather", "size_bytes": n, "seconds": [1.0]},
        ],
    }
    df = collective_frame(doc, load_cluster(str(mine)), simulate=False)
    assert list(df["op"]) == ["allgather"] and df.attrs == {
        "world_size": 4,
        "cluster": "mine",
        "backend": "gloo",
    }
    assert df["predicted_s"].iloc[0] == pytest.approx(0.24015 + 0.032, rel=1e-12)
    dgx = load_cluster("dgxa100-IB-HDR")
    intra = collective_frame(doc, dgx, simulate=False).set_index("op")
    assert intra.loc["p2p_intra", "predicted_s"] == pytest.approx(
        float(p2p_time_s(n, dgx.intra_link)), rel=1e-12
    )
    assert float(p2p_time_s(n, dgx.intra_link)) < 0.5 * float(p2p_time_s(n, dgx.link))


def test_a_dense_run_is_compared_with_the_allreduce_algorithm_asked_for(tmp_path):
    from vgcsim.commands.demo import DEMO_TRACES

    run = with_comm(tmp_path, lambda steps: np.full(len(steps), 1e-3), DEMO_TRACES / "dense")
    trace = read_trace(run)
    cluster = load_cluster("10GbE")
    opts = ValidateOptions(allreduce="recursive_doubling", simulate=False)
    df = validation_frame(trace, cluster, opts)
    assert df.attrs["collective"] == "allreduce/recursive_doubling"
    assert df.attrs["method"] == "dense" and df["simulated_s"].isna().all()
    ring = validation_frame(trace, cluster, ValidateOptions(simulate=False))
    assert ring.attrs["collective"] == "allreduce/ring"
    assert not np.allclose(ring["predicted_s"], df["predicted_s"])


def _hook_run(tmp_path: Path, source: Path, name: str) -> Path:
    """``source`` copied to ``name`` with a measured comm_s per step and a ranks table."""
    return with_ranks(with_comm(tmp_path, lambda steps: np.full(len(steps), 1e-3), source, name))


def test_two_hook_runs_of_one_job_name_the_faster_measured_and_predicted(tmp_path):
    """The sample (variance) run against a dense run, each with its ranks table: the result
    carries the winner line, last in the text, as ``winner_line`` words it for the two term
    frames; the text opens with the run's head line and gives the terms after a blank line."""
    from vgcsim import api
    from vgcsim.commands.demo import DEMO_TRACES
    from vgcsim.reports.validation import winner_line

    sparse = _hook_run(tmp_path, DEMO_TRACES / "variance", "sparse")
    dense = _hook_run(tmp_path, DEMO_TRACES / "dense", "dense")
    result = api.validate(sparse, "1GbE", dense, simulate=False, allgatherv="ring")
    cluster = load_cluster("1GbE")
    opts = ValidateOptions(allgatherv="ring", simulate=False)
    other = api.term_frame(read_trace(dense), cluster, opts)
    assert result.winner == winner_line([result.terms, other])
    assert result.winner.startswith("winner: measured ")
    lines = result.text.splitlines()
    steps = len(read_trace(sparse).steps)
    assert lines[0] == f"sparse: allgatherv/ring on 4 ranks, cluster 1GbE, {steps} steps"
    assert lines[-1] == result.winner and "" in lines
    assert result.frame.attrs["collective"] == "allgatherv/ring"
    assert set(result.cases) == {"allgatherv/ring mean over steps predicted"}  # not simulated
    alone = api.validate(dense, "1GbE", allreduce="recursive_doubling", simulate=False)
    assert (
        alone.winner is None and alone.frame.attrs["collective"] == "allreduce/recursive_doubling"
    )
    assert alone.frame["simulated_s"].isna().all()
    with pytest.raises(ConfigError):
        api.validate(sparse, "1GbE", compute="measured")


def test_a_winner_is_called_only_between_two_methods_of_one_job(tmp_path):
    """Another model or dataset (the sample trace learns digits, the demo's MNIST), or the
    same method twice, is refused in one line naming both runs."""
    from vgcsim import api
    from vgcsim.commands.demo import DEMO_TRACES

    dense = _hook_run(tmp_path, DEMO_TRACES / "dense", "dense")
    digits = _hook_run(tmp_path, SAMPLE, "digits")
    again = _hook_run(tmp_path, DEMO_TRACES / "dense", "again")
    with pytest.raises(ConfigError, match=r"layers, datasets or ranks differ \(digits, dense\)"):
        api.validate(digits, "1GbE", dense, simulate=False)
    with pytest.raises(ConfigError, match=r"ran the same method \(dense, again\)"):
        api.validate(dense, "1GbE", again, simulate=False)


def test_a_second_run_needs_two_hook_traces_and_no_measurement_file(tmp_path):
    from vgcsim import api

    hooked = _hook_run(tmp_path, SAMPLE, "hooked")
    plain = with_comm(tmp_path, lambda steps: np.full(len(steps), 1e-3))
    message = (
        "comparing two runs needs two traces written by the DDP hook "
        "(register_vgc_hook(..., trace_dir=...))"
    )
    for first, second in ((hooked, plain), (plain, hooked)):
        with pytest.raises(ConfigError) as err:
            api.validate(first, "1GbE", second, simulate=False)
        assert str(err.value) == message
    meas = tmp_path / "m.json"
    import json

    meas.write_text(json.dumps(measurements_on("1GbE", 4, {})))
    with pytest.raises(ConfigError) as err:
        api.validate(meas, "1GbE", hooked)
    assert str(err.value) == "a second run is compared only with a trace, not a measurement file"
    with pytest.raises(ConfigError):
        api.validate(meas, "1GbE", compute="measured")


def test_a_case_at_the_tolerance_passes_and_no_case_is_refused_in_one_line():
    from vgcsim.core.errors import TraceError

    assert verdict({"a": -0.25, "b": 0.125}, 0.25).passed  # |error| = tolerance: within it
    with pytest.raises(TraceError) as err:
        verdict({"a": float("nan")}, 0.1)
    assert str(err.value) == "nothing to validate: no case has both a measurement and a model"


def test_save_validation_marks_its_folder_and_writes_the_plot_at_120_dpi(tmp_path):
    """Written as ``vgcsim api.save_validation`` unless a command is named, the marker listing
    the result's files; an earlier one replaced only with ``overwrite``; the plot's pixels
    are its figure's inches × 120 (the PNG's IHDR chunk)."""
    from tests.conftest import png_size
    from vgcsim import api
    from vgcsim.core.outdir import OutputError, read_marker
    from vgcsim.reports.validation import plot_validation

    run = with_comm(tmp_path, lambda steps: np.full(len(steps), 1e-3))
    result = api.validate(run, "1GbE", simulate=False)
    out = tmp_path / "v"
    api.save_validation(result, out)
    marker = read_marker(out)
    assert marker["command"] == "vgcsim api.save_validation"
    assert sorted(marker["files"]) == sorted(result.files)
    with pytest.raises(OutputError, match="--overwrite"):
        api.save_validation(result, out)
    api.save_validation(result, out, overwrite=True, command="validate")
    assert read_marker(out)["command"] == "vgcsim validate"
    width, height = png_size(out / "validation.png")
    inches = plot_validation(result.frame).figure.get_size_inches()
    assert (width, height) == (round(inches[0] * 120), round(inches[1] * 120))


def test_save_validation_refuses_a_folder_holding_a_file_of_the_users_before_writing(tmp_path):
    """A folder that an earlier validation of a measurement file wrote, into which the user
    put a ``validation.png`` of their own: saving a trace's validation there is refused
    before any file is written, their picture kept."""
    import json

    from vgcsim import api
    from vgcsim.core.outdir import OutputError

    meas = tmp_path / "m.json"
    meas.write_text(json.dumps(measurements_on("1GbE", 4, {})))
    out = tmp_path / "v"
    api.save_validation(api.validate(meas, "1GbE", simulate=False), out)
    (out / "validation.png").write_bytes(b"my own picture")
    run = with_comm(tmp_path, lambda steps: np.full(len(steps), 1e-3))
    with pytest.raises(OutputError):
        api.save_validation(api.validate(run, "1GbE", simulate=False), out, overwrite=True)
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == [
        "validation.png",
        "validation_collectives.csv",
    ]
    assert (out / "validation.png").read_bytes() == b"my own picture"
