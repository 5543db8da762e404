"""Running a sweep's jobs (vgcsim.sweep_runners): a process pool, a Dask LocalCluster or a
user's Dask cluster, one table out in job order, and ``vgcsim sweep``."""

from __future__ import annotations

import pandas as pd
import pytest

from vgcsim.cli import main
from vgcsim.core.errors import ConfigError
from vgcsim.core.results import read_results
from vgcsim.simulator.replay import SimulateConfig
from vgcsim.simulator.sweep import SweepConfig, SweepFile, expand_factors, load_sweep
from vgcsim.sweep_runners import run_sweep
from vgcsim.traces.synth import SynthConfig, synth_trace


@pytest.fixture(scope="module")
def traces(sweep_traces):
    return sweep_traces


def test_run_sweep_returns_one_table(traces):
    sweep = SweepFile(
        SweepConfig(traces=tuple(traces), world_sizes=(2, 4), latencies=("1us", "100us")),
        SimulateConfig(max_steps=2),
    )
    table, jobs = run_sweep(sweep, processes=1, scheduler="processes")
    assert len(jobs) == 8 and len(table) == 8 * 4  # dense fp32/bf16/fp16 + compressed
    slow = table[table["cluster"].str.contains("100 us")]
    quick = table[table["cluster"].str.contains("1 us")]
    assert slow["step_s"].sum() > quick["step_s"].sum()


def test_cli_sweep_on_a_process_pool(traces, tmp_path):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(
        f'[sweep]\ntraces = {traces!r}\ncluster = "10GbE"\nworld_sizes = [2, 3]\n'
        'bandwidths = ["1Gbps", "10Gbps"]\n\n[simulate]\nmax_steps = 2\n'.replace("'", '"')
    )
    assert load_sweep(cfg).simulate.max_steps == 2
    out = tmp_path / "out"
    assert (
        main(["sweep", str(cfg), "-o", str(out), "--processes", "2", "--scheduler", "processes"])
        == 0
    )
    df, header = read_results(out)
    assert len(df) == 2 * 2 * 2 * 4  # traces x P x bandwidths x (3 dense + compressed)
    # the header's summary: the factor values covered, each sorted (clusters as the rows name them)
    assert header["options"]["summary"] == {
        "jobs": 8,
        "traces": sorted(traces),
        "clusters": sorted(df["cluster"].unique()),
        "world_sizes": [2, 3],
    }
    assert len(header["options"]["summary"]["clusters"]) == 2  # one per bandwidth
    assert main(["sweep", str(cfg), "-o", str(out), "--set", "sweep.colour=red"]) == 2
    assert main(["sweep", str(cfg), "-o", str(out), "--scheduler", "yarn"]) == 2


def test_cli_sweep_progress_lines_off_a_terminal_and_none_when_quiet(
    traces, tmp_path, capfd, monkeypatch
):
    # stderr is not a terminal here: a line per finished job at VGCSIM_PROGRESS_S = 0, the
    # last at 100 %; --quiet: none
    monkeypatch.setenv("VGCSIM_PROGRESS_S", "0")
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(
        f'[sweep]\ntraces = ["{traces[0]}"]\nworld_sizes = [2, 3]\n\n[simulate]\nmax_steps = 1\n'
    )
    argv = ["sweep", str(cfg), "--processes", "1", "--scheduler", "processes"]
    assert main([*argv, "-o", str(tmp_path / "a")]) == 0
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("sweep:")]
    assert lines and lines[-1].startswith("sweep: 2/2 jobs (100 %)")
    assert main([*argv, "-q", "-o", str(tmp_path / "b")]) == 0
    assert not [x for x in capfd.readouterr().err.splitlines() if x.startswith("sweep:")]


def _two_factor_sweep(traces) -> SweepFile:
    return SweepFile(
        SweepConfig(
            traces=tuple(traces),
            world_sizes=(2, 3, 5),
            bandwidths=("1Gbps", "10Gbps"),
            topologies=({"kind": "star"}, {"kind": "ring"}),
        ),
        SimulateConfig(max_steps=2),
    )


