"""The package version has one source below every stage, equal to the distribution's."""

from __future__ import annotations

import importlib.metadata

import vgcsim
from vgcsim.core import version
from vgcsim.core.provenance import package_versions


def test_the_version_is_the_distributions_and_the_package_root_re_exports_it():
    assert version.__version__ == importlib.metadata.version("vgcsim")
    assert vgcsim.__version__ is version.__version__
    assert package_versions()["vgcsim"] == version.__version__
