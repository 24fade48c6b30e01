"""The option table: every option declared once, in its section, with its type, default,
choices, range and help (what a declaration holds, and how a value is checked against it, is
option.py's; the rules between options are rules.py's, and what each way in refuses, entries.py's).

The command line (cli.py) builds its flags from these declarations, YAML files use the same
names (`-` -> `_`), and the Python API takes them as keyword arguments; config.py layers them.
"""

from __future__ import annotations

import os
import typing
from typing import Any
from dataclasses import MISSING, dataclass, fields

from .option import ConfigError, Option, option
from .rules import RULES, check

LENGTH_PENALTIES = ("none", "avg", "wu")  # search/penalties.py defines each
COVERAGE_PENALTIES = ("none", "wu", "summary")
EARLY_STOPPING = ("top", "true", "false", "never", "ctranslate2")  # search/stop_rules.py defines each
GEMM_BACKENDS = ("auto", "onednn", "torch")  # models/gemm.py
ENSEMBLE_RULES = ("prob", "logprob", "opennmt")  # models/ensemble.py defines each
FORMATS = ("text", "nbest", "nbest-marian", "jsonl")  # writing.py
SCORE_FORMATS = ("text", "jsonl")  # scoring.py: a log-prob a line, or JSONL with per-token log-probs
# Other tools' spellings of a dtype (PyTorch, Hugging Face, CTranslate2), each unambiguous.
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


class Section:
    """A group of options (a dataclass of `option` fields)."""

    def validate(self, everything: dict | None = None) -> None:
        """Each option's declared choices and range, then the rules that name one of them
        (rules.py), which read this section's options, or `everything` (a whole config's)."""
        declared = {f.name: f.metadata["option"] for f in fields(self)}  # type: ignore[arg-type]  # a dataclass
        options = everything if everything is not None else {key: getattr(self, key) for key in declared}
        check(options, declared, [rule for rule in RULES if rule.key in declared])


@dataclass
class DecodingConfig(Section):
    beam_size: int = option(5, "Beam width; 1 runs greedy search.", short="-k", range=">= 1")
    n_best: int = option(1, "Hypotheses returned per input line (<= beam size).", range=">= 1")
    max_length: int = option(256, "Most decoding steps (target tokens, EOS included).", range=">= 1")
    max_len_a: float = option(0.0, "Step limit a*|src|+b: the a (with --max-len-b).", range=">= 0")
    max_len_b: int | None = option(None, "Step limit a*|src|+b: the b; enables the relative limit.", range=">= 0")
    min_length: int = option(0, "Fewest target tokens before EOS may be chosen.", range=">= 0")
    length_penalty: str = option(
        "avg",
        "Score normalisation: none, avg (total/len^alpha), wu (GNMT); a number A means avg with alpha A.",
        choices=LENGTH_PENALTIES,
        aliases={},
    )  # a number: expand_aliases
    alpha: float = option(1.0, "Length penalty strength.")
    early_stopping: str = option(
        "top",
        "When a sentence stops: top (OpenNMT-py's rule, CTranslate2's without a "
        "length penalty), Hugging Face's true, false, never, or ctranslate2 (CTranslate2's "
        "at every length penalty).",
        choices=EARLY_STOPPING,
    )
    no_repeat_ngram_size: int = option(0, "Never repeat an n-gram of this size (0: off).", range=">= 0")
    ban_unk: bool = option(False, "Never generate the unknown token.")
    src_lang: str | None = option(None, "Source language code (mBART, M2M100, NLLB).")
    tgt_lang: str | None = option(None, "Target language code for multilingual models.")
    source_prefix: str = option(
        "",
        "Text put before every source line as it is: T5's task, e.g. 'translate English to German: ' "
        "(its last space included).",
    )
    repetition_penalty: float = option(
        1.0,
        "CTRL penalty on the logits of tokens already generated (> 1 discourages repeats; 1: off).",
        range="> 0",
        hint="1 is off",
    )
    coverage_penalty: str = option(
        "none",
        "Penalise finished hypotheses by their cross-attention coverage of the source (OpenNMT-py).",
        choices=COVERAGE_PENALTIES,
    )
    beta: float = option(0.0, "Coverage penalty strength.", range=">= 0")
    alignment: bool = option(
        False, "JSONL: add each target token's source token position (argmax of the cross-attention)."
    )
    attention: bool = option(False, "JSONL: add each target token's cross-attention weights over the source tokens.")
    replace_unk: bool = option(
        False, "Replace each generated <unk> by the source piece its step attended most (OpenNMT-py's -replace_unk)."
    )
    report_align: bool = option(
        False,
        "Text and n-best: add ' ||| ' and Pharaoh pairs SRC-TGT (of words when the "
        "pieces mark word starts); JSONL: add the pieces and the pairs.",
    )
    beam_groups: int = option(
        1, "Diverse beam search: split the beam into G groups (Hugging Face's group beam search).", range=">= 1"
    )
    diversity_penalty: float = option(
        0.0, "Diverse beam search: subtracted per beam of an earlier group that chose the same token.", range=">= 0"
    )
    block_ngram_repeat: int = option(
        0, "OpenNMT-py's blocking: a continuation repeating an n-gram of this size scores -1e21 (0: off).", range=">= 0"
    )
    ignore_when_blocking: list[str] = option(
        [], "Target pieces, space-separated: an n-gram containing one may repeat (--block-ngram-repeat)."
    )
    banned_tokens: list[str] = option([], "Target pieces, space-separated, never generated (e.g. '\u2581the ,').")
    sampling: bool = option(
        False, "Random sampling instead of beam search: --n-best N samples per line, sorted by score."
    )
    temperature: float = option(
        1.0,
        "Sampling: divide the log-probs by T.",
        range="> 0",
        hint="for the most probable token at every step, leave out --sampling and use --beam-size 1",
    )
    top_k: int = option(0, "Sampling: only from the K most probable tokens (0: off).", range=">= 0")
    top_p: float = option(
        1.0, "Sampling: only from the most probable tokens holding mass P (1.0: off).", range="(0, 1]"
    )
    seed: int = option(
        0,
        "Sampling: the same seed and line give the same samples, whatever the batch or input order.",
        range="[0, 2^64)",
    )

    @property
    def rows_per_sentence(self) -> int:
        """Hypotheses decoded side by side for each sentence: the beam, or the samples."""
        return self.n_best if self.sampling else self.beam_size

    @property
    def aligned(self) -> bool:
        """Whether the hypotheses record their alignment: asked for, or what --replace-unk and
        --report-align are made of."""
        return self.alignment or self.replace_unk or self.report_align

    @property
    def attention_readers(self) -> list[str]:
        """The options asked for that read the cross-attention (empty: none is recorded): the
        alignment and what is made of it, the attention itself, a coverage penalty that acts."""
        asked = [key for key in ("alignment", "attention", "replace_unk", "report_align") if getattr(self, key)]
        return asked + (["coverage_penalty"] if self.coverage_acts else [])

    @property
    def coverage_acts(self) -> bool:
        """Whether a coverage penalty is asked for and changes scores (beta is never negative)."""
        return self.coverage_penalty != "none" and self.beta > 0


