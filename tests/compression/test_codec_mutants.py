"""The torch codec's GPU code run on the CPU, its dispatch, and inputs the other tests leave out.

The selection and the bucket pass have NumPy shortcuts for CPU tensors, so on a machine
without a GPU their torch ops only run with ``torch_codec.NUMPY_ON_CPU`` set to False: every
case then compares them with the recorder's NumPy ``VarianceCompressor`` bit for bit, or with
a hand-worked message. Tensors the codec makes must sit on its input's device whatever
torch's default device and dtype are; the ``meta`` device (no data, and no mixing with CPU
tensors) stands in for a GPU.
"""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest
import torch
from torchhelpers import default_dtype
from vgcsim.traces.compression import torch_codec
from vgcsim.traces.compression.compressors import get_compressor
from vgcsim.traces.compression.compressors.variance_based import VarianceState

CPU = torch.device("cpu")
META = torch.device("meta")
B = 4
LAYERS = (7, 2, 5)
SIZES = (40, 1, 25)


@pytest.fixture
def torch_ops(monkeypatch):
    """CPU tensors take the torch ops a GPU runs instead of the NumPy shortcuts."""
    monkeypatch.setattr(torch_codec, "NUMPY_ON_CPU", False)


def bits(t: torch.Tensor) -> list[int]:
    return t.detach().cpu().contiguous().view(torch.int32).tolist()


def f32_bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def gradients(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients over many magnitudes with zeros, and squared sums with zeros."""
    grad = torch.randn(n, generator=g) * torch.exp(torch.randn(n, generator=g) * 3)
    grad[::7] = 0.0
    sq = grad.square() * torch.rand(n, generator=g) * 20
    sq[3::11] = 0.0
    return grad, sq


def reference_steps(params: dict, inputs, sizes=SIZES, layers=LAYERS):
    """The recorder's NumPy compressor, layer by layer: (bytes, sent) per step, final states."""
    comp = get_compressor("variance", **params)
    states = [comp.init_state(n) for n in sizes]
    out = []
    for grad, sq in inputs:
        data, sent, start = b"", [], 0
        for layer, state, n in zip(layers, states, sizes, strict=True):
            p = comp.compress(
                grad[start : start + n],
                state,
                sqsum=sq[start : start + n],
                batch_size=B,
                layer=layer,
            )
            data += p.data
            sent.append(p.sent)
            start += n
        out.append((data, sent))
    return out, states


PARAMS = [
    {"alpha": 0.0},
    {"alpha": 0.3, "variance": "centered", "after_send": "error_feedback"},
    {"alpha": 2.0, "variance_scale": "per_sample", "rounding": "log"},
    {"alpha": 0.3, "below_floor": "floor", "after_send": "error_feedback"},
    {"alpha": 2.0, "values": "fp32"},
    {"alpha": 1.0, "scale": "mean", "rounding": "down"},
]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: "-".join(map(str, p.values())))
def test_torch_ops_on_the_cpu_give_the_numpy_compressors_bytes_and_state(torch_ops, params):
    """With the NumPy shortcuts off, the layer path and (for the max scale) the bucket path
    give the recorder's bytes, sent counts and state for three steps; the configs cover
    α = 0, the strict test with α > 0, both variance readings and scales, error feedback,
    both floor rules and fp32 values."""
    g = torch.Generator().manual_seed(PARAMS.index(params))
    inputs = [gradients(sum(SIZES), g) for _ in range(3)]
    expected, ref_states = reference_steps(params, inputs)
    comp = get_compressor("variance", **params)
    # the layer path
    states = [comp.init_state(n) for n in SIZES]
    for (grad, sq), (data, sent) in zip(inputs, expected, strict=True):
        got, counts, start = b"", [], 0
        for layer, state, n in zip(LAYERS, states, SIZES, strict=True):
            words, k = torch_codec.compress(
                comp,
                grad[start : start + n],
                state,
                sq[start : start + n],
                batch_size=B,
                layer=layer,
            )
            got += words.view(torch.uint8).numpy().tobytes()
            counts.append(k)
            start += n
        assert got == data and counts == sent
    for a, b in zip(ref_states, states, strict=True):
        assert bits(a.residual) == bits(b.residual) and bits(a.variance) == bits(b.variance)
    assert 0 < sum(sum(s) for _, s in expected) < 3 * sum(SIZES)  # the test selects
    if not torch_codec.bucket_supported(comp, SIZES):
        return
    states = [comp.init_state(n) for n in SIZES]
    bucket = torch_codec.bucket_state(states, LAYERS, CPU)
    for (grad, sq), (data, sent) in zip(inputs, expected, strict=True):
        words, lengths, counts = torch_codec.compress_bucket(
            comp, grad, sq, bucket, batch_size=B, impl="torch"
        )
        assert words.view(torch.uint8).numpy().tobytes() == data and counts == sent
    for a, b in zip(ref_states, states, strict=True):
        assert bits(a.residual) == bits(b.residual) and bits(a.variance) == bits(b.variance)


