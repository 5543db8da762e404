"""The cluster file loader: one unit-aware reader of TOML tables into typed, frozen specs.

A cluster file (TOML) looks like::

    name = "my-10gbe"
    base = "10GbE"               # optional: start from a cluster preset
    compute = "model"            # "model" (default) or "trace"
    compute_scale = 1.0
    gpus_per_node = 4
    ranks_per_host = 4           # ranks sharing one host's cores (default 1)
    host_cores = 0               # cores per host; 0 (default): no processor sharing
    threads_per_rank = 1         # busy threads per rank (default 1)
    host_sharing = "fullest-core"  # how ranks share the cores: or "fair" (see host_share)
    device = "V100"              # preset name, or a [device] table
    [topology]
    kind = "hierarchical"
    [link]                       # preset name string, or a table
    preset = "10GbE"             # optional base for the table (default: base's link)
    bandwidth = "10Gbps"         # or bandwidth_Bps = 1.25e9
    latency = "10us"             # or latency_s = 1e-5
    gamma_s_per_byte = 0.0
    allgatherv_host_s_per_byte = 0.0   # host copy time per gathered byte (vgcsim calibrate)
    # optional, written by vgcsim calibrate: [gathered bytes, s per byte] points; where given,
    # δ at a size is the value of the point at or below it (a step function), not one number
    allgatherv_host_s_per_byte_table = [[16777216, 1.9e-9], [67108864, 5.1e-9]]
    # optional, written by vgcsim calibrate: the share of that host time paid per padded
    # byte of an allgatherv of uneven blocks (the rest per real byte); default 0.5
    allgatherv_host_padded_share = 0.24
    allgatherv_host = "2.5ms"    # optional: fixed host time per allgatherv (or allgatherv_host_s)
    call_overhead = "300us"      # software cost per collective call and rank (or call_overhead_s)
    burst = "256KiB"             # token-bucket depth of every host link (or burst_bytes)
    framing = "tcp-mtu9000"      # or efficiency = 0.99 (payload bytes per wire byte)
    [intra_link]
    preset = "NVLink2"

A ``[link]``, ``[intra_link]`` or ``[device]`` table overrides only the fields it gives, of its
``preset`` where it names one, else of the ``base`` cluster's. Unknown keys anywhere are a
:class:`~vgcsim.core.errors.ConfigError` listing the valid ones; a bad value is one naming the
field as the file spells it and the rule it breaks.

Every ``[link]``, ``[intra_link]`` and ``[device]`` table is read by one function,
:func:`read_table`, from the spellings its spec's fields declare
(:func:`vgcsim.core.specs.spelled`): a quantity with units (``bandwidth = "10Gbps"``) or
in SI (``bandwidth_Bps = 1.25e9``), a plain number, a fraction, a value named by another key
(``framing``), rows of numbers the spec checks. The ``[topology]`` table becomes its kind's
typed spec (:func:`vgcsim.core.topologies.parse_topology`). Human strings are parsed here,
once, with :mod:`vgcsim.core.units`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vgcsim.core.clusterspec import CLUSTER_PRESETS, ClusterSpec, get_cluster
from vgcsim.core.errors import ConfigError, unknown_name
from vgcsim.core.presets import DEFAULT_DEVICE, get_device, get_link
from vgcsim.core.specs import DeviceSpec, LinkSpec, check_range, spellings
from vgcsim.core.topologies import TopologySpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

__all__ = ["cluster_from_dict", "cluster_to_dict", "load_cluster", "read_table"]


def _check_keys(where: str, d: Mapping[str, Any], valid: tuple[str, ...]) -> None:
    for key in d:
        if key not in valid:
            raise ConfigError(
                f"unknown key {where + '.' + key if where else key!r} in cluster spec; "
                f"valid keys here: {', '.join(valid)}"
            )


def _one_of(where: str, d: Mapping[str, Any], a: str, b: str) -> Any:
    if a in d and b in d:
        raise ConfigError(f"{where + ': ' if where else ''}give either {a!r} or {b!r}, not both")
    return d.get(a, d.get(b))


def _at(where: str, key: str) -> str:
    """The field ``key`` of the table ``where`` as a message names it (``link.latency``)."""
    return f"{where}.{key}" if where else key


def _number_key(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{_at(where, key)}: expected a number, got {value!r}")
    return float(value)


def _integer_key(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{_at(where, key)}: expected an integer, got {value!r:.80}")
    return value


def _choice_key(where: str, key: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(
            f"{_at(where, key)}: expected one of {', '.join(map(repr, choices))}, got {value!r:.80}"
        )
    return value


def _given(d: Mapping[str, Any], *keys: str) -> str:
    """The spelling of a field the table used (the first of ``keys``, where none is given)."""
    return next((k for k in keys if k in d), keys[0])


def _quantity(where: str, key: str, parse: Any, value: Any) -> float:
    """``parse(value)``; its error names the field (``link.bandwidth: '-1Gbps' must be ...``)."""
    try:
        return parse(value)
    except ConfigError as exc:
        rule = str(exc).split(": ", 1)[-1]
        raise type(exc)(f"{_at(where, key)}: {rule}") from None


def _preset_or_table(
    where: str,
    value: Any,
    spec_type: type,
    lookup: Any,
    keys: tuple[str, ...],
    what: str,
    inherited: Any = None,
) -> tuple[Any, Mapping[str, Any], Any]:
    """``(spec, {}, None)`` for a preset name or a spec; ``(None, table, base)`` for a table
    (its keys checked), where ``base`` is its ``preset``, else ``inherited`` (the spec of the
    cluster's ``base`` preset, whose fields the table overrides one by one), else None."""
    if isinstance(value, str):
        return lookup(value), {}, None
    if isinstance(value, spec_type):
        return value, {}, None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a {what} preset name or a table, got {value!r:.80}")
    _check_keys(where, value, keys)
    preset = value.get("preset")
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f"{where}.preset: expected a {what} preset name, got {preset!r:.80}")
    return None, value, (lookup(preset) if preset is not None else inherited)


