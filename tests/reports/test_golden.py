"""Golden tables: report tables of committed result tables must not drift unnoticed.

The result tables in tests/data/golden/results were made once from tests/data/sample_trace
(commands in tests/data/golden/README.md); after a deliberate change to a table, rewrite
the golden CSVs with ``.venv/bin/python tests/reports/reports_golden.py --write``.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
from reports_golden import GOLDEN, RESULTS, ROOT, TRACE, compute

from vgcsim.reports import tables
from vgcsim.traces.io import read_trace


def _roundtrip(df: pd.DataFrame) -> pd.DataFrame:
    buf = io.StringIO()
    df.to_csv(buf, index=False)
    buf.seek(0)
    return pd.read_csv(buf)


@pytest.fixture(scope="module")
def computed():
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)  # result headers record the trace path relative to the repository
    try:
        return compute()
    finally:
        os.chdir(cwd)


def test_golden_results_are_what_the_readme_says():
    """Each committed result set is the README's command: predicted or simulated, one
    cluster, the sample trace, P = 1, 2, 4, …, 256; its CSV, Parquet and JSON header agree."""
    assert [p.parent.name for p in RESULTS] == [
        "predicted-10GbE",
        "predicted-1GbE",
        "simulated-10GbE",
        "simulated-1GbE",
    ]
    for path in RESULTS:
        source, cluster = path.parent.name.split("-", 1)
        df = pd.read_parquet(path)
        pd.testing.assert_frame_equal(
            pd.read_csv(path.with_name("results.csv")), _roundtrip(df), check_dtype=False
        )
        header = json.loads(path.with_name("results.json").read_text(encoding="utf-8"))
        assert header["source"] == source and header["cluster"]["name"] == cluster
        assert [t["path"] for t in header["traces"]] == ["tests/data/sample_trace"]
        assert set(df["source"]) == {source} and set(df["cluster"]) == {cluster}
        assert set(df["trace"]) == {TRACE.name}
        assert sorted(df["world_size"].unique()) == [2**i for i in range(9)]


def test_every_golden_table_is_recomputed(computed):
    """No golden table without a computation, and none computed without a golden file."""
    assert sorted(p.stem for p in (GOLDEN / "tables").glob("*.csv")) == sorted(computed)


@pytest.mark.parametrize(
    "name",
    ["what_if", "speedup_matrix", "crossover", "breakdown", "agreement", "time_to_accuracy"],
)
def test_table_matches_golden(computed, name):
    golden = pd.read_csv(GOLDEN / "tables" / f"{name}.csv")
    got = _roundtrip(computed[name])
    assert list(got.columns) == list(golden.columns)
    pd.testing.assert_frame_equal(got, golden, check_dtype=False, rtol=1e-9, atol=0)


def test_golden_what_if_is_consistent(computed):
    wi = computed["what_if"]
    assert set(wi["cluster"]) == {"1GbE", "10GbE"}
    assert set(wi["method_label"]) == {"variance α=2"}
    assert np.allclose(wi["speedup"], wi["dense_step_s"] / wi["compressed_step_s"])
    # the best of two collectives per method was chosen
    assert set(wi["dense_collective"]) <= {"allreduce/ring", "allreduce/rabenseifner"}


def test_trace_tables_agree_with_trace_io():
    trace = read_trace(TRACE)
    ratio = tables.compression_over_steps(trace.payloads, trace.primary_encoding)
    per_step_bits = trace.worker_bits().sum(axis=1)
    assert ratio["bits"].to_numpy().tolist() == per_step_bits.to_numpy().tolist()
    assert (ratio["dense_bits"] == trace.workers * trace.dense_bits_per_worker()).all()
    dens = tables.layer_density(trace.payloads)
    numel = np.array([layer["numel"] for layer in trace.layers], dtype=float)
    overall = (dens.to_numpy() * numel).sum(axis=1) / numel.sum()
    assert np.allclose(overall, trace.steps.sort_values("step")["density"].to_numpy())
    row = tables.trace_overview(trace, "variance α=2")
    mt = tables.method_table(pd.DataFrame([row]))
    assert mt["compression_ratio"].item() == pytest.approx(
        trace.workers * trace.dense_bits_per_worker() * trace.steps_count / row["bits"]
    )


def test_golden_time_to_accuracy_is_consistent(computed):
    tta = computed["time_to_accuracy"]
    wi = computed["what_if"]
    assert len(tta) == 2 * len(wi)  # every what-if row, at each of the two targets
    default, reached = tta[tta.target_acc != 0.85], tta[tta.target_acc == 0.85]
    # default target: the dense run's final 90.25 % − 1 point; the variance trace ends at
    # 88.86 %, below it: every row stays, marked as not reached
    assert default.target_acc.unique() == pytest.approx([0.902507 - 0.01], abs=1e-6)
    assert not default.reached.any() and default.compressed_time_to_target_s.isna().all()
    # dense: 89.42 % after step 49 is already at or above 89.25 % -> 50 steps
    assert (default.dense_steps_to_target == 50).all()
    # 85 %: both runs first at or above it at the evaluation after step 49 -> 50 steps
    assert reached.reached.all()
    assert (reached.compressed_steps_to_target == 50).all()
    assert (reached.dense_steps_to_target == 50).all()
    assert np.allclose(reached.compressed_time_to_target_s, 50 * reached.compressed_step_s)
    assert np.allclose(
        reached.speedup_to_accuracy.to_numpy(),
        reached.dense_step_s.to_numpy() / reached.compressed_step_s.to_numpy(),
    )
