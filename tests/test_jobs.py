"""Many files with one model load (issue 21): `--src a b --output x y`, `--output-dir`/`--suffix`,
a config file's `jobs:` list, and single-valued options refused when repeated.

Each file is a job of its own for output safety: locked, written through FILE.tmp, resumable
on its own and skipped under --resume when complete. Jobs run in this process (`cli`).
"""

import os

import pytest
import yaml

from tests.test_output_file import ARGS, IN_SECOND_CHUNK, LINES, interrupted_after
from tests.test_output_file import small_chunks  # noqa: F401 (autouse: here too)
from tests.test_reliability import NORMAL


@pytest.fixture()
def loads(monkeypatch):
    """The number of model loads so far, as a one-element list."""
    import nmtdecode.engine.engine

    count, original = [0], nmtdecode.engine.engine.load_model

    def counting(*args):
        count[0] += 1
        return original(*args)

    monkeypatch.setattr(nmtdecode.engine.engine, "load_model", counting)
    return count


@pytest.fixture()
def translate(model_dir, cli):
    """`translate(*more)`: `nmtdecode translate --model MODEL` with the small fixed options."""
    return lambda *more: cli("translate", "--model", model_dir, *ARGS, *more)


@pytest.fixture()
def two_inputs(lines_file):
    return lines_file(NORMAL, "a.en"), lines_file(list(reversed(NORMAL)) + ["", "water"], "b.en")


def single(translate, src, out):
    run = translate("--src", src, "--output", out)
    assert run.returncode == 0, run.stderr
    return out.read_bytes()


def test_several_inputs_are_translated_with_one_model_load(translate, two_inputs, tmp_path, loads):
    a, b = two_inputs
    expected = [single(translate, a, tmp_path / "ref-a.de"), single(translate, b, tmp_path / "ref-b.de")]
    loads[0] = 0
    run = translate("--src", a, b, "--output", tmp_path / "a.de", tmp_path / "b.de")
    assert run.returncode == 0, run.stderr
    assert [(tmp_path / "a.de").read_bytes(), (tmp_path / "b.de").read_bytes()] == expected
    assert loads[0] == 1


def test_output_dir_and_suffix_name_the_outputs(translate, two_inputs, tmp_path):
    a, b = two_inputs
    expected = single(translate, b, tmp_path / "ref-b.de")
    out = tmp_path / "out"
    out.mkdir()
    run = translate("--src", a, b, "--output-dir", out, "--suffix", ".de")
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in out.iterdir()) == ["a.de", "b.de"]
    assert (out / "b.de").read_bytes() == expected
    run = translate("--src", a, "--suffix", ".fr")  # no --output-dir: beside the input
    assert run.returncode == 0 and (tmp_path / "a.fr").exists()


@pytest.mark.parametrize("suffix, name", [("de", "a.de"), (".de", "a.de"), ("_de.txt", "a_de.txt"), (None, "a.en")])
def test_output_dir_is_created_and_suffix_is_an_extension(translate, two_inputs, tmp_path, suffix, name):
    a, _ = two_inputs
    expected = single(translate, a, tmp_path / "ref-a.de")
    out = tmp_path / "new" / "out"  # missing, and so is its parent
    run = translate("--src", a, "--output-dir", out, *(["--suffix", suffix] if suffix else []))
    assert run.returncode == 0, run.stderr
    assert [p.name for p in out.iterdir()] == [name] and (out / name).read_bytes() == expected


def test_several_inputs_without_outputs_say_how_to_name_them(translate, two_inputs, loads):
    run = translate("--src", *two_inputs)
    assert run.returncode == 2 and loads[0] == 0 and run.stderr.count(b"\n") == 1
    assert b"2 input files need an output each" in run.stderr and b"--output-dir" in run.stderr


def test_a_missing_output_directory_is_named_not_the_lock_file(translate, two_inputs, tmp_path):
    run = translate("--src", two_inputs[0], "--output", tmp_path / "nowhere" / "a.de")
    assert run.returncode != 0 and b"nowhere does not exist" in run.stderr and b".lock" not in run.stderr


