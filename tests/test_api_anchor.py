"""``--anchor CLUSTER``: a DDP-hook trace priced on the cluster of its own setup, and the time
the job measured there beyond the models' price added to every step (``vgcsim.api.anchored``).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import write_hook_trace
from vgcsim import api
from vgcsim.cli import main
from vgcsim.core.errors import ConfigError
from vgcsim.traces.wire.sizes import DENSE_ELEMENT_BITS, dense_bits

OWN = "1GbE"  # the trace's own setup in these tests
OTHER = "10GbE"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """The hook trace with a wall time at step 0 too (the hook's first step has none)."""
    run = write_hook_trace(tmp_path_factory.mktemp("hook"))
    part = run / "ranks" / "part-000000.parquet"
    ranks = pd.read_parquet(part)
    first = ranks["step"] == ranks["step"].min()
    ranks.loc[first, "step_wall_s"] = ranks.loc[first, "forward_backward_s"] + 3e-3
    ranks.to_parquet(part)
    return api.load_trace(run)


def _walls(trace) -> pd.Series:
    return trace.ranks.groupby("step")["step_wall_s"].max().dropna()


def _own_row(df: pd.DataFrame, trace) -> pd.Series:
    rows = df[(df["method"] == "compressed") & (df["step"] >= 0)]
    assert trace.compressor != "dense" and rows["collective"].nunique() == 1
    return rows.set_index("step")["step_s"]


@pytest.mark.parametrize("engine", ["predict", "simulate"])
def test_at_its_own_setup_the_anchored_step_misses_the_measured_one_by_a_median_of_zero(
    trace, engine
):
    """The offset is the median over steps of measured wall − predicted step, so on the
    anchor itself, at the trace's world size, half the steps are priced above their measured
    wall time and half below: the median miss is 0 (it was not before)."""
    run = getattr(api, engine)
    opts = {"compute": "trace", "per_step": True}
    if engine == "simulate":
        opts["max_steps"] = 6
    plain = _own_row(run(trace, OWN, [trace.workers], **opts), trace)
    anchored = run(trace, OWN, [trace.workers], anchor=OWN, **opts)
    walls = _walls(trace)
    assert 0 in walls.index  # the fixture's step 0 has a wall time, and it counts
    steps = walls.index.intersection(plain.index)
    assert len(steps) >= 5
    miss = walls[steps] - _own_row(anchored, trace)[steps]
    assert abs(float(miss.median())) < 1e-12
    assert abs(float((walls[steps] - plain[steps]).median())) > 1e-4
    info = anchored.attrs["options"]["anchor"]
    assert info["world_size"] == trace.workers and info["steps"] == len(steps)
    assert info["offset_s"] == pytest.approx(float((walls[steps] - plain[steps]).median()))


def test_the_offset_is_added_as_is_to_every_row_and_the_relative_columns_follow(trace):
    """Every method, encoding, world size and step on another cluster moves by the one
    offset; ``speedup_vs_dense`` is the dense fp32 step over the row's, computed again."""
    plain = api.predict(trace, OTHER, [2, 8, 64], compute="trace", per_step=True)
    anchored = api.predict(trace, OTHER, [2, 8, 64], compute="trace", per_step=True, anchor=OWN)
    offset = anchored.attrs["options"]["anchor"]["offset_s"]
    assert offset != 0
    assert len(anchored) == len(plain)
    np.testing.assert_allclose(anchored["step_s"] - plain["step_s"], offset, rtol=0, atol=1e-15)
    for col in ("comm_s", "compute_s", "codec_s", "decode_s"):
        pd.testing.assert_series_equal(anchored[col], plain[col])
    dense = anchored[(anchored["method"] == "dense") & (anchored["encoding"] == "fp32")]
    key = ["world_size", "step"]
    merged = anchored.merge(dense[[*key, "step_s"]], on=key, suffixes=("", "_dense"))
    np.testing.assert_allclose(
        merged["speedup_vs_dense"], merged["step_s_dense"] / merged["step_s"], rtol=1e-12
    )
    batch = trace.header["batch_size_per_worker"]
    np.testing.assert_allclose(
        anchored["throughput_samples_per_s"],
        anchored["world_size"] * batch / anchored["step_s"],
        rtol=1e-12,
    )
    # the rows' world sizes (none of them the trace's 4) do not move the offset
    at_own = api.predict(trace, OTHER, [trace.workers], compute="trace", anchor=OWN)
    assert trace.workers not in (2, 8, 64)
    assert at_own.attrs["options"]["anchor"] == anchored.attrs["options"]["anchor"]
    assert "anchor" not in api.predict(trace, OTHER, [2], compute="trace").attrs["options"]


def _dense_trace(tmp_path, encoding: str | None = None):
    """The hook trace as the dense hook writes it; ``encoding``: its bits column renamed to
    that primary encoding."""
    run = write_hook_trace(tmp_path)
    header = json.loads((run / "header.json").read_text())
    header["compressor"] = {"name": "dense", "params": {}}
    if encoding is not None:
        header["primary_encoding"], header["encodings"] = encoding, [encoding]
        for part in (run / "payloads").glob("*.parquet"):
            table = pd.read_parquet(part)
            keep = [c for c in table if not c.startswith("bits_")]
            bits = dense_bits(table["numel"], DENSE_ELEMENT_BITS[encoding])
            table = table[keep].assign(sent=table["numel"], **{f"bits_{encoding}": bits})
            table.to_parquet(part)
    (run / "header.json").write_text(json.dumps(header))
    return api.load_trace(run)


def test_a_dense_trace_in_a_dense_encoding_is_anchored_on_that_row(tmp_path):
    """A dense trace whose primary encoding is fp16 anchors on the dense fp16 row (its own
    allreduce: the ring, whatever the rows ask for), not the fp32 one."""
    t = _dense_trace(tmp_path, "fp16")
    anchored = api.predict(t, OWN, [t.workers], compute="trace", per_step=True, anchor=OWN)
    rows = (anchored["method"] == "dense") & (anchored["encoding"] == "fp16")
    own = anchored[rows & (anchored["step"] >= 0)].set_index("step")["step_s"]
    walls = _walls(t)
    steps = walls.index.intersection(own.index)
    assert abs(float((walls[steps] - own[steps]).median())) < 1e-12
    tree = api.predict(
        t, OWN, [t.workers], compute="trace", anchor=OWN, allreduce=["binomial_tree"]
    )
    assert tree.attrs["options"]["anchor"] == anchored.attrs["options"]["anchor"]


def test_a_dense_trace_is_anchored_on_its_dense_fp32_row(tmp_path):
    """A trace of the dense hook: its own row is the dense allreduce in its primary encoding,
    fp32 where that is no dense row's (here a packed encoding)."""
    run = write_hook_trace(tmp_path)
    header = json.loads((run / "header.json").read_text())
    header["compressor"] = {"name": "dense", "params": {}}
    (run / "header.json").write_text(json.dumps(header))
    t = api.load_trace(run)
    assert t.compressor == "dense"
    plain = api.predict(t, OWN, [t.workers], compute="trace", per_step=True)
    anchored = api.predict(t, OWN, [t.workers], compute="trace", per_step=True, anchor=OWN)
    assert t.primary_encoding not in set(anchored[anchored["method"] == "dense"]["encoding"])
    rows = (anchored["method"] == "dense") & (anchored["encoding"] == "fp32")
    own = anchored[rows & (anchored["step"] >= 0)].set_index("step")["step_s"]
    walls = _walls(t)
    steps = walls.index.intersection(own.index)
    assert abs(float((walls[steps] - own[steps]).median())) < 1e-12
    other = plain[(plain["method"] == "compressed") & (plain["step"] >= 0)]
    compressed_miss = walls[steps] - other.set_index("step")["step_s"][steps]
    assert anchored.attrs["options"]["anchor"]["offset_s"] != pytest.approx(
        float(compressed_miss.median())
    )


def test_refusals_are_one_line(trace, tmp_path, capsys):
    with pytest.raises(ConfigError, match="measured wall time"):
        api.predict("tests/data/sample_trace", OTHER, [2], anchor=OWN)
    no_walls = write_hook_trace(tmp_path / "no_walls", wall=False)
    assert "step_wall_s" not in pd.read_parquet(no_walls / "ranks" / "part-000000.parquet")
    with pytest.raises(ConfigError, match="measured wall time"):
        api.predict(no_walls, OTHER, [2], anchor=OWN)
    # walls only at the last step; the simulator replays the first two: nothing in common
    late = write_hook_trace(tmp_path / "late")
    part = late / "ranks" / "part-000000.parquet"
    ranks = pd.read_parquet(part)
    ranks.loc[ranks["step"] < ranks["step"].max(), "step_wall_s"] = np.nan
    ranks.to_parquet(part)
    with pytest.raises(ConfigError, match="^--anchor: no step of run has both a wall time"):
        api.simulate(late, OTHER, [2], compute="trace", anchor=OWN, max_steps=2)
    # walls far below any price on a slow anchor: the offset would leave steps below 0 s
    run = write_hook_trace(tmp_path)
    part = run / "ranks" / "part-000000.parquet"
    ranks = pd.read_parquet(part)
    ranks["step_wall_s"] = ranks["step_wall_s"] * 1e-3
    ranks.to_parquet(part)
    slow = api.predict(run, "1GbE", [4], compute="trace", per_step=True)
    own = _own_row(slow, api.load_trace(run))
    walls = _walls(api.load_trace(run))
    offset = float((walls - own[walls.index]).median())
    with pytest.raises(ConfigError, match=rf"\({offset * 1e3:.3g} ms, 1GbE\) .* at or below 0 s"):
        api.predict(run, "100GbE", [2], compute="trace", anchor="1GbE")
    for argv in (
        ["predict", "tests/data/sample_trace", "--cluster", OTHER, "--anchor", OWN],
        ["predict", str(trace.path), "--cluster", OTHER, "--anchor", "no-such-cluster"],
        ["simulate", "tests/data/sample_trace", "--cluster", OTHER, "--anchor", OWN],
    ):
        assert main([*argv, "-o", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert not (tmp_path / "out").exists()


def test_the_command_writes_the_anchor_into_the_header(trace, tmp_path, capsys):
    out = tmp_path / "p"
    argv = ["predict", str(trace.path), "--cluster", OTHER, "--world-sizes", "2,4"]
    assert main([*argv, "--compute", "trace", "--anchor", OWN, "-o", str(out)]) == 0
    header = json.loads((out / "results.json").read_text(encoding="utf-8"))
    anchor = header["options"]["anchor"]
    assert set(anchor) == {"cluster", "world_size", "steps", "offset_s"}
    assert anchor["cluster"] == OWN and anchor["world_size"] == trace.workers
    assert anchor["offset_s"] != 0


def test_the_offset_prices_the_traces_own_exchange_whatever_the_rows_ask_for(trace):
    """The rows asked with other algorithms get the offset found with the hook's own
    exchange (the ring allreduce and ``allgatherv/bounded``)."""
    own = api.predict(trace, OTHER, [4], compute="trace", anchor=OWN)
    other = api.predict(
        trace,
        OTHER,
        [4],
        compute="trace",
        anchor=OWN,
        allreduce=["binomial_tree"],
        allgatherv=["ring"],
    )
    assert set(other["collective"]) >= {"allreduce/binomial_tree", "allgatherv/ring"}
    assert own.attrs["options"]["anchor"] == other.attrs["options"]["anchor"]
