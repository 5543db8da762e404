"""One replay vocabulary and one front door: every knob predict and simulate share is one
field of ``ReplayOptions``, set by the same ``--set`` key in both commands and written by the
one header writer; the trace's own exchange (``bounded`` for traces the DDP hook wrote) is
what predict, simulate, their commands, the API and sweeps price when none is asked for."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from vgcsim import api
from vgcsim.cli import main
from vgcsim.core.config import apply_overrides
from vgcsim.core.errors import ConfigError
from vgcsim.core.options import PredictOptions, ReplayOptions, SimulateConfig
from vgcsim.simulator.sweep import load_sweep
from vgcsim.traces.inputs import resolve_collectives
from vgcsim.traces.io import read_trace

SAMPLE = Path(__file__).resolve().parent / "data" / "sample_trace"
SHARED = [f.name for f in dataclasses.fields(ReplayOptions)]


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _set_text(value) -> str:
    """A ``--set`` value spelling ``value``: a string as is, ``none`` for None, else JSON."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return value
    return json.dumps(list(value) if isinstance(value, tuple) else value)


@pytest.fixture(scope="module")
def hook_trace(tmp_path_factory) -> Path:
    """The sample trace as the DDP hook would head it: source ``ddp_hook``, one bucket of
    every layer from step 0."""
    run = tmp_path_factory.mktemp("hook") / "run"
    shutil.copytree(SAMPLE, run)
    header = json.loads((run / "header.json").read_text())
    n = len(header["layers"])
    header.update(
        source="ddp_hook", hook={"layouts": [{"from_step": 0, "buckets": [list(range(n))]}]}
    )
    (run / "header.json").write_text(json.dumps(header))
    return run


def test_predict_and_simulate_hold_every_shared_field_with_one_default():
    shared = {f.name: _default(f) for f in dataclasses.fields(ReplayOptions)}
    for cls in (PredictOptions, SimulateConfig):
        assert issubclass(cls, ReplayOptions)
        own = {f.name: _default(f) for f in dataclasses.fields(cls)}
        assert {k: own[k] for k in shared} == shared
    # what is not shared is each one's own: nothing of one stage under another name
    only_predict = {f.name for f in dataclasses.fields(PredictOptions)} - set(shared)
    only_simulate = {f.name for f in dataclasses.fields(SimulateConfig)} - set(shared)
    assert only_predict == {"extra"}
    assert only_simulate == {
        "backward_fraction",
        "mode",
        "semantics",
        "path",
        "jitter",
        "max_steps",
    }


@pytest.mark.parametrize("name", SHARED)
def test_every_shared_field_is_the_same_set_key_of_both_commands(name):
    """``--set NAME=VALUE`` reaches both configs under the same key (a value other than the
    default where one is at hand, so that the key is live)."""
    others = {
        "world_sizes": (2, 8),
        "allreduce": ("recursive_doubling",),
        "allgatherv": ("bruck",),
        "encoding": "packed32",
        "rule": "resample",
        "seed": 3,
        "per_step": True,
        "overlap": "bucketed",
        "bucket_bytes": 1e6,
        "dense_encodings": ("fp32",),
        "size_exchange": False,
        "sparse_allreduce": (),
    }
    default = _default(next(f for f in dataclasses.fields(ReplayOptions) if f.name == name))
    value = others.get(name, default)
    for cls in (PredictOptions, SimulateConfig):
        got = apply_overrides(cls(), [f"{name}={_set_text(value)}"])
        assert getattr(got, name) == value, cls.__name__


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """predict and simulate of the sample trace through the API and through the commands,
    with the same options; each one's result header."""
    out = tmp_path_factory.mktemp("saved")
    sizes, common = "2,4", ["--cluster", "10GbE", "--world-sizes", "2,4", "--compute", "trace"]
    heads = {}
    for cmd, kw in (("predict", {}), ("simulate", {"max_steps": 1})):
        sets = [x for k, v in kw.items() for x in ("--set", f"{k}={v}")]
        assert main([cmd, str(SAMPLE), *common, *sets, "-o", str(out / f"cli-{cmd}")]) == 0
        df = getattr(api, cmd)(SAMPLE, "10GbE", sizes, compute="trace", **kw)
        api.save(df, out / f"api-{cmd}", SAMPLE, "10GbE")
        heads[cmd] = {
            how: json.loads((out / f"{how}-{cmd}" / "results.json").read_text())
            for how in ("cli", "api")
        }
    return heads


