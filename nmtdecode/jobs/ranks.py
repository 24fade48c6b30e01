"""One job in several processes, started by torchrun: each decodes a share, rank 0 merges.

`torchrun --nproc-per-node N -m nmtdecode translate --src IN --output OUT ...` starts
N copies of the program with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
MASTER_ADDR/PORT set. Every process reads the whole input in the chunks one process
would read, sorts and cuts each into the same batches, and decodes its share of them
(`Ranks.mine`): batch b of a chunk (longest first) goes to rank `owner(b)`, dealt back
and forth. So every sentence is decoded in the batch it has in one process and the
output is byte-identical to one process's, while the ranks share even a single chunk
(1,024 lines at the default batch size) and get long and short batches alike.
Tokenizing every line of a chunk on every rank, to sort it, costs little beside
decoding. The job pipeline itself is pipeline.py's, the same for one process and for a rank.

Each rank writes its part through `output_file.OutputFile`: OUT.part-RANK-of-WORLD.tmp,
its progress journal (checkpointed after each chunk, the last record covering the
whole input, so that a rank resumed with nothing left to do still checks that the
input is the same) and its lock. A part is, for each of the rank's lines in input
order, a header line `INDEX BYTES` and the line's output in the job's format. When
every part is complete, rank 0 merges them by index into OUT (written as OUT.tmp and
renamed) and removes them.

The processes wait for each other through a torch.distributed process group on
gloo, also on GPUs: they exchange no tensors, only wait (at start, when the parts
are complete, when OUT is written), and gloo's waits need no device and may last
as long as the longest share (NCCL's watchdog would end them). The rendezvous and
the wait at start are bounded (`NMTDECODE_RENDEZVOUS_TIMEOUT`, 10 minutes), so that
workers whose launcher died during start-up end instead of waiting for days; the
waits are polled, so that a signal is handled at once, and a peer lost during one
is one line (`PeerLost`, exit 1).

--resume continues every rank's part with the same number of processes; a job begun
with another number of processes (or in one process) is refused, naming it (exit 2).
A merge that was stopped (rank 0 killed while writing OUT.tmp, or between its rename
and the removal of its journal) left every part complete: --resume merges again.
"""

from __future__ import annotations

import datetime
import glob
import heapq
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping

from ..options.bounded import shown
from ..engine.batching import Result
from ..options.config import Config, ConfigError
from ..models.checkpoint import first_line
from .output_file import OutputFile, OutputRefused, remove
from .writing import format_result

WAIT = datetime.timedelta(days=7)  # a rank may wait for the others as long as their share takes
RENDEZVOUS_TIMEOUT = "NMTDECODE_RENDEZVOUS_TIMEOUT"  # seconds: joining the group and the wait at start
RENDEZVOUS_DEFAULT = 600.0
PART = re.compile(r"\.part-(\d+)-of-(\d+)(\.tmp|\.tmp\.progress)?$")


@dataclass(frozen=True)
class Ranks:
    """This process's place among those torchrun started."""

    rank: int
    world: int
    local_rank: int
    local_world: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Ranks | None:
        """The ranks torchrun set, or None for a single process (WORLD_SIZE unset or 1)."""
        env = os.environ if environ is None else environ
        try:
            world = int(env.get("WORLD_SIZE", "1"))
            if world <= 1:
                return None
            rank, local_rank = int(env["RANK"]), int(env.get("LOCAL_RANK", env["RANK"]))
            local_world = int(env.get("LOCAL_WORLD_SIZE", world))
        except (KeyError, ValueError):
            raise ConfigError(
                "WORLD_SIZE is set but RANK, LOCAL_RANK or LOCAL_WORLD_SIZE is missing or not "
                "a number: start several processes with torchrun"
            ) from None
        return cls(rank, world, local_rank, local_world)

    def part(self, output: str, rank: int | None = None) -> str:
        """The part file of this rank (or of `rank`) of the job writing `output`."""
        return f"{output}.part-{self.rank if rank is None else rank}-of-{self.world}"

    def summary_prefix(self) -> str:
        return f"nmtdecode: rank {self.rank} of {self.world}:"

    def mine(self, batches: Iterable[list]) -> list[list]:
        """This rank's batches of a chunk's batches (longest first)."""
        return [batch for b, batch in enumerate(batches) if owner(b, self.world) == self.rank]


def layouts(output: str) -> dict[int, list[str]]:
    """Unfinished or unmerged work on `output`, by how many processes made it (1: one process's
    FILE.tmp and journal; N: parts of a torchrun job of N processes)."""
    found: dict[int, list[str]] = {}
    for name in (f"{output}.tmp", f"{output}.tmp.progress"):
        if os.path.lexists(name):
            found.setdefault(1, []).append(name)
    for name in sorted(glob.glob(glob.escape(output) + ".part-*-of-*")):
        match = PART.search(name[len(output) :])
        if match and name[len(output) :] == match.group(0):
            found.setdefault(int(match.group(2)), []).append(name)
    return found


