"""Configuration plumbing: frozen config dataclasses from TOML files and ``key=value`` overrides.

A config is a tree of frozen dataclasses (``RecordConfig``, ``SynthConfig``, ...). This module
turns user input into such a tree, strictly and with clear errors:

* :func:`load_toml` reads a TOML file into a dict;
* :func:`config_from_dict` builds a dataclass from a (nested) dict, refusing unknown keys;
* :func:`apply_overrides` applies ``["section.key=value", ...]`` (the CLI's ``--set``),
  parsing each value to the field's declared type;
* :func:`to_dict` turns a config back into a JSON/TOML-able dict (written to trace headers).

A dataclass may name one ``dict`` field as the home of free-form keys with the class
attribute ``EXTRA_KEYS_FIELD`` (e.g. a compressor section whose hyperparameters depend on the
compressor). Keys that are not fields of that dataclass then go into that dict instead of
being refused; whoever consumes them (``get_compressor``) validates them.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar, Union

from vgcsim.core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

T = TypeVar("T")

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null", ""}


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file into a dict; a missing or malformed file is a :class:`ConfigError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {p}: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fields(cls: type) -> dict[str, Any]:
    hints = _hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _extra_field(cls: type) -> str | None:
    return getattr(cls, "EXTRA_KEYS_FIELD", None)


def _unknown_key(where: str, key: str, valid: Iterable[str]) -> ConfigError:
    names = ", ".join(sorted(valid))
    full = f"{where}.{key}" if where else key
    return ConfigError(f"unknown config key {full!r}; valid keys here: {names}")


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _optional_inner(tp: Any) -> tuple[bool, Any]:
    """Return (is_optional, inner type) for ``X | None`` / ``Optional[X]``."""
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def _parse_literal(text: str) -> Any:
    """Parse a free-form value: a TOML literal if it is one (1.5, true, [1, 2], "x"), else the string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _coerce_int(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"config key {key!r} expects an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())  # int() reads "1_000" itself
        except ValueError:
            pass
    raise ConfigError(f"config key {key!r} expects an integer, got {value!r:.80}")


def _coerce_float(value: Any, key: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"config key {key!r} expects a number, got {value!r}")
    try:
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
    except (ValueError, OverflowError):
        pass
    raise ConfigError(f"config key {key!r} expects a number, got {value!r:.80}")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Convert ``value`` (from TOML or from a ``--set`` string) to the declared type ``tp``."""
    optional, inner = _optional_inner(tp)
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in _NONE):
        if optional or tp is Any:
            return None
        raise ConfigError(f"config key {key!r} must not be empty")
    tp = inner
    if tp is Any:
        return _parse_literal(value) if isinstance(value, str) else value
    if _is_dataclass_type(tp):
        if isinstance(value, Mapping):
            return _from_mapping(tp, value, key)
        raise ConfigError(f"config key {key!r} is a section; give its keys, e.g. {key}.<name>=...")
    origin = typing.get_origin(tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ConfigError(f"config key {key!r} expects true or false, got {value!r}")
    if tp is int:
        return _coerce_int(value, key)
    if tp is float:
        return _coerce_float(value, key)
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config key {key!r} expects a string, got {value!r}")
    if origin in (tuple, list):
        items = value
        if isinstance(value, str):
            parsed = _parse_literal(value)
            if isinstance(parsed, list):
                items = parsed
            else:
                items = [s.strip() for s in value.split(",") if s.strip()]
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"config key {key!r} expects a list, got {value!r}")
        args = typing.get_args(tp)
        item_tp = args[0] if args else Any
        out = [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(items)]
        return tuple(out) if origin is tuple else out
    if origin is dict or tp is dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                value = _parse_literal(value)
        if not isinstance(value, Mapping):
            raise ConfigError(f"config key {key!r} expects a table, got {value!r}")
        return dict(value)
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"config key {key!r}: unsupported type {tp!r}")  # pragma: no cover


def _from_mapping(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    fields = _fields(cls)
    extra_name = _extra_field(cls)
    kwargs: dict[str, Any] = {}
    extras: dict[str, Any] = {}
    for key, value in data.items():
        full = f"{where}.{key}" if where else key
        if key in fields and key != extra_name:
            kwargs[key] = _coerce(value, fields[key], full)
        elif key == extra_name:
            if not isinstance(value, Mapping):
                raise ConfigError(f"config key {full!r} expects a table, got {value!r}")
            extras.update(value)
        elif extra_name is not None:
            extras[key] = value
        else:
            raise _unknown_key(where, key, fields)
    if extra_name is not None and extras:
        kwargs[extra_name] = extras
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid config{' section ' + where if where else ''}: {exc}") from None


def config_from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
    """Build dataclass ``cls`` from a nested dict; unknown keys and bad values are ConfigErrors.

    Missing keys keep the dataclass defaults. Nested dataclass fields take nested dicts.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"config must be a table, got {type(data).__name__}")
    return _from_mapping(cls, data, "")


