"""The compressor contract: a compressor turns one worker's layer gradient into a Payload.

A :class:`Compressor` holds only hyperparameters; all mutable state (residual, variance
accumulator) lives in an explicit per-(worker, layer) state object from
:meth:`Compressor.init_state`. :meth:`Compressor.compress` returns a :class:`Payload`: the
real bytes of the primary encoding, the exact bit length of the buffer under every
encoding the compressor reports, the number of elements sent, and a decode back to the
dense tensor the receiver adds up. The communicator (emulated sum, allgatherv) is
elsewhere.

A compressor module is importable without torch (torch is imported where a tensor is made),
so the registry, the labels and the device cost model can list compressors, show their
labels and price their codecs on an install without torch.
"""

from __future__ import annotations

import dataclasses
import time
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.traces.wire.encoders import ENCODINGS
from vgcsim.traces.wire.messages import DenseMessage, QSGDMessage, SparseMessage

if TYPE_CHECKING:
    import torch

Message = SparseMessage | DenseMessage | QSGDMessage


@dataclass(frozen=True)
class CodecProfile:
    """Bytes and launches of one compressor's stages, per layer of n elements of which k are
    sent: what its module declares (``Compressor.codec_profile``, with the derivation of the
    counts) and :mod:`vgcsim.traces.devicecost` prices on a device."""

    compress_per_element: float  # bytes per gradient element (dense passes)
    compress_per_sent: float  # bytes per sent element (gather, quantize, reset)
    compress_launches: int  # kernels per layer
    encode_per_sent: float  # bytes read per sent element; the payload bytes are written too
    encode_launches: int
    decode_per_element: float  # bytes per element of a received layer (dense decoders)
    decode_per_sent: float  # bytes per sent element of a received layer (scatter-add)
    decode_launches: int  # kernels per layer for all received payloads together
    derivation: str


