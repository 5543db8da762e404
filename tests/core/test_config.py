"""Config plumbing: strict dicts, typed --set overrides, TOML files, round trips."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from vgcsim.core.config import apply_overrides, config_from_dict, load_toml, to_dict, valid_keys
from vgcsim.core.errors import ConfigError


@dataclass(frozen=True)
class Opt:
    name: str = "adam"
    lr: float = 1e-3
    milestones: tuple[int, ...] = (10, 20)


@dataclass(frozen=True)
class Comp:
    EXTRA_KEYS_FIELD = "params"
    name: str = "variance"
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Cfg:
    workers: int = 4
    quiet: bool = False
    out: str | None = None
    optimizer: Opt = field(default_factory=Opt)
    compressor: Comp = field(default_factory=Comp)


def test_overrides_parse_to_declared_types():
    cfg = apply_overrides(
        Cfg(),
        ["workers=8", "quiet=true", "optimizer.lr=0.5", "optimizer.milestones=5,7", "out=runs/x"],
    )
    assert cfg.workers == 8 and cfg.quiet is True and cfg.out == "runs/x"
    assert cfg.optimizer.lr == 0.5 and cfg.optimizer.milestones == (5, 7)
    assert Cfg().workers == 4  # frozen original untouched


def test_extra_keys_go_to_params_as_literals():
    cfg = apply_overrides(
        Cfg(), ["compressor.alpha=1.5", "compressor.name=strom", "compressor.exact=true"]
    )
    assert cfg.compressor.name == "strom"
    assert cfg.compressor.params == {"alpha": 1.5, "exact": True}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("wrokers=3", "unknown config key 'wrokers'"),
        ("optimizer.momentm=0.9", "unknown config key 'optimizer.momentm'"),
        ("workers=three", "expects an integer"),
        ("workers=1.5", "expects an integer"),
        ("quiet=maybe", "expects true or false"),
        ("optimizer.lr=fast", "expects a number"),
        ("workers", "key=value"),
        ("optimizer=1", "is a section"),
        ("workers.x=1", "not a section"),
    ],
)
def test_bad_overrides_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(Cfg(), [override])


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError) as exc:
        apply_overrides(Cfg(), ["bogus=1"])
    assert "compressor" in str(exc.value) and "workers" in str(exc.value)


def test_optional_accepts_none():
    assert apply_overrides(Cfg(out="x"), ["out=none"]).out is None


def test_dict_round_trip_and_strictness():
    cfg = apply_overrides(Cfg(), ["compressor.alpha=2", "optimizer.name=sgd"])
    d = to_dict(cfg)
    assert d["optimizer"]["milestones"] == [10, 20]
    assert config_from_dict(Cfg, d) == cfg
    with pytest.raises(ConfigError, match="unknown config key 'optimizer.bogus'"):
        config_from_dict(Cfg, {"optimizer": {"bogus": 1}})
    with pytest.raises(ConfigError, match="expects an integer"):
        config_from_dict(Cfg, {"workers": "many"})


def test_toml_file(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        'workers = 2\n[compressor]\nname = "variance"\nalpha = 1.5\n[optimizer]\nlr = 0.1\n'
    )
    cfg = config_from_dict(Cfg, load_toml(p))
    assert cfg.workers == 2 and cfg.compressor.params == {"alpha": 1.5} and cfg.optimizer.lr == 0.1
    bad = tmp_path / "bad.toml"
    bad.write_text("workers = = 2\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_toml(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_toml(tmp_path / "missing.toml")


def test_valid_keys_expands_sections():
    keys = valid_keys(Cfg)
    assert "optimizer.lr" in keys and "compressor.name" in keys and "workers" in keys


def test_toml_file_that_is_not_utf8_is_a_config_error(tmp_path):
    # `vgcsim sweep` / `record --config` on a binary file raised UnicodeDecodeError
    p = tmp_path / "binary.toml"
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_toml(p)
