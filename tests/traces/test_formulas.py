"""Size formulas of synth and validate against the compression library's real encoders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vgcsim.traces.io import read_trace
from vgcsim.traces.synth import SYNTH_ENCODINGS
from vgcsim.traces.validate import ENCODING_BOUNDS, check_trace
from vgcsim.traces.wire.encoders import ENCODINGS, QSGD_ENCODINGS, SPARSE_ENCODINGS
from vgcsim.traces.wire.messages import DenseMessage, QSGDMessage, SparseMessage

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sample_trace"


def _sparse(rng, numel, k, coded):
    idx = np.sort(rng.choice(numel, size=k, replace=False)).astype(np.int64)
    if coded:
        return SparseMessage(0, numel, idx, rng.integers(0, 16, size=k).astype(np.uint8), 0.5)
    return SparseMessage(0, numel, idx, None, 0.0, rng.normal(size=k).astype(np.float32))


CASES = [(1, 1), (10, 0), (10, 10), (1000, 1), (1000, 37), (5000, 4999), (100_000, 100)]


@pytest.mark.parametrize(("numel", "k"), CASES)
@pytest.mark.parametrize("coded", [True, False])
def test_real_sparse_sizes_within_validate_bounds(numel, k, coded):
    rng = np.random.default_rng(numel + k)
    msg = _sparse(rng, numel, k, coded)
    for name in SPARSE_ENCODINGS:
        if name == "packed32" and not coded:
            continue
        bits = 8 * len(ENCODINGS[name].encode(msg))
        lo, hi = ENCODING_BOUNDS[name](np.array([numel], float), np.array([k], float))
        assert lo[0] <= bits <= hi[0], (name, numel, k, coded, lo[0], bits, hi[0])


@pytest.mark.parametrize(("numel", "k"), CASES)
def test_synth_fixed_formulas_equal_real_coded_sizes(numel, k):
    rng = np.random.default_rng(k)
    msg = _sparse(rng, numel, k, coded=True)
    for name in ("packed32", "coo64", "bitmap"):
        want = 8 * len(ENCODINGS[name].encode(msg))
        got = SYNTH_ENCODINGS[name](np.array([numel]), np.array([k]), rng)[0]
        assert got == want, name
    dense = DenseMessage(0, numel, rng.normal(size=numel).astype(np.float32))
    for name in ("fp32", "fp16"):
        assert SYNTH_ENCODINGS[name](np.array([numel]), np.array([numel]), rng)[0] == 8 * len(
            ENCODINGS[name].encode(dense)
        )


@pytest.mark.parametrize("numel", [1, 100, 1000])
def test_dense_and_qsgd_sizes_within_bounds(numel):
    rng = np.random.default_rng(numel)
    dense = DenseMessage(0, numel, rng.normal(size=numel).astype(np.float32))
    for name in ("fp32", "fp16"):
        lo, hi = ENCODING_BOUNDS[name](np.array([numel], float), np.array([numel], float))
        assert lo[0] == hi[0] == 8 * len(ENCODINGS[name].encode(dense))
    d, s = 128, 1
    buckets = -(-numel // d)
    msg = QSGDMessage(
        0,
        numel,
        d,
        s,
        np.abs(rng.normal(size=buckets)).astype(np.float32),
        rng.integers(-s, s + 1, size=numel),
    )
    for name in QSGD_ENCODINGS:
        bits = 8 * len(ENCODINGS[name].encode(msg))
        lo, hi = ENCODING_BOUNDS[name](np.array([numel], float), np.array([numel], float))
        assert lo[0] <= bits <= hi[0], name


def test_committed_sample_trace_is_valid():
    t = read_trace(SAMPLE)
    assert check_trace(t) == []
    assert t.status == "complete" and t.workers == 4 and t.steps_count == 100
    assert t.compressor == "variance" and not t.synthetic


def test_committed_synthetic_resnet50_trace_is_valid():
    t = read_trace(SAMPLE.parent / "synth_resnet50")
    assert check_trace(t) == []
    assert t.synthetic and len(t.layers) == 161 and t.workers == 4