def _one_step(params, grad, sq, batch_size=1, layer=3):
    comp = get_compressor("variance", **params)
    state = comp.init_state(grad.numel())
    words, sent = torch_codec.compress(comp, grad, state, sq, batch_size=batch_size, layer=layer)
    return words.tolist(), sent, state


@pytest.mark.parametrize("shortcuts", [True, False])
def test_alpha_zero_sends_every_nonzero_residual_even_where_its_square_underflows(
    monkeypatch, shortcuts
):
    """α = 0 passes every nonzero r (the rule's docstring), also r = 2^-100 whose fp32
    square is 0 and would fail r² > 0·v; with the fp32 values the message is, by hand,
    [layer, k, (index, value)...]."""
    monkeypatch.setattr(torch_codec, "NUMPY_ON_CPU", shortcuts)
    tiny = 2.0**-100
    grad = torch.tensor([0.0, tiny, -3.0, 0.0])
    words, sent, _ = _one_step({"alpha": 0.0, "values": "fp32"}, grad, torch.ones(4))
    assert sent == 2
    assert words == [3, 2, 1, f32_bits(tiny), 2, f32_bits(-3.0)]


@pytest.mark.parametrize("shortcuts", [True, False])
def test_the_test_is_strict_a_residual_square_equal_to_alpha_v_stays(monkeypatch, shortcuts):
    """r² > α·v is strict: with α = 1, |B| = 1 and S = (4, 0, 1) the element with
    r² = α·v = 4 and the zero element (0 = 0) stay; only r = 3 (9 > 1) goes. And α
    multiplies v: r = 1, v = 4, α = 0.5 stays (1 < 2; α/v = 0.125 would let it go)."""
    monkeypatch.setattr(torch_codec, "NUMPY_ON_CPU", shortcuts)
    grad = torch.tensor([2.0, 0.0, 3.0])
    words, sent, state = _one_step(
        {"alpha": 1.0, "values": "fp32"}, grad, torch.tensor([4.0, 0.0, 1.0])
    )
    assert sent == 1 and words == [3, 1, 2, f32_bits(3.0)]
    assert state.residual.tolist() == [2.0, 0.0, 0.0]
    words, sent, _ = _one_step(
        {"alpha": 0.5, "values": "fp32"}, torch.tensor([1.0]), torch.tensor([4.0])
    )
    assert sent == 0 and words == [3, 0]


@pytest.mark.parametrize("variance", ["sqsum", "centered"])
def test_float64_inputs_are_rounded_to_fp32_before_any_arithmetic(variance):
    """A float64 gradient and squared sum give the state and bytes of their fp32 roundings
    (the state is fp32; rounding first is the NumPy compressor's reading): r + g and
    S·(1/|B|²) computed in float64 and rounded once would differ in the last bit."""
    comp = get_compressor("variance", variance=variance, alpha=2.0, after_send="error_feedback")
    g = torch.Generator().manual_seed(5)
    wide, narrow = comp.init_state(300), comp.init_state(300)
    for _ in range(3):
        grad = torch.randn(300, generator=g, dtype=torch.float64)
        sq = grad.square() * torch.rand(300, generator=g, dtype=torch.float64) * 9
        w1, k1 = torch_codec.compress(comp, grad, wide, sq, batch_size=3, layer=0)
        w2, k2 = torch_codec.compress(comp, grad.float(), narrow, sq.float(), batch_size=3, layer=0)
        assert w1.tolist() == w2.tolist() and k1 == k2
        assert bits(wide.residual) == bits(narrow.residual)
        assert bits(wide.variance) == bits(narrow.variance)


