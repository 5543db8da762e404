"""Run Python in a child process where torch, scikit-learn and mlxtend cannot be imported, as on
a core install without the training extra."""

from __future__ import annotations

import subprocess
import sys

#: Makes the training stack unimportable in the child before anything else runs.
BLOCK = "import sys\nfor m in ('torch', 'sklearn', 'mlxtend'): sys.modules[m] = None\n"


def run_without_training_extra(code: str, **kwargs) -> subprocess.CompletedProcess:
    """``python -c BLOCK + code``, output captured as text (``kwargs`` to subprocess.run)."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code], capture_output=True, text=True, **kwargs
    )


def api_call_without_training_extra(call: str) -> subprocess.CompletedProcess:
    """Run the ``vgcsim.api`` expression ``call`` (``api.record(...)``) without the training
    extra: exit status 3 and the error's text on stdout where it raises MissingExtraError."""
    return run_without_training_extra(
        "from vgcsim import api\n"
        "try:\n"
        f"    {call}\n"
        "except api.MissingExtraError as exc:\n"
        "    print(exc)\n"
        "    raise SystemExit(3)\n"
    )
