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

from .helpers import build_native_model

NORMAL = ["the house is red .", "a dog and a cat sleep in the garden .", "good morning", "thank you",
          "where is the station ?", "water is cold .", "my friend reads a book ."]


def command(*args):
    """The command line of `python -m nmtdecode ARGS`, for tests that need a real process."""
    return [sys.executable, "-m", "nmtdecode", *map(str, args)]


def count_lines(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


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
    run = cli("translate", "--model", model_dir, "--src", src, "--on-invalid-utf8", "replace")
    assert run.returncode == 0, run.stderr
    assert count_lines(run.stdout) == 4
    assert b"2 lines had invalid UTF-8" in run.stderr and b"2 lines with invalid UTF-8 replaced" in run.stderr


def test_overlong_lines_are_cut_with_a_warning(model_dir, tmp_path, cli):
    src = tmp_path / "in.txt"
    src.write_text("good morning\n" + "the house is red . " * 200 + "\nthank you\n", encoding="utf-8")
    run = cli("translate", "--model", model_dir, "--src", src, "--max-src-length", 20)
    assert run.returncode == 0, run.stderr
    assert count_lines(run.stdout) == 3
    assert b"are cut" in run.stderr and b"1 source line truncated" in run.stderr
    run = cli("translate", "--model", model_dir, "--src", src)  # the model's own 128 positions
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
def test_resume_after_kill_is_byte_identical(model_dir, tmp_path, lines_file, cli):
    rng = random.Random(0)
    src = lines_file([rng.choice(NORMAL + [""]) for _ in range(1500)])
    args = ["translate", "--model", model_dir, "--src", src, "--beam-size", 3, "--batch-size", 4,
            "--format", "jsonl", "--token-scores", "--quiet"]
    reference = cli(*args, "--output", tmp_path / "reference.jsonl")
    assert reference.returncode == 0, reference.stderr

    out = tmp_path / "out.jsonl"
    progress = tmp_path / "out.jsonl.tmp.progress"
    proc = subprocess.Popen(command(*args, "--output", out), stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not (progress.exists() and json.loads(progress.read_text())["lines"] >= 256):
        time.sleep(0.05)
    proc.kill()  # kill -9: no chance to clean up
    proc.wait()
    assert not out.exists() and json.loads(progress.read_text())["lines"] < 1500  # really interrupted
    resumed = cli(*args, "--output", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert b"resuming after input line" in resumed.stderr
    assert out.read_bytes() == (tmp_path / "reference.jsonl").read_bytes()
    assert not progress.exists() and not (tmp_path / "out.jsonl.tmp").exists()


@pytest.mark.subprocess
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_exits_cleanly_and_stays_resumable(model_dir, tmp_path, lines_file, sig, code, cli):
    src = lines_file(NORMAL * 200)
    out = tmp_path / "out.txt"
    args = ["translate", "--model", model_dir, "--src", src, "--batch-size", 4, "--output", out]
    proc = subprocess.Popen(command(*args), stderr=subprocess.PIPE)
    progress = tmp_path / "out.txt.tmp.progress"
    deadline = time.time() + 300
    while time.time() < deadline and not progress.exists():
        time.sleep(0.05)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code
    assert b"rerun with --resume" in stderr and b"Traceback" not in stderr
    resumed = cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert count_lines(out.read_bytes()) == len(NORMAL) * 200


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
    kinds = [lambda: b"", lambda: b"   \t", lambda: rng.choice(NORMAL).encode(),
             lambda: b"bad \xff\xfe", lambda: (rng.choice(NORMAL) + " ") .encode() * 60]
    data = b"\n".join(rng.choice(kinds)() for _ in range(10_000)) + b"\n"
    (tmp_path / "in.txt").write_bytes(data)
    for fmt in ("text", "jsonl"):
        run = cli("translate", "--model", model_dir, "--src", tmp_path / "in.txt", "--beam-size", 2,
                  "--batch-size", 64, "--on-invalid-utf8", "replace", "--format", fmt,
                  "--max-src-length", 64)
        assert run.returncode == 0, run.stderr
        assert count_lines(run.stdout) == 10_000
    assert [json.loads(line)["index"] for line in run.stdout.splitlines()] == list(range(10_000))


@pytest.mark.parametrize("seed", range(3))
def test_random_bytes_never_crash_or_lose_lines(model_dir, seed, cli):
    rng = random.Random(seed)
    alphabet = bytes(range(256))
    data = b"".join(bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) + b"\n" for _ in range(60))
    data += bytes(rng.choice(alphabet) for _ in range(7)).replace(b"\n", b"")  # no final newline
    run = cli("translate", "--model", model_dir, "--on-invalid-utf8", "replace", "--format", "jsonl",
              stdin=data)
    assert run.returncode == 0, run.stderr
    assert count_lines(run.stdout) == count_lines(data)


@pytest.mark.subprocess
def test_stream_answers_each_line_as_it_arrives(model_dir):
    proc = subprocess.Popen(command("translate", "--model", model_dir, "--stream", "--quiet"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
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
def test_broken_pipe_is_quiet(model_dir, lines_file):
    src = lines_file(NORMAL * 300)
    shell = f"{sys.executable} -m nmtdecode translate --model {model_dir} --src {src} | head -1"
    run = subprocess.run(shell, shell=True, capture_output=True, timeout=300)
    assert count_lines(run.stdout) == 1
    assert b"Traceback" not in run.stderr and b"Error" not in run.stderr


def test_out_of_memory_on_one_sentence_names_the_line(model_dir, tmp_path, lines_file, monkeypatch):
    from nmtdecode.config import Config
    from nmtdecode.run import translate_job
    from nmtdecode.translator import Translator

    src = lines_file(NORMAL[:3])
    config = Config.from_values({"model": str(model_dir), "src": str(src), "quiet": True,
                                 "output": str(tmp_path / "out.txt")})
    original = Translator.translate_batch

    def hopeless(self, sources, *rest):
        if any(len(s) > 8 for s in sources):
            raise RuntimeError("CUDA out of memory")
        return original(self, sources, *rest)

    monkeypatch.setattr(Translator, "translate_batch", hopeless)
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
    demo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "demo")
    src, out = lines_file(NORMAL), tmp_path / "out.txt"
    for delay in (0.0, 0.1, 0.25):  # after the handlers are in place: torch alone takes longer to import
        proc = subprocess.Popen(command("translate", "--model", demo, "--src", src, "--output", out),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.time() + 60
        while proc.poll() is None and not catches_sigterm(proc.pid) and time.time() < deadline:
            time.sleep(0.002)
        time.sleep(delay)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == code, (delay, stderr)
        assert stderr.splitlines() == [f"nmtdecode: {'interrupted' if code == 130 else 'terminated'} "
                                       "during start-up; nothing was written".encode()], (delay, stderr)
        assert stdout == b"" and not out.exists() and not (tmp_path / "out.txt.tmp").exists()