def test_the_bucket_paths_flat_views_are_flat():
    """_flat_f32 returns a 1-D array for a 2-D input: a contiguous fp32 tensor (a view), one
    it converts, one it only detaches; a 2-D gradient then compresses like its flat twin."""
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert torch_codec._flat_f32(t).shape == (6,)
    assert torch_codec._flat_f32(t.to(torch.bfloat16)).shape == (6,)
    assert torch_codec._flat_f32(t.clone().requires_grad_()).shape == (6,)  # detached only
    assert torch_codec._flat_f32(t.t()).tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    comp = get_compressor("variance", alpha=0.5)
    out = []
    for shape in [(6,), (2, 3)]:
        bucket = torch_codec.bucket_state([comp.init_state(4), comp.init_state(2)], (0, 1), CPU)
        grad = torch.tensor([1.0, -2.0, 0.0, 4.0, 0.5, 3.0]).reshape(shape)
        words, _, sent = torch_codec.compress_bucket(
            comp, grad, grad.square().reshape(shape), bucket, batch_size=2, impl="numpy"
        )
        out.append((words.tolist(), sent))
    assert out[0] == out[1]


def test_bucket_state_fields_by_hand():
    """Three layers of 3, 1 and 2 elements: sizes, starts, every element's layer position and
    index within its layer; the layer states are views of the flat tensors."""
    comp = get_compressor("variance")
    states = [comp.init_state(n) for n in (3, 1, 2)]
    states[1].residual[0] = 5.0
    bucket = torch_codec.bucket_state(states, (4, 0, 9), CPU)
    assert bucket.layers == (4, 0, 9) and bucket.numels == [3, 1, 2]
    assert bucket.offsets.tolist() == [0, 3, 4, 6] and bucket.offsets.dtype == torch.int64
    assert bucket.layer_ids.tolist() == [0, 0, 0, 1, 2, 2]
    assert bucket.local_index.tolist() == [0, 1, 2, 0, 0, 1]
    assert bucket.local_index.dtype == torch.int32
    assert bucket.residual.tolist() == [0.0, 0.0, 0.0, 5.0, 0.0, 0.0]
    bucket.variance[5] = 2.0
    assert states[2].variance.tolist() == [0.0, 2.0]


def test_bucket_state_moves_the_states_to_the_device_given():
    """bucket_state on another device (meta) puts the flat state, offsets and per-element
    tables there, and the layer states become views on it."""
    comp = get_compressor("variance")
    states = [comp.init_state(n) for n in (3, 1, 2)]
    bucket = torch_codec.bucket_state(states, (4, 0, 9), META)
    for t in (bucket.residual, bucket.variance, bucket.offsets, bucket.layer_ids):
        assert t.device == META
    assert bucket.local_index.device == META and bucket.local_index.shape == (6,)
    assert all(s.residual.device == META and s.variance.device == META for s in states)
    assert bucket.numels == [3, 1, 2]


def _codec_inputs(params: dict, inf: bool) -> dict:
    """CPU inputs of :func:`_codec_run`, made before any default device is changed."""
    g = torch.Generator().manual_seed(11)
    grad, sq = gradients(30, g)
    if inf:
        grad[4] = float("inf")
    bgrad = grad.clone()
    bgrad[22:] = 0.0  # the bucket's third layer sends nothing: M = 0
    comps = {s: get_compressor("variance", **{**params, "scale": s}) for s in ("max", "mean")}
    return {
        "grad": grad,
        "sq": sq,
        "bgrad": bgrad,
        "comps": comps,
        "layer_states": {s: c.init_state(30) for s, c in comps.items()},
        "bucket_states": [comps["max"].init_state(n) for n in (10, 12, 8)],
    }


def _codec_run(params: dict, x: dict) -> list:
    """Everything the codec makes from ``x``, as plain lists: two layer steps for each scale,
    bucket_state and two bucket steps (torch impl, with a layer whose M is infinite when
    ``x`` has an infinite gradient and an empty layer), and the bucket decodes."""
    out = []
    for scale, c in x["comps"].items():
        state = x["layer_states"][scale]
        for _ in range(2):
            words, sent = torch_codec.compress(c, x["grad"], state, x["sq"], batch_size=B, layer=1)
            out += [bits(words), sent, bits(state.residual), bits(state.variance)]
    bucket = torch_codec.bucket_state(x["bucket_states"], (3, 1, 2), CPU)
    out += [bucket.offsets.tolist(), bucket.layer_ids.tolist(), bucket.local_index.tolist()]
    coded = params.get("values", "code4") == "code4"
    for _ in range(2):
        words, lengths, sent = torch_codec.compress_bucket(
            x["comps"]["max"], x["bgrad"], x["sq"], bucket, batch_size=B, impl="torch"
        )
        out += [bits(words), lengths, sent, bits(bucket.residual), bits(bucket.variance)]
        idx, vals = torch_codec.decode_bucket_message(
            words, lengths, bucket.offsets, coded=coded, impl="torch"
        )
        out += [idx.tolist(), bits(vals)]
    return out