def check_layout(output: str, world: int, resume: bool, clean: bool = True) -> None:
    """Before anything is written (the output locked): --resume of work begun with another number
    of processes is refused; a new job (`clean`: its process holds the lock) removes such
    leftovers, so that a later --resume never mixes them. Under torchrun, OUT.tmp or its journal
    beside every part of the job is a stopped merge's (see `merge_stopped`): --resume merges again."""
    found = layouts(output)
    if resume and world > 1 and 1 in found and merge_stopped(output, world):
        merged = found.pop(1)
        for name in merged if clean else ():
            remove(name)
    others = {n: names for n, names in found.items() if n != world}
    if not others:
        return
    if resume:
        n = max(others)
        how = "one process" if n == 1 else f"{n} processes (torchrun's WORLD_SIZE {n})"
        now = "one process" if world == 1 else f"{world} processes"
        raise OutputRefused(
            f"--resume: {output} was begun by {how} ({others[n][0]}, ...); resume it with the same "
            f"number, not {now}, or run without --resume to start over"
        )
    for names in others.values() if clean else ():
        for name in names:
            remove(name)


def merge_stopped(output: str, world: int) -> bool:
    """Whether every part of a job of `world` processes is there with its journal. Beside them, an
    OUT.tmp (or its journal) can only be their merge's: a one-process job on OUT removes the parts
    of others before it writes, and rank 0 removes OUT.tmp before its rank's part is made."""
    ranks = Ranks(0, world, 0, world)
    return all(
        os.path.lexists(f"{ranks.part(output, r)}{suffix}")
        for r in range(world)
        for suffix in (".tmp", ".tmp.progress")
    )


def threads_for(config: Config, ranks: Ranks) -> int:
    """--threads, or this machine's CPUs shared among the processes on it (and the batches each
    decodes at once, --inter-threads)."""
    return config.runtime.operation_threads(ranks.local_world)


def device_for(config: Config, ranks: Ranks) -> str:
    """auto or cuda: GPU LOCAL_RANK (several processes per GPU when there are fewer GPUs than
    processes); cpu and cuda:N stay as given."""
    import torch

    device = config.runtime.device
    if device in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{ranks.local_rank % torch.cuda.device_count()}"
    return device


class PeerLost(RuntimeError):
    """The other processes of the job could not be reached, or one of them stopped (exit code 1)."""


