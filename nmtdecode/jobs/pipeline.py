"""The one job pipeline: a source of examples -> the engine -> a sink of results.

    for chunk in source.chunks():                  # input lines as Examples, a chunk at a time
        for batch in mine(cut(chunk)):             # length-sorted batches; a torchrun rank's share
            results = work(batch)                  # the engine: decode (or score) one batch
            put(each result); observe(batch, results)
        checkpoint(lines done, input position)     # the chunk's output is final

Every job runs through `run`: `nmtdecode translate` (a file's lines into its output file,
run.py), each torchrun rank (its share of the batches into its part, ranks.py), `score`
(pairs of lines, scoring.py) and the Python API (a list in memory, api.py). A source knows
where the input starts (a resumed job's offset, checked against the input it was made from)
and gives each line its --prefix line; the sink's `put` knows where results go, and its
`checkpoint`, when it has one (a translate job's output file), makes each chunk durable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol

from .batch_threads import in_order
from ..engine.batching import Example, chunk_size, chunks, cut
from ..options.config import BatchingConfig, Config
from ..models.inspect import check_without_torch
from .reading import LineReader, PrefixLines

if TYPE_CHECKING:
    from ..engine.engine import Engine


class Source(Protocol):
    """Where a job's examples come from."""

    batching: BatchingConfig  # how a chunk is cut into batches
    done: int  # input lines before its first chunk (a resumed job's output has them)

    def chunks(self) -> Iterator[list[Example]]: ...  # in input order

    def position(self) -> tuple[int, str]: ...  # the input read so far: (bytes, their hash)


def load_engine(config: Config) -> Engine:
    """The model on its device. torch is imported here, once the inputs and outputs are checked and
    the model path is found to be a model (models/detect.py) whose configuration and weight files'
    headers read (models/inspect.py), so that a wrong path, a broken model, an unreadable input or a
    locked output fails in a fraction of a second."""
    for path in config.io.models:
        check_without_torch(path)
    from ..engine.importing import import_engine

    return import_engine().load(config)


def run(
    source: Source,
    work: Callable[[list[Example]], list],
    put: Callable[[Any], None],
    at_once: int = 1,
    mine: Callable[[Iterable[list[Example]]], list] = list,
    observe: Callable[[list[Example], list], None] | None = None,
    checkpoint: Callable[[int, tuple[int, str]], None] | None = None,
) -> int:
    """Run a job: each chunk of `source` cut into batches, the batches `mine` keeps decoded by
    `work` (`at_once` at the same time, in_order), each result `put` (any order within a chunk)
    and each batch told to `observe`; after each chunk, `checkpoint(input lines done, input
    position)`. Returns the number of input lines done."""
    batching, done = source.batching, source.done
    for chunk in source.chunks():
        batches = mine(cut(chunk, batching.batch_size, batching.batch_type))
        for batch, results in in_order(work, batches, at_once):
            for result in results:
                put(result)
            if observe is not None:
                observe(batch, results)
        done = chunk[-1].index + 1
        if checkpoint is not None:
            checkpoint(done, source.position())
    return done


# --stream: the batches' worth of waiting lines sorted by length together. Batches in input order
# are slower (more padding, and each batch runs to its longest source's step limit); four batches
# sorted together come close to a whole chunk sorted (docs/speed.md#pipes-and---stream).
STREAM_BATCHES = 4


def read_size(config: Config) -> int:
    """The most lines decoded together: a sort chunk (many batches, sorted by length together); with
    --stream a few batches' worth (`STREAM_BATCHES`), so that a line's answer waits for at most the
    few other batches of its chunk. From a pipe or terminal a chunk also ends where the lines that
    have arrived end (`LineSource.chunks`)."""
    batching = config.batching
    if config.io.stream:  # with a token budget, assume ~16 tokens a line
        batch = batching.batch_size if batching.batch_type == "sents" else max(1, batching.batch_size // 16)
        return batch * STREAM_BATCHES
    return chunk_size(batching.batch_size, batching.batch_type)


class LineSource:
    """A job's input file (or stdin) as Examples in chunks of `read_size` lines, from where its
    output left off: the first `done` lines are read past, and once they are, `check_input` is
    given their (bytes, hash) to compare with what the output was made from, and `on_resume`
    told. Each line gets its line of the --prefix file."""

    def __init__(
        self,
        config: Config,
        make_example: Callable[..., Example],
        done: int = 0,
        check_input: Callable[[int, str], None] | None = None,
        on_resume: Callable[[int], None] | None = None,
    ) -> None:
        self.config, self.batching, self.make_example = config, config.batching, make_example
        self.done, self.check_input, self.on_resume = done, check_input, on_resume
        self.reader = LineReader(config.io.src, config.io.on_invalid_utf8)

    def position(self) -> tuple[int, str]:
        return self.reader.position()

    def chunks(self) -> Iterator[list[Example]]:
        """Chunks of `read_size` lines, or of the lines that have arrived when no more is waiting
        (a pipe, a terminal): a line is never held back for input that has not come (as
        fairseq-interactive decodes its buffer), and a full pipe fills whole chunks."""
        return chunks(self.examples(), read_size(self.config), self.reader.ready)

    def examples(self) -> Iterator[Example]:
        """The Examples of the input lines after the first `done`, each with its prefix line (if
        any), checking on the way that those first lines are the input the partial output was
        made from."""
        config, done, seen = self.config, self.done, 0
        max_src_length, prefix = config.batching.max_src_length, config.io.prefix
        prefixes = None if prefix is None else PrefixLines(prefix, config.io.on_invalid_utf8)
        for index, line in enumerate(self.reader):
            seen = index + 1
            if seen == done:
                self._check_input()
                if self.on_resume is not None:
                    self.on_resume(done)
            if index >= done:
                yield self.make_example(index, line, max_src_length, None if prefixes is None else prefixes.line(index))
        if seen < done:  # the input ends before the lines done: not the one the output was made from
            self._check_input()
        if prefixes is not None:
            prefixes.check_end()

    def _check_input(self) -> None:
        if self.check_input is not None:
            self.check_input(*self.reader.position())


class ListSource:
    """Examples already in memory (the Python API's sources), sorted and batched as one chunk, as
    the command line batches one chunk of a file."""

    done = 0

    def __init__(self, examples: list[Example], batching: BatchingConfig) -> None:
        self.examples, self.batching = examples, batching

    def chunks(self) -> Iterator[list[Example]]:
        if self.examples:
            yield self.examples

    def position(self) -> tuple[int, str]:
        return 0, ""


class ListSink:
    """Results kept in memory, in the order of their examples' indexes from `first`."""

    def __init__(self, size: int, first: int = 0) -> None:
        self.results: list = [None] * size
        self.first = first

    def put(self, result: Any) -> None:
        self.results[result.index - self.first] = result
