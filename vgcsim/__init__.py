"""vgcsim: cluster simulator and cost models for gradient-compressed distributed training.

The front door: the ``vgcsim`` command (``vgcsim.cli``) and a small notebook API
(``vgcsim.api``). The work is done in the stage packages ``vgcsim.traces``,
``vgcsim.models``, ``vgcsim.simulator`` and ``vgcsim.reports`` (the repository folders
traces/, models/, simulator/, reports/) over the shared bottom layer ``vgcsim.core``.
"""

from __future__ import annotations

from vgcsim.core.version import __version__

__all__ = ["__version__"]