@pytest.mark.parametrize("outputs", [["x.de"], ["x.de", "y.de", "z.de"]])
def test_one_output_per_input_or_a_clear_error(translate, two_inputs, tmp_path, outputs, loads):
    run = translate("--src", *two_inputs, "--output", *[tmp_path / o for o in outputs])
    assert run.returncode == 2 and b"2 input files but" in run.stderr and loads[0] == 0


def test_several_inputs_to_stdout_or_one_output_twice_are_refused(translate, two_inputs, tmp_path, loads):
    assert translate("--src", *two_inputs).returncode == 2
    run = translate("--src", *two_inputs, "--output", tmp_path / "x.de", tmp_path / "x.de")
    assert run.returncode == 2 and b"output of two jobs" in run.stderr and loads[0] == 0


@pytest.mark.parametrize("spelling", ["symlink", "dangling symlink", "hard link", "dotdot", "linked folder"])
def test_two_outputs_that_are_one_file_are_refused_however_spelt(translate, two_inputs, tmp_path, loads, spelling):
    """Outputs are compared as files (device and inode, or the path with links and `..`
    resolved), not as names: the second job would overwrite the first's output."""
    first = tmp_path / "a.de"
    if spelling != "dangling symlink":
        first.write_text("an older output\n", encoding="utf-8")
    second = tmp_path / "link.de"
    if spelling in ("symlink", "dangling symlink"):
        second.symlink_to("a.de")
    elif spelling == "hard link":
        os.link(first, second)
    elif spelling == "dotdot":
        (tmp_path / "sub").mkdir()
        second = tmp_path / "sub" / ".." / "a.de"
    else:
        (tmp_path / "folder").symlink_to(tmp_path, target_is_directory=True)
        second = tmp_path / "folder" / "a.de"
    run = translate("--src", *two_inputs, "--output", first, second)
    assert run.returncode == 2 and loads[0] == 0
    assert f"output: {second} is the output of two jobs (it is {first}".encode() in run.stderr
    assert not first.exists() or first.read_text(encoding="utf-8") == "an older output\n"


def test_an_input_that_another_job_writes_is_refused(translate, two_inputs, loads):
    a, b = two_inputs
    run = translate("--src", a, b, "--output", b, a.with_name("c.de"))
    assert run.returncode == 2 and b"overwritten before it is read" in run.stderr and loads[0] == 0


def test_each_file_resumes_on_its_own_and_complete_ones_are_skipped(translate, lines_file, tmp_path, loads):
    a, b = lines_file(NORMAL, "a.en"), lines_file(LINES, "b.en")  # b: several chunks (small_chunks)
    expected = single(translate, b, tmp_path / "ref-b.de")
    outputs = [tmp_path / "a.de", tmp_path / "b.de"]
    with interrupted_after(len(NORMAL) + IN_SECOND_CHUNK):  # a completes, b stops after its first chunk
        assert translate("--src", a, b, "--output", *outputs).returncode == 130
    assert outputs[0].exists() and not outputs[1].exists()
    loads[0] = 0
    run = translate("--src", a, b, "--output", *outputs, "--resume")
    assert run.returncode == 0, run.stderr
    assert outputs[1].read_bytes() == expected and loads[0] == 1
    run = translate("--src", a, b, "--output", *outputs, "--resume", "--no-quiet")
    assert run.returncode == 0 and run.stderr.count(b"is complete") == 2 and loads[0] == 1  # no load at all


def test_resume_redoes_every_file_a_stopped_run_had_not_finished(translate, lines_file, tmp_path):
    """Older outputs of all three files; a new run completes a, stops within b's first chunk,
    never starts c: `--resume` keeps the new a and makes b and c anew, none of the older ones."""
    sources = [lines_file(NORMAL, "a.en"), lines_file(LINES, "b.en"), lines_file(NORMAL[:3], "c.en")]
    expected = [single(translate, s, tmp_path / f"ref-{i}.de") for i, s in enumerate(sources)]
    outputs = [tmp_path / "a.de", tmp_path / "b.de", tmp_path / "c.de"]
    for out in outputs:
        out.write_bytes(b"an older output\n")
    with interrupted_after(len(NORMAL) + 2):
        assert translate("--src", *sources, "--output", *outputs).returncode == 130
    assert outputs[0].read_bytes() == expected[0]
    run = translate("--src", *sources, "--output", *outputs, "--resume", "--no-quiet")
    assert run.returncode == 0, run.stderr
    assert [out.read_bytes() for out in outputs] == expected and run.stderr.count(b"is complete") == 1


