"""`make setup` installs quietly: the package metadata raises no setuptools warnings."""

import warnings

import pytest

from tests.helpers import REPO

ROOT = REPO


def test_pyproject_applies_without_setuptools_warnings():
    """A `project.license` table (deprecated since setuptools 77) printed a boxed warning per install."""
    pytest.importorskip("setuptools", minversion="77")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    assert [str(w.message).splitlines()[0] for w in caught] == []
    assert dist.metadata.license_expression == "MIT"
    assert any(r.startswith("torch>=2.4") for r in dist.install_requires)