@pytest.mark.slow
def test_dask_local_cluster_rows_equal_the_process_pool(traces):
    """A real LocalCluster of two single-threaded worker processes gives the pool's rows."""
    from distributed import LocalCluster

    sweep = _two_factor_sweep(traces)
    pool, jobs = run_sweep(sweep, processes=2, scheduler="processes")
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        done: list[int] = []
        dask, dask_jobs = run_sweep(
            sweep, scheduler=cluster.scheduler_address, progress=done.append
        )
    assert dask_jobs == jobs and len(done) == len(jobs) == 2 * 3 * 2 * 2
    assert done == [1] * len(jobs)  # the progress bar advances one job at a time
    assert len(dask) == len(jobs) * 4
    pd.testing.assert_frame_equal(dask, pool)
    # Cases differ, so equal tables mean each job's rows landed in the job's place.
    assert dask["step_s"].nunique() >= len(jobs)
    keys = list(dict.fromkeys(zip(dask["cluster"], dask["world_size"], strict=True)))
    assert keys == list(dict.fromkeys((j.cluster.name, j.world_size) for j in jobs))


@pytest.mark.slow
def test_cli_scheduler_local_writes_the_process_pools_rows(traces, tmp_path, capfd):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(
        f'[sweep]\ntraces = ["{traces[0]}"]\nworld_sizes = [2, 4]\n\n[simulate]\nmax_steps = 1\n'
    )
    run = ["sweep", str(cfg), "--processes", "2"]
    assert main([*run, "-o", str(tmp_path / "pool"), "--scheduler", "processes"]) == 0
    capfd.readouterr()
    # -q: no progress lines (a slow machine prints one every few seconds), so that what
    # stderr holds is only what must not be there
    assert main([*run, "-o", str(tmp_path / "dask"), "--scheduler", "local", "-q"]) == 0
    # Nothing of the cluster's start or teardown (warnings, tracebacks) on the user's stderr,
    # worker processes included (capfd reads the file descriptor they inherit).
    assert capfd.readouterr().err == ""
    (pool, _), (dask, header) = read_results(tmp_path / "pool"), read_results(tmp_path / "dask")
    pd.testing.assert_frame_equal(dask, pool)
    assert header["options"]["sweep"]["scheduler"] == "local"


@pytest.mark.slow
@pytest.mark.timeout(120)  # Dask's own connect timeout, set to 10 min below, must not apply
def test_unreachable_scheduler_is_one_line_and_exit_2(traces, tmp_path, capsys):
    import socket

    import dask
    import distributed  # noqa: F401  (its defaults loaded first: set() restores to them)

    with (
        socket.socket() as s,
        dask.config.set({"distributed.comm.timeouts.connect": "600s"}),
    ):  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        sweep = SweepFile(SweepConfig(traces=tuple(traces[:1])), SimulateConfig(max_steps=1))
        with pytest.raises(ConfigError) as info:
            run_sweep(sweep, scheduler=f"tcp://127.0.0.1:{port}", connect_timeout_s=1.0)
        assert str(info.value) == (
            f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port} within 1 s "
            "(OSError): is it running, and is the address right?"
        )
        cfg = tmp_path / "sweep.toml"
        cfg.write_text(f'[sweep]\ntraces = ["{traces[0]}"]\n\n[simulate]\nmax_steps = 1\n')
        args = [
            "sweep",
            str(cfg),
            "-o",
            str(tmp_path / "o"),
            "--scheduler",
            f"tcp://127.0.0.1:{port}",
        ]
        # the file's timeout, set on the command line, reaches the client
        settings = ["--set", "sweep.processes=1", "--set", "sweep.connect_timeout_s=0.5"]
        assert main([*args, *settings]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "cannot reach the Dask scheduler" in err[0] and "within 0.5 s" in err[0]
    )
    assert not (tmp_path / "o").exists()


