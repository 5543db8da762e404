"""The payload contract of ``vgcsim.traces.compression.base``: the primary buffer is real,
the other encodings' bit counts equal their real buffers, and the input is flattened to
fp32 without touching the caller's tensor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vgcsim.traces.compression.base import LayerStep, check_grad, make_payload
from vgcsim.traces.wire.encoders import ENCODINGS, SPARSE_ENCODINGS
from vgcsim.traces.wire.messages import QSGDMessage, SparseMessage

MSG = SparseMessage(4, 10, np.array([1, 4, 9]), np.array([0, 9, 7], dtype=np.uint8), 0.5)


def test_payload_carries_the_primary_buffer_and_every_encodings_real_size():
    p = make_payload(MSG, sent=3, encodings=SPARSE_ENCODINGS, primary="bitmap")
    assert p.data == ENCODINGS["bitmap"].encode(MSG)
    assert p.encoding == "bitmap" and p.layer == 4 and p.numel == 10 and p.sent == 3
    assert p.bits == {name: 8 * len(ENCODINGS[name].encode(MSG)) for name in SPARSE_ENCODINGS}
    assert list(p.bits) == list(SPARSE_ENCODINGS)
    assert p.message is MSG and p.decode_context == {}
    assert p.encode_s >= 0.0
    torch.testing.assert_close(
        p.decode(), torch.tensor([0, 0.5, 0, 0, -0.25, 0, 0, 0, 0, 0.5 / 128])
    )
    assert p.decode().dtype == torch.float32


def test_payload_without_its_message_decodes_from_the_bytes_alone():
    q = QSGDMessage(1, 5, 4, 3, np.float32([2.0, 1.0]), np.array([3, -1, 0, 2, -3]))
    ctx = {"bucket_size": 4, "s": 3}
    p = make_payload(
        q,
        sent=5,
        encodings=("qsgd_fixed",),
        primary="qsgd_elias",
        decode_context=ctx,
        keep_message=False,
    )
    assert p.message is None
    assert set(p.bits) == {"qsgd_fixed"}  # only the encodings asked for
    assert p.decode_context == ctx and p.decode_context is not ctx
    torch.testing.assert_close(p.decode(), torch.tensor([2.0, -2 / 3, 0.0, 4 / 3, -1.0]))


def test_sent_is_stored_as_a_python_int():
    p = make_payload(MSG, sent=np.int64(3), encodings=("coo64",), primary="coo64")
    assert type(p.sent) is int and p.sent == 3


@pytest.mark.parametrize(
    "t",
    [
        torch.arange(6, dtype=torch.float32).reshape(2, 3),
        torch.arange(6, dtype=torch.float64).reshape(2, 3),
        torch.arange(6, dtype=torch.float16).reshape(2, 3),
        torch.arange(6, dtype=torch.float32).reshape(3, 2).t(),  # not contiguous
    ],
)
def test_check_grad_is_a_flat_contiguous_fp32_tensor_of_the_same_values(t):
    flat = check_grad(t)
    assert flat.dtype == torch.float32 and flat.dim() == 1 and flat.is_contiguous()
    assert flat.tolist() == [float(v) for v in t.reshape(-1).tolist()]
    assert not flat.requires_grad


def test_check_grad_of_a_contiguous_fp32_tensor_is_a_view_and_detached():
    t = torch.ones(2, 2, requires_grad=True)
    flat = check_grad(t)
    assert not flat.requires_grad and flat.data_ptr() == t.data_ptr()


def test_layer_step_defaults():
    s = LayerStep()
    assert (s.layer, s.sqsum, s.batch_size, s.generator) == (0, None, 1, None)
