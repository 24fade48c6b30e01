"""Nothing lost under misuse: the output file's lock, temporary files, journal and resume (issue 18).

Each case is what a hostile but realistic user does: two jobs on one output, a stale
journal, planted links, special files, the input named as the output, a resume with
other options or another input, a full disk. Jobs run in this process (`cli`); an
interruption is a KeyboardInterrupt raised from a decoding call, as Ctrl-C would.
Only the two-real-jobs case needs processes (marked `subprocess`).
"""

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.test_reliability import NORMAL, command, count_lines

CHUNK = 4  # batches sorted together (SORT_CHUNK_BATCHES, 32 in use): a checkpoint every 4 lines here
LINES = NORMAL * 2  # 14 lines: with --batch-size 1, chunks of 4, 4, 4 and 2 lines
IN_SECOND_CHUNK = CHUNK + 2  # decoding calls before a stop that comes after the first checkpoint
ARGS = ["--beam-size", 2, "--batch-size", 1, "--max-length", 2, "--quiet"]  # 2 steps: the files are the point


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """CHUNK batches to a chunk: the journal's rules do not depend on its size, and an input that
    spans several chunks is then 14 lines long, not 70."""
    from nmtdecode.engine import batching

    monkeypatch.setattr(batching, "SORT_CHUNK_BATCHES", CHUNK)


@pytest.fixture()
def job(model_dir, cli):
    """`job(src, out, *more)`: `nmtdecode translate` with the small fixed options above."""

    def run(src, out, *more, stdin=b""):
        return cli("translate", "--model", model_dir, "--src", src, "--output", out, *ARGS, *more, stdin=stdin)

    return run


@pytest.fixture()
def src(lines_file):
    return lines_file(LINES)


def completed_output(model_dir, directory, lines) -> tuple:
    """(input file, output) of an uninterrupted job on `lines` in `directory`, run in this process
    outside any test (for the module's shared fixtures)."""
    from nmtdecode.cli import run

    src, out = directory / "in.txt", directory / "out.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code = run([str(arg) for arg in ["translate", "--model", model_dir, "--src", src, "--output", out, *ARGS]])
    assert code == 0
    return src, out.read_bytes()


@pytest.fixture(scope="module")
def reference(model_dir, tmp_path_factory):
    """The output of an uninterrupted job on LINES (the input `src` holds)."""
    return completed_output(model_dir, tmp_path_factory.mktemp("reference"), LINES)[1]


@pytest.fixture(scope="module")
def short(model_dir, tmp_path_factory):
    """(a short input, its output) for the cases that need no interruption (read, never changed)."""
    return completed_output(model_dir, tmp_path_factory.mktemp("short"), NORMAL)


@contextlib.contextmanager
def interrupted_after(calls: int):
    """Ctrl-C instead of the decoding call after `calls` of them (CHUNK calls per chunk of a file here)."""
    from nmtdecode.engine.decoding import BatchDecoder

    original, count = BatchDecoder.decode, 0

    def fragile(self, sources, *rest):
        nonlocal count
        count += 1
        if count > calls:
            raise KeyboardInterrupt
        return original(self, sources, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BatchDecoder, "decode", fragile)
        yield


@pytest.fixture()
def no_model_load(monkeypatch):
    """Fails the test if a model is loaded: the error must come before."""
    import nmtdecode.engine.engine

    def refuse(path):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(nmtdecode.engine.engine, "load_model", refuse)


def journal_of(out):
    return out.with_name(out.name + ".tmp.progress")


def one_line(stderr: bytes) -> bool:
    return stderr.count(b"\n") == 1 and b"Traceback" not in stderr


# --- 1. two jobs, one output ---------------------------------------------------------------


