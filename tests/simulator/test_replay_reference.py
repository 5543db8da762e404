"""The replay's full result table and path counts against a reference saved before the replay
was vectorized: every column of every row, to the last bit.

The reference (``tests/data/golden/replay/reference.json``) was written by the replay as it
stood before its per-step work was batched across steps; the cases cover a star and a
leaf-spine with ``path = auto`` (fast path and message level), P = 8 to 1024, eager and
rendezvous semantics, straggler jitter, bucketed overlap, the resample rule, both compute
modes and every step's row. Rewrite it only after a deliberate change of the replay's
numbers::

    .venv/bin/python tests/simulator/test_replay_reference.py --write
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from simhelpers import cluster as _cluster  # noqa: E402

from vgcsim.simulator.replay import SimulateConfig, simulate_trace  # noqa: E402
from vgcsim.traces.io import read_trace  # noqa: E402
from vgcsim.traces.synth import SynthConfig, synth_trace  # noqa: E402

REFERENCE = Path(__file__).parents[1] / "data" / "golden" / "replay" / "reference.json"

LEAF_SPINE = {
    "kind": "leaf_spine",
    "hosts_per_leaf": 4,
    "spines": 1,
    "oversubscription": 4.0,
    "placement": "spread",
}

# name -> (topology, compute mode, world sizes, SimulateConfig fields)
CASES: dict[str, tuple[dict | None, str, list[int], dict]] = {
    "star_rendezvous": (None, "trace", [8, 64, 1024], {}),
    "star_eager_jitter": (None, "trace", [8, 64], {"semantics": "eager", "jitter": 0.3}),
    "star_model_bucketed": (
        None,
        "model",
        [8, 128],
        {"overlap": "bucketed", "bucket_bytes": 4e6, "jitter": 0.1, "seed": 3},
    ),
    "star_resample_per_layer_eager": (
        None,
        "trace",
        [16],
        {"overlap": "per_layer", "rule": "resample", "semantics": "eager", "seed": 5},
    ),
    "star_padded_no_exchange": (
        None,
        "trace",
        [8, 32],
        {"allgatherv": ("padded",), "size_exchange": False},
    ),
    "star_bruck_rabenseifner": (
        None,
        "model",
        [8, 16],
        {
            "allgatherv": ("bruck",),
            "allreduce": ("recursive_doubling",),
        },
    ),
    "leaf_spine_packed_auto": (
        {**LEAF_SPINE, "placement": "packed"},
        "trace",
        [8, 16, 64],
        {"jitter": 0.2},
    ),
    "leaf_spine_spread_message": (LEAF_SPINE, "trace", [8, 16], {"path": "message"}),
    "leaf_spine_spread_message_eager_jitter": (
        LEAF_SPINE,
        "trace",
        [8],
        {"semantics": "eager", "jitter": 0.2, "path": "message"},
    ),
}


def _trace(tmp: Path):
    cfg = SynthConfig(
        layers="vgg_like",
        workers=4,
        steps=8,
        density=0.01,
        compute_s_per_worker=0.02,
        variance_s_per_worker=0.002,
        codec_s_per_worker=0.003,
        seed=7,
    )
    return read_trace(synth_trace(cfg, tmp / "vgg"))


def run_cases(trace) -> dict[str, dict]:
    """Every case's rows (per step and means) and info."""
    out = {}
    for name, (topology, compute, sizes, fields) in CASES.items():
        cl = dataclasses.replace(_cluster(topology, gamma_s_per_byte=1e-11), compute=compute)
        cfg = SimulateConfig(per_step=True, **fields)
        df, _, info = simulate_trace(trace, cl, sizes, cfg)
        rows = [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in df.to_dict(orient="records")
        ]
        out[name] = {"rows": rows, "info": info}
    return out


@pytest.fixture(scope="module")
def computed(tmp_path_factory):
    return run_cases(_trace(tmp_path_factory.mktemp("ref")))


@pytest.mark.parametrize("name", sorted(CASES))
def test_replay_equals_the_saved_reference_bit_for_bit(computed, name):
    reference = json.loads(REFERENCE.read_text())[name]
    got = computed[name]
    # the same counts on every path the reference knew; a path added since never ran here
    for size, variants in reference["info"].items():
        for label, counts in variants.items():
            now = got["info"][size][label]
            assert {k: now[k] for k in counts} == counts, (size, label)
            assert all(v == 0 for k, v in now.items() if k not in counts), (size, label)
    assert got["info"].keys() == reference["info"].keys()
    assert len(got["rows"]) == len(reference["rows"])
    for i, (g, r) in enumerate(zip(got["rows"], reference["rows"], strict=True)):
        assert g.keys() == r.keys(), i
        for key in r:
            assert g[key] == r[key] or (g[key] is None and r[key] is None), (i, key, g[key], r[key])


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: test_replay_reference.py --write")
    with tempfile.TemporaryDirectory() as tmp:
        data = run_cases(_trace(Path(tmp)))
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"wrote {REFERENCE} ({sum(len(c['rows']) for c in data.values())} rows)")
