"""``vgcsim trace info`` says what a trace was recorded from: model and size, dataset,
optimizer, compressor with its reading, device and CPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from vgcsim.cli import main
from vgcsim.commands.demo import DEMO_TRACES

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "sample_trace"
SYNTH = ROOT / "tests" / "data" / "synth_resnet50"


def _info(capsys, run: Path) -> str:
    assert main(["trace", "info", str(run)]) == 0
    return capsys.readouterr().out


def test_info_names_model_dataset_optimizer_reading_device_and_cpu(capsys):
    header = json.loads((DEMO_TRACES / "variance" / "header.json").read_text())
    params = sum(layer["numel"] for layer in header["layers"])
    lines = _info(capsys, DEMO_TRACES / "variance").splitlines()
    data = header["dataset"]
    assert (
        f"model      small_cnn ({params:,} parameters) on mnist ({data['train']:,} train, "
        f"{data['test']:,} test, {data['num_classes']} classes)"
    ) in lines
    opt = header["config"]["optimizer"]
    milestones = ", ".join(map(str, opt["milestones"]))
    assert f"optimizer  adam, lr {opt['lr']:g} (schedule step, milestones {milestones})" in lines
    p = header["compressor"]["params"]
    reading = (
        f"after_send={p['after_send']}, below_floor={p['below_floor']}, "
        f"variance_scale={p['variance_scale']}"
    )
    assert f"reading    {reading}" in lines
    dev = header["device"]
    assert f"device     {dev['type']}: {dev['name']} (1 thread)" in lines
    # recorded before headers named the CPU model: said so, with the architecture
    assert "cpu_model" not in header["machine"]
    assert f"cpu        not recorded (processor {header['machine']['processor']})" in lines


def test_info_shows_the_cpu_model_a_header_records(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    header = json.loads((run / "header.json").read_text())
    header["machine"]["cpu_model"] = "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    (run / "header.json").write_text(json.dumps(header))
    out = _info(capsys, run)
    assert "cpu        Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\n" in out
    # a header from before the reading parameters: said so
    assert "reading    reading not recorded\n" in out
    assert main(["trace", "info", str(run), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)["recording"]
    assert rec["model"] == "small_cnn" and rec["dataset"]["name"] == "digits"
    assert rec["optimizer"]["name"] == "adam" and rec["cpu_model"].startswith("Intel(R) Xeon")


def test_a_synthetic_trace_names_its_layer_list_and_no_machine(capsys):
    out = _info(capsys, SYNTH)
    assert "model      resnet50 (25,557,032 parameters)\n" in out
    assert "reading " not in out and "cpu " not in out and "device " not in out
