"""What this machine can hold (``vgcsim.core.memory``): read in a real child process under a
real address-space limit (``ulimit -v``), against ``/proc`` read independently."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vgcsim.core import memory
from vgcsim.core.errors import ConfigError

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc and RLIMIT_AS (Linux)"
)

# The child sets its soft RLIMIT_AS to the address space it maps now plus ROOM, then reports
# what the module says and its own VmSize read right after.
CHILD = r"""
import json, resource, sys
room = int(sys.argv[1])
from vgcsim.core import memory
def vm_bytes():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmSize:"))
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + room, hard))
limit = resource.getrlimit(resource.RLIMIT_AS)[0]
left = memory._address_space_left_bytes()
have = memory.available_memory_bytes()
after = vm_bytes()
try:
    memory.check_fits(1, "x", "y")
    refused = None
except Exception as e:
    refused = type(e).__name__
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))  # room again for the output
print(json.dumps({"limit": limit, "left": left, "have": have, "vm_after": after, "refused": refused}))
"""


def run_child(room_bytes: int, cwd) -> dict:
    # cwd: a folder of its own, as `python -c` puts the working directory first on sys.path.
    # Under mutmut's first pass (MUTANT_UNDER_TEST=stats) every mutated function records who
    # called it, which reads mutmut's setup.cfg from the working directory; the child's
    # records would be lost with it anyway, so there it runs the functions as they are.
    env = dict(os.environ)
    if env.get("MUTANT_UNDER_TEST") == "stats":
        env["MUTANT_UNDER_TEST"] = ""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(room_bytes)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def meminfo_available_bytes() -> int:
    with open("/proc/meminfo") as fh:
        return next(int(r.split()[1]) * 1024 for r in fh if r.startswith("MemAvailable:"))


def test_without_an_address_space_limit_the_room_is_unbounded_and_memavailable_counts():
    import resource

    if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        pytest.skip("this process runs under an address-space limit")
    assert memory._address_space_left_bytes() is None
    have = memory.available_memory_bytes()
    # MemAvailable moves while the test runs: within 1 % of a read made just after (the
    # physical memory, the fallback, is a few % above it on a machine in use)
    assert have == pytest.approx(meminfo_available_bytes(), rel=0.01)
    assert memory._os_available_bytes() == pytest.approx(meminfo_available_bytes(), rel=0.01)


# rooms wide enough for what the module imports after the limit is set (a mutation run's
# trampolines import more than the product does)
@pytest.mark.parametrize("room_mib", [256, 1024])
def test_under_ulimit_v_the_room_left_is_the_limit_minus_the_mapped_address_space(
    room_mib, tmp_path
):
    got = run_child(room_mib * 2**20, tmp_path)
    # limit − VmSize, read by the module between setting the limit and the child's last read
    assert got["limit"] - got["vm_after"] <= got["left"] <= room_mib * 2**20
    assert got["left"] > 0.9 * room_mib * 2**20
    # the limit is far below this machine's MemAvailable, so it is what the module reports
    assert got["have"] == got["left"]
    assert got["refused"] is None


def test_a_mapped_space_beyond_the_limit_leaves_no_room_not_a_negative_one(tmp_path):
    """VmSize above the soft limit (a limit lowered after mapping) leaves 0 bytes, and a
    trace that needs one byte is refused."""
    got = run_child(-(2**20), tmp_path)
    assert got["left"] == 0 and got["have"] == 0
    assert got["refused"] == "ConfigError"


def test_check_fits_names_the_estimate_and_the_memory_available(monkeypatch):
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 3 * 2**30)
    memory.check_fits(3 * 2**30, "a trace", "use fewer steps")  # exactly fits
    with pytest.raises(
        ConfigError,
        match=r"a trace needs about 4\.0 GiB .* than the 3\.0 GiB "
        r"available; use fewer steps",
    ):
        memory.check_fits(4 * 2**30, "a trace", "use fewer steps")
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: None)
    memory.check_fits(2**60, "a trace", "use fewer steps")  # the OS does not say: no refusal


# -- the same readings in this process: the parsers on this machine's own /proc texts --------


def read(path: str) -> str:
    with open(path, encoding="ascii") as fh:
        return fh.read()


def vm_size_bytes(status_text: str) -> int:
    line = next(r for r in status_text.splitlines() if r.startswith("VmSize:"))
    return int(line.split()[1]) * 1024


def test_room_below_a_limit_from_a_real_status_text_by_hand():
    text = read("/proc/self/status")
    vm = vm_size_bytes(text)
    assert memory._room_below(vm + 5 * 2**20, text) == 5 * 2**20
    assert memory._room_below(vm, text) == 0
    assert memory._room_below(vm - 1, text) == 0  # mapped beyond the limit: no room, not < 0
    assert memory._room_below(vm + 1, "Name:\tpython\nVmPeak:\t 1 kB\n") is None


def test_mem_available_from_a_real_meminfo_text_by_hand():
    text = read("/proc/meminfo")
    line = next(r for r in text.splitlines() if r.startswith("MemAvailable:"))
    kib = int(line.split()[1])
    assert memory._proc_field_bytes(text, "MemAvailable") == kib * 1024
    assert memory._proc_field_bytes("MemTotal:  100 kB\nMemFree:  50 kB\n", "MemAvailable") is None
    assert memory._proc_field_bytes("MemAvailable:     7 kB\n", "MemAvailable") == 7 * 1024


def test_without_meminfo_the_physical_memory_counts(tmp_path):
    total_kib = int(read("/proc/meminfo").split("MemTotal:")[1].split()[0])
    phys = memory._os_available_bytes(str(tmp_path / "no-such-file"))
    # the kernel's page count is MemTotal's: the same bytes, within a page per MiB
    assert phys == pytest.approx(total_kib * 1024, rel=1e-3)
    no_line = tmp_path / "meminfo"
    no_line.write_text("MemTotal:  100 kB\n")
    assert memory._os_available_bytes(str(no_line)) == phys


def test_available_memory_is_the_smaller_of_memavailable_and_the_room_under_the_limit():
    """Under a soft RLIMIT_AS set in this process for the calls (and restored at once): the
    room left under it where that is smaller, MemAvailable where the limit is far above."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        pytest.skip("this process runs under an address-space limit")
    vm = vm_size_bytes(read("/proc/self/status"))
    room = 1 << 30  # 1 GiB of room: far below MemAvailable on the machines tests run on
    try:
        resource.setrlimit(resource.RLIMIT_AS, (vm + room, hard))
        have = memory.available_memory_bytes()
        left = memory._address_space_left_bytes()
        os_have = memory._os_available_bytes()
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 50), hard))  # 1 PiB of room
        have_far = memory.available_memory_bytes()
        os_far = memory._os_available_bytes()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    assert 0.9 * room < left <= room
    assert os_have > room
    # the two reads are microseconds apart: the mapped space may move by a few pages
    assert have == pytest.approx(left, rel=1e-3)
    assert have_far == pytest.approx(os_far, rel=0.05)