@pytest.mark.parametrize(
    "args, named",
    [
        (["--max-length", "4", "--max-length", "5"], b"--max-length"),
        (["--beam-size", "4", "--beam-size", "5"], b"--beam-size"),
        (["-k", "4", "--beam-size", "4"], b"--beam-size"),
        (["--format", "text", "--format", "jsonl"], b"--format"),
    ],
)
def test_a_single_valued_option_given_twice_is_refused_by_name(cli, lines_file, args, named):
    run = cli("translate", "--src", lines_file(NORMAL), *args)
    assert run.returncode == 2 and named in run.stderr and run.stderr.count(b"\n") == 1


def test_config_jobs_share_options_and_override_per_item(model_dir, translate, two_inputs, tmp_path, cli, loads):
    a, b = two_inputs
    expected_a = single(translate, a, tmp_path / "ref-a.de")
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        b,
        "--output",
        tmp_path / "ref-b.jsonl",
        "--format",
        "jsonl",
        "--n-best",
        2,
        "--beam-size",
        2,
        "--batch-size",
        1,
        "--max-length",
        2,
    )
    assert run.returncode == 0, run.stderr
    expected_b = (tmp_path / "ref-b.jsonl").read_bytes()
    (tmp_path / "sub").mkdir()
    (tmp_path / "elsewhere").mkdir()
    config = tmp_path / "sub" / "jobs.yaml"  # relative paths are the config file's
    config.write_text(
        yaml.safe_dump(
            {
                "model": str(model_dir),
                "beam_size": 2,
                "batch_size": 1,
                "max_length": 2,
                "quiet": True,
                "jobs": [
                    {"src": "../a.en", "output": "a.de"},
                    {"src": "../b.en", "output": "b.jsonl", "format": "jsonl", "n_best": 2},
                ],
            }
        )
    )
    loads[0] = 0
    run = cli("translate", "-c", config, cwd=tmp_path / "elsewhere")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "sub" / "a.de").read_bytes() == expected_a
    assert (tmp_path / "sub" / "b.jsonl").read_bytes() == expected_b
    assert loads[0] == 1


def test_config_jobs_may_not_change_the_model_load(model_dir, lines_file, tmp_path, cli, loads):
    config = tmp_path / "jobs.yaml"
    config.write_text(
        yaml.safe_dump(
            {"model": str(model_dir), "jobs": [{"src": str(lines_file(NORMAL)), "output": "x.de", "device": "cpu"}]}
        )
    )
    run = cli("translate", "-c", config)
    assert run.returncode == 2 and b"item 1 sets 'device'" in run.stderr and loads[0] == 0


def test_command_line_inputs_replace_the_config_jobs(model_dir, translate, two_inputs, tmp_path, cli):
    a, b = two_inputs
    config = tmp_path / "jobs.yaml"
    config.write_text(yaml.safe_dump({"model": str(model_dir), "jobs": [{"src": "a.en", "output": "never.de"}]}))
    run = cli("translate", "-c", config, *ARGS, "--src", b, "--output", tmp_path / "b.de")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "b.de").exists() and not (tmp_path / "never.de").exists()


def test_config_file_lists_inputs_and_derives_outputs_beside_it(model_dir, translate, two_inputs, tmp_path, cli):
    a, b = two_inputs
    expected = single(translate, b, tmp_path / "ref-b.de")
    config = tmp_path / "files.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": str(model_dir),
                "beam_size": 2,
                "batch_size": 1,
                "max_length": 2,
                "src": ["a.en", "b.en"],
                "output_dir": "out",
                "suffix": ".de",
            }
        )
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    run = cli("translate", "-c", config, "--quiet", cwd=tmp_path / "elsewhere")
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.de", "b.de"]
    assert (tmp_path / "out" / "b.de").read_bytes() == expected


