"""Unit parsing at the config boundary (bits vs bytes, prefixes, times, sizes, FLOP/s), each
refusal's line, and the readable forms the commands print."""

from __future__ import annotations

import pytest

from vgcsim.core.errors import UnitError, VgcsimError
from vgcsim.core.units import (
    format_bandwidth,
    format_bytes,
    format_time,
    parse_bandwidth_Bps,
    parse_burst_bytes,
    parse_flops,
    parse_size_bytes,
    parse_time_s,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10Gbps", 1.25e9),
        ("10 Gb/s", 1.25e9),
        ("10Gbit/s", 1.25e9),
        ("56Gbps", 7e9),
        ("1Gbps", 125e6),
        ("100Mbps", 12.5e6),
        ("12.5GB/s", 12.5e9),
        ("12.5GBps", 12.5e9),
        ("1GiB/s", 2.0**30),
        ("1Gibps", 2.0**30 / 8),
        ("3e3B/s", 3e3),
        (1.25e9, 1.25e9),
        ("1250", 1250.0),
    ],
)
def test_bandwidth_bits_and_bytes(text, expected):
    assert parse_bandwidth_Bps(text) == pytest.approx(expected, rel=1e-12)


def test_bits_and_bytes_differ_by_eight():
    assert parse_bandwidth_Bps("8Gb/s") * 8 == parse_bandwidth_Bps("8GB/s")


@pytest.mark.parametrize(
    "bad", ["10G", "10 gigabit", "fast", "-1Gbps", "0Gbps", "", "10Gbps/s", True]
)
def test_bandwidth_rejects(bad):
    with pytest.raises(UnitError):
        parse_bandwidth_Bps(bad)


def test_unit_error_is_user_error():
    assert issubclass(UnitError, VgcsimError)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5us", 5e-6),
        ("5µs", 5e-6),
        ("1.5ms", 1.5e-3),
        ("100ns", 1e-7),
        ("2s", 2.0),
        (0, 0.0),
        ("3e-6", 3e-6),
    ],
)
def test_time(text, expected):
    assert parse_time_s(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("bad", ["5", "5 parsecs", "-1us", "1us5"])
def test_time_rejects(bad):
    if bad == "5":  # a bare number is seconds
        assert parse_time_s(bad) == 5.0
        return
    with pytest.raises(UnitError):
        parse_time_s(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("64MiB", 64 * 2**20), ("1.5GB", 1.5e9), ("800Mb", 1e8), ("4 bytes", 4), ("1KiB", 1024)],
)
def test_size(text, expected):
    assert parse_size_bytes(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # "bits" spelled out is a bit, as "b" and "bit" are: an eighth of a byte each
        ("800 bits", 100.0),
        ("16kbits", 2e3),
        ("1 bits", 0.125),
        ("2Mibits", 2.0**21 / 8),
    ],
)
def test_sizes_spelled_in_bits_are_eighths_of_bytes(text, expected):
    assert parse_size_bytes(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10Gbits/s", 1.25e9), ("10 Gbitsps", 1.25e9), ("8 bits/s", 1.0), ("100Mbits/sec", 12.5e6)],
)
def test_bandwidths_spelled_in_bits_per_second_are_eighths_of_bytes(text, expected):
    assert parse_bandwidth_Bps(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"), [("15.7TFLOPS", 15.7e12), ("160 GFLOP/s", 160e9), (1e12, 1e12)]
)
def test_flops(text, expected):
    assert parse_flops(text) == pytest.approx(expected)


def test_flops_rejects_bytes():
    with pytest.raises(UnitError):
        parse_flops("15.7TB/s")


def test_format_round_trip_readable():
    assert format_bandwidth(1.25e9) == "10 Gb/s"
    assert format_time(5e-6) == "5 us"


