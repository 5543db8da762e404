"""`vgcsim calibrate --codec` on the CPU: measured device figures land in the cluster file's
[device] table, the rest of an existing file is kept, and the model reads them back."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from vgcsim.cli import main  # noqa: E402
from vgcsim.core.cluster import load_cluster  # noqa: E402
from vgcsim.core.errors import ConfigError  # noqa: E402
from vgcsim.traces.devicecost import stream_time_s  # noqa: E402
from vgcsim.traces.training.codec_calibrate import (  # noqa: E402
    measure_device,
    resolve_device,
    write_device_entry,
)


@pytest.fixture(scope="module")
def cal():
    return measure_device("cpu", size_bytes=2**20, repeats=3, warmup=1, launches=200)


def test_cpu_measurement_is_positive_and_consistent(cal):
    assert cal.device == "cpu" and cal.threads >= 1
    assert 1e7 < cal.memory_bandwidth_Bps < 1e13  # between 10 MB/s and 10 TB/s
    assert 0 < cal.launch_overhead_s < 1e-2
    # the check is the model's own formula on the measured figures
    assert cal.cast_predicted_s == pytest.approx(
        6 * (2**20 / 4) / cal.memory_bandwidth_Bps + cal.launch_overhead_s
    )


def test_device_entry_replaces_only_the_device(tmp_path, cal):
    f = tmp_path / "c.toml"
    f.write_text(
        'name = "mine"\ndevice = "V100"\ncompute = "trace"\n\n[topology]\nkind = "star"\n\n'
        '[link]\nbandwidth = "1Gbps"\nlatency = "20us"\n\n[device]\npreset = "A100"\n'
    )
    write_device_entry(f, cal, preset="cpu", name="box")
    c = load_cluster(f)
    assert c.name == "mine" and c.compute == "trace" and c.link.latency_s == pytest.approx(2e-5)
    assert c.device.name == "box" and c.device.peak_flops == 160e9
    assert c.device.sustained_memory_Bps == pytest.approx(cal.memory_bandwidth_Bps)
    assert stream_time_s(1e6, 3, c.device) == pytest.approx(
        1e6 / cal.memory_bandwidth_Bps + 3 * cal.launch_overhead_s
    )
    fresh = write_device_entry(tmp_path / "new.toml", cal, preset="cpu")
    assert load_cluster(fresh).link.name == "10GbE"


@pytest.mark.slow
def test_cli_codec_on_cpu_and_errors(tmp_path, capsys):
    out = tmp_path / "dev.toml"
    rc = main(["calibrate", "--codec", "--codec-device", "cpu", "--repeats", "2", "-o", str(out)])
    assert rc == 0 and "memory bandwidth" in capsys.readouterr().out
    assert load_cluster(out).device.launch_overhead_s > 0
    assert main(["calibrate", "--codec", "--codec-device", "tpu", "-o", str(out)]) == 2
    with pytest.raises(ConfigError):
        resolve_device("quantum")