def _named(where: str, key: str, lookup: Any, value: Any) -> float:
    """``lookup(value)`` of a value given by name; its error names the field."""
    try:
        return lookup(value)
    except ConfigError as exc:
        raise type(exc)(f"{_at(where, key)}: {exc}") from None


def _lacking(where: str, what: str, fields: tuple, given: Mapping[str, Any]) -> None:
    """ConfigError naming the fields a table without a preset or base must give and does not."""
    lacking = [s.keys(n)[0] for n, s in fields if s.required and given.get(n) is None]
    if lacking:
        raise ConfigError(
            f"{where}: no {' and '.join(repr(k) for k in lacking)}: give it, or 'preset' "
            f"(a {what} preset the table overrides), or a cluster 'base'"
        )


@functools.cache
def _file_keys(spec_type: type) -> tuple[str, ...]:
    """The keys a table of ``spec_type`` may hold: ``preset``, ``name``, each field's
    spellings in field order, ``source``."""
    keys = [key for name, spelling in spellings(spec_type) for key in spelling.keys(name)]
    return ("preset", "name", *keys, "source")


def _read_fields(
    where: str,
    table: Mapping[str, Any],
    spec_type: type,
    base: Any,
    what: str,
    *,
    ranges: bool = True,
) -> dict[str, Any]:
    """The values of the spelled fields of ``spec_type`` that ``table`` gives (parsed to SI,
    type-checked, and with ``ranges`` range-checked), else ``base``'s, else their defaults."""
    fields = spellings(spec_type)
    given: dict[str, Any] = {}
    # what a table must give is named before a conflict elsewhere in it
    for required in (True, False):
        for name, spelling in fields:
            if spelling.required == required:
                keys = spelling.keys(name)
                one = _one_of(where, table, *keys) if len(keys) == 2 else table.get(keys[0])
                given[name] = one
        if required and base is None:
            _lacking(where, what, fields, given)
    defaults = {f.name: f.default for f in dataclasses.fields(spec_type)}
    kwargs: dict[str, Any] = {}
    for name, spelling in fields:
        raw, key = given[name], _given(table, *spelling.keys(name))
        if raw is None:
            if base is not None:
                kwargs[name] = getattr(base, name)
            else:
                loaded = spelling.loaded
                kwargs[name] = defaults[name] if loaded is None else loaded
        elif spelling.by_name is not None and key == spelling.by_name[0]:
            kwargs[name] = _named(where, key, spelling.by_name[1], raw)
        elif spelling.parse is not None:
            kwargs[name] = _quantity(where, key, spelling.parse, raw)
        elif spelling.rows:
            kwargs[name] = raw
        elif spelling.integer:
            kwargs[name] = _integer_key(where, key, raw)
        elif spelling.choices:
            kwargs[name] = _choice_key(where, key, raw, spelling.choices)
        else:
            kwargs[name] = _number_key(where, key, raw)
    for name, spelling in fields if ranges else ():
        shown = _at(where, _given(table, *spelling.keys(name)))
        value = kwargs[name]
        if spelling.fraction and not (math.isfinite(value) and 0 < value <= 1):
            raise ConfigError(f"{shown}: {spelling.fraction}, must be in (0, 1], got {value!r}")
        if spelling.range is not None and value is not None:
            check_range(where, name, value, shown=shown, bounds=spelling.range)
    return kwargs