def test_second_job_on_a_locked_output_fails_at_once(job, src, tmp_path, no_model_load):
    out = tmp_path / "out.txt"
    with open(tmp_path / "out.txt.lock", "w") as holder:  # what a running job holds
        fcntl.flock(holder, fcntl.LOCK_EX)
        run = job(src, out)
    assert run.returncode == 2 and one_line(run.stderr), run.stderr
    assert b"is being written by another job" in run.stderr and str(out).encode() in run.stderr
    assert not out.exists() and not (tmp_path / "out.txt.tmp").exists()


def test_lock_is_released_when_a_job_ends(job, src, tmp_path, reference):
    out = tmp_path / "out.txt"
    with interrupted_after(IN_SECOND_CHUNK):
        assert job(src, out).returncode == 130
    assert not (tmp_path / "out.txt.lock").exists()
    run = job(src, out, "--resume")
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == reference and not (tmp_path / "out.txt.lock").exists()


@pytest.mark.subprocess
def test_two_real_jobs_on_one_output(model_dir, tmp_path, lines_file, cli):
    """A second job on the output of a running one fails at once and leaves it alone. The first
    reads its input from stdin, which the test holds open: it runs until the second has failed."""
    src = lines_file(NORMAL * 2)
    out = tmp_path / "out.txt"
    first = subprocess.Popen(
        command("translate", "--model", model_dir, "--output", out, *ARGS),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not (tmp_path / "out.txt.tmp").exists() and first.poll() is None:
        time.sleep(0.02)
    second = cli("translate", "--model", model_dir, "--src", src, "--output", out, *ARGS, "--format", "jsonl")
    _, stderr = first.communicate(src.read_bytes(), timeout=300)
    assert first.returncode == 0, stderr
    assert second.returncode == 2 and b"is being written by another job (process" in second.stderr
    assert out.read_bytes().count(b"\n") == len(NORMAL) * 2 and b"{" not in out.read_bytes()


@contextlib.contextmanager
def lock_removed_after(calls: int, out, second_job: bool):
    """At decoding call `calls`, another process removes FILE.lock; with `second_job`, a second
    job then takes FILE (its own lock) and leaves a partial FILE.tmp of its own."""
    from nmtdecode.engine.decoding import BatchDecoder
    from nmtdecode.jobs.output_file import OutputFile

    original, count, taken = BatchDecoder.decode, 0, []

    def meddled(self, sources, *rest):
        nonlocal count
        count += 1
        if count == calls:
            os.remove(f"{out}.lock")
            if second_job:
                other = OutputFile(str(out))
                other.claim(False)
                other.open(False, signature="another job")
                other.stream.write("the second job's line\n")
                other.stream.flush()
                taken.append(other)
        return original(self, sources, *rest)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BatchDecoder, "decode", meddled)
        yield taken


@pytest.mark.parametrize("second_job", [False, True])
def test_a_lock_removed_while_the_job_runs_stops_it_without_harm(job, src, tmp_path, reference, second_job):
    """The job checks its lock and FILE.tmp at each checkpoint and before the final rename: with
    the lock gone it stops (exit 1). Nobody else came: its partial output resumes. A second job
    came: its FILE.tmp and lock are left as they are, and FILE is not made from them."""
    out = tmp_path / "out.txt"
    with lock_removed_after(IN_SECOND_CHUNK, out, second_job) as taken:
        run = job(src, out)
    assert run.returncode == 1 and one_line(run.stderr), run.stderr
    assert f"{out}.lock was removed while this job ran".encode() in run.stderr and not out.exists()
    if second_job:
        assert (tmp_path / "out.txt.tmp").read_text() == "the second job's line\n"
        assert (tmp_path / "out.txt.lock").exists()  # the second job's, still held
        taken[0].abandon()
        taken[0].release()
    else:
        resumed = job(src, out, "--resume")
        assert resumed.returncode == 0 and out.read_bytes() == reference, resumed.stderr


# --- 2. a stale journal ------------------------------------------------------------------


