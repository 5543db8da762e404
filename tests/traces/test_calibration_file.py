"""The calibration measurement file: sizes, round trip, and one-line refusals of bad files."""

from __future__ import annotations

import json
import os
import platform

import pytest

from vgcsim.core.errors import ConfigError, UnknownNameError
from vgcsim.core.provenance import cpu_model, machine_info
from vgcsim.traces.calibration import (
    CalibrateConfig,
    default_sizes_bytes,
    measured_seconds,
    parse_sizes,
    read_measurements,
    split_repeats,
    write_measurements,
)


def test_reading_a_foreign_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text('{"kind": "something-else"}')
    with pytest.raises(ConfigError, match="re-run the calibration"):
        read_measurements(bad)
    with pytest.raises(ConfigError, match="no calibration measurements"):
        read_measurements(tmp_path / "missing.json")


def test_measurements_that_are_not_utf8_are_a_config_error(tmp_path):
    p = tmp_path / "m.json"
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="unreadable calibration measurements"):
        read_measurements(p)


def test_size_ranges_are_log_spaced_and_inclusive():
    assert default_sizes_bytes()[0] == 4 and default_sizes_bytes()[-1] == 64 << 20
    # powers of 4 up to 1 MiB, then of 2: 4 B .. 1 MiB is 10 sizes, 2 MiB .. 64 MiB 6 more
    assert default_sizes_bytes() == (
        *(4**k for k in range(1, 11)),
        *(1 << k for k in range(21, 27)),
    )
    assert parse_sizes("256KiB:5MiB") == (
        (262144, 1048576, 2097152, 4194304, 5242880),
        (262144, 5242880),
    )
    sizes, bounds = parse_sizes("1KiB:10KiB")
    assert sizes == (1024, 4096, 10240) and bounds == (1024, 10240)
    assert parse_sizes("4,1KiB") == ((4, 1024), None)
    with pytest.raises(ConfigError, match="MIN <= MAX"):
        parse_sizes("1MiB:1KiB")
    with pytest.raises(ConfigError, match="bad --sizes"):
        parse_sizes("4:lots")


def _doc(**changes):
    doc = {
        "kind": "vgcsim-calibration",
        "version": 2,
        "backend": "gloo",
        "world_size": 4,
        "nodes": [0, 0, 1, 1],
        "rows": [
            {"op": "p2p", "size_bytes": 64, "seconds": [1e-5, 2e-5], "pair": [0, 2]},
            {"op": "allreduce", "size_bytes": 4096, "seconds": [3e-4]},
        ],
    }
    doc.update(changes)
    return doc


def _row(**changes):
    return _doc(rows=[{"op": "p2p", "size_bytes": 64, "seconds": [1e-5], **changes}])


def test_written_file_reads_back_with_its_config(tmp_path):
    cfg = CalibrateConfig(ops=("p2p", "allreduce"), sizes_bytes=(64, 4096), repeats=3)
    rows = _doc()["rows"]
    path = tmp_path / "sub" / "m.json"
    write_measurements(path, cfg, 4, rows, [0, 0, 1, 1])
    doc = read_measurements(path)
    assert doc["rows"] == rows and doc["nodes"] == [0, 0, 1, 1] and doc["world_size"] == 4
    assert doc["config"]["sizes_bytes"] == [64, 4096] and doc["config"]["repeats"] == 3
    assert not list(tmp_path.glob("sub/*.tmp"))  # written through a temporary file
    # the machine as a trace header names it (vgcsim.core.provenance), and the host's name
    machine = json.loads(path.read_text())["machine"]
    assert machine == {**machine_info(), "node": platform.node()}
    assert machine["cpus"] == os.cpu_count() and machine["cpu_model"] == cpu_model()


# Each case breaks one rule; the message names the field and the rule.
MALFORMED = [
    ("[]", "must be a JSON object, got list"),
    ("null", "must be a JSON object, got NoneType"),
    ('"text"', "must be a JSON object, got str"),
    ("{}", "is not a version-2 calibration file"),
    (json.dumps(_doc(version=3)), "is a version-3 calibration file, newer than this vgcsim reads"),
    (json.dumps(_doc(version=0)), "is not a version-2 calibration file"),
    (json.dumps(_doc(world_size="4")), "world_size: must be a whole number >= 2, got '4'"),
    (json.dumps(_doc(world_size=1, nodes=None)), "world_size: must be a whole number >= 2"),
    (json.dumps(_doc(world_size=True)), "world_size: must be a whole number >= 2"),
    (json.dumps(_doc(backend=5)), "backend: must be a string"),
    (json.dumps(_doc(nodes=[0, 1])), "nodes: must list one node index in 0..3 per rank (4)"),
    (json.dumps(_doc(nodes="0,0,1,1")), "nodes: must list one node index"),
    (json.dumps(_doc(rows=[])), "rows: must be a non-empty list of measurements"),
    (json.dumps(_doc(rows={"op": "p2p"})), "rows: must be a non-empty list"),
    (json.dumps(_doc(rows=[[1, 2]])), "rows[0]: must be an object, got list"),
    (json.dumps(_row(op="bcast")), "rows[0].op: must be one of p2p, p2p_intra,"),
    (json.dumps(_row(size_bytes=-1)), "rows[0].size_bytes: must be a whole number of bytes >= 1"),
    (json.dumps(_row(size_bytes=1.5)), "rows[0].size_bytes: must be a whole number"),
    (json.dumps(_row(size_bytes="64")), "rows[0].size_bytes: must be a whole number"),
    (json.dumps(_row(seconds=[])), "rows[0].seconds: must be a non-empty list of times"),
    (json.dumps(_row(seconds=1e-5)), "rows[0].seconds: must be a non-empty list"),
    (json.dumps(_row(seconds=[1e-5, float("nan")])), "positive finite number, got nan"),
    (json.dumps(_row(seconds=[float("inf")])), "positive finite number, got inf"),
    (json.dumps(_row(seconds=[0.0])), "positive finite number, got 0.0"),
    (json.dumps(_row(seconds=[-1e-5])), "positive finite number, got -1e-05"),
    (json.dumps(_row(seconds=["1e-5"])), "positive finite number, got '1e-5'"),
    (json.dumps(_row(seconds=[None])), "positive finite number, got None"),
    (json.dumps(_row(pair=[0, 0])), "rows[0].pair: must be two distinct ranks in 0..3"),
    (json.dumps(_row(pair=[0, 9])), "rows[0].pair: must be two distinct ranks"),
    (json.dumps(_row(pair="0-2")), "rows[0].pair: must be two distinct ranks"),
    ("[" * 100_000 + "]" * 100_000, "unreadable calibration measurements"),
    ('{"kind": ', "unreadable calibration measurements"),
]