def read_table(
    where: str,
    value: Any,
    spec_type: type,
    lookup: Any,
    what: str,
    inherited: Any = None,
    unnamed: str = "custom",
) -> Any:
    """The spec of a cluster file's ``[where]`` table: ``value`` is a preset name (looked up
    with ``lookup``), a spec, or a table overriding the fields it gives of its ``preset``,
    else of ``inherited`` (the cluster ``base``'s), else the fields' defaults.

    Each field is read as its :class:`~vgcsim.core.specs.Spelling` says; a bad value is a
    ConfigError naming the field as the table spelled it and the rule it breaks. A table that
    changes any value gets ``source = "user"`` unless it gives one; ``name`` defaults to the
    base's, else ``unnamed``.
    """
    spec, table, base = _preset_or_table(
        where, value, spec_type, lookup, _file_keys(spec_type), what, inherited
    )
    if spec is not None:
        return spec
    kwargs = _read_fields(where, table, spec_type, base, what)
    changed = any(
        k in table for k in _file_keys(spec_type) if k not in ("preset", "name", "source")
    )
    name = table.get("name", base.name if base else unnamed)
    source = table.get("source", base.source if base and not changed else "user")
    try:
        return spec_type(name=str(name), source=str(source), **kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


_CLUSTER_KEYS = (
    "name",
    "base",
    "topology",
    "link",
    "intra_link",
    "gpus_per_node",
    "device",
    "compute",
    "compute_scale",
    "source",
    *(key for name, spelling in spellings(ClusterSpec) for key in spelling.keys(name)),
)


def cluster_from_dict(d: Mapping[str, Any], *, default_name: str = "custom") -> ClusterSpec:
    """Build a :class:`ClusterSpec` from a dict (a parsed TOML file or :func:`cluster_to_dict`).

    Unknown keys, unknown preset names and malformed quantities raise ConfigError.
    """
    if not isinstance(d, Mapping):
        raise ConfigError(f"cluster spec must be a table, got {type(d).__name__}")
    _check_keys("", d, _CLUSTER_KEYS)
    if "base" in d and not isinstance(d["base"], str):
        raise ConfigError(f"base: expected a cluster preset name, got {d['base']!r:.80}")
    base = get_cluster(d["base"]) if "base" in d else None
    topology = d.get("topology", base.topology if base else {"kind": "star"})
    if not isinstance(topology, Mapping):
        raise ConfigError(f"topology: expected a table with 'kind', got {topology!r}")

    def link_from(where: str, value: Any, inherited: LinkSpec | None) -> LinkSpec:
        return read_table(where, value, LinkSpec, get_link, "link", inherited, unnamed=where)

    # a table overrides the fields it names of the base's link, intra link and device
    if "link" in d:
        link = link_from("link", d["link"], base.link if base else None)
    elif base is not None:
        link = base.link
    else:
        raise ConfigError("cluster spec needs 'link' (a preset name or a table) or 'base'")
    intra = d.get("intra_link", base.intra_link if base else None)
    intra_link = (
        None if intra is None else link_from("intra_link", intra, base.intra_link if base else None)
    )
    device = read_table(
        "device",
        d.get("device", base.device if base else DEFAULT_DEVICE),
        DeviceSpec,
        get_device,
        "device",
        base.device if base else None,
    )
    gpn = d.get("gpus_per_node", base.gpus_per_node if base else 1)
    if isinstance(gpn, bool) or not isinstance(gpn, int):
        raise ConfigError(f"gpus_per_node: expected an integer, got {gpn!r}")
    scale = d.get("compute_scale", base.compute_scale if base else 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise ConfigError(f"compute_scale: expected a number, got {scale!r}")
    compute = d.get("compute", base.compute if base else "model")
    if not isinstance(compute, str):
        raise ConfigError(f"compute: expected 'model' or 'trace', got {compute!r}")
    # the host fields (each as ClusterSpec declares it; ClusterSpec checks their ranges)
    hosts = _read_fields("", d, ClusterSpec, base, "cluster", ranges=False)
    name = d.get("name", base.name if base else default_name)
    if not (isinstance(name, str) and name.strip()):
        raise ConfigError(f"name: expected a non-empty string, got {name!r}")
    return ClusterSpec(
        name=name,
        topology=topology if isinstance(topology, TopologySpec) else dict(topology),
        link=link,
        intra_link=intra_link,
        gpus_per_node=gpn,
        device=device,
        compute=compute,
        compute_scale=float(scale),
        source=str(d.get("source", base.source if base else "user")),
        **hosts,
    )


def cluster_to_dict(spec: ClusterSpec) -> dict[str, Any]:
    """A JSON/TOML-able dict of ``spec`` that :func:`cluster_from_dict` reads back unchanged
    (the topology as its table, :meth:`vgcsim.core.topologies.TopologySpec.table`)."""
    out = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    for key, value in out.items():
        if dataclasses.is_dataclass(value) and not isinstance(value, TopologySpec):
            # a stripped link's kept refill is not a file field (LinkSpec.start_refill_bytes)
            out[key] = {
                k: v for k, v in dataclasses.asdict(value).items() if k != "start_refill_bytes"
            }
    out["topology"] = spec.topology.table()
    return out


def load_cluster(name_or_path: str | Path) -> ClusterSpec:
    """A cluster preset name (``"10GbE"``) or the path of a TOML cluster file."""
    text = str(name_or_path)
    if text in CLUSTER_PRESETS:
        return CLUSTER_PRESETS[text]
    path = Path(text)
    if not path.is_file():
        if path.is_dir():
            raise ConfigError(f"cluster {path} is a folder; give a TOML file or a preset name")
        if path.suffix.lower() == ".toml" or "/" in text:
            raise ConfigError(f"cluster file not found: {path}")
        raise unknown_name("cluster (preset name or TOML file)", text, CLUSTER_PRESETS)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"cluster file {path} is not valid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read cluster file {path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"cluster file {path} nests tables too deeply to read") from None
    try:
        return cluster_from_dict(data, default_name=path.stem)
    except ConfigError as exc:  # name the file; keep the error's class (UnknownNameError, ...)
        raise type(exc)(f"cluster file {path}: {exc}") from None


# ---------------------------------------------------------------- writing a fitted link's file
#
# ``vgcsim calibrate`` writes a cluster file from a fitted α-β-γ link: any object with the
# fields of the link fit (latency_s, bandwidth_Bps, gamma_s_per_byte, the host terms, the ops
# they came from, the fit's method and typical error). The text below reads back with
# :func:`load_cluster`.

#: The first line of every cluster file ``vgcsim calibrate`` writes: its marker (a file
#: without it is never replaced).
WRITTEN_BY_CALIBRATE = "# Written by vgcsim calibrate."


def toml_value(value: object) -> str:
    """A TOML literal for a string, bool, int or finite float."""
    import json  # a TOML basic string is a JSON string

    from vgcsim.core.errors import VgcsimError

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise VgcsimError(f"cannot write non-finite number {value} to a cluster file")
        return repr(value)
    return json.dumps(str(value))


def fit_source(fit: Any) -> str:
    """Where a link fit's alpha and beta come from, as the printed summary and the cluster file
    both say it."""
    ops = "+".join(fit.fit_ops)
    if fit.latency_op:
        return f"alpha from {fit.latency_op}'s small messages, beta from {ops}"
    return f"alpha and beta from {ops}"


def _fitted_link_lines(table: str, name: str, fit: Any, what: str) -> list[str]:
    """The ``[link]`` or ``[intra_link]`` table of a fitted link, with its ``source``."""
    source = (
        f"vgcsim calibrate: {what}, {fit.backend}, {fit.world_size} ranks, "
        + fit_source(fit)
        + (f", gamma from {fit.gamma_op}" if fit.gamma_op else "")
        + (f", allgatherv host cost from {fit.host_op}" if fit.host_op else "")
        + (f", its fixed part from {fit.host_call_op}" if fit.host_call_op else "")
        + (f", its padded share from {fit.share_op}" if fit.share_op else "")
        + (f", per-call cost from {'+'.join(fit.call_ops)}" if fit.call_ops else "")
        + (
            f", an allgather step's alpha from {fit.allgather_latency_op}"
            if fit.allgather_latency_op
            else ""
        )
        + (f", host CPU per byte from {fit.comm_cpu_op}" if fit.comm_cpu_op else "")
        + f" ({fit.method} fit), typical error {fit.typical_error:.1%}"
    )
    lines = [
        f"[{table}]",
        f"name = {toml_value(name)}",
        f"bandwidth_Bps = {toml_value(float(fit.bandwidth_Bps))}",
        f"latency_s = {toml_value(float(fit.latency_s))}",
        f"gamma_s_per_byte = {toml_value(float(fit.gamma_s_per_byte))}",
        f"allgatherv_host_s_per_byte = {toml_value(float(fit.allgatherv_host_s_per_byte))}",
    ]
    if fit.call_ops:
        # the software cost of one collective call, fitted with alpha from small messages
        lines.append(f"call_overhead_s = {toml_value(float(fit.call_overhead_s))}")
    if fit.allgather_latency_op:
        # alpha of an allgather-type collective's step, from the allgather's small messages
        lines.append(f"allgather_latency_s = {toml_value(float(fit.allgather_latency_s))}")
    if fit.comm_cpu_op:
        # host CPU per byte sent or received: caps a collective's rate where ranks share cores
        lines.append(f"comm_cpu_s_per_byte = {toml_value(float(fit.comm_cpu_s_per_byte))}")
    if fit.segments:
        # p2p priced by message size ([from_bytes, extra_latency_s, bandwidth_Bps])
        points = ", ".join(
            f"[{toml_value(float(b))}, {toml_value(float(e))}, {toml_value(float(w))}]"
            for b, e, w in fit.segments
        )
        lines.append(f"segments = [{points}]")
    host_table = fit.allgatherv_host_s_per_byte_table
    if host_table:
        # δ size by size ([gathered bytes, s per byte]); it prices the host time where given.
        points = ", ".join(f"[{int(b)}, {toml_value(float(v))}]" for b, v in host_table)
        lines.append(f"allgatherv_host_s_per_byte_table = [{points}]")
    if fit.host_call_op:
        # the fixed host time of one allgatherv beyond its two calls (its small messages)
        lines.append(f"allgatherv_host_s = {toml_value(float(fit.allgatherv_host_s))}")
    if fit.share_op:
        # the share of that host time an allgatherv of uneven blocks pays per padded byte
        lines.append(
            f"allgatherv_host_padded_share = {toml_value(float(fit.allgatherv_host_padded_share))}"
        )
    if "efficiency" in {f.name for f in dataclasses.fields(LinkSpec)}:
        # The fit measures payload bytes per second: nothing is left to discount.
        lines.append("efficiency = 1.0")
    return [*lines, f"source = {toml_value(source)}", ""]


def cluster_toml(
    name: str,
    fit: Any,
    device: str,
    note: str,
    intra: Any = None,
    ranks_per_node: int = 1,
    hosts: tuple[int, int] = (1, 0),
    burst_bytes: float = 0.0,
    host_sharing: str = "fullest-core",
) -> str:
    """The cluster file text for a fitted link: a non-blocking star of identical NICs, or a
    hierarchical cluster with ``ranks_per_node`` ranks per node on the fitted ``intra`` link;
    ``hosts`` = (ranks_per_host, host_cores), written where host_cores > 0 with the
    ``host_sharing`` rule the fit divided the CPU-time terms by; ``burst_bytes``,
    the host link's token bucket as given (``--burst``), written where > 0."""
    lines = [
        f"{WRITTEN_BY_CALIBRATE} {note}",
        f"name = {toml_value(name)}",
        f"device = {toml_value(device)}",
        'compute = "trace"',
    ]
    if hosts[1] > 0:
        lines += [
            f"ranks_per_host = {hosts[0]}",
            f"host_cores = {hosts[1]}",
            f"host_sharing = {toml_value(host_sharing)}",  # the fit divided by its factor
        ]
    if intra is not None:
        lines.append(f"gpus_per_node = {ranks_per_node}")
    lines += ["", "[topology]", f"kind = {toml_value('hierarchical' if intra else 'star')}", ""]
    link = _fitted_link_lines("link", name, fit, "inter-node link" if intra else "link")
    if burst_bytes > 0:  # in the [link] table, before the blank line that ends it
        link.insert(-1, f"burst_bytes = {toml_value(float(burst_bytes))}  # as given (--burst)")
    lines += link
    if intra is not None:
        lines += _fitted_link_lines("intra_link", f"{name}-intra", intra, "intra-node link")
    return "\n".join(lines)


__all__ += ["WRITTEN_BY_CALIBRATE", "cluster_toml", "fit_source", "toml_value"]
