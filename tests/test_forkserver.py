"""The sweep's fork server in a process forked from one that runs it (real processes)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from vgcsim.forkserver import start_fork_server

pytestmark = pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods(), reason="no fork server here"
)


def _square(x: int) -> int:
    return x * x


def _in_child() -> int:
    """What a forked child does: start the fork server and run a job on a worker from it."""
    try:
        assert start_fork_server(())
        with multiprocessing.get_context("forkserver").Pool(1) as pool:
            assert pool.map(_square, [3]) == [9]
        return 0
    except BaseException as exc:  # reported through the exit status
        os.write(2, f"child: {type(exc).__name__}: {exc}\n".encode())
        return 1


def test_a_process_forked_after_the_fork_server_started_can_start_its_own():
    """multiprocessing waits for its fork server as a child process to see that it is alive;
    a process forked after the server started is not its parent (ChildProcessError from
    ``ensure_running`` before vgcsim forgot the inherited server in the child). The child
    starts a server of its own and runs a job on it; the parent's server keeps serving."""
    assert start_fork_server(())
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        os._exit(_in_child())
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # the parent's own server is untouched by the child's closing its copy of the handle
    with multiprocessing.get_context("forkserver").Pool(1) as pool:
        assert pool.map(_square, [4]) == [16]