def test_jobs_start_largest_world_size_first_and_rows_keep_job_order(traces):
    from vgcsim.sweep_runners import _cost_order

    jobs = expand_factors(SweepConfig(traces=tuple(traces), world_sizes=(2, 8, 4)))
    order = _cost_order(jobs)
    assert sorted(order) == list(range(len(jobs)))
    sizes = [jobs[i].world_size for i in order]
    assert sizes == sorted(sizes, reverse=True)
    # Equal sizes keep job order (trace-major), so equal inputs give one schedule.
    assert [i for i in order if jobs[i].world_size == 8] == [1, 4]
    sweep = SweepFile(SweepConfig(traces=tuple(traces[:1]), world_sizes=(2, 8, 4)))
    table, _ = run_sweep(sweep, processes=2, scheduler="processes")
    assert list(dict.fromkeys(table["world_size"])) == [2, 8, 4]


def _nanny_log_level() -> int:
    import logging

    return logging.getLogger("distributed.nanny").level


def test_local_cluster_workers_are_forked_and_set_up_for_sweep_jobs():
    """The workers come from the fork server (not this process) with the sweep settings:
    one thread each (with one worker, Dask's default would give it every CPU), their logs at
    WARNING (Dask sets the level in each worker process) and no dashboard."""
    import logging
    import multiprocessing
    import os

    import dask
    from distributed import Client

    from vgcsim.sweep_runners import LOCAL_DASK_CONFIG, local_cluster

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork server on this platform")
    keys = sorted(LOCAL_DASK_CONFIG)
    with local_cluster(1) as cluster, Client(cluster) as client:
        (ppid,) = client.run(os.getppid).values()
        (settings,) = client.run(lambda: [dask.config.get(k) for k in keys]).values()
        threads = list(client.nthreads().values())
        levels = list(client.run(_nanny_log_level).values())
        dashboard = cluster.scheduler_spec["options"]["dashboard_address"]
    assert ppid != os.getpid()
    assert settings == [LOCAL_DASK_CONFIG[k] for k in keys]
    assert threads == [1] and levels == [logging.WARNING] and dashboard is None


def test_task_chunks_cover_the_order_once_largest_first_and_end_in_single_jobs():
    from vgcsim.sweep_runners import _task_chunks

    order = list(range(100, 36, -1))  # 64 job indices in cost order
    chunks = _task_chunks(order, 2)
    assert [i for c in chunks for i in c] == order  # every job once, order kept
    sizes = [len(c) for c in chunks]
    assert sizes == sorted(sizes, reverse=True)  # long tasks first, short ones last
    assert sizes[0] == 8 and sizes[-8:] == [1] * 8  # ceil(64 / (4 * 2)) first; single jobs last
    assert len(chunks) == 21
    assert _task_chunks([3], 4) == [[3]] and _task_chunks([], 2) == []
    assert [len(c) for c in _task_chunks(list(range(10)), 8)] == [1] * 10


def test_run_jobs_gives_each_jobs_run_job_rows_in_order(traces):
    from vgcsim.simulator.sweep import run_job
    from vgcsim.sweep_runners import run_jobs

    sim = SimulateConfig(max_steps=2)
    jobs = expand_factors(SweepConfig(traces=tuple(traces), world_sizes=(4, 2)))
    table, counts = run_jobs(jobs, sim)
    alone = [run_job(job, sim) for job in jobs]
    assert counts == [len(f) for f in alone] and sum(counts) == len(table)
    pd.testing.assert_frame_equal(table, pd.concat(alone, ignore_index=True))


def test_heartbeat_error_at_close_is_dropped_and_nothing_else():
    import logging
    import sys

    from distributed.comm import CommClosedError

    from vgcsim.sweep_runners import _HeartbeatAtCloseFilter

    def record(message, exc):
        try:
            raise exc
        except type(exc):
            info = sys.exc_info()
        return logging.LogRecord("distributed.worker", logging.ERROR, "w.py", 1, message, (), info)

    keep = _HeartbeatAtCloseFilter().filter
    heartbeat = "Failed to communicate with scheduler during heartbeat."
    assert not keep(record(heartbeat, CommClosedError("in <TCP>: Stream is closed")))
    assert keep(record(heartbeat, OSError("connection refused")))
    assert keep(record("Compute Failed", CommClosedError("closed")))


