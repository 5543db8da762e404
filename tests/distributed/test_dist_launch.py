"""The local launcher: a failed rank stops the job and is reported with its own output."""

from __future__ import annotations

import pytest

from traces.training.distributed_launch import DistributedRunError, launch_local


def test_failed_rank_is_reported_with_its_output(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(
        "import os, sys, time\n"
        "print('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
        "if os.environ['RANK'] == '1':\n"
        "    sys.exit(3)\n"
        "time.sleep(30)\n"  # rank 0 would hang: the launcher must stop it
    )
    with pytest.raises(DistributedRunError, match=r"rank 1 exited with status 3[\s\S]*rank 1 of 2"):
        launch_local([str(script)], 2, timeout_s=20)


def test_a_hung_job_times_out(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\ntime.sleep(30)\n")
    with pytest.raises(DistributedRunError, match="timed out after 1 s"):
        launch_local([str(script)], 2, timeout_s=1)