def test_new_job_removes_a_stale_journal(job, src, tmp_path, reference):
    out = tmp_path / "out.txt"
    with interrupted_after(IN_SECOND_CHUNK):  # an earlier job, interrupted after its first checkpoint
        assert job(src, out).returncode == 130
    assert json.loads(journal_of(out).read_text())["lines"] == CHUNK
    with interrupted_after(2):  # a new job, interrupted before its first checkpoint
        assert job(src, out).returncode == 130
    assert not journal_of(out).exists()
    run = job(src, out, "--resume")  # starts over: nothing of either job is final
    assert run.returncode == 0, run.stderr
    assert b"resuming" not in run.stderr and out.read_bytes() == reference


@pytest.mark.parametrize("calls", [0, 2])  # stopped at its first batch, or within its first chunk
def test_a_new_job_stopped_before_its_first_checkpoint_is_redone_by_resume(job, src, tmp_path, reference, calls):
    """An older FILE (other options) and a new job that stops before it has anything final:
    `--resume` must redo the new job, not take the older FILE for its output."""
    out = tmp_path / "out.txt"
    out.write_bytes(b"an older output, made with other options\n" * len(LINES))
    with interrupted_after(calls):
        assert job(src, out).returncode == 130
    assert out.with_name("out.txt.tmp").read_bytes() == b"" and not journal_of(out).exists()
    run = job(src, out, "--resume")
    assert run.returncode == 0, run.stderr
    assert b"is complete" not in run.stderr and out.read_bytes() == reference


@pytest.mark.parametrize("stop", ["after the rename", "before the rename"])
def test_a_stop_around_the_final_rename_is_not_a_job_to_redo(job, src, tmp_path, reference, stop):
    """The journal says the output is complete before FILE.tmp is renamed: stopped after the
    rename, --resume finds FILE complete (no model load); stopped before it, --resume renames
    without decoding a line again. Either way FILE is the job's output."""
    import nmtdecode.engine.engine
    import nmtdecode.jobs.output_file as output_file

    out, tmp = tmp_path / "out.txt", str(tmp_path / "out.txt.tmp")
    replace, remove, renamed = output_file._replace, output_file.remove, []

    def replacing(name, target):
        if name == tmp and stop == "before the rename":
            raise KeyboardInterrupt
        replace(name, target)
        renamed.append(name == tmp)

    def removing(name, *rest, **kwargs):
        if name == str(journal_of(out)) and any(renamed):  # finish's, after the rename
            raise KeyboardInterrupt
        return remove(name, *rest, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(output_file, "_replace", replacing)
        patch.setattr(output_file, "remove", removing)
        assert job(src, out).returncode == 130
    assert json.loads(journal_of(out).read_text())["complete"] is True
    decoded = []
    with pytest.MonkeyPatch.context() as patch:
        if stop == "after the rename":
            patch.setattr(nmtdecode.engine.engine, "load_model", lambda path: pytest.fail("the model was loaded"))
        else:
            from nmtdecode.engine.decoding import BatchDecoder

            original_batch = BatchDecoder.decode
            patch.setattr(BatchDecoder, "decode", lambda *a, **k: decoded.append(1) or original_batch(*a, **k))
        run = job(src, out, "--resume", "--no-quiet")
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == reference and not decoded and not journal_of(out).exists()
    assert (b"is complete" in run.stderr) == (stop == "after the rename")


# --- 3. links and special files ------------------------------------------------------------


@pytest.mark.parametrize("planted", ["out.txt.tmp", "out.txt.tmp.progress.new", "out.txt.tmp.progress", "out.txt.lock"])
def test_planted_links_are_not_followed(job, short, tmp_path, planted):
    src, reference = short
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / planted).symlink_to(victim)
    out = tmp_path / "out.txt"
    run = job(src, out)
    assert run.returncode == 0, run.stderr
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and out.read_bytes() == reference


