"""torchrun: several processes on one job give the output of one process, and lose nothing.

The byte-identity and kill tests start two CPU ranks with torchrun (gloo) in a subprocess
(marked `subprocess`; one torchrun run serves the tests of every format and of several files);
the refusals and the chunk sharing run in this process, with the variables torchrun would set."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading

import pytest

from nmtdecode.jobs import signals
from nmtdecode.options.config import Config, ConfigError
from nmtdecode.jobs.output_file import OutputFile, OutputRefused
from nmtdecode.jobs.ranks import (
    KEPT,
    Group,
    PeerLost,
    Ranks,
    check_layout,
    merge,
    owner,
    rendezvous_timeout,
    threads_for,
)

from tests.helpers import wait_for_checkpoint

NORMAL = [
    "the house is red .",
    "a dog and a cat sleep in the garden .",
    "good morning",
    "thank you",
    "where is the station ?",
    "water is cold .",
    "my friend reads a book .",
    "",
    "  ",
]
FORMATS = {"text": [], "nbest": ["--n-best", 2], "jsonl": ["--token-scores"]}


def torchrun(*args, nproc=2):
    """The command line of `torchrun --nproc-per-node N --standalone -m nmtdecode ARGS`."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--standalone",
        "-m",
        "nmtdecode",
        *map(str, args),
    ]


def job_args(model_dir, src, fmt):
    return [
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--beam-size",
        3,
        "--batch-size",
        2,
        "--threads",
        1,
        "--max-length",
        8,
        "--format",
        fmt,
        *FORMATS[fmt],
        "--quiet",
    ]


def translate(*args):
    """`nmtdecode ARGS` in this process, outside any test (for the module's shared fixtures); the
    output goes to files."""
    from nmtdecode.cli import run

    assert run([str(arg) for arg in args]) == 0


def leftovers(tmp_path, name):
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(name + "."))


