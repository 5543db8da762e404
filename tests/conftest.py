"""Shared fixtures: a tiny hand-made trace (TraceWriter) whose every number is known, for replay,
predict and scenario tests."""

from __future__ import annotations

import contextlib
import json
import locale
import shutil
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

#: bits_hand[step, worker, layer] of the tiny trace: 3 steps, 2 workers, 2 layers.
TINY_BITS = np.array(
    [
        [[800, 160], [1600, 320]],
        [[804, 0], [80, 8]],
        [[8000, 1600], [16, 16]],
    ],
    dtype=np.int64,
)
TINY_NUMEL = (1000, 250)
TINY_STEP = {"compute_s": 0.2, "variance_s": 0.02, "compress_s": 0.04, "encode_s": 0.02}


def write_tiny_trace(
    run_dir, *, bits=TINY_BITS, numel=TINY_NUMEL, step_row=TINY_STEP, step_rows=None
):
    """``step_rows``: optional extra step columns, one dict per step."""
    # Imported here, not at the top: every test folder loads this conftest.
    from vgcsim.traces import schema
    from vgcsim.traces.io import TraceWriter

    steps, workers, n_layers = bits.shape
    layers = [
        {"index": i, "name": f"l{i}", "shape": [numel[i]], "numel": numel[i]}
        for i in range(n_layers)
    ]
    header = {
        "synthetic": True,
        "config": {"test": True},
        "seeds": {"seed": 0},
        "versions": {},
        "git_commit": None,
        "machine": {},
        "workers": workers,
        "batch_size_per_worker": 8,
        "compressor": {"name": "variance", "params": {"alpha": 2.0}},
        # hand-picked bit counts, not those a real wire format gives (packed32 would be exactly
        # 96 + 32 per value): encodings without a size formula, which validate checks for
        # bits >= 0 only, so that every reader accepts the trace
        "encodings": ["hand", "hand2x"],
        "primary_encoding": "hand",
        "layers": layers,
        "flops_per_sample": 1e9,
        "dense_bytes_per_step": 4 * sum(numel),
    }
    with TraceWriter(run_dir, header, chunk_steps=2) as w:
        for t in range(steps):
            rows = {c: [] for c in [*schema.PAYLOAD_COLUMNS, "bits_hand", "bits_hand2x"]}
            for wk in range(workers):
                for layer in range(n_layers):
                    b = int(bits[t, wk, layer])
                    rows["step"].append(t)
                    rows["worker"].append(wk)
                    rows["layer"].append(layer)
                    rows["numel"].append(numel[layer])
                    rows["sent"].append(b // 32)
                    rows["bits_hand"].append(b)
                    rows["bits_hand2x"].append(2 * b)
            w.add_payload_rows(rows)
            w.add_step(
                {
                    "step": t,
                    "loss": 1.0,
                    "lr": 0.1,
                    "grad_norm": 1.0,
                    "density": 0.01,
                    **step_row,
                    **(step_rows[t] if step_rows else {}),
                }
            )
    return run_dir


@pytest.fixture
def tiny_trace_dir(tmp_path):
    return write_tiny_trace(tmp_path / "tiny")


@pytest.fixture
def tiny_trace(tiny_trace_dir):
    from vgcsim.traces.io import read_trace

    return read_trace(tiny_trace_dir)


#: The folder of the tests that time shaped links (marker ``netns``): ``make test`` runs the
#: rest on several processes without them, then this folder's ``netns`` tests alone.
NETNS_FOLDER = Path(__file__).parent / "distributed"


def pytest_collection_modifyitems(config, items):
    """A test marked ``netns`` outside :data:`NETNS_FOLDER` would run in neither part of
    ``make test``: refuse the session instead."""
    stray = [
        item.nodeid
        for item in items
        if item.get_closest_marker("netns") and not Path(item.path).is_relative_to(NETNS_FOLDER)
    ]
    if stray:
        raise pytest.UsageError(
            f"tests marked netns must live in {NETNS_FOLDER.name}/, whose netns tests make test "
            f"runs alone: {', '.join(stray)}"
        )


def pytest_sessionstart(session):
    """Every test session starts with the module-level ``functools`` caches of ``vgcsim`` empty
    (collective schedules, read traces). A session run in a process that has already computed
    them (mutation testing forks each mutant's session from a process that ran the unmutated
    code) would otherwise test the cached results instead of the code."""
    import functools
    import sys

    for name, module in list(sys.modules.items()):
        if name == "vgcsim" or name.startswith("vgcsim."):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):
                    value.cache_clear()