def test_a_planted_journal_link_refuses_a_resume_saying_what_it_is(job, short, tmp_path):
    """Before: "Too many levels of symbolic links", the errno of a link opened without following."""
    src, _ = short
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "out.txt.tmp").write_text("partial\n")
    (tmp_path / "out.txt.tmp.progress").symlink_to(victim)
    run = job(src, tmp_path / "out.txt", "--resume")
    assert run.returncode == 2 and one_line(run.stderr) and victim.read_text() == "precious\n"
    assert run.stderr.decode() == (
        f"nmtdecode: error: --resume: cannot read {tmp_path / 'out.txt.tmp.progress'}: it is a symbolic "
        "link, which a job never follows (and did not make)\n"
    )


def test_link_to_a_device_is_written_through(job, lines_file, tmp_path):
    src = lines_file(NORMAL)
    link = tmp_path / "out.txt"
    link.symlink_to(os.devnull)
    run = job(src, link)
    assert run.returncode == 0, run.stderr
    assert link.is_symlink() and os.readlink(link) == os.devnull
    assert not (tmp_path / "out.txt.tmp").exists() and not journal_of(link).exists()
    run = job(src, link, "--resume")
    assert run.returncode == 2 and one_line(run.stderr) and b"is not a regular file" in run.stderr
    assert link.is_symlink()


def test_fifo_output_is_written_through(job, short, tmp_path):
    src, reference = short
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        run = job(src, fifo)
        reader.join(timeout=10)  # the job has ended: the reader has its end of file
    finally:
        if reader.is_alive():  # the job never opened the FIFO: let the reader go
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert run.returncode == 0, run.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received == [reference]


def test_replaced_output_keeps_its_mode(job, short, tmp_path):
    src, reference = short
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    out.chmod(0o640)
    run = job(src, out)
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == reference and stat.S_IMODE(out.stat().st_mode) == 0o640


# --- 4. the input destroyed ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["temp file", "same path", "link", "hard link"])
def test_input_that_the_job_would_overwrite_is_refused(job, src, tmp_path, how):
    data = src.read_bytes()  # in.txt
    if how == "temp file":
        out = tmp_path / "x.txt"
        named = tmp_path / "x.txt.tmp"
        os.replace(src, named)
    else:
        out, named = src, src
        if how == "link":
            named = tmp_path / "link.txt"
            named.symlink_to(src)
        elif how == "hard link":
            named = tmp_path / "hard.txt"
            os.link(src, named)
    files = sorted(tmp_path.iterdir())
    run = job(named, out)
    assert run.returncode == 2 and one_line(run.stderr), run.stderr
    assert b"would be overwritten before it is read" in run.stderr
    assert named.read_bytes() == data and sorted(tmp_path.iterdir()) == files


@pytest.mark.parametrize("link", [False, True])
def test_a_prefix_file_the_job_would_overwrite_is_refused_by_its_name(job, src, tmp_path, link):
    """Before: `--prefix P --output P` decoded and wrote the translations over the prefixes (exit 0)."""
    prefix = tmp_path / "prefix.txt"
    prefix.write_bytes(src.read_bytes())
    out = prefix
    if link:
        out = tmp_path / "link.txt"
        out.symlink_to(prefix)
    run = job(src, out, "--prefix", prefix)
    assert run.returncode == 2 and one_line(run.stderr), run.stderr
    assert f"--prefix {prefix} is the output file".encode() in run.stderr
    assert prefix.read_bytes() == src.read_bytes()


def test_score_names_the_target_file_it_would_overwrite(model_dir, src, tmp_path, cli):
    tgt = tmp_path / "tgt.txt"
    tgt.write_bytes(src.read_bytes())
    run = cli("score", "-m", model_dir, "--src", src, "--tgt", tgt, "--output", tgt)
    assert run.returncode == 2 and f"--tgt {tgt} is the output file".encode() in run.stderr
    assert tgt.read_bytes() == src.read_bytes()


