"""Unit parsing at the config boundary: bits vs bytes, prefixes, times, sizes, FLOP/s."""

from __future__ import annotations

import pytest

from vgcsim.core.errors import UnitError, VgcsimError
from vgcsim.core.units import (
    format_bandwidth,
    format_time,
    parse_bandwidth_Bps,
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
