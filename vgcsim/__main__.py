"""Allow ``python -m vgcsim``."""

from vgcsim.cli import main

raise SystemExit(main())
