"""vgcsim: cluster simulator and cost models for gradient-compressed distributed training.

The front door: the ``vgcsim`` command (``vgcsim.cli``) and a small notebook API
(``vgcsim.api``). The work is done in the top-level packages ``traces``, ``models``,
``simulator`` and ``reports``.
"""

from __future__ import annotations

__version__ = "0.1.0"
