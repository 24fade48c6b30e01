"""`nmtdecode score`: forced decoding, the log-probability of given (source, target) line pairs.

Sources are tokenized and cut as translate cuts them (`run.encode_source`) and decoded
with translate's effective config (`run.decoder`); the output file is translate's
`OutputFile`, written whole.
"""

from __future__ import annotations

import json

from . import signals
from .config import Config, ConfigError
from .io import InputError, read_lines
from .models.checkpoint import LoadedModel
from .output import OutputFile
from .ranks import Ranks
from .run import decoder, encode_source, warn
from .translator import Translator


def score_job(config: Config, src_path: str, tgt_path: str, output: str = "-", fmt: str = "text"):
    """Write the forced-decoding log-probability of each (source, target) line pair: one number a
    line (text), or JSONL records with the tokens and per-token log-probs as translate gives them.
    The output is translate's (`OutputFile`: locked, written through FILE.tmp, links not followed),
    checked and locked before the model loads; it is written whole, with no --resume."""
    if Ranks.from_env() is not None:  # every rank would print every score
        raise ConfigError("score runs in one process: start it without torchrun")
    from .api import Translator as PublicTranslator

    out = OutputFile(output)
    for path in (src_path, tgt_path):
        out.refuse_source(path)
    out.claim(False)
    try:
        sources, targets = list(read_lines(src_path)), list(read_lines(tgt_path))
        if len(sources) != len(targets):
            raise ConfigError(f"--src has {len(sources)} lines but --tgt has {len(targets)}")
        translator = PublicTranslator.from_config(config)
        signals.job_started()
        config, loop = decoder(translator.config, translator.loaded, translator.device)
        scored = score_pairs(translator.loaded, loop, sources, targets, config.batching.batch_size,
                             tokens=fmt == "jsonl", max_src_length=config.batching.max_src_length)
        if fmt == "jsonl":
            lines = [json.dumps({"index": i, "log_prob": sum(s) + eos, "tokens": t, "token_scores": s,
                                 "eos_score": eos}, ensure_ascii=False) for i, (t, s, eos) in enumerate(scored)]
        else:
            lines = [f"{total:.6f}" for total in scored]
        out.open(False, signature="")  # no checkpoints: a complete file or none
        try:
            out.stream.write("".join(line + "\n" for line in lines))
        except BaseException:
            out.abandon()  # with no journal, FILE.tmp is removed
            raise
        out.finish()
    finally:
        out.release()


def score_pairs(loaded: LoadedModel, translator: Translator, sources: list[str], targets: list[str],
                batch_size: int, tokens: bool = False, max_src_length: int | None = None) -> list:
    """Forced-decoding log-probabilities of (source, target) pairs, `batch_size` pairs at a time:
    totals, or with `tokens` each pair's (tokens, token_scores, eos_score) as
    `Translator.score_tokens` gives them.

    Sources are cut as translate cuts them (a warning names the lines); a target the decoder
    has no positions for cannot be scored (an error names the line)."""
    tgt = [loaded.tokenizer.encode_target(t) for t in targets]
    room = loaded.model.cfg.max_positions - len(translator.forced_prefix())  # what the decoder may still be fed
    for number, ids in enumerate(tgt, 1):
        if len(ids) > room:
            raise InputError(f"target line {number} has {len(ids)} tokens; with its forced prefix the decoder has "
                             f"positions for {room}: it cannot be scored")
    src, cut_lines = [], []
    for number, text in enumerate(sources, 1):
        ids, truncated = encode_source(text, loaded, max_src_length)
        src.append(ids)
        cut_lines += [number] if truncated else []
    if cut_lines:
        warn(f"source {_lines(cut_lines)} longer than the model's positions (or --max-src-length): cut, "
             "as translate cuts them")
    score = translator.score_tokens if tokens else translator.score
    return [r for start in range(0, len(src), batch_size)
            for r in score(src[start : start + batch_size], tgt[start : start + batch_size])]


def _lines(numbers: list[int], shown: int = 5) -> str:
    """`line 3`, `lines 3, 8`, `lines 3, 8, 9, 12, 20 and 4 more`."""
    head = ", ".join(map(str, numbers[:shown]))
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"line {head}" if len(numbers) == 1 else f"lines {head}{more}"
