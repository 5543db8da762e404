"""The CPU model a recording or a calibration names (``vgcsim.core.provenance.cpu_model``)."""

from __future__ import annotations

import platform

from vgcsim.core.provenance import cpu_model, machine_info


def test_the_cpu_model_is_the_first_model_name_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC 9R14 96-Core Processor\nflags\t\t: fpu avx512f\n\n"
        "processor\t: 1\nmodel name\t: another\n"
    )
    assert cpu_model(info) == "AMD EPYC 9R14 96-Core Processor"  # not "model", not the 2nd


def test_without_a_model_name_the_platform_says_what_it_can(tmp_path):
    fallback = platform.processor() or platform.machine()
    arm = tmp_path / "cpuinfo"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\nmodel name\t:\n")
    assert cpu_model(arm) == fallback  # an empty model name is no name
    assert cpu_model(tmp_path / "missing") == fallback


def test_machine_info_names_the_cpu_model_beside_the_architecture():
    info = machine_info(torch_threads=1)
    assert info["cpu_model"] == cpu_model() and info["cpu_model"]
    assert info["torch_threads"] == 1 and info["cpus"] >= 1