@pytest.mark.parametrize(
    "top, flags, message",
    [
        ({"src": "x.en"}, [], b"give either jobs: or src:/output:"),
        ({}, ["--output", "y.de"], b"give --src with --output"),
        ({"suffix": 3}, [], b"suffix: expected a string"),
    ],
)
def test_ambiguous_job_lists_are_refused(model_dir, tmp_path, cli, top, flags, message, loads):
    config = tmp_path / "jobs.yaml"
    config.write_text(yaml.safe_dump({"model": str(model_dir), **top, "jobs": [{"src": "a.en", "output": "a.de"}]}))
    run = cli("translate", "-c", config, *flags)
    assert run.returncode == 2 and message in run.stderr and loads[0] == 0


def test_output_dir_without_suffix_keeps_the_name_and_never_the_input_itself(translate, two_inputs, tmp_path):
    a, _ = two_inputs
    run = translate("--src", a, "--output-dir", a.parent)  # the input's own directory: it would be the input
    assert run.returncode == 2 and b"is the output file" in run.stderr and b"--suffix" in run.stderr
    assert a.read_text().splitlines() == NORMAL


@pytest.mark.parametrize(
    "first, second, message",
    [
        ({"dump_beam": "d.jsonl"}, {"dump_beam": "d.jsonl"}, "dump_beam: {tmp}/d.jsonl is the beam dump of two jobs"),
        ({"dump_beam": "b.de"}, {}, "output: {tmp}/b.de is the beam dump of another job"),
        ({}, {"dump_beam": "a.de"}, "dump_beam: {tmp}/a.de is the output of another job"),
    ],
)
def test_a_beam_dump_that_another_job_writes_is_refused(
    first, second, message, model_dir, cli, two_inputs, tmp_path, loads
):
    """A job's --dump-beam file is a file it writes, as its output is: no two jobs share one."""
    a, b = two_inputs
    config = tmp_path / "jobs.yaml"
    jobs = [{"src": str(a), "output": "a.de", **first}, {"src": str(b), "output": "b.de", **second}]
    config.write_text(yaml.safe_dump({"model": str(model_dir), "jobs": jobs}))
    run = cli("translate", "-c", config, *ARGS)
    assert run.returncode == 2 and loads[0] == 0, run.stderr
    assert run.stderr.strip().endswith(message.format(tmp=tmp_path).encode()), run.stderr
    assert not any(tmp_path.glob("*.de")) and not (tmp_path / "d.jsonl").exists()


@pytest.mark.parametrize(
    "outputs, message",
    [
        (["x.de.tmp", "x.de"], "output: {tmp}/x.de.tmp is the output of another job"),
        (["x.de", "x.de.tmp"], "output: {tmp}/x.de.tmp is a file kept beside the output {tmp}/x.de of another job"),
        (
            ["x.de", "x.de.tmp.progress"],
            "output: {tmp}/x.de.tmp.progress is a file kept beside the output {tmp}/x.de of another job",
        ),
        (["x.de.lock", "x.de"], "output: {tmp}/x.de.lock is the output of another job"),
    ],
)
def test_an_output_that_is_another_jobs_side_file_is_refused(outputs, message, translate, two_inputs, tmp_path, loads):
    """Before: the first job's finished output was renamed to x.de.tmp, which the second job then
    deleted to make its own temporary file; only x.de remained, exit 0."""
    a, b = two_inputs
    run = translate("--src", a, b, "--output", *[tmp_path / name for name in outputs])
    assert run.returncode == 2 and loads[0] == 0, run.stderr
    assert run.stderr.strip().endswith(message.format(tmp=tmp_path).encode()), run.stderr
    assert not any(tmp_path.glob("x.de*"))


def test_a_beam_dump_beside_its_own_output_is_refused(translate, two_inputs, tmp_path, loads):
    a, _ = two_inputs
    run = translate("--src", a, "--output", tmp_path / "x.de", "--dump-beam", tmp_path / "x.de.lock")
    assert run.returncode == 2 and loads[0] == 0, run.stderr
    assert run.stderr.strip().endswith(
        f"dump_beam: {tmp_path}/x.de.lock is the job's --output (a file kept beside "
        f"the output {tmp_path}/x.de); give it a file of its own".encode()
    )
