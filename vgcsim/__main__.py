"""Allow ``python -m vgcsim``."""

from vgcsim.cli import entry

entry()
