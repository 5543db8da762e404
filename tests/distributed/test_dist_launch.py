"""The local launcher: a failed rank stops the job and is reported with its own output."""

from __future__ import annotations

import pytest

from vgcsim.traces.training.distributed_launch import DistributedRunError, launch_local


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


def test_a_node_of_a_multi_node_job_numbers_its_ranks_and_names_the_interface(tmp_path):
    """Node 1 of 2 with 2 ranks each: ranks 2 and 3 of 4, GROUP_RANK 1, the given rendezvous
    and the socket interface for gloo and NCCL (the ranks only report their environment)."""
    script = tmp_path / "env.py"
    script.write_text(
        "import json, os, sys\n"
        "keys = ['RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'GROUP_RANK', 'MASTER_ADDR', 'MASTER_PORT',\n"
        "        'GLOO_SOCKET_IFNAME', 'NCCL_SOCKET_IFNAME']\n"
        "out = os.path.join(sys.argv[1], os.environ['RANK'] + '.json')\n"
        "json.dump({k: os.environ.get(k) for k in keys}, open(out, 'w'))\n"
    )
    launch_local(
        [str(script), str(tmp_path)],
        2,
        nnodes=2,
        node_rank=1,
        master_addr="10.9.8.7",
        master_port=29400,
        iface="eth1",
        timeout_s=60,
    )
    import json

    seen = {r: json.loads((tmp_path / f"{r}.json").read_text()) for r in (2, 3)}
    assert not (tmp_path / "0.json").exists()
    for rank, env in seen.items():
        assert env == {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank - 2),
            "WORLD_SIZE": "4",
            "GROUP_RANK": "1",
            "MASTER_ADDR": "10.9.8.7",
            "MASTER_PORT": "29400",
            "GLOO_SOCKET_IFNAME": "eth1",
            "NCCL_SOCKET_IFNAME": "eth1",
        }


def test_rank_env_reads_the_node_from_group_rank():
    from vgcsim.traces.training.distributed_launch import rank_env

    base = {"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}
    assert rank_env({**base, "GROUP_RANK": "1"}).node == "1"
    assert rank_env(base).node  # no GROUP_RANK: the host name