@pytest.mark.parametrize("cmd", ["predict", "simulate"])
def test_the_api_and_the_command_write_one_header(saved, cmd):
    cli, via_api = saved[cmd]["cli"], saved[cmd]["api"]
    for key in ("source", "traces", "cluster", "extrapolation", "options"):
        assert cli[key] == via_api[key], key
    assert cli["options"]["time_sources"]["compute_mode"] == "trace"
    assert "caveats" in cli["traces"][0]


@pytest.mark.parametrize("cmd", ["predict", "simulate"])
def test_every_shared_field_reaches_the_result_header(saved, cmd):
    options = saved[cmd]["cli"]["options"]
    missing = [name for name in SHARED if name not in options]
    assert not missing
    assert options["world_sizes"] == [2, 4] and options["allgatherv"] == ["ring"]


def test_the_trace_own_exchange_is_resolved_in_one_place(hook_trace):
    hook, plain = read_trace(hook_trace), read_trace(SAMPLE)
    for cls in (PredictOptions, SimulateConfig):
        assert resolve_collectives(cls(), hook).allgatherv == ("bounded",)
        assert resolve_collectives(cls(), plain).allgatherv == ("ring",)
        asked = cls(allgatherv=("bruck",))
        assert resolve_collectives(asked, hook) is asked


def _collectives(df) -> set[str]:
    return set(df.loc[df["method"] == "compressed", "collective"])


def test_api_predict_and_simulate_price_a_hook_trace_with_its_bounded_exchange(hook_trace):
    pred = api.predict(hook_trace, "10GbE", [2], compute="trace")
    sim = api.simulate(hook_trace, "10GbE", [2], compute="trace", max_steps=1)
    for df in (pred, sim):
        assert "allgatherv/bounded" in _collectives(df)
        assert not any(
            c.startswith("allgatherv/") and c != "allgatherv/bounded" for c in _collectives(df)
        )
        assert df.attrs["options"]["allgatherv"] == ["bounded"]
    # asked for, another exchange is priced instead
    ring = api.simulate(
        hook_trace, "10GbE", [2], compute="trace", max_steps=1, allgatherv=("ring",)
    )
    assert "allgatherv/ring" in _collectives(ring) and "allgatherv/bounded" not in _collectives(
        ring
    )


def test_simulate_command_prices_a_hook_trace_with_its_bounded_exchange(hook_trace, tmp_path):
    argv = ["simulate", str(hook_trace), "--cluster", "10GbE", "--world-sizes", "2"]
    assert main([*argv, "--set", "max_steps=1", "-o", str(tmp_path / "s")]) == 0
    head = json.loads((tmp_path / "s" / "results.json").read_text())
    assert head["options"]["allgatherv"] == ["bounded"]


def test_sweep_prices_a_hook_trace_with_its_bounded_exchange(hook_trace, tmp_path):
    import pandas as pd

    cfg = tmp_path / "sweep.toml"
    cfg.write_text(
        f'[sweep]\ntraces = ["{hook_trace}", "{SAMPLE}"]\nworld_sizes = [2]\n'
        'compute = "trace"\n\n[simulate]\nmax_steps = 1\n'
    )
    argv = ["sweep", str(cfg), "--processes", "1", "--scheduler", "processes", "-q"]
    assert main([*argv, "-o", str(tmp_path / "out")]) == 0
    df = pd.read_parquet(tmp_path / "out" / "results.parquet")
    by_trace = {path: _collectives(rows) for path, rows in df.groupby("trace_path")}
    assert by_trace == {str(hook_trace): {"allgatherv/bounded"}, str(SAMPLE): {"allgatherv/ring"}}


def test_a_sweep_file_refuses_world_sizes_among_the_replay_options(tmp_path):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(f'[sweep]\ntraces = ["{SAMPLE}"]\n\n[simulate]\nworld_sizes = [2]\n')
    with pytest.raises(ConfigError, match="set sweep.world_sizes"):
        load_sweep(cfg)
