"""The recorder's training state (``vgcsim.traces.training.checkpoint``), function by function:
what ``save_state`` writes and ``load_state`` reads back or refuses, the prefixes that share
one flat tensor file, an optimizer's state through JSON and back, and the global generators.
``test_record_resume.py`` checks the whole: a killed and resumed recording equals an
uninterrupted one."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from vgcsim.core.errors import TraceError
from vgcsim.traces.training.checkpoint import (
    SCALARS_FILE,
    STATE_FORMAT,
    TENSORS_FILE,
    global_rng_state,
    load_optimizer_state,
    load_state,
    optimizer_state,
    prefixed,
    save_state,
    set_global_rng_state,
    unprefixed,
)


def test_the_two_files_and_their_names():
    assert (TENSORS_FILE, SCALARS_FILE, STATE_FORMAT) == ("state.pt", "state.json", 1)


def test_save_then_load_gives_back_tensors_and_scalars(tmp_path):
    weights = torch.arange(6, dtype=torch.float32).reshape(2, 3).requires_grad_()
    scalars = {"step": 7, "name": "variance", "nested": {"a": [1, 2]}}
    save_state(tmp_path, {"net/w": weights, "n": torch.tensor([3], dtype=torch.int64)}, scalars)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "state.pt"]
    # the scalars file is one JSON object with the format first, and ends with a newline
    text = (tmp_path / "state.json").read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.count("\n") == 1
    assert json.loads(text) == {"format": 1, **scalars}
    assert next(iter(json.loads(text))) == "format"
    tensors, back = load_state(tmp_path)
    assert back == {"format": 1, **scalars}
    assert sorted(tensors) == ["n", "net/w"]
    assert torch.equal(tensors["net/w"], weights.detach())
    assert not tensors["net/w"].requires_grad  # saved detached
    assert tensors["n"].dtype == torch.int64 and tensors["n"].tolist() == [3]


def test_saved_tensors_are_copies(tmp_path):
    t = torch.zeros(3)
    save_state(tmp_path, {"t": t}, {})
    t += 1  # a change after saving is not in the file
    tensors, _ = load_state(tmp_path)
    assert tensors["t"].tolist() == [0.0, 0.0, 0.0]


def test_a_missing_checkpoint_is_one_trace_error(tmp_path):
    with pytest.raises(TraceError, match=r"^checkpoint .* is unreadable \("):
        load_state(tmp_path)


def test_a_corrupt_tensor_file_is_one_trace_error(tmp_path):
    save_state(tmp_path, {"t": torch.zeros(2)}, {})
    (tmp_path / TENSORS_FILE).write_bytes(b"not a torch file")
    with pytest.raises(TraceError, match=r"^checkpoint .* is unreadable \("):
        load_state(tmp_path)


def test_a_corrupt_scalars_file_is_one_trace_error(tmp_path):
    save_state(tmp_path, {"t": torch.zeros(2)}, {})
    (tmp_path / SCALARS_FILE).write_text("{not json", encoding="utf-8")
    with pytest.raises(TraceError, match=r"^checkpoint .* is unreadable \("):
        load_state(tmp_path)


@pytest.mark.parametrize(
    "content",
    [[torch.zeros(1)], {"t": 3}, {1: torch.zeros(1)}],
    ids=["a list", "a number", "a non-string key"],
)
def test_a_tensor_file_that_is_not_a_table_of_tensors_is_refused(tmp_path, content):
    save_state(tmp_path, {}, {})
    torch.save(content, tmp_path / TENSORS_FILE)
    with pytest.raises(TraceError) as err:
        load_state(tmp_path)
    assert str(err.value) == f"checkpoint {tmp_path / TENSORS_FILE} is not a table of tensors"


def test_another_format_is_refused_with_what_this_version_reads(tmp_path):
    save_state(tmp_path, {}, {})
    (tmp_path / SCALARS_FILE).write_text(json.dumps({"format": 2}), encoding="utf-8")
    with pytest.raises(TraceError) as err:
        load_state(tmp_path)
    assert str(err.value) == (
        f"checkpoint {tmp_path / SCALARS_FILE} has format 2, this vgcsim reads 1; "
        "record the run again"
    )
    (tmp_path / SCALARS_FILE).write_text("{}", encoding="utf-8")
    with pytest.raises(TraceError, match=r"has format None, this vgcsim reads 1"):
        load_state(tmp_path)


def test_scalars_that_are_not_an_object_are_refused(tmp_path):
    save_state(tmp_path, {}, {})
    (tmp_path / SCALARS_FILE).write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(TraceError) as err:
        load_state(tmp_path)
    assert str(err.value) == f"checkpoint {tmp_path / SCALARS_FILE} is not a JSON object"


def test_prefixes_share_one_flat_table():
    a, b = torch.zeros(1), torch.ones(1)
    flat = {**prefixed("net", {"w": a, "x/y": b}), **prefixed("netx", {"w": b})}
    assert list(flat) == ["net/w", "net/x/y", "netx/w"]
    # only the names under "net/" come back, without the prefix ("netx/" is another owner)
    back = unprefixed("net", flat)
    assert list(back) == ["w", "x/y"]
    assert back["w"] is a and back["x/y"] is b
    assert unprefixed("none", flat) == {}


def _adam_after_steps(steps: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    opt = torch.optim.Adam(net.parameters(), lr=0.01, betas=(0.8, 0.95))
    for _ in range(steps):
        opt.zero_grad()
        net(torch.ones(4, 3)).sum().backward()
        opt.step()
    return net, opt


def test_an_optimizer_state_goes_through_json_and_back():
    _, opt = _adam_after_steps(3)
    # a state entry that is not a tensor travels in the JSON part
    first = opt.param_groups[0]["params"][0]
    opt.state[first]["seen"] = 5
    tensors, scalars = optimizer_state(opt)
    assert sorted(tensors) == [
        f"{p}/{k}" for p in range(4) for k in ("exp_avg", "exp_avg_sq", "step")
    ]
    assert scalars["state"] == {"0": {"seen": 5}}
    text = json.loads(json.dumps(scalars))  # what the checkpoint file holds
    assert text["param_groups"][0]["betas"] == [0.8, 0.95]  # JSON made the tuple a list

    _, fresh = _adam_after_steps(0)
    load_optimizer_state(fresh, tensors, text)
    want, got = opt.state_dict(), fresh.state_dict()
    assert got["param_groups"] == want["param_groups"]
    assert isinstance(got["param_groups"][0]["betas"], tuple)  # the tuple came back
    assert sorted(got["state"]) == [0, 1, 2, 3]
    for pid, entry in want["state"].items():
        assert sorted(got["state"][pid]) == sorted(entry)
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(got["state"][pid][key], value)
            else:
                assert got["state"][pid][key] == value
    assert got["state"][0]["seen"] == 5


def test_a_list_stays_a_list_where_the_optimizer_holds_a_list():
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    opt.param_groups[0]["tags"] = ["a", "b"]  # a list in the group itself
    tensors, scalars = optimizer_state(opt)
    fresh = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.5)
    fresh.param_groups[0]["tags"] = ["c"]
    load_optimizer_state(fresh, tensors, json.loads(json.dumps(scalars)))
    assert fresh.param_groups[0]["tags"] == ["a", "b"]
    assert fresh.param_groups[0]["lr"] == 0.1


def test_the_global_generators_come_back(tmp_path):
    torch.manual_seed(3)
    np.random.seed(4)
    random.seed(5)
    np.random.standard_normal()  # numpy caches a second Gaussian: part of its state
    random.gauss(0.0, 1.0)  # Python's too
    tensors, scalars = global_rng_state()
    assert sorted(tensors) == ["torch"] and sorted(scalars) == ["numpy", "python"]
    # through the checkpoint's own files, as a resume reads them
    save_state(tmp_path, tensors, scalars)
    tensors, scalars = load_state(tmp_path)
    want = (
        torch.rand(4),
        np.random.standard_normal(3),
        np.random.randint(0, 2**31, 3),
        [random.random(), random.gauss(0.0, 1.0)],
    )
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    set_global_rng_state(tensors, scalars)
    got = (
        torch.rand(4),
        np.random.standard_normal(3),
        np.random.randint(0, 2**31, 3),
        [random.random(), random.gauss(0.0, 1.0)],
    )
    assert torch.equal(got[0], want[0])
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    assert got[3] == want[3]
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    assert keys.dtype == np.uint32 and kind == "MT19937"


def test_a_state_key_may_hold_a_slash():
    # the parameter index ends at the first slash of a tensor's name; the key is the rest
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    opt.state[net.weight]["buf/a/b"] = torch.full((1, 2), 2.0)
    tensors, scalars = optimizer_state(opt)
    assert sorted(tensors) == ["0/buf/a/b"]
    fresh_net = torch.nn.Linear(2, 1)
    fresh = torch.optim.SGD(fresh_net.parameters(), lr=0.1, momentum=0.9)
    load_optimizer_state(fresh, tensors, json.loads(json.dumps(scalars)))
    state = fresh.state_dict()["state"]
    assert list(state) == [0] and list(state[0]) == ["buf/a/b"]
    assert state[0]["buf/a/b"].tolist() == [[2.0, 2.0]]


def test_a_parameter_whose_state_holds_no_tensor_comes_back():
    net = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)  # no momentum: no tensor state
    opt.state[net.bias]["count"] = 3
    tensors, scalars = optimizer_state(opt)
    assert tensors == {} and scalars["state"] == {"1": {"count": 3}}
    fresh = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    load_optimizer_state(fresh, tensors, json.loads(json.dumps(scalars)))
    assert fresh.state_dict()["state"] == {1: {"count": 3}}