@pytest.mark.subprocess
def test_stdin_redirected_from_the_output_is_refused(model_dir, src, tmp_path):
    data = src.read_bytes()
    with open(src, "rb") as stdin:
        run = subprocess.run(
            command("translate", "--model", model_dir, "--output", src, *ARGS),
            stdin=stdin,
            capture_output=True,
            timeout=300,
        )
    assert run.returncode == 2 and b"would be overwritten before it is read" in run.stderr, run.stderr
    assert src.read_bytes() == data


# --- 4b. the model destroyed ---------------------------------------------------------------
# Before: `--output DIR/model.safetensors` turned the weights into a few bytes of text (exit 0).


@pytest.fixture()
def own_model(model_dir, tmp_path):
    """A copy of the test model that a test may find overwritten."""
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    return model


def assert_spared(model, run, files_before, option="output"):
    assert run.returncode == 2 and one_line(run.stderr), run.stderr
    assert f"nmtdecode: error: {option}: ".encode() in run.stderr
    assert b"is a file the model is read from" in run.stderr and b"writing it would destroy the model" in run.stderr
    assert {p.name: p.read_bytes() for p in model.iterdir()} == files_before  # nothing written, nothing beside


@pytest.mark.parametrize("name", ["config.yaml", "model.safetensors", "spm.model"])
@pytest.mark.parametrize("option", ["output", "dump_beam"])
def test_an_output_naming_a_file_of_the_model_is_refused_before_anything_is_written(
    own_model, src, cli, name, option, tmp_path
):
    before = {p.name: p.read_bytes() for p in own_model.iterdir()}
    flags = (
        ["--output", own_model / name]
        if option == "output"
        else ["--output", tmp_path / "o.txt", "--dump-beam", own_model / name]
    )
    run = cli("translate", "--model", own_model, "--src", src, *flags, *ARGS)
    assert_spared(own_model, run, before, option)


@pytest.mark.parametrize("how", ["link", "hard link", "ensemble member", "score"])
def test_the_model_is_spared_whatever_names_it(own_model, model_dir, src, cli, tmp_path, how):
    before = {p.name: p.read_bytes() for p in own_model.iterdir()}
    target, models, command_name = own_model / "config.yaml", [own_model], "translate"
    extra = list(ARGS)
    if how == "link":
        target = tmp_path / "link.txt"
        target.symlink_to(own_model / "config.yaml")
    elif how == "hard link":
        target = tmp_path / "hard.txt"
        os.link(own_model / "model.safetensors", target)
    elif how == "ensemble member":
        models = [model_dir, own_model]
    else:
        command_name, extra = "score", ["--tgt", src, "--quiet"]
    run = cli(command_name, "--model", *models, "--src", src, "--output", target, *extra)
    assert_spared(own_model, run, before)


def test_a_tokenizer_only_the_load_finds_is_spared_too(tmp_path, cli, lines_file):
    """An OpenNMT-py checkpoint names its SentencePiece models inside the pickle: the refusal comes
    once the model has loaded, still before the output is opened."""
    from tests.models.formats.test_opennmt_files import VOCAB, tiny_checkpoint
    from tests.helpers import train_sentencepiece

    spm_file = train_sentencepiece(tmp_path, vocab_size=40)
    path = tiny_checkpoint(
        tmp_path / "model.pt",
        vocab=VOCAB,
        transforms=["sentencepiece"],
        src_subword_model=spm_file,
        tgt_subword_model=spm_file,
    )
    data = Path(spm_file).read_bytes()
    run = cli("translate", "--model", path, "--src", lines_file(["a b"]), "--output", spm_file, *ARGS)
    assert run.returncode == 2 and one_line(run.stderr) and b"is a file the model is read from" in run.stderr
    assert Path(spm_file).read_bytes() == data and not os.path.exists(f"{spm_file}.lock")