def to_dict(cfg: Any) -> dict[str, Any]:
    """A config dataclass as a plain dict (tuples become lists) for JSON headers and TOML."""

    def conv(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        if isinstance(v, Mapping):
            return {str(k): conv(x) for k, x in v.items()}
        return v

    if not (dataclasses.is_dataclass(cfg) and not isinstance(cfg, type)):
        raise TypeError(f"to_dict expects a dataclass instance, got {type(cfg).__name__}")
    return conv(cfg)


def valid_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key a config class accepts (sections expanded), for help texts and errors."""
    out: list[str] = []
    for name, tp in _fields(cls).items():
        _, inner = _optional_inner(tp)
        full = f"{prefix}{name}"
        if _is_dataclass_type(inner):
            out.extend(valid_keys(inner, f"{full}."))
        else:
            out.append(full)
    return out


def _override_one(cfg: Any, path: list[str], raw: str, where: str) -> Any:
    cls = type(cfg)
    fields = _fields(cls)
    key = path[0]
    full = f"{where}.{key}" if where else key
    extra_name = _extra_field(cls)
    if key not in fields or (key == extra_name and len(path) == 1):
        if extra_name is None:
            raise _unknown_key(where, key, fields)
        if len(path) != 1:
            raise ConfigError(f"config key {full + '.' + '.'.join(path[1:])!r} is too deep")
        extras = dict(getattr(cfg, extra_name) or {})
        extras[key] = _parse_literal(raw)
        return dataclasses.replace(cfg, **{extra_name: extras})
    tp = fields[key]
    _, inner = _optional_inner(tp)
    if len(path) > 1:
        if key == extra_name:
            return _override_one(cfg, path[1:], raw, where)
        if not _is_dataclass_type(inner):
            raise ConfigError(
                f"config key {full!r} is not a section; cannot set {'.'.join(path)!r}"
            )
        sub = getattr(cfg, key)
        if sub is None:
            sub = inner()
        new_sub = _override_one(sub, path[1:], raw, full)
        return _replace(cfg, key, new_sub)
    if _is_dataclass_type(inner):
        raise ConfigError(
            f"config key {full!r} is a section; set one of its keys, e.g. {full}.<key>=..."
        )
    return _replace(cfg, key, _coerce(raw, tp, full))


def _replace(cfg: Any, key: str, value: Any) -> Any:
    try:
        return dataclasses.replace(cfg, **{key: value})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value for {key!r}: {exc}") from None


def apply_overrides(cfg: T, overrides: Iterable[str]) -> T:
    """Apply ``["a.b=1.5", "workers=8"]`` to a config dataclass and return the new one.

    Values are parsed to the field's declared type (int, float, bool, str, list, optional);
    free-form keys of a section with ``EXTRA_KEYS_FIELD`` are parsed as TOML literals.
    An unknown key is a :class:`ConfigError` listing the valid keys at that level.
    """
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value (e.g. workers=8)")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} has an empty key")
        cfg = _override_one(cfg, key.split("."), raw.strip(), "")
    return cfg
