"""CTranslate2's `return_alternatives`: the tokens that may come first after a target prefix, each
continued to its end, for interactive prefix completion. As CTranslate2 decodes them (its
decode_alternatives, src/decoding.cc; docs/decoding.md, "Alternatives at a position"):

    1. expand: the num_hypotheses most probable tokens after the prefix, EOS banned, with the
       call's bans (disable_unk, suppress_sequences) and no repetition penalty; those less
       probable than min_alternative_expansion_prob are dropped, the others kept in that order;
    2. continue: each alternative, appended to the prefix, is decoded to its end by the call's
       search (beam_size, sampling), one hypothesis each, whose length penalty counts the tokens
       after the alternative (its EOS included);
    3. score: the alternative's log-probability plus its continuation's penalised score.

The hypotheses keep the order of their alternatives, not of their scores. A prefix as long as
the step limit (or an empty source) comes back num_hypotheses times, scored 0; an alternative
that reaches the step limit is not continued. Both steps are calls of nmtdecode's Python API:
the expansion a beam of num_hypotheses cut one token after the prefix, the continuation the
alternatives as prefixes; the continuation's n-best are ranked here by CTranslate2's score.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .. import api

Options = Callable[[dict], dict]  # CTranslate2's decoding arguments -> the API's call options


@dataclass
class Alternative:
    """One hypothesis of an alternatives result and its score, as CTranslate2 computes it."""

    hypothesis: api.Translation  # the prefix, the alternative and its continuation
    score: float


def alternatives(
    translator: api.Translator,
    source: list[str],
    prefix: list[str],
    args: dict,
    options_for: Options,
    piece: Callable[[int], str],
) -> list[Alternative]:
    """`source`'s alternatives after `prefix` (pieces), for the call's arguments `args` (filled);
    `options_for` maps arguments to the API's options, `piece` a target id to its piece."""
    limit = options_for(args)["max_length"]  # the step limit, within the model's positions
    prefix, wanted = prefix[:limit], args["num_hypotheses"]
    if not source or len(prefix) == limit:
        alone = {**args, "beam_size": 1, "num_hypotheses": 1, "sampling_topk": 1}
        [[whole]] = translator.translate_batch([source], [prefix], **options_for(alone))
        return [Alternative(whole, 0.0)] * wanted
    expanded = _expansion(translator, source, prefix, args, options_for)
    kept = [hyp for hyp in expanded if math.exp(hyp.token_scores[-1]) >= args["min_alternative_expansion_prob"]]
    if not kept or len(prefix) + 1 == limit:
        return [Alternative(hyp, hyp.token_scores[-1]) for hyp in kept]
    starts = [[piece(t) for t in hyp.tokens] for hyp in kept]
    # each alternative's ended hypotheses, which CTranslate2's own count ranks; unpenalised, its top beam
    ended = {**args, "num_hypotheses": args["beam_size"] if args["length_penalty"] else 1}
    ranked = translator.translate_batch([source] * len(kept), starts, **options_for(ended))
    return [_best(hyp, nbest, args["length_penalty"]) for hyp, nbest in zip(kept, ranked)]


def _expansion(
    translator: api.Translator, source: list[str], prefix: list[str], args: dict, options_for: Options
) -> list[api.Translation]:
    """The num_hypotheses most probable tokens after the prefix, each as the prefix and that token
    (best first): a beam of that width whose step limit is the next token, with EOS banned there."""
    expansion = {
        **args,
        "beam_size": args["num_hypotheses"],
        "sampling_topk": 1,
        "max_decoding_length": len(prefix) + 1,
        "min_decoding_length": len(prefix) + 1,
        "repetition_penalty": 1.0,
        "no_repeat_ngram_size": 0,
        "return_attention": False,
        "replace_unknowns": False,
    }
    return translator.translate_batch([source], [prefix], **options_for(expansion))[0]


def _best(expanded: api.Translation, nbest: list[api.Translation], length_penalty: float) -> Alternative:
    """The continuation CTranslate2 keeps of an alternative, and its score: the alternative's
    log-probability plus the continuation's, divided by its length (EOS counted) to the power
    `length_penalty`."""
    start, word = len(expanded.tokens), expanded.token_scores[-1]

    def continued(hyp: api.Translation) -> float:
        total = sum(hyp.token_scores[start:]) + (hyp.eos_score or 0.0)
        return total / (len(hyp.tokens) - start + hyp.ended) ** length_penalty

    best = max(nbest, key=continued)
    return Alternative(best, word + continued(best))
