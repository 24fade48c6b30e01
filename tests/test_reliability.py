"""Nothing lost: bad input, bad setup, interruption and resume, memory faults, streaming.
Each case runs the CLI in this process (the `cli` fixture) unless a real process is the
point: signals, kill -9, a closed pipe, line-by-line streaming (marked `subprocess`)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from nmtdecode.jobs import signals

from tests.helpers import DEMO, build_native_model, wait_for_checkpoint

NORMAL = [
    "the house is red .",
    "a dog and a cat sleep in the garden .",
    "good morning",
    "thank you",
    "where is the station ?",
    "water is cold .",
    "my friend reads a book .",
]


def command(*args):
    """The command line of `python -m nmtdecode ARGS`, for tests that need a real process."""
    return [sys.executable, "-m", "nmtdecode", *map(str, args)]


def count_lines(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def held_fifo(path, data: bytes) -> int:
    """A FIFO at `path` holding `data` (under the pipe's 64 KiB), held open for writing by this
    process (Linux opens a FIFO read-write without waiting): a job reading it decodes `data`,
    then waits for more, so that it cannot end before the test stops it, however fast the
    machine. Returns the descriptor, for the test to close."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR)
    os.write(fd, data)
    return fd


@pytest.mark.subprocess
@pytest.mark.parametrize("name, code", [("model.safetensors", 1), ("spm.model", 1), ("config.yaml", 2)])
def test_a_fifo_in_place_of_a_model_file_is_refused_not_waited_on(model_dir, tmp_path, name, code):
    """Nothing ever writes to it: reading it would block forever (with SIGTERM and Ctrl-C
    ignored while start-up reads it). Every file a loader reads must be a regular file; a
    config.yaml that is not one is named before the format is told from it (exit 2)."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    (model / name).unlink()
    os.mkfifo(model / name)
    run = subprocess.run(command("translate", "--model", model), input=b"hello\n", capture_output=True, timeout=60)
    assert run.returncode == code and len(run.stderr.splitlines()) == 1, run.stderr
    message = f"{model / name} is not a regular file (a FIFO, device or folder): a model's files must be files"
    message = message if code == 1 else f"model: {message}"
    assert message.encode() in run.stderr


def test_invalid_utf8_stops_with_file_and_line(model_dir, tmp_path, cli):
    src = tmp_path / "in.txt"
    src.write_bytes(b"good morning\nbad \xff\xfe here\nthank you\n")
    run = cli("translate", "--model", model_dir, "--src", src, "--output", tmp_path / "out.txt")
    assert run.returncode == 1
    assert f"{src}:2: invalid UTF-8".encode() in run.stderr
    assert b"Traceback" not in run.stderr
    assert not (tmp_path / "out.txt").exists()


def test_invalid_utf8_replaced_and_counted(model_dir, tmp_path, cli):
    src = tmp_path / "in.txt"
    src.write_bytes(b"good morning\nbad \xff\xfe here\nthank \xc3 you\nwater")
    run = cli("translate", "--model", model_dir, "--src", src, "--on-invalid-utf8", "replace", "--max-length", 8)
    assert run.returncode == 0, run.stderr
    assert count_lines(run.stdout) == 4
    assert b"2 lines had invalid UTF-8" in run.stderr and b"2 lines with invalid UTF-8 replaced" in run.stderr


def test_overlong_lines_are_cut_with_a_warning(model_dir, tmp_path, cli):
    src = tmp_path / "in.txt"
    src.write_text("good morning\n" + "the house is red . " * 200 + "\nthank you\n", encoding="utf-8")
    run = cli("translate", "--model", model_dir, "--src", src, "--max-src-length", 20, "--max-length", 8)
    assert run.returncode == 0, run.stderr
    assert count_lines(run.stdout) == 3
    assert b"are cut" in run.stderr and b"1 source line truncated" in run.stderr
    run = cli("translate", "--model", model_dir, "--src", src, "--max-length", 8)  # the model's own 128 positions
    assert run.returncode == 0 and count_lines(run.stdout) == 3 and b"1 source line truncated" in run.stderr


def test_truncated_weights_exit_1(model_dir, tmp_path, cli):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in os.listdir(model_dir):
        data = (model_dir / name).read_bytes()
        (broken / name).write_bytes(data[: len(data) // 2] if name == "model.safetensors" else data)
    run = cli("translate", "--model", broken, stdin=b"hello\n")
    assert run.returncode == 1
    assert b"cannot read weights" in run.stderr and b"Traceback" not in run.stderr
    debug = cli("translate", "--model", broken, "--debug", stdin=b"hello\n")
    assert b"Traceback" in debug.stderr


def test_vocabulary_mismatch_exit_1(model_dir, tmp_path, cli):
    other = build_native_model(tmp_path / "other", vocab_size=40)
    (other / "spm.model").write_bytes((model_dir / "spm.model").read_bytes())  # 48 pieces for 40 rows
    run = cli("translate", "--model", other, stdin=b"hello\n")
    assert run.returncode == 1 and b"48 pieces, the model 40" in run.stderr


def test_empty_input_gives_empty_output(model_dir, tmp_path, cli):
    for content in (b"", b"\n\n  \n"):
        (tmp_path / "in.txt").write_bytes(content)
        run = cli("translate", "--model", model_dir, "--src", tmp_path / "in.txt", "--output", tmp_path / "o.txt")
        assert run.returncode == 0, run.stderr
        assert (tmp_path / "o.txt").read_bytes() == b"\n" * count_lines(content)


def test_not_a_model_directory_exit_2(tmp_path, cli):
    run = cli("translate", "--model", tmp_path, stdin=b"hello\n")
    assert run.returncode == 2 and b"is not a model directory" in run.stderr


def test_yaml_is_loaded_safely(tmp_path, cli):
    config = tmp_path / "evil.yaml"
    config.write_text('beam_size: !!python/object/apply:os.system ["touch PWNED"]\n')
    run = cli("translate", "-c", config, stdin=b"", cwd=tmp_path)
    assert run.returncode == 2 and b"not valid YAML" in run.stderr
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.subprocess
def test_resume_after_kill_is_byte_identical(model_dir, tmp_path, cli):
    """kill -9 mid-job, then the same command with --resume: the output of an uninterrupted run,
    byte for byte. The killed job reads a FIFO at the input's path that holds all but the last
    lines (`held_fifo`); the resumed one reads them all from a regular file there (a job's input
    is identified by the bytes of its lines, not by the file's kind)."""
    rng = random.Random(0)
    lines = [rng.choice(NORMAL + [""]) for _ in range(150)]  # chunks of 64 lines (--batch-size 2)
    data = "".join(line + "\n" for line in lines).encode()
    src = tmp_path / "in.txt"
    src.write_bytes(data)
    args = [
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--beam-size",
        3,
        "--batch-size",
        2,
        "--max-length",
        8,
        "--format",
        "jsonl",
        "--token-scores",
        "--quiet",
    ]
    reference = cli(*args, "--output", tmp_path / "reference.jsonl")
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "out.jsonl"
    progress = tmp_path / "out.jsonl.tmp.progress"
    src.unlink()
    fifo = held_fifo(src, "".join(line + "\n" for line in lines[:140]).encode())
    try:
        proc = subprocess.Popen(command(*args, "--output", out), stderr=subprocess.DEVNULL)
        wait_for_checkpoint(progress, 64, proc, timeout=120)  # the first chunk is final; the job goes on
        proc.kill()  # kill -9: no chance to clean up
        proc.wait()
    finally:
        os.close(fifo)
    assert not out.exists() and json.loads(progress.read_text())["lines"] < 150  # really interrupted
    src.unlink()
    src.write_bytes(data)
    resumed = cli(*args, "--output", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert b"resuming after input line" in resumed.stderr
    assert out.read_bytes() == (tmp_path / "reference.jsonl").read_bytes()
    assert not progress.exists() and not (tmp_path / "out.jsonl.tmp").exists()


@pytest.mark.subprocess
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_exits_cleanly_and_stays_resumable(model_dir, tmp_path, sig, code, cli):
    """SIGINT or SIGTERM mid-job: exit code 130 or 143, a message saying how to go on (no
    traceback), and the same command with --resume completes the output. The job reads a FIFO
    holding all but the last lines (`held_fifo`), so the signal comes before its end; the
    resumed job reads a regular file."""
    lines = NORMAL * 10  # chunks of 32 lines (--batch-size 1)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    args = ["translate", "--model", model_dir, "--src", src, "--batch-size", 1, "--max-length", 8, "--output", out]
    fifo = held_fifo(src, "".join(line + "\n" for line in lines[:64]).encode())
    try:
        proc = subprocess.Popen(command(*args), stderr=subprocess.PIPE)
        wait_for_checkpoint(tmp_path / "out.txt.tmp.progress", 32, proc, timeout=120)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
    finally:
        os.close(fifo)
    assert proc.returncode == code
    assert b"rerun with --resume" in stderr and b"Traceback" not in stderr
    src.unlink()
    src.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    resumed = cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert count_lines(out.read_bytes()) == len(lines)


def test_resume_refuses_other_options(model_dir, tmp_path, lines_file, cli):
    src = lines_file(NORMAL)
    out = tmp_path / "out.txt"
    (tmp_path / "out.txt.tmp").write_text("partial\n")
    (tmp_path / "out.txt.tmp.progress").write_text(json.dumps({"lines": 1, "bytes": 8, "signature": "other"}))
    run = cli("translate", "--model", model_dir, "--src", src, "--output", out, "--resume")
    assert run.returncode == 2 and b"written with other options" in run.stderr


def test_resume_needs_an_output_file(model_dir, cli):
    run = cli("translate", "--model", model_dir, "--resume", stdin=b"hi\n")
    assert run.returncode == 2 and b"needs an output file" in run.stderr


@pytest.mark.slow
def test_ten_thousand_mixed_lines_keep_their_count(model_dir, tmp_path, cli):
    rng = random.Random(1)
    kinds = [
        lambda: b"",
        lambda: b"   \t",
        lambda: rng.choice(NORMAL).encode(),
        lambda: b"bad \xff\xfe",
        lambda: (rng.choice(NORMAL) + " ").encode() * 60,
    ]
    data = b"\n".join(rng.choice(kinds)() for _ in range(10_000)) + b"\n"
    (tmp_path / "in.txt").write_bytes(data)
    for fmt in ("text", "jsonl"):
        run = cli(
            "translate",
            "--model",
            model_dir,
            "--src",
            tmp_path / "in.txt",
            "--beam-size",
            2,
            "--batch-size",
            64,
            "--on-invalid-utf8",
            "replace",
            "--format",
            fmt,
            "--max-src-length",
            64,
            "--max-length",
            2,
        )  # 2 steps: the count is what counts
        assert run.returncode == 0, run.stderr
        assert count_lines(run.stdout) == 10_000
    assert [json.loads(line)["index"] for line in run.stdout.splitlines()] == list(range(10_000))


@pytest.mark.parametrize("seed", range(3))
def test_random_bytes_never_crash_or_lose_lines(model_dir, seed, cli):
    rng = random.Random(seed)
    alphabet = bytes(range(256))
    data = b"".join(bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) + b"\n" for _ in range(60))
    data += bytes(rng.choice(alphabet) for _ in range(7)).replace(b"\n", b"")  # no final newline
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--on-invalid-utf8",
        "replace",
        "--format",
        "jsonl",
        "--max-length",
        8,
        stdin=data,
    )
    assert run.returncode == 0, run.stderr
    assert count_lines(run.stdout) == count_lines(data)


@pytest.mark.subprocess
def test_stream_answers_each_line_as_it_arrives(model_dir):
    proc = subprocess.Popen(
        command("translate", "--model", model_dir, "--stream", "--quiet"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    answers = []
    for line in ("good morning", "", "thank you"):
        proc.stdin.write((line + "\n").encode())
        proc.stdin.flush()
        answers.append(proc.stdout.readline())  # blocks until this very line is answered
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    proc.stdout.close()
    proc.stderr.close()
    assert len(answers) == 3 and answers[1] == b"\n" and all(a.endswith(b"\n") for a in answers)


@pytest.mark.subprocess
def test_broken_pipe_is_quiet(model_dir):
    """`nmtdecode translate | head -1`: once the reader is gone, the next output ends the program
    without a traceback or error message. The test is the reader: it takes the first line and
    closes the pipe, and only then gives the program more input (so that it writes again)."""
    proc = subprocess.Popen(
        command("translate", "--model", model_dir, "--batch-size", 1, "--max-length", 8),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdin.write(b"good morning\n")
    proc.stdin.flush()
    first = proc.stdout.readline()  # as `head -1` reads
    proc.stdout.close()  # and exits
    proc.stdin.write("".join(line + "\n" for line in NORMAL).encode())
    proc.stdin.close()
    stderr = proc.stderr.read()
    proc.stderr.close()
    proc.wait(timeout=60)
    assert count_lines(first) == 1
    assert b"Traceback" not in stderr and b"Error" not in stderr


def test_out_of_memory_on_one_sentence_names_the_line(model_dir, tmp_path, lines_file, monkeypatch):
    from nmtdecode.options.config import Config
    from nmtdecode.engine.decoding import BatchDecoder
    from nmtdecode.jobs.run import translate_job

    src = lines_file(NORMAL[:3])
    config = Config.from_values(
        {"model": str(model_dir), "src": str(src), "quiet": True, "output": str(tmp_path / "out.txt")}
    )
    original = BatchDecoder.decode

    def hopeless(self, sources, *rest):
        if any(len(s) > 8 for s in sources):
            raise RuntimeError("CUDA out of memory")
        return original(self, sources, *rest)

    monkeypatch.setattr(BatchDecoder, "decode", hopeless)
    with pytest.raises(RuntimeError, match="out of memory on input line 2, even alone"):
        translate_job(config)


def catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has its own SIGTERM handler yet (Linux: SigCgt in /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask >> (signal.SIGTERM - 1) & 1)


@pytest.mark.subprocess
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_during_start_up_ends_at_once_with_one_line(tmp_path, lines_file, sig, code):
    """While torch imports and the model loads, a signal ends the program: never swallowed by
    an `except` inside an import, never a half-imported module, never a traceback."""
    demo = DEMO
    src, out = lines_file(NORMAL), tmp_path / "out.txt"
    for delay in (0.0, 0.1, 0.25):  # after the handlers are in place: torch alone takes longer to import
        proc = subprocess.Popen(
            command("translate", "--model", demo, "--src", src, "--output", out),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.time() + 60
        while proc.poll() is None and not catches_sigterm(proc.pid) and time.time() < deadline:
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == code, (delay, stderr)
        assert stderr.splitlines() == [
            f"nmtdecode: {'interrupted' if code == 130 else 'terminated'} during start-up; nothing was written".encode()
        ], (delay, stderr)
        assert stdout == b"" and not out.exists()
        mark = tmp_path / "out.txt.tmp"  # claimed before the load: an empty mark, or nothing yet
        assert not mark.exists() or mark.read_bytes() == b""
        mark.unlink(missing_ok=True)


def test_a_stop_while_the_model_loads_leaves_no_older_output_looking_complete(
    cli, model_dir, lines_file, tmp_path, monkeypatch
):
    """A job stopped during the load (tens of seconds for a large model), then rerun with --resume
    (a requeued Slurm job passes it every time): the output of an earlier, complete job must not
    be taken for this one's. The job marks its output unfinished before the model loads."""
    from nmtdecode.jobs import run

    out = tmp_path / "out.txt"
    assert (
        cli(
            "translate", "--model", model_dir, "--src", lines_file(["good morning"], "old.txt"), "--output", out
        ).returncode
        == 0
    )
    older = out.read_bytes()
    src = lines_file(NORMAL)
    loading = run.load_engine

    def stopped_while_loading(config):
        raise signals.Terminated()

    monkeypatch.setattr(run, "load_engine", stopped_while_loading)
    assert cli("translate", "--model", model_dir, "--src", src, "--output", out).returncode == 143
    assert (tmp_path / "out.txt.tmp").read_bytes() == b""  # the mark
    monkeypatch.setattr(run, "load_engine", loading)
    resumed = cli("translate", "--model", model_dir, "--src", src, "--output", out, "--resume")
    assert resumed.returncode == 0 and b"nothing to do" not in resumed.stderr
    fresh = tmp_path / "fresh.txt"
    assert cli("translate", "--model", model_dir, "--src", src, "--output", fresh).returncode == 0
    assert out.read_bytes() == fresh.read_bytes() != older


@pytest.mark.parametrize(
    "command, note",
    [
        (["translate", "--output", "-"], b"is written directly, so the job cannot be resumed: run it again"),
        (["translate", "--output", "OUT"], b"partial output kept, rerun with --resume to continue"),
        (["score", "--tgt", "SRC", "--output", "OUT"], b"nothing was kept (score writes its output file whole)"),
        (["score", "--tgt", "SRC"], b"is written directly, so the job cannot be resumed: run it again"),
    ],
)
def test_a_stopped_job_says_what_it_left(cli, model_dir, lines_file, tmp_path, monkeypatch, command, note):
    """Ctrl-C during decoding: "rerun with --resume" only where there is something to resume."""
    from nmtdecode.engine.decoding import BatchDecoder

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    src = lines_file(NORMAL)
    monkeypatch.setattr(BatchDecoder, "_forced", interrupted)  # score's decoding
    monkeypatch.setattr(BatchDecoder, "decode", interrupted)
    args = [str(src) if a == "SRC" else str(tmp_path / "out.txt") if a == "OUT" else a for a in command]
    run = cli(args[0], "--model", model_dir, "--src", src, *args[1:])
    last = run.stderr.splitlines()[-1]
    assert run.returncode == 130 and last.startswith(b"nmtdecode: interrupted; ") and note in last, run.stderr
