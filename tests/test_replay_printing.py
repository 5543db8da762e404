"""predict and simulate print one table format and one verdict line."""

from __future__ import annotations

from pathlib import Path

from vgcsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = str(ROOT / "tests" / "data" / "sample_trace")


def _printed(capsys, command, tmp_path):
    argv = [command, SAMPLE, "--cluster", "1GbE", "--world-sizes", "2,8"]
    if command == "simulate":
        argv += ["--set", "max_steps=2"]
    assert main([*argv, "-o", str(tmp_path / command)]) == 0
    return capsys.readouterr().out.splitlines()


def test_predict_and_simulate_print_the_same_table_and_one_verdict(tmp_path, capsys):
    pred = _printed(capsys, "predict", tmp_path)
    sim = _printed(capsys, "simulate", tmp_path)
    for lines, source in ((pred, "predicted"), (sim, "simulated")):
        verdicts = [x for x in lines if x.startswith("verdict: ")]
        assert len(verdicts) == 1, lines
        # the verdict names its interconnect, its source and what decides it
        assert verdicts[0].startswith("verdict: On 1GbE, ") and source in verdicts[0]
        assert " against " in verdicts[0] and " of dense allreduce" in verdicts[0]
        assert lines[-1].startswith("wrote ")
    # the same header line and the same columns, row for row
    head = [x for x in pred if x.lstrip().startswith("P ")]
    assert head and head == [x for x in sim if x.lstrip().startswith("P ")]
    rows = [x.split()[:4] for x in pred if x.strip()[:1].isdigit()]
    assert rows == [x.split()[:4] for x in sim if x.strip()[:1].isdigit()]