@pytest.mark.parametrize(
    "params",
    [{"alpha": 0.5}, {"alpha": 0.5, "values": "fp32"}, {"alpha": 0.0, "below_floor": "keep"}],
    ids=["code4", "fp32", "alpha0"],
)
def test_the_codec_makes_its_tensors_on_the_inputs_device_not_the_default(
    torch_ops, monkeypatch, params
):
    """With torch's default device set to meta, the torch ops on CPU inputs give the same
    words, counts, state and decode as with the default CPU: every tensor the codec makes
    (tables, scales, positions, headers, empty and masked codes) is put on its input's
    device (a CPU tensor would not mix with a meta one). The tables are built afresh."""
    expected = _codec_run(params, _codec_inputs(params, inf=True))
    x = _codec_inputs(params, inf=True)
    monkeypatch.setattr(torch_codec, "_POW2", {})
    monkeypatch.setattr(torch_codec, "_SIGNED_POW2", {})
    with torch.device(META):
        got = _codec_run(params, x)
    assert got == expected


def test_a_chunked_sparse_decode_builds_its_chunk_bases_on_the_words_device():
    """decode_sparse of a layer of 2^28 + 4 elements (two chunks) with the default device set
    to meta: the indices are the chunk base + the packed index, by hand."""
    numel = (1 << 28) + 4
    m = f32_bits(2.0)
    # two elements in chunk 0 (indices 5, 9), one in chunk 1 (index 2^28 + 3), codes 0, 1, 9
    words = torch.tensor([1, 3, m, 2, 1, 5 << 4 | 0, 9 << 4 | 1, 3 << 4 | 9], dtype=torch.int32)
    with torch.device(META):
        idx, vals = torch_codec.decode_sparse(words, numel=numel, coded=True)
    assert idx.device == CPU
    assert idx.tolist() == [5, 9, (1 << 28) + 3]
    assert vals.tolist() == [2.0, 1.0, -1.0]


def test_the_bucket_codec_does_not_depend_on_the_default_dtype(torch_ops):
    """torch's default dtype set to float64: the bucket path's per-layer scales stay fp32,
    the same words and state as with the default fp32."""
    params = {"alpha": 0.5}
    expected = _codec_run(params, _codec_inputs(params, inf=False))
    x = _codec_inputs(params, inf=False)
    with default_dtype(torch.float64):
        got = _codec_run(params, x)
    assert got == expected


