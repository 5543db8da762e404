"""Human quantities parsed once, at the config boundary, into SI numbers.

Bandwidths become bytes per second, times seconds, sizes bytes, compute rates FLOP/s.
Bits and bytes are never confused: a lower-case ``b`` (or ``bit``) is a bit and an
upper-case ``B`` (or ``byte``) is a byte, so ``"10Gbps"`` and ``"10Gb/s"`` are 1e10 bits/s =
1.25e9 bytes/s while ``"12.5GB/s"`` is 1.25e10 bytes/s. Decimal prefixes (k, M, G, T, P) are
powers of 1000; binary prefixes (Ki, Mi, Gi, Ti, Pi) powers of 1024. A bare number is
already in SI units (bytes/s, seconds, bytes, FLOP/s).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from vgcsim.core.errors import UnitError

__all__ = [
    "format_bandwidth",
    "format_bytes",
    "format_time",
    "parse_bandwidth_Bps",
    "parse_burst_bytes",
    "parse_flops",
    "parse_size_bytes",
    "parse_time_s",
]

_PREFIXES: dict[str, float] = {
    "": 1.0,
    "k": 1e3,
    "K": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
}

_NUMBER = r"(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_PREFIX = r"(?P<prefix>Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P|)"

# bandwidth: <num><prefix><bit|byte unit><per second>
_BANDWIDTH_RE = re.compile(
    rf"^{_NUMBER}\s*{_PREFIX}(?P<unit>bit|bits|byte|bytes|b|B)\s*(?:ps|/s|/sec|/second)$"
)
_SIZE_RE = re.compile(rf"^{_NUMBER}\s*{_PREFIX}(?P<unit>bit|bits|byte|bytes|b|B)$")
_FLOPS_RE = re.compile(rf"^{_NUMBER}\s*{_PREFIX}(?:FLOPS|FLOP/s|flops|flop/s|FLOPs/s)$")
_TIME_RE = re.compile(
    rf"^{_NUMBER}\s*(?P<unit>ps|ns|us|µs|μs|ms|s|sec|min|h)$",
)
_TIME_UNITS = {
    "ps": 1e-12,
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "min": 60.0,
    "h": 3600.0,
}


def _number(value: object, what: str) -> float | None:
    """Return ``value`` as a float if it is a plain number (or numeric string), else None."""
    if isinstance(value, bool):
        raise UnitError(f"{what}: expected a number or a string with units, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    raise UnitError(f"{what}: expected a number or a string with units, got {value!r}")


def _check(value: float, what: str, text: object, *, allow_zero: bool) -> float:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = "non-negative" if allow_zero else "positive"
        raise UnitError(f"{what}: {text!r} must be a finite {bound} quantity")
    return value


def _is_bits(unit: str) -> bool:
    return unit in ("b", "bit", "bits")


def _parse(
    value: str | float | int,
    what: str,
    pattern: re.Pattern[str],
    to_si: Callable[[re.Match[str]], float],
    hint: str,
    *,
    allow_zero: bool,
) -> float:
    """The one parsing path: a bare number is already SI; a string must match ``pattern``
    and ``to_si`` turns the match into SI units; the result is checked finite and in range."""
    num = _number(value, what)
    if num is not None:
        return _check(num, what, value, allow_zero=allow_zero)
    text = str(value).strip()
    m = pattern.match(text)
    if not m:
        raise UnitError(f"{what}: cannot parse {text!r}; use e.g. {hint}")
    return _check(to_si(m), what, text, allow_zero=allow_zero)


def _prefixed(m: re.Match[str]) -> float:
    """Number × SI/binary prefix, divided by 8 when the unit is bits."""
    out = float(m["num"]) * _PREFIXES[m["prefix"]]
    return out / 8.0 if _is_bits(m["unit"]) else out


def parse_bandwidth_Bps(value: str | float | int) -> float:
    """Parse a bandwidth into bytes per second.

    ``"10Gbps"``, ``"10 Gb/s"``, ``"10Gbit/s"`` are bits per second (÷ 8); ``"12.5GB/s"``,
    ``"12.5GBps"`` are bytes per second; ``"1GiB/s"`` is 2**30 bytes per second. A bare
    number is bytes per second. Ambiguous strings such as ``"10G"`` are rejected.
    """
    hint = (
        "'10Gbps' or '10Gb/s' (bits), '12.5GB/s' (bytes), '1GiB/s' (binary bytes), "
        "or a number in bytes/s"
    )
    return _parse(value, "bandwidth", _BANDWIDTH_RE, _prefixed, hint, allow_zero=False)


def parse_time_s(value: str | float | int) -> float:
    """Parse a duration into seconds: ``"5us"``, ``"5µs"``, ``"1.5ms"``, ``"100ns"``, ``"2s"``.

    A bare number is seconds. Zero is allowed (e.g. a latency-free link in tests).
    """
    return _parse(
        value,
        "time",
        _TIME_RE,
        lambda m: float(m["num"]) * _TIME_UNITS[m["unit"]],
        "'5us', '1.5ms', '100ns', '2s' or seconds",
        allow_zero=True,
    )


def parse_size_bytes(value: str | float | int) -> float:
    """Parse a size into bytes: ``"64MiB"``, ``"1.5GB"``, ``"800Mb"`` (megabits ÷ 8).

    A bare number is bytes.
    """
    hint = "'64MiB', '1.5GB', '800Mb' (bits) or bytes"
    return _parse(value, "size", _SIZE_RE, _prefixed, hint, allow_zero=True)


#: A size as ``tc`` writes one with a bare ``b`` unit (``16kb``, ``2mb``, ``2000b``): tc's
#: prefixes are binary and read in either case.
_TC_BYTES_RE = re.compile(rf"^{_NUMBER}\s*(?P<prefix>[kKmMgG]?)b$")
_TC_PREFIXES = {"": 1.0, "k": 2.0**10, "m": 2.0**20, "g": 2.0**30}


def parse_burst_bytes(value: str | float | int) -> float:
    """Parse a token bucket's depth into bytes, as :func:`parse_size_bytes` does, refusing a
    size whose unit is a bare ``b`` (``"16kb"``, ``"256Kb"``, ``"2mb"``, ``"2000b"``).

    ``tc`` reads its sizes case-insensitively with ``b`` for bytes and ``k``, ``m``, ``g`` as
    1024, 1024² and 1024³, so the ``burst 16kb`` of a ``tc qdisc ... tbf`` line is 16384
    bytes, while a size of this project with a lower-case ``b`` is in bits (``"16kb"``: 2000
    bytes, eight times less). A bucket's depth copied from a shaper's configuration must not
    change meaning silently, so those spellings are refused with tc's reading; ``"16KiB"``,
    ``"16384B"``, ``"16kbit"`` and a bare number of bytes are not ambiguous.
    """
    text = value.strip() if isinstance(value, str) else ""
    m = _TC_BYTES_RE.match(text)
    if m:
        prefix = m["prefix"].lower()
        tc_bytes = float(m["num"]) * _TC_PREFIXES[prefix]
        binary = f" or '{m['num']}{prefix.upper()}iB'" if prefix else ""
        raise UnitError(
            f"burst: {text!r} is ambiguous: tc reads it as {tc_bytes:.10g} bytes, while a "
            f"lower-case b is a bit here; write '{tc_bytes:.10g}B'{binary} for tc's meaning"
        )
    return parse_size_bytes(value)


def parse_flops(value: str | float | int) -> float:
    """Parse a compute rate into FLOP/s: ``"15.7TFLOPS"``, ``"19.5 TFLOP/s"``, ``"160GFLOPS"``."""
    return _parse(
        value,
        "compute rate",
        _FLOPS_RE,
        lambda m: float(m["num"]) * _PREFIXES[m["prefix"]],
        "'15.7TFLOPS', '160 GFLOP/s' or FLOP/s",
        allow_zero=False,
    )


def format_bandwidth(bandwidth_Bps: float) -> str:
    """Format bytes/s as a human bit rate (network convention), e.g. ``"10 Gb/s"``."""
    bits = bandwidth_Bps * 8.0
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.4g} {prefix}b/s"
    return f"{bits:.4g} b/s"


def format_time(seconds: float) -> str:
    """Format seconds with a readable unit, e.g. ``"5 us"``."""
    if seconds == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-12:.4g} ps"


def format_bytes(n_bytes: float) -> str:
    """Format a byte count with binary prefixes, e.g. ``"97.5 MiB"``."""
    for prefix, scale in (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.4g} {prefix}B"
    return f"{n_bytes:.4g} B"
