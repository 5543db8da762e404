"""How the ``vgcsim`` program ends (``vgcsim.cli.entry``): the command's exit code, every
``atexit`` handler and non-daemon thread, stdout complete through a pipe, and no
interpreter teardown (which took 0.2-0.4 s once pandas and Dask were loaded)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vgcsim.core.results import read_results

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "tests" / "data" / "sample_trace")

# A program that runs ``entry()`` as the console script does, with an atexit handler, a
# non-daemon thread that finishes after ``main`` returned and an object whose finalizer runs
# only in the interpreter's teardown, each leaving a file behind, and an idle thread pool.
PROGRAM = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from pathlib import Path

    out = Path(sys.argv[1])

    def at_exit():
        (out / "atexit").write_text("ran")
        print("printed at exit")  # stdout still buffered here: the final flush must send it

    atexit.register(at_exit)

    def late():
        time.sleep(0.3)
        (out / "thread").write_text("ran")

    class Teardown:
        def __del__(self):
            (out / "teardown").write_text("ran")

    keep = Teardown()
    # a thread pool never shut down: its idle worker must be stopped, not waited for forever
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(1)
    pool.submit(int).result()
    sys.argv = ["vgcsim", *sys.argv[2:]]
    import vgcsim.cli

    command = vgcsim.cli.main

    def main_then_a_thread():
        code = command()
        threading.Thread(target=late).start()  # still running when entry() goes to exit
        return code

    vgcsim.cli.main = main_then_a_thread
    vgcsim.cli.entry()
    """
)


#: stdout buffered, as it is for a user (unless PYTHONUNBUFFERED is set, as it may be here).
BUFFERED = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _run(tmp_path: Path, *argv: str, program: str = PROGRAM) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", program, str(tmp_path), *argv],
        capture_output=True,
        cwd=ROOT,
        env=BUFFERED,
        timeout=120,  # a wait for the idle pool's thread would never end
    )


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["predict", SAMPLE, "--cluster", "10GbE", "--world-sizes", "2,8"], 0),
        (["trace", "validate", "no/such/trace"], 2),
    ],
)
def test_entry_keeps_the_exit_code_atexit_handlers_and_threads(tmp_path, argv, code):
    if code == 0:
        argv = [*argv, "-o", str(tmp_path / "out")]
    done = _run(tmp_path, *argv)
    assert done.returncode == code, done.stderr.decode()
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "ran"  # waited for, as Python's exit does
    assert done.stdout.decode().endswith("printed at exit\n")
    # the teardown, and only it, is skipped: a plain interpreter exit runs this finalizer
    assert not (tmp_path / "teardown").exists()
    if code == 0:
        assert done.stdout.startswith(b"local times") and len(read_results(tmp_path / "out")[0])
    else:
        assert done.stderr.decode().count("\n") == 1 and "error" in done.stderr.decode()


def test_the_finalizer_of_the_program_runs_without_entry(tmp_path):
    """The check above can fail: without ``entry`` the same finalizer does run."""
    program = PROGRAM.replace("vgcsim.cli.entry()", "vgcsim.cli.main()")
    done = _run(tmp_path, "--version", program=program)
    assert done.returncode == 0
    assert (tmp_path / "teardown").read_text() == "ran"


@pytest.mark.slow
def test_stdout_is_complete_through_a_pipe(tmp_path):
    """All of an output larger than a pipe's buffer reaches the reader, its last line too
    (what is left in stdout's buffer is flushed before the process ends)."""
    argv = [sys.executable, "-m", "vgcsim", "predict", SAMPLE, "--cluster", "10GbE"]
    argv += ["--world-sizes", "1:300:+1", "-o", str(tmp_path / "p")]
    done = subprocess.run(argv, capture_output=True, cwd=ROOT, env=BUFFERED, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    rows = len(read_results(tmp_path / "p")[0])
    printed = done.stdout.decode().splitlines()
    assert len(done.stdout) > 65536 and rows == 1200
    # a title, the column names, one line a row, the verdict, the summary
    assert len(printed) == rows + 4 and printed[-2].startswith("verdict: ")
    assert printed[-1] == f"wrote {rows} rows to {tmp_path / 'p'}"