def test_a_new_file_in_the_model_s_directory_is_written(own_model, src, cli, reference):
    run = cli("translate", "--model", own_model, "--src", src, "--output", own_model / "out.txt", *ARGS)
    assert run.returncode == 0, run.stderr
    assert (own_model / "out.txt").read_bytes() == reference


# --- 5. resume accepts only the same job ----------------------------------------------------


def test_resume_refuses_another_quantization(job, src, tmp_path):
    out = tmp_path / "out.txt"
    with interrupted_after(IN_SECOND_CHUNK):
        assert job(src, out).returncode == 130
    run = job(src, out, "--resume", "--quantize", "int8")
    assert run.returncode == 2 and b"written with other options" in run.stderr
    assert json.loads(journal_of(out).read_text())["lines"] == CHUNK  # still resumable as it was


def other_sentencepiece(directory, vocab_size: int = 48) -> str:
    """A SentencePiece model as tests/helpers.py trains it, on other lines: same size, other scores."""
    import random

    import sentencepiece as spm

    from tests.helpers import WORDS

    rng = random.Random(7)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(300)]
    prefix = str(directory / "other")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=prefix,
        vocab_size=vocab_size,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return prefix + ".model"


@pytest.mark.parametrize("where", ["tok/spm.model", "../shared/spm.model"])
def test_resume_refuses_a_tokenizer_changed_outside_the_model_folder(model_dir, src, tmp_path, cli, where):
    """The signature hashes every file the loader reads (here the SentencePiece model a native
    config names in a subfolder or beside the model's folder), not only the folder's own files."""
    import shutil

    import yaml

    model = tmp_path / "models" / "m"
    shutil.copytree(model_dir, model)
    spm_file = model / where
    spm_file.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(model / "spm.model", spm_file)
    config = yaml.safe_load((model / "config.yaml").read_text())
    config["tokenizer"] = {"source": where}
    (model / "config.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out.txt"
    args = ["translate", "--model", model, "--src", src, "--output", out, *ARGS]
    with interrupted_after(IN_SECOND_CHUNK):
        assert cli(*args).returncode == 130
    shutil.copy(other_sentencepiece(tmp_path), spm_file)
    run = cli(*args, "--resume")
    assert run.returncode == 2 and b"written with other options or another model" in run.stderr, run.stderr


def test_resume_refuses_an_input_edited_in_place(job, src, tmp_path):
    out = tmp_path / "out.txt"
    with interrupted_after(IN_SECOND_CHUNK):
        assert job(src, out).returncode == 130
    before = src.stat()
    data = src.read_bytes()
    edited = data.replace(b"the house is red .", b"the mouse is red .", 1)
    assert len(edited) == len(data) and edited != data
    src.write_bytes(edited)
    os.utime(src, ns=(before.st_atime_ns, before.st_mtime_ns))  # size and time as before
    run = job(src, out, "--resume")
    assert run.returncode == 2 and one_line(run.stderr), run.stderr
    assert b"the input is not the one" in run.stderr and f"first {CHUNK} lines".encode() in run.stderr


def test_resume_from_stdin_checks_the_lines_fed_again(job, src, tmp_path):
    out = tmp_path / "out.txt"
    data = src.read_bytes()
    with interrupted_after(IN_SECOND_CHUNK):
        assert job("-", out, stdin=data).returncode == 130
    other = data.replace(b"good morning", b"good evening", 1)
    run = job("-", out, "--resume", stdin=other)
    assert run.returncode == 2 and b"the input is not the one" in run.stderr
    run = job("-", out, "--resume", stdin=data[: data.index(b"\n") + 1])  # fewer lines than were done
    assert run.returncode == 2 and b"the input is not the one" in run.stderr
    run = job("-", out, "--resume", stdin=data)
    assert run.returncode == 0, run.stderr
    assert b"resuming after input line" in run.stderr
    stdin_reference = tmp_path / "stdin-reference.txt"  # stdin is read in smaller chunks than a file
    assert job("-", stdin_reference, stdin=data).returncode == 0
    assert out.read_bytes() == stdin_reference.read_bytes()


def test_interrupted_job_resumes_byte_identical(job, src, tmp_path):
    out = tmp_path / "out.jsonl"
    more = ["--format", "jsonl", "--token-scores"]
    jsonl_reference = tmp_path / "reference.jsonl"
    assert job(src, jsonl_reference, *more).returncode == 0
    with interrupted_after(IN_SECOND_CHUNK):
        assert job(src, out, *more).returncode == 130
    with interrupted_after(CHUNK + 1):  # interrupted again, in the third chunk
        assert job(src, out, *more, "--resume").returncode == 130
    assert json.loads(journal_of(out).read_text())["lines"] == 2 * CHUNK
    run = job(src, out, *more, "--resume")
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == jsonl_reference.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.jsonl", "reference.jsonl"]


# --- 6. smaller promises -------------------------------------------------------------------


def test_missing_input_is_found_before_the_model_loads(job, tmp_path, no_model_load):
    out = tmp_path / "out.txt"
    run = job(tmp_path / "missing.txt", out)
    assert run.returncode == 1 and one_line(run.stderr) and b"cannot read" in run.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["missing directory", "file as directory"])
