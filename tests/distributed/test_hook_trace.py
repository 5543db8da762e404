"""The DDP hook writes a trace of the user's own job: three gloo ranks on loopback run a
script that asks for it (``register_vgc_hook(..., trace_dir=...)``, ``state.timed``,
``state.step_done``, ``state.close_trace``); every command reads the trace, and the bytes
``allgatherv/bounded`` prices from it are the bytes the hook counted."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from vgcsim.cli import main
from vgcsim.core.bounded import align_bytes, bounded_rounds
from vgcsim.core.cluster import get_cluster
from vgcsim.models.predict import PredictOptions, bounded_wire_bytes, predict_trace
from vgcsim.traces.inputs import bucket_messages, step_inputs
from vgcsim.traces.io import read_trace
from vgcsim.traces.training.distributed_launch import launch_local

HERE = Path(__file__).parent
STEPS, SEED, WORLD = 8, 1, 3

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("hook_trace")
    out = root / "out.pt"
    argv = [str(HERE / "_hook_trace_worker.py"), str(STEPS), str(SEED), str(root), str(out)]
    launch_local([*argv, "variance,dense"], WORLD, timeout_s=300, threads_per_proc=1)
    return root, torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def run(runs) -> tuple[Path, dict]:
    root, measured = runs
    return root / "variance", measured["variance"]


def test_trace_validate_accepts_it_and_the_header_says_the_hook_wrote_it(run, capsys):
    trace_dir, _ = run
    assert main(["trace", "validate", str(trace_dir)]) == 0
    header = json.loads((trace_dir / "header.json").read_text())
    assert header["source"] == "ddp_hook" and header["status"] == "complete"
    assert header["workers"] == WORLD
    layouts = header["hook"]["layouts"]
    # DDP's first step runs one bucket of every layer, then rebuilds its buckets
    assert layouts[0]["from_step"] == 0 and len(layouts[0]["buckets"]) == 1
    assert len(layouts[-1]["buckets"]) > 1


def test_every_step_and_rank_is_in_the_tables(run):
    trace_dir, _ = run
    t = read_trace(trace_dir)
    assert t.steps_count == STEPS
    assert len(t.ranks) == STEPS * WORLD
    assert sorted(t.payloads["worker"].unique().tolist()) == list(range(WORLD))
    ranks = t.ranks
    # the script timed forward+backward and the optimizer on every rank
    assert np.isfinite(ranks["forward_backward_s"]).all()
    assert (ranks["forward_backward_s"] >= ranks["compute_s"]).all()
    assert np.isfinite(t.steps["optimizer_s"]).all()
    # the whole step's wall time from the second step on: it holds forward+backward and the
    # optimizer step it encloses
    later = ranks[ranks["step"] > 0]
    assert ranks.loc[ranks["step"] == 0, "step_wall_s"].isna().all()
    assert np.isfinite(later["step_wall_s"]).all()
    assert (later["step_wall_s"] >= later["forward_backward_s"] + later["optimizer_s"]).all()


def test_priced_wire_bytes_equal_the_hooks_own(run):
    trace_dir, measured = run
    t = read_trace(trace_dir)
    cluster = dataclasses.replace(get_cluster("1GbE"), compute="trace")
    si = step_inputs(t, cluster, WORLD, layers=True)
    bm = bucket_messages(t, si.layer_bytes)
    priced = bounded_wire_bytes(bm)
    hook = np.array(measured["wire_bytes"], dtype=np.int64)  # [step, rank]
    assert hook.shape == (STEPS, WORLD)
    for r in range(WORLD):
        assert priced.tolist() == hook[:, r].tolist()
    table = t.ranks.pivot(index="step", columns="rank", values="wire_bytes").to_numpy()
    assert (table == hook).all()
    # and the fallback rounds the hook counted are the steps' buckets past their bound
    fallbacks = np.zeros(STEPS, dtype=np.int64)
    for k in range(len(bm.buckets)):
        rows = np.flatnonzero(bm.used[:, k])
        _, extra = bounded_rounds(bm.messages[rows, :, k], align_bytes(int(bm.header_bytes[k])))
        fallbacks[rows] += extra > 0
    rounds = t.ranks.pivot(index="step", columns="rank", values="fallback_rounds").to_numpy()
    assert (rounds == fallbacks[:, None]).all()
    assert fallbacks[0] >= 1  # the first exchange of a bucket has no bound yet


def test_predict_and_simulate_read_it_with_the_bounded_exchange(run, tmp_path, capsys):
    trace_dir, _ = run
    t = read_trace(trace_dir)
    cluster = dataclasses.replace(get_cluster("1GbE"), compute="trace")
    df = predict_trace(t, cluster, PredictOptions(world_sizes=(WORLD, 8)))
    comp = df[df["method"] == "compressed"]
    assert set(comp["collective"]) == {"allgatherv/bounded"}
    for cmd in ("predict", "simulate"):
        out = tmp_path / cmd
        argv = [cmd, str(trace_dir), "--cluster", "1GbE", "--compute", "trace"]
        assert main([*argv, "--world-sizes", f"{WORLD},8", "-o", str(out)]) == 0
        assert "allgatherv/bounded" in capsys.readouterr().out


def test_validate_prints_every_term_and_the_winner_of_two_runs(runs, tmp_path, capsys):
    root, _ = runs
    out = tmp_path / "v"
    argv = ["validate", str(root / "variance"), str(root / "dense"), "--cluster", "1GbE"]
    rc = main([*argv, "--compute", "trace", "--tolerance", "10", "-o", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    for term in ("compute", "sqsum", "compress", "exchange", "decode", "optimizer", "step"):
        assert f"\n{term:>9} " in text, term
    assert "winner: measured " in text and ("match" in text or "MISMATCH" in text)
    terms = pd.read_csv(out / "validation_terms.csv")
    assert set(terms["term"]) >= {"exchange", "step"} and len(terms) == 7 * STEPS
    # the compressed run's measured exchange is the fastest rank's, per step
    t = read_trace(root / "variance")
    fastest = t.ranks.groupby("step")["comm_s"].min().to_numpy()
    exchange = terms[terms["term"] == "exchange"].sort_values("step")["measured_s"].to_numpy()
    assert np.allclose(exchange, fastest, rtol=1e-12, atol=0)


def test_a_trace_folder_in_use_is_refused_before_the_first_step(runs):
    """Asked for a trace in a folder an earlier run filled, every rank raises the same error
    when the hook is registered (rank 0 looks, the others are told), before any step; a
    rank's error ending the launch: tests/distributed/test_dist_launch.py."""
    root, measured = runs
    folder = root / "variance"
    assert (
        measured["refused"]
        == [f"trace folder {folder} is not empty; choose another trace_dir or pass overwrite=True"]
        * WORLD
    )
