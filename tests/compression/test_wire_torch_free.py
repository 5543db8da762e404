"""The wire formats import and run without torch; synth and validate size payloads with them."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from vgcsim.traces.synth import SYNTH_ENCODINGS
from vgcsim.traces.validate import ENCODING_BOUNDS
from vgcsim.traces.wire import sizes
from vgcsim.traces.wire.encoders import ENCODINGS
from vgcsim.traces.wire.messages import DenseMessage, QSGDMessage, SparseMessage

#: torch is blocked (``sys.modules['torch'] = None`` makes ``import torch`` raise ImportError).
_BLOCK = "import sys; sys.modules['torch'] = None\n"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK + code], capture_output=True, text=True, timeout=120
    )


def test_wire_formats_synth_and_validate_import_and_encode_without_torch():
    code = (
        "import numpy as np\n"
        "import vgcsim.traces.compression\n"
        "from vgcsim.traces.wire import bitstream, quantize, sizes\n"
        "from vgcsim.traces.wire.encoders import ENCODINGS\n"
        "from vgcsim.traces.wire.messages import SparseMessage\n"
        "import vgcsim.traces.synth, vgcsim.traces.validate\n"
        "msg = SparseMessage(0, 100, np.array([3, 50]), np.array([1, 9], np.uint8), 0.5)\n"
        "print(len(ENCODINGS['packed32'].encode(msg)))\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    nbytes, loaded = out.stdout.split("\n")[:2]
    assert int(nbytes) == 12 + 4 * 2
    assert loaded == "['torch']"  # only the blocking entry itself


def test_the_registry_lists_labels_and_prices_compressors_without_torch():
    """Listing the registry, a label and a codec profile import no torch; making a tensor
    (a compressor's state) is what needs it, and fails here, so the blocking works."""
    code = (
        "from vgcsim.traces.compression.compressors import COMPRESSORS, get_compressor\n"
        "from vgcsim.traces.devicecost import codec_profile\n"
        "from vgcsim.traces.labels import method_label\n"
        "print(','.join(COMPRESSORS))\n"
        "print(method_label('variance', {'alpha': 2.0}))\n"
        "print(codec_profile('strom').compress_launches)\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n"
        "get_compressor('variance', alpha=2.0).init_state(4)\n"
    )
    out = _run(code)
    names, label, launches, loaded = out.stdout.split("\n")[:4]
    assert set(names.split(",")) >= {"dense", "variance", "strom", "hybrid", "qsgd", "topk"}
    assert label == "variance α=2"
    assert int(launches) == 5
    assert loaded == "['torch']"  # only the blocking entry itself
    assert out.returncode != 0 and "torch" in out.stderr


def _sparse(rng, numel, k, coded):
    idx = np.sort(rng.choice(numel, size=k, replace=False)).astype(np.int64)
    if coded:
        return SparseMessage(0, numel, idx, rng.integers(0, 16, size=k).astype(np.uint8), 0.5)
    return SparseMessage(0, numel, idx, None, 0.0, rng.normal(size=k).astype(np.float32))


@pytest.mark.parametrize(("numel", "k"), [(1, 0), (1, 1), (9, 3), (1000, 37), (4097, 4097)])
@pytest.mark.parametrize("coded", [True, False])
def test_closed_form_sizes_equal_real_buffers(numel, k, coded):
    rng = np.random.default_rng(numel * 7 + k)
    msg = _sparse(rng, numel, k, coded)
    real = {name: 8 * len(ENCODINGS[name].encode(msg)) for name in ("coo64", "bitmap")}
    assert sizes.coo64_bits(k, coded) == real["coo64"]
    assert sizes.bitmap_bits(numel, k, coded) == real["bitmap"]
    gaps = np.diff(msg.indices, prepend=-1)
    for name, code in (("gap_elias_gamma", "gamma"), ("gap_elias_delta", "delta")):
        per_gap = getattr(sizes, f"elias_{code}_bits")(np.floor(np.log2(gaps)).astype(np.int64))
        want = 8 * len(ENCODINGS[name].encode(msg))
        assert sizes.gap_bits(k, int(np.sum(per_gap)), coded) == want, name
    if coded:
        assert sizes.packed32_bits(numel, k) == 8 * len(ENCODINGS["packed32"].encode(msg))


def test_packed32_counts_one_word_per_chunk_above_two_to_the_28():
    n = 3 * 2**28 + 5
    assert sizes.packed32_chunks(n) == 4
    assert sizes.packed32_bits(n, 10) == 96 + 320 + 4 * 32
    assert sizes.packed32_bits(2**28, 10) == 96 + 320


@pytest.mark.parametrize("numel", [1, 127, 1000])
@pytest.mark.parametrize("s", [1, 3, 7])
def test_qsgd_and_dense_sizes_equal_real_buffers(numel, s):
    rng = np.random.default_rng(numel + s)
    d = 128
    buckets = sizes.qsgd_buckets(numel, d)
    levels = rng.integers(-s, s + 1, size=numel)
    msg = QSGDMessage(0, numel, d, s, np.ones(buckets, np.float32), levels)
    assert sizes.qsgd_fixed_bits(numel, buckets, s) == 8 * len(ENCODINGS["qsgd_fixed"].encode(msg))
    assert ENCODINGS["qsgd_elias"].bit_length(msg) == 8 * len(ENCODINGS["qsgd_elias"].encode(msg))
    dense = DenseMessage(0, numel, rng.normal(size=numel).astype(np.float32))
    for name, element_bits in sizes.DENSE_ELEMENT_BITS.items():
        assert sizes.dense_bits(numel, element_bits) == 8 * len(ENCODINGS[name].encode(dense))


def test_elias_delta_envelope_bounds_the_exact_code_from_above():
    n = np.arange(0, 64)
    assert (sizes.elias_delta_bits_envelope(n.astype(float)) >= sizes.elias_delta_bits(n)).all()
    assert sizes.elias_delta_bits(np.array([0, 1, 2, 3, 7])).tolist() == [1, 4, 5, 8, 14]


def test_synth_and_validate_use_the_same_closed_forms():
    numel, sent = np.array([10, 4096, 2**29]), np.array([3, 100, 7])
    rng = np.random.default_rng(0)
    for name in ("packed32", "coo64", "fp32", "fp16"):
        got = SYNTH_ENCODINGS[name](numel, sent, rng)
        lo, hi = ENCODING_BOUNDS[name](numel, sent)
        assert (lo <= got).all() and (got <= hi).all(), name
    assert SYNTH_ENCODINGS["packed32"](numel, sent, rng).tolist() == (
        sizes.packed32_bits(numel, sent).tolist()
    )


def test_package_names_are_the_modules_objects():
    import vgcsim.traces.compression as pkg
    from vgcsim.traces.compression.base import Compressor
    from vgcsim.traces.compression.compressors import COMPRESSORS, get_compressor

    assert pkg.get_compressor is get_compressor and pkg.COMPRESSORS is COMPRESSORS
    assert pkg.Compressor is Compressor and pkg.ENCODINGS is ENCODINGS
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = pkg.nope