@pytest.fixture()
def torchrun_env(monkeypatch):
    """This process as rank 0 of 2, as torchrun would start it."""
    for key, value in {
        "WORLD_SIZE": "2",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(key, value)


def test_ranks_come_from_torchrun_variables():
    assert Ranks.from_env({}) is None and Ranks.from_env({"WORLD_SIZE": "1", "RANK": "0"}) is None
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert Ranks.from_env(env) == Ranks(3, 4, 1, 2)
    assert Ranks.from_env(env).part("out.txt") == "out.txt.part-3-of-4"


def test_each_process_gets_its_share_of_the_cpus_unless_threads_is_given():
    cpus = len(os.sched_getaffinity(0))
    assert threads_for(Config.from_values({}), Ranks(5, 8, 1, 4)) == max(1, cpus // 4)
    assert threads_for(Config.from_values({"threads": 3}), Ranks(5, 8, 1, 4)) == min(3, cpus)


def test_batches_are_dealt_back_and_forth():
    assert [owner(b, 2) for b in range(6)] == [0, 1, 1, 0, 0, 1]
    assert [owner(b, 3) for b in range(7)] == [0, 1, 2, 2, 1, 0, 0]


def test_merge_puts_the_parts_lines_in_input_order(tmp_path):
    parts = [tmp_path / "out.part-0-of-2.tmp", tmp_path / "out.part-1-of-2.tmp"]
    parts[0].write_bytes("0 2\na\n3 4\nbé\n4 2\ne\n".encode())
    parts[1].write_bytes(b"1 2\nc\n2 4\nd\nd\n")
    merge(OutputFile(str(tmp_path / "out")), [str(p)[:-4] for p in parts], 5)
    assert (tmp_path / "out").read_bytes() == "a\nc\nd\nd\nbé\ne\n".encode()
    assert not any(p.exists() for p in parts)

    for broken, lines, message in [
        (b"0 2\na\n2 2\nd\n", 3, "no output for input line 2"),
        (b"0 2\na\n0 2\nd\n", 2, "a second output for input line 1"),
        (b"0 2\na\n1 2\nd\n", 3, "end at input line 2, not 3"),
        (b"0 2\na\n1 9\nd\n", 2, "ends inside the output of input line 2"),
        (b"0 2\na\nxyz\n", 2, "is not a part"),
    ]:
        parts[0].write_bytes(broken)
        parts[1].write_bytes(b"")
        with pytest.raises(RuntimeError, match=message):
            merge(OutputFile(str(tmp_path / "out2")), [str(p)[:-4] for p in parts], lines)
        assert not (tmp_path / "out2").exists() and not (tmp_path / "out2.tmp").exists() and parts[0].exists()


def test_stdin_stdout_stream_and_score_are_refused_under_torchrun(model_dir, lines_file, tmp_path, torchrun_env, cli):
    run = cli("translate", "--model", model_dir, "--src", "-", "--output", "out.txt", stdin=b"hello\n", text=True)
    assert run.returncode == 2 and "give --src FILE, not stdin" in run.stderr
    run = cli("translate", "--model", model_dir, "--src", lines_file(["hello"]), text=True)
    assert run.returncode == 2 and "--output must be a file" in run.stderr
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        lines_file(["hello"]),
        "--output",
        tmp_path / "out.txt",
        "--stream",
        text=True,
    )
    assert run.returncode == 2 and "under torchrun leave it out" in run.stderr
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    run = cli("translate", "--model", model_dir, "--src", fifo, "--output", tmp_path / "out.txt", text=True)
    assert run.returncode == 2 and "must be a regular file" in run.stderr
    src = lines_file(["hello"])
    run = cli("score", "--model", model_dir, "--src", src, "--tgt", src, text=True)
    assert run.returncode == 2 and "start it without torchrun" in run.stderr


def test_resume_with_another_number_of_processes_is_refused(model_dir, lines_file, tmp_path, cli):
    src, out = lines_file(NORMAL), tmp_path / "out.txt"
    (tmp_path / "out.txt.part-1-of-2.tmp.progress").write_text("{}")
    run = cli("translate", "--model", model_dir, "--src", src, "--output", out, "--resume", text=True)
    assert run.returncode == 2
    assert "was begun by 2 processes" in run.stderr and "not one process" in run.stderr
    with pytest.raises(Exception, match="was begun by 2 processes .*not 3 processes"):
        check_layout(str(out), 3, resume=True)
    run = cli(
        "translate", "--model", model_dir, "--src", src, "--output", out, "--max-length", 8, text=True
    )  # a new job starts over
    assert run.returncode == 0, run.stderr
    assert leftovers(tmp_path, "out.txt") == []


def test_a_stopped_merge_is_merged_again_by_resume(tmp_path):
    """OUT.tmp (rank 0 killed while merging) or OUT.tmp.progress (killed between the rename and
    its removal) beside every part of the job: --resume with the same processes merges again
    instead of taking them for a one-process job; one part missing, they are still refused."""
    out = str(tmp_path / "out.txt")
    for left in (["out.txt.tmp"], ["out.txt", "out.txt.tmp.progress"], ["out.txt.tmp", "out.txt.tmp.progress"]):
        for name in [
            "out.txt.part-0-of-2.tmp",
            "out.txt.part-0-of-2.tmp.progress",
            "out.txt.part-1-of-2.tmp",
            "out.txt.part-1-of-2.tmp.progress",
            *left,
        ]:
            (tmp_path / name).write_text("x")
        check_layout(out, 2, resume=True, clean=False)  # another rank: nothing removed
        assert all((tmp_path / name).exists() for name in left)
        check_layout(out, 2, resume=True)  # rank 0: the merge's files go
        assert leftovers(tmp_path, "out.txt")[-1] == "out.txt.part-1-of-2.tmp.progress"
        assert not any(name.startswith("out.txt.tmp") for name in leftovers(tmp_path, "out.txt"))
    (tmp_path / "out.txt.part-1-of-2.tmp.progress").unlink()
    (tmp_path / "out.txt.tmp").write_text("x")
    with pytest.raises(OutputRefused, match="was begun by one process"):
        check_layout(out, 2, resume=True)


def test_the_rendezvous_timeout_is_bounded_and_read_from_the_environment():
    assert rendezvous_timeout({}) == 600
    assert rendezvous_timeout({"NMTDECODE_RENDEZVOUS_TIMEOUT": "2.5"}) == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        with pytest.raises(ConfigError, match=f"NMTDECODE_RENDEZVOUS_TIMEOUT='{bad}': expected a number of seconds"):
            rendezvous_timeout({"NMTDECODE_RENDEZVOUS_TIMEOUT": bad})


def test_a_rank_whose_launcher_is_gone_ends_at_the_rendezvous_timeout(
    model_dir, lines_file, tmp_path, torchrun_env, monkeypatch, cli
):
    """Rank 1 of 2 with nothing at MASTER_ADDR:PORT (torchrun killed during start-up) gives up after
    NMTDECODE_RENDEZVOUS_TIMEOUT seconds with one line, exit 1 (it waited 7 days before)."""
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("NMTDECODE_RENDEZVOUS_TIMEOUT", "1")
    runs = []
    args = ("translate", "--model", model_dir, "--src", lines_file(["hello"]), "--output", tmp_path / "out.txt")
    worker = threading.Thread(target=lambda: runs.append(cli(*args, text=True)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert runs, "still waiting for the rendezvous after 60 s"
    assert runs[0].returncode == 1
    assert runs[0].stderr.strip() == (
        "nmtdecode: error: rank 1 of 2: no rendezvous with the other processes of the job within 1 s (Connection "
        "refused): was torchrun stopped? (NMTDECODE_RENDEZVOUS_TIMEOUT sets the limit); nothing was written"
    )
    assert leftovers(tmp_path, "out.txt") == []


def test_c10d_logs_are_quiet_under_torchrun_unless_chosen():
    from nmtdecode.cli import distributed_log_environment as quiet

    assert quiet({"WORLD_SIZE": "2"}, torch_loaded=False) == {"TORCH_CPP_LOG_LEVEL": "FATAL"}
    assert quiet({"WORLD_SIZE": "2", "TORCH_CPP_LOG_LEVEL": "INFO"}, torch_loaded=False) == {}
    assert quiet({"WORLD_SIZE": "1"}, torch_loaded=False) == quiet({}, torch_loaded=False) == {}
    assert quiet({"WORLD_SIZE": "2"}, torch_loaded=True) == {}


def test_a_peer_lost_during_a_wait_is_one_line():
    """gloo's error when a peer died (its source location first) becomes PeerLost naming the rank."""
    group = Group.__new__(Group)
    group.ranks = Ranks(1, 2, 1, 2)

    def closed():
        raise RuntimeError(
            "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            "[127.0.0.1]:29500. This is typically caused by a remote worker hanging\nException ..."
        )

    with pytest.raises(PeerLost) as lost:
        group._polled(closed, KEPT, wait=True)
    assert str(lost.value) == (
        "rank 1 of 2: another process of the job stopped or cannot be reached "
        "(Connection closed by peer [127.0.0.1]:29500); the finished parts are kept: rerun the "
        "command with --resume"
    )


def test_a_signal_while_a_failure_is_reported_leaves_one_line(monkeypatch, capsys):
    """Under torchrun a peer's failure and the launcher's SIGTERM come together: a SIGTERM that
    arrives while the error is being said (injected: formatting the error sends it) no longer
    escapes as a Terminated traceback; the error's line and exit code stand."""
    from nmtdecode.cli import run
    from nmtdecode.models import inspect

    class GlooError(RuntimeError):
        def __str__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            return "Connection closed by peer"

    def fail(path):
        raise GlooError()

    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(inspect, "describe", fail)
    try:
        signals.install()
        signals.job_started()
        code = run(["inspect", "somewhere"])
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        signals.job_ended()
    assert code == 1
    assert capsys.readouterr().err == "nmtdecode: error: Connection closed by peer\n"


class AloneGroup:
    """In place of the process group, for rank 0 run alone in this process: the others agree."""

    def __init__(self, ranks):
        pass

    def all_ranks(self, flag: bool) -> bool:
        return flag

    def wait(self):
        pass


def test_resume_under_torchrun_never_takes_an_older_output_for_a_file_no_rank_started(
    model_dir, lines_file, tmp_path, torchrun_env, monkeypatch, cli
):
    """Older a.de and b.de; a new two-file run under torchrun stops at its first batch (injected),
    before any rank began b: b's part is kept as a mark, so that --resume does not find the older
    b.de complete (it did: no part of b existed)."""
    from nmtdecode.engine.engine import Engine

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr("nmtdecode.jobs.run.Group", AloneGroup)
    monkeypatch.setattr(Engine, "decode_batch", interrupted)  # Ctrl-C at the first batch
    sources = [lines_file(NORMAL, "a.en"), lines_file(NORMAL[:3], "b.en")]
    outputs = [tmp_path / "a.de", tmp_path / "b.de"]
    for out in outputs:
        out.write_bytes(b"an older output\n")
    args = ["translate", "--model", model_dir, "--src", *sources, "--output", *outputs, "--max-length", 8]
    assert cli(*args).returncode == 130
    assert (tmp_path / "b.de.part-0-of-2.tmp").read_bytes() == b""  # the mark
    assert not (tmp_path / "b.de.part-0-of-2.tmp.progress").exists()
    resumed = cli(*args, "--resume", text=True)
    assert resumed.returncode == 130 and "is complete" not in resumed.stderr
    assert [out.read_bytes() for out in outputs] == [b"an older output\n"] * 2  # untouched until merged


@pytest.fixture(scope="module")
def two_rank_jobs(model_dir, tmp_path_factory):
    """One jobs config run by one process and by torchrun with two ranks (one start for the
    tests below): 150 lines (3 chunks of 64 lines, in batches of 2) in each format, by a
    per-item option, and a second file of 9 lines. Returns the folder with `reference/` and
    `out/`, each holding the outputs text, nbest, jsonl and short."""
    folder = tmp_path_factory.mktemp("jobs")
    rng = random.Random(1)
    long, short = folder / "long.txt", folder / "short.txt"
    long.write_text("".join(rng.choice(NORMAL) + "\n" for _ in range(150)))
    short.write_text("".join(rng.choice(NORMAL) + "\n" for _ in range(9)))
    for name in ("reference", "out"):
        (folder / name).mkdir()
        (folder / f"{name}.yaml").write_text(
            f"model: {model_dir}\nbeam_size: 3\nbatch_size: 2\nthreads: 1\nmax_length: 8\nquiet: true\njobs:\n"
            f"  - {{src: {long}, output: {folder / name / 'text'}}}\n"
            f"  - {{src: {long}, output: {folder / name / 'nbest'}, format: nbest, n_best: 2}}\n"
            f"  - {{src: {long}, output: {folder / name / 'jsonl'}, format: jsonl, token_scores: true}}\n"
            f"  - {{src: {short}, output: {folder / name / 'short'}}}\n"
        )
    translate("translate", "-c", folder / "reference.yaml")
    run = subprocess.run(torchrun("translate", "-c", folder / "out.yaml"), capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr.decode()
    return folder


@pytest.mark.subprocess
@pytest.mark.slow  # a torchrun start: ~5 s
@pytest.mark.parametrize("fmt", FORMATS)
def test_two_ranks_write_what_one_process_writes(two_rank_jobs, fmt):
    out, reference = two_rank_jobs / "out", two_rank_jobs / "reference"
    assert (out / fmt).read_bytes() == (reference / fmt).read_bytes()
    assert leftovers(out, fmt) == []
    if fmt == "jsonl":  # the global input line, not the line within a rank's share
        assert [json.loads(line)["index"] for line in (out / fmt).read_text().splitlines()] == list(range(150))


@pytest.mark.subprocess
@pytest.mark.slow  # a torchrun start: ~5 s
def test_two_ranks_translate_several_files_as_one_process_does(two_rank_jobs):
    """Many files in one run (one model load) under torchrun: each file's output as one process
    writes it (each format but text by a per-item option of the jobs config), and nothing else
    left beside them."""
    out, reference = two_rank_jobs / "out", two_rank_jobs / "reference"
    for name in ("text", "nbest", "jsonl", "short"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    assert sorted(p.name for p in out.iterdir()) == ["jsonl", "nbest", "short", "text"]


@pytest.mark.subprocess
@pytest.mark.slow  # a torchrun start: ~5 s
def test_two_ranks_sample_with_prefixes_as_one_process_does(model_dir, lines_file, tmp_path, cli):
    """Sampling draws by input line, and each line keeps its prefix line, whichever rank decodes it."""
    rng = random.Random(3)
    src = lines_file([rng.choice(NORMAL) for _ in range(80)])
    prefix = lines_file([rng.choice(["", "the", "a dog"]) for _ in range(80)], name="prefix.txt")
    args = [
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--prefix",
        prefix,
        "--sampling",
        "--n-best",
        2,
        "--batch-size",
        2,
        "--threads",
        1,
        "--max-length",
        8,
        "--format",
        "nbest",
        "--quiet",
    ]
    reference = cli(*args, "--output", tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr
    run = subprocess.run(torchrun(*args, "--output", tmp_path / "out"), capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr.decode()
    assert (tmp_path / "out").read_bytes() == (tmp_path / "reference").read_bytes()


@pytest.fixture(scope="module")
def killed_job(model_dir, tmp_path_factory):
    """(input, one process's output) of the job the kill test interrupts: 1,000 lines, 16 chunks
    of 64 lines; after their first checkpoints the two ranks still decode for about 2 s (on a
    2-core machine), time enough to kill them before they end."""
    folder = tmp_path_factory.mktemp("killed")
    rng = random.Random(2)
    src = folder / "in.txt"
    src.write_text("".join(rng.choice(NORMAL) + "\n" for _ in range(1000)))
    translate(*job_args(model_dir, src, "jsonl"), "--output", folder / "reference")
    return src, (folder / "reference").read_bytes()


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("victim", ["one rank", "the whole group"])
def test_killed_ranks_resume_byte_identical(model_dir, killed_job, tmp_path, victim):
    src, reference = killed_job
    args = job_args(model_dir, src, "jsonl")
    out = tmp_path / "out"
    proc = subprocess.Popen(torchrun(*args, "--output", out), stderr=subprocess.PIPE, start_new_session=True)
    # rank 1's share of the first chunk is final
    wait_for_checkpoint(tmp_path / "out.part-1-of-2.tmp.progress", 64, proc)
    ranks = [int((tmp_path / f"out.part-{r}-of-2.lock").read_text()) for r in (0, 1)]  # their pids
    if victim == "the whole group":  # torchrun first (its workers run in their own sessions), then the ranks
        proc.kill()
    for pid in ranks[1:] if victim == "one rank" else ranks:  # one rank: torchrun stops the other
        os.kill(pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode != 0 and not out.exists()
    assert json.loads((tmp_path / "out.part-1-of-2.tmp.progress").read_text())["lines"] < 1000

    resumed = subprocess.run(torchrun(*args, "--output", out, "--resume"), capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert b"out.part-1-of-2: resuming after input line" in resumed.stderr
    assert out.read_bytes() == reference
    assert leftovers(tmp_path, "out") == []


@pytest.mark.subprocess
@pytest.mark.slow  # two torchrun starts: ~12 s
def test_rank_0_killed_during_the_merge_resumes_by_merging_again(model_dir, two_rank_jobs, tmp_path):
    """kill -9 of rank 0 after 40 of 150 lines of OUT.tmp (injected by tests/stopped_merge.py): the
    same command with --resume merges the complete parts again (it refused before, advising to
    start over) and gives one process's output, leaving nothing beside it."""
    src, out = two_rank_jobs / "long.txt", tmp_path / "out"
    args = [*job_args(model_dir, src, "text"), "--output", out]
    killer = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--standalone",
        os.path.join(os.path.dirname(__file__), "stopped_merge.py"),
        *map(str, args),
    ]
    stopped = subprocess.run(killer, capture_output=True, timeout=300, env={**os.environ, "STOP_AFTER_RECORDS": "40"})
    assert stopped.returncode != 0 and not out.exists()
    assert len((tmp_path / "out.tmp").read_text().splitlines()) == 40  # the kill came within the merge
    resumed = subprocess.run(torchrun(*args, "--resume"), capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert out.read_bytes() == (two_rank_jobs / "reference" / "text").read_bytes()
    assert leftovers(tmp_path, "out") == []