def test_local_workers_read_the_traces_as_they_start(traces):
    from distributed import Client

    from vgcsim.sweep_runners import local_cluster

    with local_cluster(1, traces[:1]) as cluster, Client(cluster) as client:
        (info,) = client.run(_trace_cache_info, traces[0]).values()
    assert info == (1, 0)  # read once as the worker started; the job's read is a hit


def _trace_cache_info(path):
    from vgcsim.simulator.sweep import _read_trace, cached_trace

    before = _read_trace.cache_info()
    cached_trace(path)
    after = _read_trace.cache_info()
    return before.currsize, after.misses - before.misses


def test_a_missing_trace_is_the_error_of_a_sweep_on_the_local_cluster(traces, tmp_path):
    from vgcsim.core.errors import TraceError

    missing = str(tmp_path / "no-such-run")
    sweep = SweepFile(SweepConfig(traces=(traces[0], missing), world_sizes=(2,)))
    with pytest.raises(TraceError, match="no-such-run"):
        run_sweep(sweep, processes=1, scheduler="local")


def test_process_pool_workers_come_from_a_server_that_imported_the_sweep_module_once():
    """A pool worker has the sweep module before it runs anything (imported once, in the fork
    server, not once per worker), and not Dask; run in a fresh interpreter, whose fork
    server no earlier test has started."""
    import multiprocessing
    import subprocess
    import sys

    if "forkserver" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork server on this platform")
    script = (
        "import os\n"
        "from vgcsim.sweep_runners import process_pool\n"
        "if __name__ == '__main__':\n"
        "    probe = \"sorted(k for k in __import__('sys').modules if k in "
        "('vgcsim.simulator.sweep', 'vgcsim.simulator.paths.message', 'distributed'))\"\n"
        "    with process_pool(2) as pool:\n"
        "        print(pool.submit(eval, probe).result(), pool.submit(os.getppid).result() != os.getpid())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert (
        out.stdout.split("\n")[0]
        == "['vgcsim.simulator.paths.message', 'vgcsim.simulator.sweep'] True"
    )


def test_dask_setup_installs_the_filter_and_reads_the_named_traces(traces, tmp_path, caplog):
    """What a local worker runs as it starts, called here: the heartbeat filter lands on
    Dask's worker logger, each trace named by the setting is read into this process's cache
    (the next read is a cache hit), a trace that cannot be read is logged at debug level with
    its path and its error, and no setting means nothing to read."""
    import logging

    import dask

    from vgcsim import sweep_runners as runners
    from vgcsim.simulator import sweep as sw

    logger = logging.getLogger("distributed.worker")
    machine = logging.getLogger("distributed.worker.state_machine")
    before = list(logger.filters)
    before_machine = list(machine.filters)
    missing = str(tmp_path / "no-such-run")
    try:
        sw._read_trace.cache_clear()
        with dask.config.set({runners.TRACES_SETTING: [traces[1], missing]}):
            with caplog.at_level(logging.DEBUG, logger=runners.__name__):
                runners.dask_setup(None)
        added = [f for f in logger.filters if f not in before]
        assert len(added) == 1 and isinstance(added[0], runners._HeartbeatAtCloseFilter)
        added = [f for f in machine.filters if f not in before_machine]
        assert len(added) == 1 and isinstance(added[0], runners._CancelledAtCloseFilter)
        info = sw._read_trace.cache_info()
        assert info.currsize == 1 and info.misses == 2  # the good trace cached, the bad one tried
        sw.cached_trace(traces[1])
        assert sw._read_trace.cache_info().hits == 1
        (rec,) = [r for r in caplog.records if r.name == runners.__name__]
        assert (
            rec.levelno == logging.DEBUG and rec.getMessage() == f"trace {missing} not read ahead"
        )
        assert rec.exc_info is not None and rec.exc_info[0] is not None
        sw._read_trace.cache_clear()
        runners.dask_setup(None)  # no setting: nothing read, no error
        assert sw._read_trace.cache_info().misses == 0
    finally:
        for f in [f for f in logger.filters if f not in before]:
            logger.removeFilter(f)
        for f in [f for f in machine.filters if f not in before_machine]:
            machine.removeFilter(f)
        sw._read_trace.cache_clear()


