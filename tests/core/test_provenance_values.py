"""vgcsim.core.provenance by value: ``cpu_model`` reads this machine's ``/proc/cpuinfo`` by
default, as UTF-8 whatever the locale, replaces bytes that are not UTF-8, keeps colons inside
the model name; ``machine_info`` names its four fields as documented (checked against
independent reads of the same sources)."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from tests.conftest import ascii_locale
from vgcsim.core.provenance import cpu_model, machine_info

CPUINFO = Path("/proc/cpuinfo")


def _fallback() -> str:
    return platform.processor() or platform.machine()


def _model_name_of(raw: bytes) -> str | None:
    """The first non-empty ``model name`` value, read independently of vgcsim."""
    text = raw.decode("utf-8", errors="replace")
    for match in re.finditer(r"^model name[ \t]*:(.*)$", text, flags=re.MULTILINE):
        if match.group(1).strip():
            return match.group(1).strip()
    return None


def test_by_default_the_cpu_model_is_read_from_proc_cpuinfo():
    try:
        raw = CPUINFO.read_bytes()
    except OSError:
        raw = b""
    expected = _model_name_of(raw) or _fallback()
    assert cpu_model() == expected


def test_a_model_name_holding_a_colon_is_kept_whole(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Vendor: Model 9 @ 2.00GHz\n", "utf-8")
    assert cpu_model(info) == "Vendor: Model 9 @ 2.00GHz"


def test_bytes_that_are_not_utf8_are_replaced_not_fatal(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_bytes(
        b"processor\t: 0\nvendor_id\t: \xff\xfeGenuine\nmodel name\t: Intel(R) \xe9 CPU\n"
    )
    assert cpu_model(info) == "Intel(R) \ufffd CPU"


def test_the_cpu_model_is_read_as_utf8_whatever_the_locale(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Intel® Core™ i7 — 2 GHz\n", "utf-8")
    with ascii_locale():
        assert cpu_model(info) == "Intel® Core™ i7 — 2 GHz"


def test_machine_info_names_platform_processor_cpu_model_and_count():
    info = machine_info()
    assert set(info) == {"platform", "processor", "cpu_model", "cpus"}
    assert info["platform"] == platform.platform()
    assert info["processor"] == _fallback()
    assert info["cpus"] == os.cpu_count()
    assert machine_info(torch_threads=4) == {**info, "torch_threads": 4}
