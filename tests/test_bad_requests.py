"""Requests that must be refused with one clear line, and the paths of a config file.

Bad numbers and files in the configuration exit 2 naming the key or the file; a model
whose own configuration is malformed exits 1 naming its file and key; a closed stdin is
said as such. Each case runs the CLI in this process (the `cli` fixture).
"""

import json
import os
import shutil
import sys

import pytest
import yaml

from nmtdecode.cli import run

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture()
def nmtdecode(cli):
    """`nmtdecode ARGS`, in this process, text in and out."""
    return lambda *args, stdin="hello\n", cwd=None: cli(*args, stdin=stdin, text=True, cwd=cwd)


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("nmtdecode: error: "), stderr
    return lines[0]


@pytest.mark.parametrize("key, value", [("alpha", ".nan"), ("alpha", ".inf"), ("alpha", "-.inf"),
                                        ("max_len_a", ".nan"), ("max_len_a", ".inf")])
def test_non_finite_numbers_in_a_config_file_are_refused(model_dir, tmp_path, nmtdecode, key, value):
    config = tmp_path / "job.yaml"
    config.write_text(f"model: {model_dir}\n{key}: {value}\n")
    run = nmtdecode("translate", "-c", config)
    assert run.returncode == 2 and run.stdout == ""
    assert f"{key}: must be a finite number" in one_line(run.stderr)


@pytest.mark.parametrize("flag", ["--alpha", "--max-len-a"])
def test_non_finite_numbers_on_the_command_line_are_refused(model_dir, nmtdecode, flag):
    run = nmtdecode("translate", "--model", model_dir, flag, "nan")
    assert run.returncode == 2
    assert f"{flag[2:].replace('-', '_')}: must be a finite number" in one_line(run.stderr)


def test_config_file_with_invalid_utf8_exits_2_naming_it(tmp_path, nmtdecode):
    config = tmp_path / "job.yaml"
    config.write_bytes(b"beam_size: 4\nsrc_lang: caf\xe9\n")  # Latin-1, not UTF-8
    run = nmtdecode("translate", "-c", config)
    assert run.returncode == 2
    assert f"config file {config}:2: invalid UTF-8" in one_line(run.stderr)


def test_demo_config_works_from_another_directory(tmp_path, nmtdecode):
    """configs/demo.yaml names its model relative to itself, not to the working directory."""
    sample = os.path.join(REPO, "data", "demo", "sample.en")
    run = nmtdecode("translate", "-c", os.path.join(REPO, "configs", "demo.yaml"), "--src", sample, "--quiet",
                    cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    with open(sample, encoding="utf-8") as f:
        assert len(run.stdout.splitlines()) == len(f.read().splitlines())


def test_paths_in_a_config_file_are_relative_to_it_and_flags_to_the_cwd(model_dir, tmp_path, nmtdecode):
    jobs, elsewhere = tmp_path / "jobs", tmp_path / "elsewhere"
    jobs.mkdir()
    elsewhere.mkdir()
    (jobs / "in.txt").write_text("good morning\nthank you\n")
    (elsewhere / "other.txt").write_text("water\n")
    config = jobs / "job.yaml"
    config.write_text(yaml.safe_dump({"model": os.path.relpath(model_dir, jobs), "src": "in.txt",
                                      "output": "out.txt", "quiet": True}))
    run = nmtdecode("translate", "-c", config, cwd=elsewhere)
    assert run.returncode == 0, run.stderr
    assert len((jobs / "out.txt").read_text().splitlines()) == 2  # beside the config, not in the cwd
    assert not (elsewhere / "out.txt").exists()
    run = nmtdecode("translate", "-c", config, "--src", "other.txt", "--output", "flag.txt", cwd=elsewhere)
    assert run.returncode == 0, run.stderr
    assert len((elsewhere / "flag.txt").read_text().splitlines()) == 1  # flags: relative to the cwd
