"""``--set`` overrides (``vgcsim.core.config.apply_overrides``) through nested sections and a
section's free-form keys: each path lands where it names, and each refusal is its one line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from vgcsim.core.config import apply_overrides
from vgcsim.core.errors import ConfigError


@dataclass(frozen=True)
class Model:
    name: str = "mlp"
    width: float = 1.0


@dataclass(frozen=True)
class Compressor:
    EXTRA_KEYS_FIELD: ClassVar[str] = "params"  # keys it does not declare land in params
    name: str = "variance"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Job:
    model: Model = field(default_factory=Model)
    compressor: Compressor = field(default_factory=Compressor)
    probe: Model | None = None
    steps: int = 10


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("steps=3", Job(steps=3)),
        ("model.width=0.5", Job(model=Model(width=0.5))),
        ("compressor.name=dense", Job(compressor=Compressor(name="dense"))),
        ("compressor.alpha=3", Job(compressor=Compressor(params={"alpha": 3}))),
        ("compressor.params.alpha=3", Job(compressor=Compressor(params={"alpha": 3}))),
        ("compressor.zeta=0.99", Job(compressor=Compressor(params={"zeta": 0.99}))),
        # an optional section that is None is made from its defaults, then set
        ("probe.width=2", Job(probe=Model(width=2.0))),
    ],
)
def test_an_override_lands_where_its_path_names(override, expected):
    assert apply_overrides(Job(), [override]) == expected


def test_free_form_keys_accumulate():
    job = apply_overrides(Job(), ["compressor.alpha=3", "compressor.params.beta=0.5"])
    assert job.compressor.params == {"alpha": 3, "beta": 0.5}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("steps.x=1", "config key 'steps' is not a section; cannot set 'steps.x'"),
        ("model.width.x=1", "config key 'model.width' is not a section; cannot set 'width.x'"),
        ("model=3", "config key 'model' is a section; set one of its keys, e.g. model.<key>=..."),
        ("model.depth=1", "unknown config key 'model.depth'; valid keys here: name, width"),
        ("compressor.alpha.x=3", "config key 'compressor.alpha.x' is too deep"),
        ("compressor.alpha.x.y=3", "config key 'compressor.alpha.x.y' is too deep"),
        ("compressor.params.alpha.x=3", "config key 'compressor.alpha.x' is too deep"),
        (
            "bogus=1",
            "unknown config key 'bogus'; valid keys here: compressor, model, probe, steps",
        ),
    ],
)
def test_each_override_refusal_is_its_one_line(override, message):
    with pytest.raises(ConfigError) as err:
        apply_overrides(Job(), [override])
    assert str(err.value) == message
