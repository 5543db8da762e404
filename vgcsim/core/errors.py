"""The project's exception hierarchy.

Every error a user can cause (bad config, bad units, corrupt files, unknown names,
disconnected topologies, NaN during training) is a subclass of :class:`VgcsimError`.
The CLI prints the message and exits with status 2; any other exception is a bug and
keeps its traceback.
"""

from __future__ import annotations


class VgcsimError(Exception):
    """Base class for every error caused by user input or user files."""


class ConfigError(VgcsimError):
    """A configuration key, value or file is invalid (unknown key, wrong type, bad range)."""


class UnitError(ConfigError):
    """A human quantity string ("10Gbps", "5us", "64MiB") could not be parsed."""


class UnknownNameError(ConfigError):
    """A registry lookup failed; the message lists the valid names."""


class TraceError(VgcsimError):
    """A trace run directory is missing, truncated, corrupt, or violates an invariant."""


class SchemaVersionError(TraceError):
    """A file was written with a schema version this version of vgcsim cannot read."""


class ResultsError(VgcsimError):
    """A result table is missing, corrupt, or from an unknown schema version."""


class TopologyError(ConfigError):
    """A topology spec is invalid (disconnected, non-positive bandwidth, unknown kind)."""


class TrainingDivergedError(VgcsimError):
    """NaN or Inf appeared in the loss or the gradients; the recorded prefix is kept."""


def unknown_name(kind: str, name: str, valid: object) -> UnknownNameError:
    """Build the standard "unknown X 'name'; valid: a, b, c" error."""
    names = ", ".join(sorted(str(v) for v in valid))  # type: ignore[attr-defined]
    return UnknownNameError(f"unknown {kind} {name!r}; valid: {names}")