def test_impl_picks_the_pass(monkeypatch):
    """impl="numpy" and "auto" (on a CPU state) run the NumPy bucket pass and decode,
    impl="torch" never does."""
    calls = []

    def spy(name):
        real = getattr(torch_codec, name)

        def wrapper(*args, **kwargs):
            calls.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(torch_codec, name, wrapper)

    spy("_compress_bucket_numpy")
    spy("_decode_bucket_message_numpy")
    comp = get_compressor("variance", alpha=0.5)
    grad, sq = gradients(6, torch.Generator().manual_seed(2))
    for impl, numpy in (("torch", False), ("numpy", True), ("auto", True)):
        calls.clear()
        bucket = torch_codec.bucket_state([comp.init_state(4), comp.init_state(2)], (0, 1), CPU)
        words, lengths, _ = torch_codec.compress_bucket(
            comp, grad, sq, bucket, batch_size=B, impl=impl
        )
        torch_codec.decode_bucket_message(words, lengths, bucket.offsets, coded=True, impl=impl)
        assert calls == (
            ["_compress_bucket_numpy", "_decode_bucket_message_numpy"] if numpy else []
        )


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_a_layer_of_infinite_scale_keeps_its_residual_under_error_feedback(torch_ops, impl):
    """M = inf codes every element of its layer 0 with q = 0 (the quantizer's rule for a
    non-finite scale), so error feedback leaves r − q = r: the infinite element and a finite
    one sent beside it (``below_floor="floor"``: "keep" would hold 3 < inf·2^-7 back) keep
    their values; the other layer (M = 4) is coded as usual."""
    comp = get_compressor("variance", alpha=0.0, after_send="error_feedback", below_floor="floor")
    bucket = torch_codec.bucket_state([comp.init_state(3), comp.init_state(2)], (0, 1), CPU)
    grad = torch.tensor([float("inf"), 3.0, 0.0, 4.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        words, lengths, sent = torch_codec.compress_bucket(
            comp, grad, torch.zeros(5), bucket, batch_size=1, impl=impl
        )
    assert sent == [2, 2] and lengths == [20, 20]
    assert bucket.residual.tolist()[:3] == [float("inf"), 3.0, 0.0]
    # layer 1: 4 = M·2^0 (code 0), −1 = −M·2^−2 (code 8 | 2): both exact, residual 0
    assert bucket.residual.tolist()[3:] == [0.0, 0.0]
    w = words.tolist()
    assert w[:5] == [0, 2, f32_bits(float("inf")), 0 << 4 | 0, 1 << 4 | 0]
    assert w[5:] == [1, 2, f32_bits(4.0), 0 << 4 | 0, 1 << 4 | 10]


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_a_scale_of_one_beside_an_empty_layer_is_coded(torch_ops, impl):
    """M = 1 is a usable scale also when another layer of the bucket sends nothing (M = 0):
    1, −0.5, 0.25 get codes 0, 8 | 1, 2 by hand; the empty layer is a bare header."""
    comp = get_compressor("variance", alpha=0.0)
    bucket = torch_codec.bucket_state([comp.init_state(3), comp.init_state(2)], (0, 1), CPU)
    grad = torch.tensor([1.0, -0.5, 0.25, 0.0, 0.0])
    words, lengths, sent = torch_codec.compress_bucket(
        comp, grad, torch.zeros(5), bucket, batch_size=1, impl=impl
    )
    assert sent == [3, 0] and lengths == [24, 12]
    assert words.tolist() == [0, 3, f32_bits(1.0), 0 << 4 | 0, 1 << 4 | 9, 2 << 4 | 2, 1, 0, 0]


@pytest.mark.parametrize("impl", ["torch", "numpy"])
def test_a_layer_id_beyond_the_u32_header_is_refused_not_wrapped(impl):
    """The header's layer field is a u32 (the encoders' struct.pack refuses 2^32 + 3): both
    bucket passes refuse it rather than writing it modulo 2^32 (layer 3)."""
    with pytest.raises(struct.error):
        struct.pack("<I", (1 << 32) + 3)
    comp = get_compressor("variance", alpha=0.0)
    bucket = torch_codec.bucket_state([comp.init_state(2)], ((1 << 32) + 3,), CPU)
    with pytest.raises((OverflowError, RuntimeError)):
        torch_codec.compress_bucket(
            comp, torch.ones(2), torch.zeros(2), bucket, batch_size=1, impl=impl
        )


def test_state_to_a_device_moves_the_state_there():
    """state_to(meta) moves a CPU state's two tensors; a state already there keeps them."""
    state = VarianceState(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
    torch_codec.state_to(state, META)
    assert state.residual.device == META and state.variance.device == META
    r = state.residual
    torch_codec.state_to(state, META)
    assert state.residual is r


def test_the_numpy_shortcuts_are_the_default():
    """Production keeps the NumPy shortcuts on the CPU."""
    assert torch_codec.NUMPY_ON_CPU is True


class _NumpySpy:
    """numpy for the codec module, counting calls of ``flatnonzero`` (the shortcuts' step)."""

    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        if name != "flatnonzero":
            return getattr(np, name)

        def flatnonzero(*args, **kwargs):
            self.calls += 1
            return np.flatnonzero(*args, **kwargs)

        return flatnonzero


@pytest.mark.parametrize("shortcuts", [True, False])
def test_numpy_on_cpu_switches_the_shortcuts_of_the_cpu(monkeypatch, shortcuts):
    """NUMPY_ON_CPU = True: the selection and _nonzero of CPU tensors go through NumPy;
    False: neither does. The indices are the same either way (α = 0 and α > 0)."""
    monkeypatch.setattr(torch_codec, "NUMPY_ON_CPU", shortcuts)
    spy = _NumpySpy()
    monkeypatch.setattr(torch_codec, "np", spy)
    mask = torch.tensor([False, True, False, True, True])
    assert torch_codec._nonzero(mask).tolist() == [1, 3, 4]
    assert spy.calls == (1 if shortcuts else 0)
    for alpha, sent in ((0.0, 2), (1.0, 1)):
        spy.calls = 0
        # r = (0, 2, 0.5), v = S = (0, 1, 1): α = 0 sends the two nonzero; α = 1 only 4 > 1
        _, k, _ = _one_step(
            {"alpha": alpha, "values": "fp32"},
            torch.tensor([0.0, 2.0, 0.5]),
            torch.tensor([0.0, 1.0, 1.0]),
        )
        assert k == sent and spy.calls == (1 if shortcuts else 0)
