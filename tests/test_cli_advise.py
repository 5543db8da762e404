"""`vgcsim advise` from the command line: the table, the recommendation, its files, and one
line with exit 2 for user mistakes."""

from __future__ import annotations

from vgcsim.cli import main
from vgcsim.commands.demo import DEMO_TRACES

DEMO = DEMO_TRACES
TRACES = [str(DEMO / n) for n in ("dense", "variance", "strom", "qsgd")]


def test_advise_prints_the_recommendation_and_writes_its_files(tmp_path, capsys):
    out = tmp_path / "advice"
    code = main(
        ["advise", *TRACES, "--cluster", "1GbE,IB-EDR", "--world-sizes", "8,64", "-o", str(out)]
    )
    text = capsys.readouterr().out
    assert code == 0
    assert text.count("1GbE, P=") == 2 and text.count("IB-EDR, P=") == 2
    assert "## Ranking" in text and "## Per-bucket mixes" in text
    assert {p.name for p in out.iterdir()} >= {"advice.csv", "mixes.csv", "advice.md"}


def test_advise_user_mistakes_are_one_line_exit_2(capsys):
    bad = [
        [*TRACES, "--cluster", "10GbE", "--target-accuracy", "101"],
        [*TRACES, "--cluster", "10GbE", "--target-accuracy", "0.95"],  # percent, as report's
        [TRACES[0], str(DEMO.parent / "powersgd_trace"), "--cluster", "10GbE"],
        [*TRACES, "--cluster", "10Gbs"],
        [*TRACES, "--cluster", " , "],  # names no cluster
    ]
    for args in bad:
        assert main(["advise", *args, "--world-sizes", "8"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Traceback" not in err


def test_the_target_accuracy_is_a_percentage_as_in_report(capsys):
    """``--target-accuracy 90`` ranks by time to 90 % test accuracy: the API's 0.9."""
    from vgcsim import api

    assert main(["advise", *TRACES[:2], "--cluster", "1GbE", "--world-sizes", "8",
                 "--target-accuracy", "90"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    expected = api.advice_text(api.advise(TRACES[:2], "1GbE", [8], target_accuracy=0.9))
    assert text.startswith(expected)
    assert "reaches the target first" in text