def test_unwritable_output_is_found_before_the_model_loads(job, src, tmp_path, where, no_model_load):
    (tmp_path / "file").write_text("")
    out = tmp_path / ("missing" if where == "missing directory" else "file") / "out.txt"
    run = job(src, out)
    assert run.returncode == 2 and one_line(run.stderr) and b"output: cannot" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "in.txt"]


def test_resume_of_a_completed_job_does_nothing(job, short, tmp_path, cli, model_dir):
    src, reference = short
    out = tmp_path / "out.txt"
    assert job(src, out).returncode == 0  # a completed job
    import nmtdecode.engine.engine

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nmtdecode.engine.engine, "load_model", lambda path: pytest.fail("the model was loaded"))
        run = cli("translate", "--model", model_dir, "--src", src, "--output", out, "--resume")
    assert run.returncode == 0, run.stderr
    assert b"is complete" in run.stderr and out.read_bytes() == reference


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"signature": 7', b"\xff\xfe"])
def test_corrupt_journal_is_named(job, src, tmp_path, content):
    out = tmp_path / "out.txt"
    (tmp_path / "out.txt.tmp").write_text("partial\n")
    journal_of(out).write_bytes(content)
    run = job(src, out, "--resume")
    assert run.returncode == 2 and one_line(run.stderr), run.stderr
    assert str(journal_of(out)).encode() in run.stderr and b"not a valid progress record" in run.stderr


def test_journal_missing_a_field_is_named(job, src, tmp_path):
    out = tmp_path / "out.txt"
    with interrupted_after(IN_SECOND_CHUNK):
        assert job(src, out).returncode == 130
    record = json.loads(journal_of(out).read_text())
    del record["bytes"]
    journal_of(out).write_text(json.dumps(record))
    run = job(src, out, "--resume")
    assert run.returncode == 2 and b"not a valid progress record (no 'bytes')" in run.stderr


CHECKSUM, OUTPUT = b"checksum does not match", b"does not hold the output its progress record describes"


