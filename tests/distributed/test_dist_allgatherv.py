"""The real allgatherv over gloo on loopback: sizes exchanged, padding removed, empties survive."""

from __future__ import annotations

from pathlib import Path

import pytest

from traces.training.distributed_launch import DistributedRunError, launch_local

HERE = Path(__file__).parent

pytestmark = pytest.mark.distributed


def test_three_ranks_receive_every_segment_intact():
    launch_local([str(HERE / "_allgatherv_worker.py")], 3, timeout_s=60)


def test_failed_rank_is_reported_with_its_output(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(
        "import os, sys\n"
        "print('rank', os.environ['RANK'])\n"
        "sys.exit(3 if os.environ['RANK'] == '1' else 0)\n"
    )
    with pytest.raises(DistributedRunError, match=r"rank 1 exited with status 3[\s\S]*rank 1"):
        launch_local([str(script)], 2, timeout_s=30)
