"""The optional ranks table (traces the DDP hook writes) and the hook's header entries: read,
checked by ``trace validate``, refused in one line when wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.traces.io import read_trace
from vgcsim.traces.validate import check_trace

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_trace"


def _with_ranks(tmp_path: Path, **edit) -> Path:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    t = read_trace(run)
    steps = t.steps["step"].to_numpy()
    rows = pd.DataFrame(
        {
            "step": np.repeat(steps, t.workers),
            "rank": np.tile(np.arange(t.workers), len(steps)),
        }
    )
    for col in ("forward_backward_s", "compute_s", "sqsum_s", "compress_s", "encode_s"):
        rows[col] = 1e-3
    for col in ("comm_s", "decode_s", "optimizer_s"):
        rows[col] = 2e-3
    rows["wire_bytes"] = 4096
    rows["fallback_rounds"] = 0
    for col, value in edit.items():
        rows.loc[0, col] = value
    (run / "ranks").mkdir()
    rows.to_parquet(run / "ranks" / "part-000000.parquet")
    return run


def test_a_ranks_table_is_read_and_accepted(tmp_path):
    run = _with_ranks(tmp_path, forward_backward_s=np.nan)  # not reported: NaN is allowed
    t = read_trace(run)
    assert t.ranks is not None and len(t.ranks) == t.steps_count * t.workers
    assert check_trace(t) == []
    assert read_trace(SAMPLE).ranks is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"rank": 99}, "names a rank outside"),
        ({"rank": 1}, "more than one row for a step and rank"),
        ({"comm_s": -1.0}, "ranks column comm_s has negative seconds"),
        ({"sqsum_s": np.nan}, "ranks column sqsum_s contains NaN"),
        ({"step": 10_000}, "refers to steps that are not in the steps table"),
    ],
)
def test_trace_validate_refuses_a_wrong_ranks_table(tmp_path, capsys, edit, message):
    run = _with_ranks(tmp_path, **edit)
    assert main(["trace", "validate", str(run)]) == 2
    assert message in capsys.readouterr().err


def test_a_malformed_hook_header_is_one_line_in_predict(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    header = json.loads((run / "header.json").read_text())
    header.update(source="ddp_hook", hook={"layouts": [{"from_step": 0, "buckets": [[99]]}]})
    (run / "header.json").write_text(json.dumps(header))
    argv = ["predict", str(run), "--cluster", "10GbE", "--compute", "trace", "--world-sizes", "2"]
    assert main([*argv, "-o", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert "hook.layouts names layers outside" in err and len(err.strip().splitlines()) == 1