@pytest.fixture(scope="module")
def sweep_traces(tmp_path_factory) -> list[str]:
    """Two small synthesized VGG-like traces (density 1 % and 10 %) for sweep tests."""
    from vgcsim.traces.synth import SynthConfig, synth_trace

    root = tmp_path_factory.mktemp("sweep")
    a = synth_trace(SynthConfig(layers="vgg_like", workers=2, steps=3, density=0.01), root / "a")
    b = synth_trace(SynthConfig(layers="vgg_like", workers=2, steps=3, density=0.1), root / "b")
    return [str(a), str(b)]


@contextlib.contextmanager
def ascii_locale():
    """The C locale, whose encoding is ASCII, for the block (restored afterwards): a file
    opened without ``encoding="utf-8"`` then fails on UTF-8 text (Python's UTF-8 mode off)."""
    old = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, old)


def png_size(path: Path) -> tuple[int, int]:
    """A PNG file's (width, height) in pixels, read from its IHDR chunk."""
    head = Path(path).read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def write_hook_trace(tmp_path: Path, wall: bool = True) -> Path:
    """The sample trace as the hook would write it (one bucket of every layer): a ranks table
    whose compute is (1 + step) ms on rank 0 and 10 × that on rank 1, the whole step 2 ms
    above forward + backward + optimizer."""
    from vgcsim.traces.io import read_trace

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parent / "data" / "sample_trace", run)
    t = read_trace(run)
    steps = t.steps["step"].to_numpy()
    w = int(t.workers)
    rows = pd.DataFrame({"step": np.repeat(steps, w), "rank": np.tile(np.arange(w), len(steps))})
    compute = (1.0 + rows["step"]) * 1e-3 * np.where(rows["rank"] == 1, 10.0, 1.0)
    rows["compute_s"] = compute
    rows["forward_backward_s"] = compute + 1e-3  # the hook's own 1 ms inside
    for col in ("sqsum_s", "compress_s", "encode_s"):
        rows[col] = 0.25e-3
    rows["comm_s"] = 0.25e-3
    rows["decode_s"] = 0.5e-3 * w
    rows["optimizer_s"] = 0.5e-3
    if wall:
        rows["step_wall_s"] = rows["forward_backward_s"] + rows["optimizer_s"] + 2e-3
        rows.loc[rows["step"] == steps[0], "step_wall_s"] = np.nan
    rows["wire_bytes"] = 4096
    rows["fallback_rounds"] = 0
    (run / "ranks").mkdir()
    rows.to_parquet(run / "ranks" / "part-000000.parquet")
    header = json.loads((run / "header.json").read_text())
    header["source"] = "ddp_hook"
    header["hook"] = {
        "layouts": [{"from_step": 0, "buckets": [list(range(len(header["layers"])))]}]
    }
    (run / "header.json").write_text(json.dumps(header))
    return run


class _ClosedPipe:
    """A stdout whose reader went away: every write raises BrokenPipeError, as ``vgcsim
    ... | head`` gives once head has exited; its descriptor (for the command's devnull
    redirect) is a scratch file's."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self._fd


@contextlib.contextmanager
def closed_stdout(scratch: Path):
    """sys.stdout as a closed pipe inside the block (see :class:`_ClosedPipe`; set in the
    test's body, since pytest's capture sets sys.stdout again at each phase)."""
    import os
    import sys

    fd = os.open(scratch / "stdout.scratch", os.O_WRONLY | os.O_CREAT)
    was = sys.stdout
    sys.stdout = _ClosedPipe(fd)
    try:
        yield
    finally:
        sys.stdout = was
        os.close(fd)
