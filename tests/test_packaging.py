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


def test_make_test_sets_up_the_browser_or_says_in_one_line_what_to_install(tmp_path):
    """`make test` depends on `browser`: without Chromium, and not root (so no apt), it says what
    to install in one line and goes on (the browser test then fails naming it)."""
    import shutil
    import subprocess

    from tests.helpers import REPO

    dry = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True)
    assert "command -v chromium" in dry.stdout  # the browser step runs before pytest
    bin_dir = tmp_path / "bin"  # a PATH with make's shell tools, no chromium, and a user who is not root
    bin_dir.mkdir()
    for tool in ("sh", "make"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_dir / "id").chmod(0o755)
    done = subprocess.run(
        ["make", "--no-print-directory", "browser"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "nmtdecode: the browser test needs Chromium, which this user cannot install: "
        "install the chromium package (apt-get install chromium) and rerun"
    ]


MARKS = ("slow", "subprocess", "cuda", "parity", "precision")


@pytest.mark.parametrize(
    "markexpr, skips",
    [
        ("not slow and not subprocess and not parity", True),  # make test-fast
        ("not parity", True),
        ("precision", False),  # a test marked both precision and parity would be chosen
        ("not parity or slow", False),
        ("parity", False),
        ("", False),
    ],
)
def test_parity_modules_are_left_uncollected_only_when_every_parity_test_is_deselected(markexpr, skips):
    from tests.conftest import _deselects_parity

    assert _deselects_parity(markexpr, MARKS) is skips