@pytest.mark.parametrize(
    "edit, consistent, tmp_edit, refused",
    [
        (lambda r: r.update(bytes=100), False, None, CHECKSUM),  # the record edited by hand
        (lambda r: r.update(bytes=r["bytes"] - 5), False, None, CHECKSUM),
        (lambda r: r.update(lines=CHUNK - 1), False, None, CHECKSUM),
        (lambda r: r.update(bytes=r["bytes"] - 5), True, None, OUTPUT),  # ... with its checksum made anew
        (lambda r: r.update(lines=CHUNK - 1), True, None, b"the input is not the one"),
        (None, False, lambda data: data[:10] + bytes([data[10] ^ 1]) + data[11:], OUTPUT),  # FILE.tmp edited
        (None, False, lambda data: data + b"not final\n", None),  # past the record: cut, and the job resumes
    ],
    ids=[
        "bytes 100",
        "bytes - 5",
        "lines",
        "bytes - 5, checksum too",
        "lines, checksum too",
        "tmp edited",
        "tmp appended",
    ],
)
def test_the_journal_is_checked_against_itself_and_the_temporary_file(
    job, src, tmp_path, reference, edit, consistent, tmp_edit, refused
):
    """A resumed job continues only from a record whose checksum holds, whose FILE.tmp holds the
    bytes it describes (their hash), and whose input lines are the input's."""
    from nmtdecode.jobs.output_file import _checksum

    out, tmp = tmp_path / "out.txt", tmp_path / "out.txt.tmp"
    with interrupted_after(IN_SECOND_CHUNK):
        assert job(src, out).returncode == 130
    record = json.loads(journal_of(out).read_text())
    assert record["lines"] == CHUNK
    if edit is not None:
        edit(record)
    if consistent:
        record["check"] = _checksum(record)
    journal_of(out).write_text(json.dumps(record))
    if tmp_edit is not None:
        tmp.write_bytes(tmp_edit(tmp.read_bytes()))
    run = job(src, out, "--resume")
    if refused is None:
        assert run.returncode == 0 and out.read_bytes() == reference, run.stderr
    else:
        assert run.returncode == 2 and refused in run.stderr and one_line(run.stderr), run.stderr
        assert not out.exists()


def test_a_journal_that_cannot_be_made_mid_run_is_a_runtime_failure(job, src, tmp_path, reference):
    """Exit 1 (the run failed), not 2 (the request was wrong): the same command with --resume
    continues once the journal can be written."""
    import nmtdecode.jobs.output_file as output_file

    out, create, made = tmp_path / "out.txt", output_file._create, []

    def refusing(path):
        if path.endswith(".progress.new"):
            if made:  # the second checkpoint's
                raise output_file.OutputRefused(f"output: cannot create {path}: Permission denied")
            made.append(path)
        return create(path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(output_file, "_create", refusing)
        run = job(src, out)
    assert run.returncode == 1 and b"cannot create" in run.stderr and one_line(run.stderr), run.stderr
    resumed = job(src, out, "--resume")
    assert resumed.returncode == 0 and out.read_bytes() == reference, resumed.stderr


def test_full_disk_names_the_file_and_stays_resumable(job, src, tmp_path, reference):
    out = tmp_path / "out.txt"
    real_write, tmp = os.write, str(tmp_path / "out.txt.tmp")
    writes = 0

    def full_after_first_chunk(fd, data):
        nonlocal writes
        try:
            ours = os.readlink(f"/proc/self/fd/{fd}") == tmp
        except OSError:
            ours = False
        writes += ours
        if ours and writes > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "write", full_after_first_chunk)
        run = job(src, out)
    assert run.returncode == 1 and one_line(run.stderr), run.stderr
    assert f"cannot write {tmp}: No space left on device".encode() in run.stderr
    run = job(src, out, "--resume")  # once there is room again
    assert run.returncode == 0, run.stderr
    assert out.read_bytes() == reference


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_device_names_the_file(job, lines_file, tmp_path):
    src = lines_file(NORMAL)
    link = tmp_path / "out.txt"
    link.symlink_to("/dev/full")
    run = job(src, link)
    assert run.returncode == 1 and one_line(run.stderr), run.stderr
    assert f"cannot write {link}: No space left on device".encode() in run.stderr
    assert link.is_symlink()


def test_stdout_output_still_works(model_dir, cli):
    run = cli("translate", "--model", model_dir, *ARGS, stdin=b"good morning\n\nthank you\n")
    assert run.returncode == 0 and count_lines(run.stdout) == 3