@pytest.mark.parametrize(
    ("bytes_per_s", "text"),
    [
        (1.25e12, "10 Tb/s"),
        (1.25e11, "1 Tb/s"),  # exactly at a prefix: that prefix
        (1.2e11, "960 Gb/s"),
        (1.25e8, "1 Gb/s"),
        (1.25e5, "1 Mb/s"),
        (1.25e2, "1 kb/s"),
        (3e6, "24 Mb/s"),
        (100.0, "800 b/s"),
        (0.1, "0.8 b/s"),
    ],
)
def test_format_bandwidth_by_hand(bytes_per_s, text):
    assert format_bandwidth(bytes_per_s) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (1.0, "1 s"),  # exactly at a unit: that unit
        (2.5, "2.5 s"),
        (1e-3, "1 ms"),
        (0.25, "250 ms"),
        (1e-6, "1 us"),
        (3e-5, "30 us"),
        (1e-9, "1 ns"),
        (7.5e-7, "750 ns"),
        (5e-10, "500 ps"),
        (-2e-3, "-2 ms"),
    ],
)
def test_format_time_by_hand(seconds, text):
    assert format_time(seconds) == text


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [
        (2.0**40, "1 TiB"),  # exactly at a prefix: that prefix
        (3 * 2.0**40, "3 TiB"),
        (2.0**30, "1 GiB"),
        (1.5 * 2.0**30, "1.5 GiB"),
        (2.0**20, "1 MiB"),
        (97.5 * 2**20, "97.5 MiB"),
        (2.0**10, "1 KiB"),
        (2.0**10 - 1, "1023 B"),
        (3 * 2.0**10, "3 KiB"),
        (0, "0 B"),
        (-(2.0**20), "-1 MiB"),
    ],
)
def test_format_bytes_by_hand(n_bytes, text):
    assert format_bytes(n_bytes) == text


@pytest.mark.parametrize(
    ("parse", "value", "message"),
    [
        (
            parse_bandwidth_Bps,
            True,
            "bandwidth: expected a number or a string with units, got True",
        ),
        (parse_time_s, [1], "time: expected a number or a string with units, got [1]"),
        (parse_size_bytes, -1, "size: -1 must be a finite non-negative quantity"),
        (parse_flops, "0TFLOPS", "compute rate: '0TFLOPS' must be a finite positive quantity"),
        (parse_time_s, "-1ms", "time: '-1ms' must be a finite non-negative quantity"),
        (parse_bandwidth_Bps, 0, "bandwidth: 0 must be a finite positive quantity"),
        (parse_flops, "inf", "compute rate: 'inf' must be a finite positive quantity"),
        (
            parse_bandwidth_Bps,
            "fast",
            "bandwidth: cannot parse 'fast'; use e.g. '10Gbps' or '10Gb/s' (bits), '12.5GB/s' "
            "(bytes), '1GiB/s' (binary bytes), or a number in bytes/s",
        ),
        (
            parse_size_bytes,
            "x",
            "size: cannot parse 'x'; use e.g. '64MiB', '1.5GB', '800Mb' (bits) or bytes",
        ),
        (
            parse_flops,
            "fast",
            "compute rate: cannot parse 'fast'; use e.g. '15.7TFLOPS', '160 GFLOP/s' or FLOP/s",
        ),
        (
            parse_time_s,
            "x",
            "time: cannot parse 'x'; use e.g. '5us', '1.5ms', '100ns', '2s' or seconds",
        ),
    ],
)
def test_each_unit_refusal_is_its_one_line(parse, value, message):
    with pytest.raises(UnitError) as err:
        parse(value)
    assert str(err.value) == message


def test_sizes_and_times_may_be_zero_rates_may_not():
    assert parse_size_bytes(0) == 0.0 and parse_size_bytes("0MiB") == 0.0
    assert parse_time_s(0) == 0.0 and parse_time_s("0us") == 0.0
    for parse, zero in ((parse_bandwidth_Bps, "0Gbps"), (parse_flops, "0TFLOPS")):
        with pytest.raises(UnitError, match="must be a finite positive quantity"):
            parse(zero)


@pytest.mark.parametrize(
    ("text", "tc_bytes", "written"),
    [
        ("16kb", 16384, "'16384B' or '16KiB'"),
        ("256Kb", 262144, "'262144B' or '256KiB'"),
        (" 2mb", 2097152, "'2097152B' or '2MiB'"),
        ("1gb", 1073741824, "'1073741824B' or '1GiB'"),
        ("1500b", 1500, "'1500B' for"),
    ],
)
def test_a_burst_in_tcs_spelling_is_refused_with_tcs_reading(text, tc_bytes, written):
    """tc reads ``16kb`` as 16 KiB; a size here reads a lower-case b as bits: an 8x gap."""
    with pytest.raises(UnitError) as exc:
        parse_burst_bytes(text)
    message = str(exc.value)
    assert message.startswith(
        f"burst: {text.strip()!r} is ambiguous: tc reads it as {tc_bytes} bytes"
    )
    assert written in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16KiB", 16384.0),
        ("16384B", 16384.0),
        ("16kbit", 2000.0),
        ("64kB", 64000.0),
        (4096, 4096.0),
        ("0", 0.0),
    ],
)
def test_a_burst_spelled_without_ambiguity_is_a_size(text, expected):
    assert parse_burst_bytes(text) == expected == parse_size_bytes(text)