@dataclass
class BatchingConfig(Section):
    batch_size: int = option(32, "Sentences (or tokens) per batch.", range=">= 1")
    batch_type: str = option("sents", "Unit of --batch-size.", choices=("sents", "tokens"))
    max_src_length: int | None = option(None, "Cut longer sources (tokens) with a warning.", range=">= 1")


@dataclass
class RuntimeConfig(Section):
    device: str = option("auto", "auto, cpu, cuda or cuda:N.")
    dtype: str = option(
        "float32",
        "Compute precision: float32 (fp32), float16 (fp16, half) or bfloat16 (bf16).",
        choices=("float32", "float16", "bfloat16"),
        aliases=DTYPE_ALIASES,
    )
    quantize: str = option(
        "none",
        "int8: int8 weights with a scale per row (CPU): the linear layers, the token "
        "embeddings and a tied output projection.",
        choices=("none", "int8"),
    )
    gemm: str = option(
        "auto",
        "CPU matrix products: oneDNN with prepacked weights, torch's linear (MKL on x86), "
        "or auto: the faster on this machine, measured once and remembered.",
        choices=GEMM_BACKENDS,
    )
    cuda_graphs: str = option(
        "auto",
        "CUDA: each decoding step (and the device search's) replayed as a captured CUDA graph (auto), "
        "or run operator by operator (off).",
        choices=("auto", "off"),
    )
    traced_step: str = option(
        "auto",
        "CPU: the decoding step recorded once by TorchScript and replayed without "
        "Python between its operators (auto), or run operator by operator (off). Same "
        "tokens.",
        choices=("auto", "off"),
    )
    search_on: str = option(
        "auto",
        "Where the search keeps its records: as tensor operations on the model's "
        "device, the host reading a done flag every few steps (device), or per sentence on the "
        "host after a copy every step (host); auto: the host on a CPU; on a GPU the device, its "
        "steps replayed as CUDA graphs where the options allow, else from 64 sentences "
        "(docs/search.md). Same tokens.",
        choices=("auto", "device", "host"),
    )
    threads: int | None = option(
        None,
        "CPU threads of each operation (torch.set_num_threads); default: the CPUs, shared among --inter-threads.",
        range=">= 1",
    )
    inter_threads: int = option(
        1,
        "CPU: batches decoded at once, each by a thread of its own (CTranslate2's "
        "inter_threads); their results are written in input order.",
        range=">= 1",
    )
    quiet: bool = option(False, "No progress bar or summary on stderr.", short="-q")

    def operation_threads(self, processes: int = 1) -> int | None:
        """Threads for each operation: --threads (at most the CPUs this process may use: more only
        wait for each other), or the CPUs shared among the processes on this machine and the
        batches each decodes at once; None (torch's default: every core) for one process decoding
        one batch at a time."""
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if self.threads:
            return min(self.threads, cpus)
        if processes == 1 and self.inter_threads == 1:
            return None
        return max(1, cpus // (processes * self.inter_threads))


@dataclass
class IOConfig(Section):
    model: str | list[str] | None = option(
        None,
        "Model directory (native, Hugging Face, eole, Marian, CTranslate2) or OpenNMT-py .pt checkpoint "
        "or Marian .npz. "
        "Several: --model A B, an ensemble decoded as one model.",
        short="-m",
        many=True,
        metavar="PATH...",
    )
    tokenizer: str | None = option(
        None,
        "A CTranslate2 folder's SentencePiece model or Hugging Face tokenizer.json (a file, or a "
        "folder holding one), which cuts text into its pieces; default: one in the model's folder "
        "or beside it.",
        metavar="PATH",
    )
    ensemble_rule: str | None = option(
        None,
        "How an ensemble combines its models' next-token scores: prob (mean of "
        "probabilities, fairseq), logprob (weighted sum of log-probs, Marian), "
        "opennmt (mean of logits, OpenNMT-py); unset: opennmt for OpenNMT-py and eole "
        "models, else prob.",
        choices=ENSEMBLE_RULES,
    )
    ensemble_weights: list[float] | None = option(
        None, "One weight per model of the ensemble (default: equal; logprob: 1 each).", many=True, metavar="W..."
    )
    src: str = option(
        "-",
        "Input file(s), one sentence per line; - is stdin. Several: --src a.en b.en, one job each, one model load.",
        short="-s",
        many=True,
        metavar="FILE...",
    )
    output: str = option("-", "Output file(s), one per --src; - is stdout.", short="-o", many=True, metavar="FILE...")
    format: str = option("text", "Output format.", choices=FORMATS)
    token_scores: bool = option(
        False, "JSONL: add tokens and per-token log-probs; nbest-marian: Marian's WordScores field (--word-scores)."
    )
    on_invalid_utf8: str = option(
        "error", "Invalid UTF-8 input: stop with the line number, or decode it as U+FFFD.", choices=("error", "replace")
    )
    resume: bool = option(False, "Continue an interrupted job from its partial --output.")
    stream: bool = option(False, "Answer each input line as soon as it arrives.")
    prefix: str | None = option(
        None,
        "File of target prefixes, one per --src line (may be empty): each output starts with its prefix.",
        metavar="FILE",
    )
    dump_beam: str | None = option(
        None,
        "Write each line's search (beam tree, finished hypotheses, n-best) as "
        "JSONL to this file, for `nmtdecode show` (OpenNMT-py's -dump_beam).",
        metavar="FILE",
    )

    @property
    def models(self) -> list[str]:
        """The model paths: one, or an ensemble's (a ConfigError when none is given)."""
        if self.model is None:
            raise ConfigError("model: no model given (--model PATH or `model:` in the config file)")
        return list(self.model) if isinstance(self.model, list) else [self.model]


SECTIONS = {"decoding": DecodingConfig, "batching": BatchingConfig, "runtime": RuntimeConfig, "io": IOConfig}
KEY_SECTION = {f.name: name for name, cls in SECTIONS.items() for f in fields(cls)}
OPTIONS: dict[str, Option] = {f.name: f.metadata["option"] for cls in SECTIONS.values() for f in fields(cls)}
TYPES = {key: hint for cls in SECTIONS.values() for key, hint in typing.get_type_hints(cls).items()}  # int, str | None
# What may differ between the jobs of one model load (an item of `jobs:`, one API call): its files and
# what needs no other model load.
PER_JOB_KEYS = frozenset(
    {"src", "output", "format", "token_scores", "on_invalid_utf8", "prefix", "dump_beam"}
    | {f.name for f in fields(DecodingConfig)}
    | {f.name for f in fields(BatchingConfig)}
)
# The options `score` shares with translate; from a config file it takes these (and the model) only.
SCORE_KEYS = (
    "model",
    "tokenizer",
    "ensemble_rule",
    "ensemble_weights",
    "batch_size",
    "batch_type",
    "max_src_length",
    "on_invalid_utf8",
    "device",
    "dtype",
    "quantize",
    "gemm",
    "cuda_graphs",
    "traced_step",
    "threads",
    "quiet",
    "src_lang",
    "tgt_lang",
    "source_prefix",
)
# Options one Python API call may change; the others (model, device, dtype, ...) are fixed by its load().
CALL_KEYS = PER_JOB_KEYS - {"src", "output"}
# Keys a config file may hold besides the options: they plan a run of many files (plan.py).
PLAN_OPTIONS = {
    "output_dir": Option(
        "Instead of --output: each input's output is DIR/its name (its extension replaced with "
        "--suffix), DIR created if missing.  [default: the input's directory]",
        metavar="DIR",
    ),
    "suffix": Option(
        "Instead of --output: the input name's last extension replaced by SUFFIX (a.en -> a.de with "
        "de or .de; _de.txt is appended as it is: a_de.txt).",
        metavar="SUFFIX",
    ),
}
PLAN_KEYS = ("jobs", *PLAN_OPTIONS)


def default_of(key: str) -> Any:
    """The built-in default of an option (for --help)."""
    f = next(f for f in fields(SECTIONS[KEY_SECTION[key]]) if f.name == key)
    return None if f.default is MISSING else f.default  # a list's default (a factory's) is empty
