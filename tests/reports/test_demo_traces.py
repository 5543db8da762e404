"""The traces committed for `vgcsim demo` are what the demo says they are, and honest.

tests/data/demo_traces holds four traces recorded by `vgcsim record` (commands in the
README beside them). Recording is deterministic for a seed on one machine type, so the
first chunk of a trace, recorded again, must come out identical: the slow test does that.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from vgcsim.traces.io import read_header, read_trace
from vgcsim.traces.training.record import record, resolve_config
from vgcsim.traces.training.record_config import RecordConfig

from vgcsim.commands.demo import DEMO_TRACES, DemoConfig, _record_config, demo_headline
from vgcsim.core.config import config_from_dict, to_dict

METHODS = DemoConfig().methods
#: Fields the recording machine resolves (not settings of the demo).
RESOLVED = ("sq_dtype", "device", "threads")


def _without_resolved(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in RESOLVED}


@pytest.mark.parametrize("method", METHODS)
def test_committed_trace_was_recorded_with_the_demo_settings(method):
    header = read_header(DEMO_TRACES / method)
    assert header["status"] == "complete"
    want = to_dict(resolve_config(_record_config(DemoConfig(), method)))
    assert _without_resolved(header["config"]) == _without_resolved(want)
    assert header["config"]["steps"] == 500


def test_committed_traces_are_small():
    total = sum(f.stat().st_size for f in DEMO_TRACES.rglob("*") if f.is_file())
    assert total < 2_000_000


def test_readme_gives_each_traces_command():
    readme = (DEMO_TRACES / "README.md").read_text()
    for method in METHODS:
        assert f"-o tests/data/demo_traces/{method} " in readme


def test_demo_headline_names_model_size_steps_reading_and_accuracy():
    traces = {m: read_trace(DEMO_TRACES / m) for m in METHODS}
    line = demo_headline(traces, METHODS)
    n = sum(int(layer["numel"]) for layer in traces["variance"].layers)
    assert line.startswith(f"small_cnn ({n:,} parameters) on mnist, 500 steps of 4 workers")
    assert "after_send=reset, below_floor=keep" in line
    for m in METHODS:
        acc = traces[m].evals.sort_values("step")["test_acc"].iloc[-1]
        assert f"{acc * 100:.1f} %" in line


def test_variance_density_has_settled():
    # the point of these traces: the last 20 % of steps are in the settled regime (its two
    # halves differ by under 10 %, the paper-grid criterion) and sparser than the start
    steps = read_trace(DEMO_TRACES / "variance").steps.sort_values("step")
    d = steps["density"].to_numpy()
    last = d[int(len(d) * 0.8) :]
    a, b = last[: len(last) // 2].mean(), last[len(last) // 2 :].mean()
    assert abs(a - b) / max(a, b) < 0.10
    assert last.mean() < 0.5 * d[: len(d) // 5].mean()


@pytest.mark.slow
def test_first_chunk_rerecords_identically(tmp_path):
    """Determinism: the variance trace's first chunk, recorded again, is the same.

    The demo's learning-rate schedule is a step schedule, so the first steps do not depend
    on the run's length: recording only ``chunk_steps`` steps gives the same chunk.
    """
    committed = read_trace(DEMO_TRACES / "variance")
    cfg = config_from_dict(RecordConfig, committed.header["config"])
    n = cfg.chunk_steps
    again = read_trace(record(dataclasses.replace(cfg, steps=n), tmp_path / "v"))

    def first(df: pd.DataFrame) -> pd.DataFrame:
        keep = [c for c in df.columns if not c.endswith("_s")]  # wall-clock columns differ
        part = df[df["step"] < n][keep]
        return part.sort_values(list(part.columns[:3])).reset_index(drop=True)

    pd.testing.assert_frame_equal(first(again.payloads), first(committed.payloads))
    pd.testing.assert_frame_equal(first(again.steps), first(committed.steps))
    pd.testing.assert_frame_equal(first(again.evals), first(committed.evals))
    assert len(first(again.payloads)) == n * cfg.workers * len(committed.layers)