def test_heartbeat_filter_keeps_a_heartbeat_message_without_an_exception():
    import logging

    from vgcsim.sweep_runners import _HeartbeatAtCloseFilter

    record = logging.LogRecord(
        "distributed.worker",
        logging.ERROR,
        "w.py",
        1,
        "Failed to communicate with scheduler",
        (),
        None,
    )
    assert _HeartbeatAtCloseFilter().filter(record)


def _with_broken_steps(src: str, dst) -> str:
    """A copy of the trace at ``src`` whose header is fine and whose first steps chunk is
    cut short (a trace the header check passes and the reader refuses)."""
    import shutil
    from pathlib import Path

    shutil.copytree(src, dst)
    part = sorted((Path(dst) / "steps").glob("part-*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:50])
    return str(dst)


@pytest.mark.parametrize("scheduler", ["processes", "local"])
def test_a_trace_with_broken_tables_is_the_error_of_the_sweep(traces, tmp_path, scheduler):
    """The calling process reads only the headers; the broken chunk fails the first job
    that reads the trace, and the sweep raises the reader's own error naming the file."""
    from vgcsim.core.errors import TraceError

    broken = _with_broken_steps(traces[0], tmp_path / "broken")
    sweep = SweepFile(
        SweepConfig(traces=(traces[1], broken), world_sizes=(2, 4), latencies=("1us", "5us")),
        SimulateConfig(max_steps=2),
    )
    with pytest.raises(TraceError, match="part-000000.parquet is truncated or corrupt"):
        run_sweep(sweep, processes=2, scheduler=scheduler)


def test_a_corrupt_header_fails_before_any_job_runs(traces, tmp_path):
    import shutil
    from pathlib import Path

    from vgcsim.core.errors import TraceError

    bad = tmp_path / "bad-header"
    shutil.copytree(traces[0], bad)
    (Path(bad) / "header.json").write_text("{not json")
    done: list[int] = []
    sweep = SweepFile(SweepConfig(traces=(traces[1], str(bad)), world_sizes=(2,)))
    with pytest.raises(TraceError, match="header.json is corrupt"):
        run_sweep(sweep, processes=2, scheduler="processes", progress=done.append)
    assert done == []


def test_the_calling_process_of_a_pool_sweep_reads_no_trace_tables(tmp_path):
    """Each pool worker reads the traces it needs; the calling process reads only headers
    (its trace cache stays as it was), and the rows are those of a sweep in one process."""
    from vgcsim.simulator.sweep import _read_trace

    run = synth_trace(SynthConfig(layers="vgg_like", workers=2, steps=2, seed=7), tmp_path / "t")
    sweep = SweepFile(SweepConfig(traces=(str(run),), world_sizes=(2, 4)))
    before = _read_trace.cache_info()
    pooled, _ = run_sweep(sweep, processes=2, scheduler="processes")
    after = _read_trace.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)
    alone, _ = run_sweep(sweep, processes=1, scheduler="processes")
    pd.testing.assert_frame_equal(pooled, alone)


def test_cancelled_at_close_filter_drops_only_that_warning():
    import logging

    from vgcsim.sweep_runners import _CancelledAtCloseFilter

    def record(msg: str) -> logging.LogRecord:
        name = "distributed.worker.state_machine"
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, None, None)

    keep = _CancelledAtCloseFilter().filter
    assert not keep(record("Async instruction for <Task cancelled> ended with CancelledError"))
    assert keep(record("Async instruction for <Task cancelled> ended with ValueError"))
    assert keep(record("Task ended with CancelledError"))
    assert keep(record("Compute Failed"))


