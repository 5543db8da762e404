"""`vgcsim --help` (and the parsing every command does first) imports no plotting or table
library: matplotlib and pandas cost seconds of start-up on a small machine, paid by every
command before it does anything, so the commands import them where they use them."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("matplotlib", "pandas", "torch", "simpy", "distributed")


@pytest.mark.parametrize("argv", [["--help"], ["validate", "--help"], ["sweep", "--help"]])
def test_help_imports_no_heavy_library(argv):
    code = (
        "import sys\n"
        "from vgcsim import cli\n"
        "try:\n"
        f"    cli.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('imported:', ','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.rstrip().splitlines()[-1].strip() == "imported:"