@pytest.mark.parametrize("text, message", MALFORMED)
def test_a_malformed_file_is_one_config_error_naming_the_field(tmp_path, text, message):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        read_measurements(path)
    line = str(info.value)
    assert message in line and str(path) in line and "\n" not in line


def test_the_well_formed_reference_document_is_accepted(tmp_path):
    # The base of every malformed case above is valid: each case fails for its one change.
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_doc()))
    assert read_measurements(path)["world_size"] == 4
    path.write_text(json.dumps(_row()))
    assert read_measurements(path)["rows"][0]["seconds"] == [1e-5]
    # Version 1 had no node layout.
    path.write_text(json.dumps(_doc(version=1, nodes=None)))
    assert read_measurements(path)["version"] == 1


def test_a_folder_is_not_a_measurement_file(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        read_measurements(tmp_path)


def test_statistics_are_median_or_min_over_repetitions():
    row = {"op": "p2p", "size_bytes": 8, "seconds": [3.0, 1.0, 2.0, 10.0]}
    assert measured_seconds(row) == 2.5
    assert measured_seconds(row, "min") == 1.0
    with pytest.raises(UnknownNameError, match="unknown statistic 'mean'; valid: median, min"):
        measured_seconds(row, "mean")


def test_repeats_are_shared_out_over_the_passes_as_evenly_as_can_be():
    # Worked by hand: the first passes take the remainder, one each; never a negative share.
    assert split_repeats(10, 3) == [4, 3, 3]
    assert split_repeats(9, 3) == [3, 3, 3]
    assert split_repeats(2, 3) == [1, 1, 0]
    assert split_repeats(3, 1) == [3]
    assert split_repeats(15, 4) == [4, 4, 4, 3]
    for repeats in range(1, 30):
        for passes in range(1, 8):
            shares = split_repeats(repeats, passes)
            assert sum(shares) == repeats and len(shares) == passes
            assert max(shares) - min(shares) <= 1 and shares == sorted(shares, reverse=True)


@pytest.mark.parametrize("passes", [0, -1, 1.5, True, "3"])
def test_passes_must_be_a_whole_number_of_one_or_more(passes):
    with pytest.raises(ConfigError, match="passes must be a whole number >= 1"):
        CalibrateConfig(passes=passes)


@pytest.mark.parametrize("busy", [-0.001, 10.5, float("nan"), float("inf"), True, "8ms"])
def test_busy_before_must_be_seconds_in_0_to_10(busy):
    with pytest.raises(ConfigError, match=r"busy_before_s must be in \[0, 10\] seconds"):
        CalibrateConfig(busy_before_s=busy)


@pytest.mark.parametrize("busy", [0, 0.0, 0.008, 10])
def test_busy_before_takes_0_to_10_seconds(busy):
    assert CalibrateConfig(busy_before_s=busy).busy_before_s == busy


def test_busy_spends_the_cpu_seconds_it_is_given_and_one_operation_per_repetition():
    import time

    from vgcsim.traces.training.distributed_calibrate import (
        _ops_per_repetition,
        back_to_back,
        busy,
    )

    t0 = time.thread_time()
    busy(0.03)
    assert time.thread_time() - t0 >= 0.03
    for size in (4, 64, 4096, 1 << 20):
        assert _ops_per_repetition(size, 0.0) == back_to_back(size)
        assert _ops_per_repetition(size, 0.005) == 1
    assert back_to_back(4) == 16  # back to back, small messages average 16 operations


def test_a_file_written_before_passes_existed_reads_with_its_config(tmp_path):
    cfg = CalibrateConfig(ops=("p2p",), sizes_bytes=(64,), repeats=3, passes=2)
    path = tmp_path / "m.json"
    write_measurements(path, cfg, 4, _doc()["rows"], [0, 0, 1, 1])
    doc = json.loads(path.read_text())
    assert doc["config"]["passes"] == 2
    del doc["config"]["passes"]
    path.write_text(json.dumps(doc))
    assert "passes" not in read_measurements(path)["config"]
