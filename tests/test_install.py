"""What ``pip install vgcsim`` gives: one import name, a core without torch, a clear extra."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from no_training_extra import run_without_training_extra

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "tests" / "data" / "sample_trace"


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    code = f"from vgcsim.cli import main\nraise SystemExit(main({list(argv)!r}))\n"
    return run_without_training_extra(code, cwd=tmp_path, timeout=300)


def test_core_dependencies_leave_out_the_training_stack():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = " ".join(meta["dependencies"]).lower()
    assert not any(name in core for name in ("torch", "scikit-learn", "mlxtend"))
    train = " ".join(meta["optional-dependencies"]["train"]).lower()
    assert all(name in train for name in ("torch", "scikit-learn", "mlxtend"))


def test_predict_runs_without_torch(tmp_path):
    out = tmp_path / "p"
    done = _cli(
        tmp_path, "predict", str(SAMPLE), "--cluster", "10GbE", "--world-sizes", "2,8",
        "-o", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "results.parquet").is_file()


def test_record_without_torch_names_the_extra(tmp_path):
    done = _cli(tmp_path, "record", "--steps", "1", "-o", str(tmp_path / "run"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "vgcsim[train]" in lines[0] and "torch" in lines[0]
    assert not (tmp_path / "run").exists()


# -- the built wheel, installed in a fresh virtual environment without torch -------------------

#: What a wheel is built from: pyproject, setup.py, the README it names, the mapped folders.
BUILD_FILES = ("pyproject.toml", "setup.py", "README.md")
CORE_DEPENDENCIES = (
    "numpy", "pandas", "pyarrow", "simpy", "networkx", "matplotlib", "tqdm", "pydantic",
    "dask", "distributed",
)  # fmt: skip


def _package_dirs() -> dict[str, str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return config["tool"]["setuptools"]["package-dir"]


def _packages_in_tree() -> set[str]:
    """Every folder with an __init__.py below a mapped folder, by its import name."""
    found = set()
    for name, folder in _package_dirs().items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    return found


def _has_build_backend() -> bool:
    """True when this environment has the setuptools pyproject.toml asks for."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (need,) = [r for r in config["build-system"]["requires"] if r.startswith("setuptools")]
    minimum = tuple(int(x) for x in need.split(">=")[1].split("."))
    try:
        have = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(x) for x in have.split(".")[:2] if x.isdigit()) >= minimum


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from a copy of what the build reads (the checkout is left
    as it is: no build/ or egg-info folders)."""
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, src / name)
    for folder in _package_dirs().values():
        shutil.copytree(
            ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    dist = tmp_path_factory.mktemp("dist")
    # the build backend of this environment where it is recent enough, else pip's isolated one
    isolation = ["--no-build-isolation"] if _has_build_backend() else []
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", *isolation,
         "--quiet", "-w", str(dist)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # every folder the wheel ships files from is a listed package (setup.py)
    assert "absent from the `packages` configuration" not in done.stderr, done.stderr
    (whl,) = dist.glob("vgcsim-*.whl")
    return whl


@pytest.mark.slow
def test_the_wheel_holds_every_package_and_the_demo_traces(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {
        name.removesuffix("/__init__.py").replace("/", ".")
        for name in names
        if name.endswith("/__init__.py")
    }
    missing = _packages_in_tree() - shipped
    assert not missing, f"packages missing from the wheel: {sorted(missing)}"
    assert "vgcsim.preload" in shipped  # the one a hand-written list once missed
    from vgcsim.commands.demo import DEMO_TRACES

    demo = DEMO_TRACES.relative_to(ROOT).as_posix()
    committed = sorted(
        p.relative_to(ROOT).as_posix()
        for p in DEMO_TRACES.rglob("*")
        if p.is_file() and p.suffix in (".json", ".parquet", ".md")
    )
    assert committed and all(p.startswith(demo + "/") for p in committed)
    assert sorted(n for n in names if n.startswith(demo + "/")) == committed


def _constraints(path: Path) -> Path:
    """Pin the core dependencies to the versions of the environment running the tests, so
    that pip reuses what its cache holds and the result does not move with PyPI."""
    path.write_text(
        "".join(f"{name}=={importlib.metadata.version(name)}\n" for name in CORE_DEPENDENCIES)
    )
    return path


@pytest.fixture(scope="module")
def core_venv(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel and its core dependencies (no torch),
    installed by this environment's pip (``--python``): the new one needs no pip of its own."""
    where = tmp_path_factory.mktemp("venv")
    venv = where / "core"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    py = venv / "bin" / "python"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--quiet",
         "--disable-pip-version-check", "--no-compile",
         "-c", str(_constraints(where / "constraints.txt")), str(wheel)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def _in_venv(venv: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(venv / "bin" / argv[0]), *argv[1:]],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=600,
    )  # fmt: skip


@pytest.mark.slow
def test_a_core_install_runs_every_stage_without_torch(core_venv, tmp_path):
    probe = _in_venv(
        core_venv, tmp_path, "python", "-c",
        "import importlib.util, vgcsim; print(vgcsim.__file__); "
        "print([m for m in ('torch', 'sklearn', 'mlxtend') if importlib.util.find_spec(m)])",
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    where, present = probe.stdout.splitlines()
    assert Path(where).is_relative_to(core_venv) and present == "[]"

    def ok(*argv: str) -> str:
        done = _in_venv(core_venv, tmp_path, "vgcsim", *argv)
        assert done.returncode == 0, f"vgcsim {' '.join(argv)}: {done.stderr}"
        return done.stdout

    trace = str(SAMPLE)
    assert "workers" in ok("trace", "info", trace)
    (tmp_path / "sweep.toml").write_text(
        f'[sweep]\ntraces = ["{SAMPLE.as_posix()}"]\ncluster = "10GbE"\nworld_sizes = [2, 4]\n'
        'bandwidths = ["1Gbps", "10Gbps"]\n\n[simulate]\nmax_steps = 2\n'
    )
    # a local Dask cluster, whose workers import the sweep's job module from the installed
    # package (the process pool runs the same module: tests/test_sweep_runners.py; every
    # package is in the wheel: test_the_wheel_holds_every_package_and_the_demo_traces)
    ok("sweep", "sweep.toml", "-o", "sw-local", "--processes", "1", "--scheduler", "local")
    assert "time_s = " in ok("collective", "10GbE", "allreduce/ring", "--sizes-bytes", "4e6",
                      "--world-size", "8")  # fmt: skip
    # the demo predicts, simulates and reports: every stage, through the installed commands
    ok("demo", "-o", "d", "--world-sizes", "2,4", "--set", "clusters=10GbE", "-q",
       "--set", 'methods=["dense","variance"]', "--set", 'paper_nets=["vgg_like"]',
       "--set", "paper_steps=2")  # fmt: skip
    for stage in ("predicted", "simulated"):
        assert list((tmp_path / "d" / "results" / stage).glob("*/results.parquet")), stage
    assert (tmp_path / "d" / "report" / "index.html").is_file()

    for argv in (
        ("record", "--steps", "1", "-o", "run"),
        ("calibrate", "--backend", "gloo", "--nprocs", "2", "-o", "c.toml"),
        ("demo", "--set", "traces=record", "-o", "d2"),
    ):
        done = _in_venv(core_venv, tmp_path, "vgcsim", *argv)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, f"vgcsim {argv[0]}: {done.stderr}"
        assert "vgcsim[train]" in lines[0] and "torch" in lines[0]
        assert not (tmp_path / argv[-1]).exists()