def rendezvous_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds a rank waits to join the others (NMTDECODE_RENDEZVOUS_TIMEOUT, else 10 minutes)."""
    value = (os.environ if environ is None else environ).get(RENDEZVOUS_TIMEOUT, "")
    if not value.strip():
        return RENDEZVOUS_DEFAULT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise ConfigError(f"{RENDEZVOUS_TIMEOUT}={shown(value)}: expected a number of seconds > 0")
    return seconds


# What a rank lost by a peer says was left: at start (claiming the outputs) nothing was decoded;
# waiting for the others' shares, every part is resumable.
STARTING = "nothing was decoded: run the command again"
KEPT = "the finished parts are kept: rerun the command with --resume"


class Group:
    """The ranks' process group (gloo). Joining it and the wait at start (`all_ranks`) are bounded
    by the rendezvous timeout, the waits for the others' shares (`wait`) by WAIT, on a second
    group. Every wait is polled, so that a signal stops a rank at once, and fails as PeerLost."""

    def __init__(self, ranks: Ranks) -> None:
        import torch.distributed as dist

        self.ranks, self.dist = ranks, dist
        timeout = rendezvous_timeout()
        if not dist.is_initialized():
            try:
                self._store_reachable(time.monotonic() + timeout)
                dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
            except (OSError, RuntimeError) as e:
                raise PeerLost(
                    f"rank {ranks.rank} of {ranks.world}: no rendezvous with the other processes of the "
                    f"job within {timeout:g} s ({_reason(e)}): was torchrun stopped? "
                    f"({RENDEZVOUS_TIMEOUT} sets the limit); nothing was written"
                ) from None
        self.long = self._polled(lambda: dist.new_group(backend="gloo", timeout=WAIT), STARTING)

    def _store_reachable(self, deadline: float) -> None:
        """Until the rendezvous store (MASTER_ADDR:MASTER_PORT, torchrun's own under torchrun) takes
        a connection. Tried here, a second at a time, because torch's own attempt cannot be
        interrupted: a signal would wait for its timeout. The rank that serves the store itself
        (rank 0 started by hand) does not wait."""
        env = os.environ
        if self.ranks.rank == 0 and env.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            return
        host, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT", "")
        if not host or not port.isdigit():
            return  # torch names what is missing
        while True:
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)  # a signal is handled here

    def all_ranks(self, flag: bool) -> bool:
        """True when `flag` is true on every rank (also a barrier)."""
        import torch

        value = torch.tensor([1 if flag else 0])
        self._polled(lambda: self.dist.all_reduce(value, op=self.dist.ReduceOp.MIN, async_op=True), STARTING, True)
        return bool(value.item())

    def wait(self) -> None:
        """Until every rank is here (as long as the others' shares take)."""
        self._polled(lambda: self.dist.barrier(group=self.long, async_op=True), KEPT, True)

    def _polled(self, start: Callable[[], Any], note: str, wait: bool = False) -> Any:
        try:
            work = start()
            if wait:
                while not work.is_completed():
                    time.sleep(0.02)  # a signal is handled here, not after the wait
                work.wait()
            return work
        except RuntimeError as e:
            raise PeerLost(
                f"rank {self.ranks.rank} of {self.ranks.world}: another process of the job stopped or "
                f"cannot be reached ({_reason(e)}); {note}"
            ) from None


def _reason(error: Exception) -> str:
    """The first sentence of a torch.distributed or gloo error, without its source location."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    if not str(error).strip():
        return type(error).__name__
    return re.sub(r"^\[[^\]]*\]\s*", "", first_line(str(error)))[:200]


def leave_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def owner(batch: int, world: int) -> int:
    """The rank that decodes a chunk's batch number `batch` (longest first): dealt back and forth,
    0 1 .. w-1 w-1 .. 1 0 0 1 .., so that every rank gets long and short ones alike."""
    turn = batch % (2 * world)
    return turn if turn < world else 2 * world - 1 - turn


class PartWriter:
    """A rank's sink: its part, for each of its lines in input order, a header `INDEX BYTES` and the
    line's output in the job's format. A chunk's results come in batch order (longest first), so
    each chunk's are sorted and written when the chunk ends, before the part is checkpointed."""

    def __init__(self, part: OutputFile, fmt: str, token_scores: bool = False) -> None:
        self.part, self.fmt, self.token_scores = part, fmt, token_scores
        self.chunk: list[Result] = []

    def put(self, result: Result) -> None:
        self.chunk.append(result)

    def checkpoint(self, lines_done: int, input_position: tuple[int, str]) -> None:
        for result in sorted(self.chunk, key=lambda r: r.index):
            text = format_result(result, self.fmt, self.token_scores)
            self.part.stream.write(f"{result.index} {len(text.encode('utf-8'))}\n{text}")
        self.chunk = []
        self.part.checkpoint(lines_done, input_position)

    def close(self) -> None:
        """The part stays PART.tmp with its journal until rank 0 merges it."""
        self.part.stream.close()


def _records(name: str, f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(input line, its output bytes) of a part, checking the headers."""
    while header := f.readline():
        try:
            index, size = (int(x) for x in header.split())
        except ValueError:
            raise RuntimeError(
                f"{name} is not a part (a record header {header[:40]!r}); run without --resume to start over"
            ) from None
        data = f.read(size)
        if len(data) != size:
            raise RuntimeError(
                f"{name} ends inside the output of input line {index + 1}; run without --resume to start over"
            )
        yield index, data


def merge(output: OutputFile, parts: list[str], lines: int) -> None:
    """Write the `lines` input lines' outputs from the parts (PART.tmp, each in input order) into
    `output` in input order, checking that every line is there once; then remove the parts and
    their journals."""
    files = []
    try:
        for name in parts:
            files.append(open(f"{name}.tmp", "rb"))
        output.open(False, "merge")
        expected = 0
        streams = [_records(f"{name}.tmp", f) for name, f in zip(parts, files)]
        for index, data in heapq.merge(*streams, key=lambda record: record[0]):
            if index != expected:
                raise RuntimeError(
                    f"the parts of {output.path} have {'no' if index > expected else 'a second'} "
                    f"output for input line {min(index, expected) + 1}; run without --resume to "
                    "start over"
                )
            output.stream.write(data.decode("utf-8"))
            expected += 1
        if expected != lines:
            raise RuntimeError(
                f"the parts of {output.path} end at input line {expected}, not {lines}; "
                "run without --resume to start over"
            )
    except BaseException:
        output.abandon()
        raise
    finally:
        for f in files:
            f.close()
    output.finish()
    for name in parts:
        remove(f"{name}.tmp")
        remove(f"{name}.tmp.progress")