def test_dask_task_returns_a_users_error_and_raises_a_bug(traces, tmp_path, monkeypatch):
    """A VgcsimError of a job is the Dask task's value (the calling process raises it); any
    other exception fails the task as usual; without an error the value is run_jobs's."""
    from vgcsim import sweep_runners as sw
    from vgcsim.core.errors import TraceError

    jobs = expand_factors(SweepConfig(traces=(traces[0],), world_sizes=(2,)))
    sim = SimulateConfig(max_steps=1)
    table, counts = sw._dask_task(jobs, sim)
    expected, expected_counts = sw.run_jobs(jobs, sim)
    pd.testing.assert_frame_equal(table, expected)
    assert counts == expected_counts
    broken = _with_broken_steps(traces[0], tmp_path / "broken")
    bad = expand_factors(SweepConfig(traces=(broken,), world_sizes=(2,)))
    err = sw._dask_task(bad, sim)
    assert isinstance(err, TraceError) and "part-000000.parquet" in str(err)

    def bug(job, sim):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(sw, "run_job", bug)
    with pytest.raises(ZeroDivisionError):
        sw._dask_task(jobs, sim)


@pytest.mark.slow
@pytest.mark.timeout(180)  # the failure this guards against is a sweep that never ends
def test_workers_that_cannot_run_jobs_are_refused_in_one_line_not_waited_for(traces):
    """Dask does not fail a task its worker cannot unpickle (the sweep would wait forever):
    a user's cluster whose workers cannot import the sweep module, or have another version of
    this package, is refused before any job goes out, naming the cause. Real workers: a
    LocalCluster of two processes, one of them broken by hand."""
    import sys

    from distributed import Client, LocalCluster

    sweep = SweepFile(SweepConfig(traces=tuple(traces[:1])), SimulateConfig(max_steps=1))

    def break_import():
        sys.modules["vgcsim.simulator.sweep"] = None  # the next import raises ImportError

    def other_version():
        import vgcsim.core.version

        vgcsim.core.version.__version__ = "0.0.1"

    import vgcsim

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        rows, jobs = run_sweep(sweep, scheduler=address)  # healthy workers: the jobs run
        assert len(jobs) > 0 and len(rows) > 0
        with Client(cluster) as client:
            worker = sorted(client.scheduler_info()["workers"])[0]
            client.run(other_version, workers=[worker])
            with pytest.raises(ConfigError) as info:
                run_sweep(sweep, scheduler=address)
            assert str(info.value).startswith(f"the Dask worker {worker} at {address}")
            assert "has vgcsim 0.0.1" in str(info.value)
            client.run(break_import, workers=[worker])
            with pytest.raises(ConfigError) as info:
                run_sweep(sweep, scheduler=address)
            assert str(info.value) == (
                f"the Dask worker {worker} at {address} cannot run sweep jobs: importing "
                "vgcsim.sweep_runners or vgcsim.simulator.sweep there failed (import of "
                "vgcsim.simulator.sweep halted; None in sys.modules); install this vgcsim "
                f"({vgcsim.__version__}) where the workers run"
            )


