"""The examples/ pipeline (issue 21): the Makefile's pattern rule under `make -j`, and the jobs
config, both giving what `nmtdecode translate` gives file by file."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.test_docs import split_page

ROOT = REPO
EXAMPLES, DEMO = ROOT / "examples", ROOT / "data" / "demo"
NAMES = ["animals", "drinks", "greetings"]


@pytest.fixture()
def corpus(tmp_path):
    """A copy of examples/corpus (the tests never write into the repository)."""
    shutil.copytree(EXAMPLES / "corpus", tmp_path / "corpus", ignore=shutil.ignore_patterns("*.de", "*.jsonl"))
    return tmp_path / "corpus"


def expected(cli, src, *more):
    run = cli("translate", "--model", DEMO, "--src", src, "--quiet", *more, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_makefile_translates_a_directory_in_parallel_and_redoes_only_edited_sources(corpus, cli):
    make = [
        "make",
        "-s",
        "-C",
        str(EXAMPLES),
        "-j3",
        f"DIR={corpus}",
        f"MODEL={DEMO}",
        f"NMTDECODE={sys.executable} -m nmtdecode",
    ]
    assert subprocess.run(make, capture_output=True).returncode == 0
    for name in NAMES:
        assert (corpus / f"{name}.de").read_text(encoding="utf-8") == expected(
            cli, corpus / f"{name}.en", "--beam-size", 5
        )
    (corpus / "drinks.en").write_text("water\n", encoding="utf-8")  # newer than its output
    run = subprocess.run(make + ["--no-print-directory"], capture_output=True, text=True)
    assert run.returncode == 0 and (corpus / "drinks.de").read_text() == expected(
        cli, corpus / "drinks.en", "--beam-size", 5
    )
    assert sorted(p.name for p in corpus.iterdir()) == sorted([f"{n}.{e}" for n in NAMES for e in ("en", "de")])


def test_jobs_config_runs_every_item_with_its_own_options(corpus, tmp_path, cli):
    config = tmp_path / "jobs.yaml"
    config.write_text((EXAMPLES / "jobs.yaml").read_text().replace("../data/demo", str(DEMO)))
    assert cli("translate", "-c", config).returncode == 0
    assert (corpus / "greetings.de").read_text() == expected(cli, corpus / "greetings.en", "--beam-size", 5)
    assert (corpus / "animals.de").read_text() == expected(cli, corpus / "animals.en", "--beam-size", 2)
    assert (corpus / "drinks.jsonl").read_text() == expected(
        cli, corpus / "drinks.en", "--format", "jsonl", "--n-best", 3
    )


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_summaries_target_works_on_a_fresh_checkout(tmp_path, cli):
    """The shipped articles are summarized with the model given (the demo model stands in for BART
    here), one summary line per article line; without the model, one message says where it comes from."""
    articles = tmp_path / "articles"
    shutil.copytree(EXAMPLES / "articles", articles)
    make = [
        "make",
        "-s",
        "-C",
        str(EXAMPLES),
        "summaries",
        f"ARTICLES={articles}",
        f"NMTDECODE={sys.executable} -m nmtdecode",
    ]
    missing = subprocess.run(make + [f"BART={tmp_path / 'bart-large-cnn'}"], capture_output=True, text=True)
    assert missing.returncode != 0 and "huggingface-cli download facebook/bart-large-cnn" in missing.stderr
    assert not (articles / "news.sum").exists()
    run = subprocess.run(make + [f"BART={DEMO}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (articles / "news.sum").read_text() == expected(
        cli, articles / "news.txt", "-c", ROOT / "configs" / "bart-summarization.yaml"
    )


def fresh_checkout(tmp_path):
    """A copy of the checkout as a clone has it: no .venv, no build outputs (bench/out and scripts/out
    can hold gigabytes of converted models), nothing written by tests."""
    ignored = shutil.ignore_patterns(
        ".venv",
        "out",
        "scratch",
        ".git",
        "build",
        "dist",
        "*.egg-info",
        "__pycache__",
        ".pytest_cache",
        "*.de",
        "*.sum",
        ".mypy_cache",
        ".ruff_cache",
    )
    return Path(shutil.copytree(ROOT, tmp_path / "nmtdecode", ignore=ignored))


def test_the_readmes_pip_commands_name_the_checkout_they_run_in():
    """`pip install ./nmtdecode` failed inside the checkout (./nmtdecode is the package, not the
    project): each pip command of the README names a directory holding pyproject.toml."""
    code, _ = split_page(ROOT / "README.md")
    commands = [line.split("#")[0].split() for _, line in code if line.startswith("pip ")]
    assert len(commands) >= 2
    for words in commands:
        target = [w for w in words[2:] if not w.startswith("-") and w != "dist"][-1].strip("\"'")
        assert (ROOT / target.split("[")[0] / "pyproject.toml").is_file(), words


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_examples_run_from_a_fresh_checkout_and_from_a_pip_install(tmp_path, cli):
    """The Makefile takes the checkout's .venv/bin/nmtdecode after `make setup`, else the one pip
    installed on PATH: here a wheel built from a fresh copy as the README says (offline: no build
    isolation, no dependencies) and installed apart, translating the corpus as the CLI does."""
    checkout = fresh_checkout(tmp_path)
    assert (
        "../.venv/bin/nmtdecode translate"
        not in subprocess.run(["make", "-n", "-C", str(checkout / "examples")], capture_output=True, text=True).stdout
    )
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "nmtdecode").write_text("")
    planned = subprocess.run(["make", "-n", "-C", str(checkout / "examples")], capture_output=True, text=True).stdout
    assert planned.count("../.venv/bin/nmtdecode translate --model ../data/demo") == len(NAMES)
    shutil.rmtree(checkout / ".venv")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", "dist", "."],
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    site = tmp_path / "site"
    [wheel] = (checkout / "dist").glob("nmtdecode-*.whl")
    assert subprocess.run(pip + ["install", "--no-deps", "--target", str(site), str(wheel)]).returncode == 0
    env = {**os.environ, "PATH": f"{site / 'bin'}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(site)}
    run = subprocess.run(
        ["make", "-s", "-C", str(checkout / "examples"), "-j2"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    for name in NAMES:
        assert (checkout / "examples" / "corpus" / f"{name}.de").read_text(encoding="utf-8") == expected(
            cli, EXAMPLES / "corpus" / f"{name}.en", "--beam-size", 5
        )