def label_number(value: Any) -> Any:
    """A hyperparameter as a label shows it: a whole float without its ".0" (2.0 -> 2)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True, eq=False)
class Payload:
    """What one worker puts on the wire for one layer in one step.

    ``bits[name]`` is the exact bit length (``8 × bytes``, headers and padding included) of
    the buffer under encoding ``name``; ``data`` is the primary encoding's real buffer.
    ``encode_s`` is the wall-clock time spent encoding (primary buffer + every bit count),
    so callers can split compress time from encode time.
    """

    layer: int
    numel: int
    sent: int
    bits: dict[str, int]
    data: bytes = field(repr=False)
    encoding: str
    decode_context: dict[str, Any] = field(default_factory=dict, repr=False)
    message: Message | None = field(default=None, repr=False)
    encode_s: float = 0.0

    def decode(self) -> torch.Tensor:
        """Decode :attr:`data` (the real buffer) into the dense fp32 tensor of ``numel``."""
        import torch

        msg = ENCODINGS[self.encoding].decode(self.data, numel=self.numel, **self.decode_context)
        return torch.from_numpy(np.ascontiguousarray(msg.dense(), dtype=np.float32))


def make_payload(
    msg: Message,
    *,
    sent: int,
    encodings: tuple[str, ...],
    primary: str,
    decode_context: dict[str, Any] | None = None,
    keep_message: bool = True,
) -> Payload:
    """Encode ``msg`` with the primary encoding for real, and size it under the others.

    Non-primary sizes use each encoder's closed-form ``bit_length``, which tests prove
    equal to ``8 * len(encode(msg))`` for the same input.
    """
    start = time.perf_counter()
    data = ENCODINGS[primary].encode(msg)
    bits = {}
    for name in encodings:
        bits[name] = 8 * len(data) if name == primary else ENCODINGS[name].bit_length(msg)
    return Payload(
        layer=msg.layer,
        numel=msg.numel,
        sent=int(sent),
        bits=bits,
        data=data,
        encoding=primary,
        decode_context=dict(decode_context or {}),
        message=msg if keep_message else None,
        encode_s=time.perf_counter() - start,
    )


@dataclass(frozen=True)
class LayerStep:
    """What a compressor gets for one layer in one step besides the gradient and its state."""

    layer: int = 0
    sqsum: torch.Tensor | None = None
    batch_size: int = 1
    generator: torch.Generator | None = None


class Compressor:
    """Base class. Subclasses define a frozen ``Params`` dataclass (documented hyperparameters).

    Attributes: ``name``; ``needs_sqsum`` (True when :meth:`compress` needs the per-element
    Σ_z (∇f_z)²); ``params`` (JSON-able dict, written to trace headers); ``encodings`` (every
    encoding whose exact bits a payload reports); ``primary_encoding`` (what crosses the wire);
    ``codec_profile`` (the bytes and launches its stages touch on a device, read by
    :mod:`vgcsim.traces.devicecost`); :meth:`label` (its name in reports and tables).
    """

    name: ClassVar[str] = ""
    needs_sqsum: ClassVar[bool] = False
    #: bytes and launches per layer of compress, encode and decode, which the default compute
    #: mode prices on the target device; None: priced otherwise (powersgd) or not at all
    codec_profile: ClassVar[CodecProfile | None] = None
    #: parameters that choose a reading of the paper's rules, shown by
    #: :func:`vgcsim.traces.labels.compressor_reading` (the variance-test compressors)
    readings: ClassVar[tuple[str, ...]] = ()
    #: True when the workers' messages depend on each other (powersgd): the compressor then
    #: exchanges all workers in one call instead of compressing each one's payload
    collective: ClassVar[bool] = False
    Params: ClassVar[type] = object

    def __init__(self, **params: Any) -> None:
        valid = [f.name for f in dataclasses.fields(self.Params)]
        unknown = sorted(set(params) - set(valid))
        if unknown:
            raise ConfigError(
                f"unknown parameter(s) {', '.join(unknown)} for compressor {self.name!r}; "
                f"valid: {', '.join(valid) or '(none)'}"
            )
        self._check_types(params)
        try:
            self.config = self.Params(**params)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"compressor {self.name!r}: {exc}") from exc
        self._validate()

    def _check_types(self, params: dict[str, Any]) -> None:
        """ConfigError for a value of the wrong type (``bits=2.5``, ``alpha="x"``).

        Without this a wrong type passes the range checks or fails in them, or later in
        ``compress``, with a TypeError traceback instead of a message.
        """
        hints = typing.get_type_hints(self.Params)
        for key, value in params.items():
            tp = hints.get(key)
            if tp is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif tp is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            elif tp is str:
                ok = isinstance(value, str)
            else:
                ok = True
            if not ok:
                raise ConfigError(
                    f"compressor {self.name!r}: parameter {key!r} expects "
                    f"{getattr(tp, '__name__', tp)}, got {value!r}"
                )

    def _validate(self) -> None:
        """Raise ConfigError for out-of-range hyperparameters."""

    @classmethod
    def label(cls, params: Mapping[str, Any]) -> str:
        """The one name of this configuration in every stage (reports, tables, the paper
        grid), from the ``params`` of a trace header (keys may be missing: old headers).
        This default shows up to two scalar hyperparameters; compressors override it with the
        ones a reader compares by."""
        shown = [
            f"{k}={label_number(v)}"
            for k, v in sorted(params.items())
            if isinstance(v, (int, float, str))
        ][:2]
        return f"{cls.name} {', '.join(shown)}" if shown else cls.name

    @property
    def params(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)

    @property
    def encodings(self) -> tuple[str, ...]:
        raise NotImplementedError

    @property
    def primary_encoding(self) -> str:
        raise NotImplementedError

    def init_state(self, numel: int) -> object:
        """Fresh per-(worker, layer) state for a layer of ``numel`` elements."""
        return None

    def compress(
        self,
        grad: torch.Tensor,
        state: object,
        *,
        sqsum: torch.Tensor | None = None,
        batch_size: int = 1,
        layer: int = 0,
        generator: torch.Generator | None = None,
    ) -> Payload:
        """One worker's layer gradient ``grad`` (any shape, any float dtype) and its state
        (updated in place) to the payload it sends. ``sqsum``: per-element Σ_z (∇f_z)² over
        the worker's ``batch_size`` samples (when :attr:`needs_sqsum`); ``generator``: the
        seeded source of every random draw (qsgd)."""
        return self._compress(grad, state, LayerStep(layer, sqsum, batch_size, generator))

    def _compress(self, grad: torch.Tensor, state: Any, step: LayerStep) -> Payload:
        """The compressor's rule; :meth:`compress` is its public form."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


def check_grad(grad: torch.Tensor) -> torch.Tensor:
    """Flatten ``grad`` to a contiguous 1-D float32 tensor (the compressor input contract)."""
    import torch

    if grad.dtype == torch.float32 and grad.is_contiguous():
        return grad.detach().view(-1)
    return grad.detach().reshape(-1).to(torch.float32).contiguous()


def check_choice(kind: str, value: str, valid: tuple[str, ...]) -> None:
    """UnknownNameError naming the valid choices when ``value`` is not among them."""
    if value not in valid:
        raise unknown_name(kind, value, valid)