@pytest.mark.timeout(180)  # the failure this guards against is a sweep that never ends
def test_a_local_cluster_whose_workers_cannot_import_the_sweep_is_refused(
    traces, tmp_path, monkeypatch
):
    """The same check on the local cluster: its workers, forked from the fork server, here
    run one more Dask preload script that makes the sweep module unimportable (as a fork
    server whose own preload failed would leave them); the sweep stops in one line naming a
    worker instead of waiting for tasks the workers cannot unpickle."""
    from vgcsim import sweep_runners as sweep_module

    script = tmp_path / "break_sweep_import.py"
    script.write_text('import sys\n\nsys.modules["vgcsim.simulator.sweep"] = None\n')
    preload = [*sweep_module.LOCAL_DASK_CONFIG["distributed.worker.preload"], str(script)]
    monkeypatch.setitem(sweep_module.LOCAL_DASK_CONFIG, "distributed.worker.preload", preload)
    clusters, workers = [], []

    def local_cluster(n, traces):  # the real one, each cluster kept to look at afterwards
        clusters.append(real_local_cluster(n, traces))
        return clusters[-1]

    def check_workers(client, scheduler):  # the real check, the workers counted first
        workers.append(len(client.scheduler_info()["workers"]))
        return real_check_workers(client, scheduler)

    real_local_cluster, real_check_workers = sweep_module.local_cluster, sweep_module.check_workers
    monkeypatch.setattr(sweep_module, "local_cluster", local_cluster)
    monkeypatch.setattr(sweep_module, "check_workers", check_workers)
    sweep = SweepFile(SweepConfig(traces=tuple(traces[:1])), SimulateConfig(max_steps=1))
    with pytest.raises(ConfigError) as info:
        run_sweep(sweep, processes=3, scheduler="local")
    message = str(info.value)
    assert message.startswith("the Dask worker tcp://127.0.0.1:") and " at local " in message
    assert "vgcsim.simulator.sweep" in message and "\n" not in message
    # one worker per process asked for; the refused cluster is closed, not left running
    assert workers == [3] and len(clusters) == 1
    assert clusters[0].status.name == "closed"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_process_forked_after_a_local_dask_sweep_runs_one_too(traces):
    """A child forked after a sweep on a LocalCluster (real processes, a fresh interpreter)
    runs its own: it gets the parent's rows. Forked, Dask's module-level offload thread would
    be missing in the child, and the child's sweep would wait for it without end."""
    import subprocess
    import sys

    script = (
        "import os, sys\n"
        "from vgcsim.simulator.sweep import SweepConfig, SweepFile\n"
        "from vgcsim.sweep_runners import run_sweep\n"
        "from vgcsim.simulator.replay import SimulateConfig\n"
        "if __name__ == '__main__':\n"
        "    sweep = SweepFile(SweepConfig(traces=(sys.argv[1],), world_sizes=(2, 4)),\n"
        "                      SimulateConfig(max_steps=1))\n"
        "    parent, _ = run_sweep(sweep, processes=2, scheduler='local')\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        child, _ = run_sweep(sweep, processes=2, scheduler='local')\n"
        "        os._exit(0 if child.equals(parent) else 3)\n"
        "    _, status = os.waitpid(pid, 0)\n"
        "    print('child exit', os.waitstatus_to_exitcode(status), len(parent))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, traces[0]], capture_output=True, text=True, timeout=240
    )
    assert out.stdout.split()[:3] == ["child", "exit", "0"], out.stderr[-2000:]
    assert int(out.stdout.split()[3]) > 0


def test_a_sweep_on_a_users_cluster_logs_it_and_cuts_tasks_for_its_threads(
    traces, monkeypatch, caplog
):
    """On a user's cluster (one single-threaded worker here, asked for two processes) the
    jobs are cut into tasks for the cluster's threads, 1, not for the processes asked for;
    the sweep names its job count and the scheduler in one INFO line. A repeated case (P = 2
    twice, apart in the job order) gets its own rows each time, in its own place: every task
    is submitted as impure, so equal tasks are not merged into one."""
    import logging

    from distributed import LocalCluster

    from vgcsim import sweep_runners as sweep_module

    cut: list[int] = []
    real_chunks = sweep_module._task_chunks

    def chunks(order, n):
        cut.append(n)
        return real_chunks(order, n)

    monkeypatch.setattr(sweep_module, "_task_chunks", chunks)
    sweep = SweepFile(
        SweepConfig(traces=tuple(traces[:1]), world_sizes=(2, 3, 2)), SimulateConfig(max_steps=2)
    )
    pool, jobs = run_sweep(sweep, processes=1, scheduler="processes")
    assert [j.world_size for j in jobs] == [2, 3, 2]
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        address = cluster.scheduler_address
        with caplog.at_level(logging.INFO, logger=sweep_module.__name__):
            table, _ = run_sweep(sweep, processes=2, scheduler=address)
    assert cut == [1]
    assert f"sweep: 3 jobs on Dask scheduler {address}" in caplog.messages
    pd.testing.assert_frame_equal(table, pool)
