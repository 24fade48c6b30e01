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
that reaches the step limit is not continued. Both steps are calls of nmtdecode's Python API
over the whole batch: the expansion a beam of num_hypotheses cut one token after the prefix
(a call per prefix length: the cut is the step limit), the continuation every alternative of
every source as a prefix, its n-best ranked here by CTranslate2's score.
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
    sources: list[list[str]],
    prefixes: list[list[str]],
    args: dict,
    options_for: Options,
    piece: Callable[[int], str],
) -> list[list[Alternative]]:
    """Each source's alternatives after its prefix (pieces), for the call's arguments `args`
    (filled); `options_for` maps arguments to the API's options, `piece` a target id to its piece."""
    alone = {**args, "beam_size": 1, "num_hypotheses": 1, "sampling_topk": 1}  # one hypothesis, no sample
    limit = options_for(alone)["max_length"]  # the step limit, within the model's positions
    prefixes = [prefix[:limit] for prefix in prefixes]
    found: list[list[Alternative]] = [[] for _ in sources]
    whole = [i for i, (source, prefix) in enumerate(zip(sources, prefixes)) if not source or len(prefix) == limit]
    for i, [hyp] in zip(whole, _decoded(translator, sources, prefixes, whole, options_for(alone))):
        found[i] = [Alternative(hyp, 0.0)] * args["num_hypotheses"]
    expanded = _expansions(
        translator, sources, prefixes, sorted(set(range(len(sources))) - set(whole)), args, options_for
    )
    for i, hyps in expanded.items():  # where the alternative reaches the step limit, it ends the hypothesis
        if len(prefixes[i]) + 1 == limit:
            found[i] = [Alternative(hyp, hyp.token_scores[-1]) for hyp in hyps]
    starts = [(i, hyp) for i, hyps in expanded.items() if len(prefixes[i]) + 1 < limit for hyp in hyps]
    if not starts:
        return found
    # each alternative's ended hypotheses, which CTranslate2's own count ranks; unpenalised, its top beam
    ended = {**args, "num_hypotheses": args["beam_size"] if args["length_penalty"] else 1}
    continued = translator.translate_batch(
        [sources[i] for i, _ in starts], [[piece(t) for t in hyp.tokens] for _, hyp in starts], **options_for(ended)
    )
    for (i, hyp), nbest in zip(starts, continued):
        found[i].append(_best(hyp, nbest, args["length_penalty"]))
    return found


def _decoded(
    translator: api.Translator, sources: list, prefixes: list, chosen: list[int], options: dict
) -> list[list[api.Translation]]:
    """The API's n-best of the sources `chosen` (indices) after their prefixes."""
    if not chosen:
        return []
    return translator.translate_batch([sources[i] for i in chosen], [prefixes[i] for i in chosen], **options)


def _expansions(
    translator: api.Translator, sources: list, prefixes: list, chosen: list[int], args: dict, options_for: Options
) -> dict[int, list[api.Translation]]:
    """For each source `chosen`, its alternatives: the num_hypotheses most probable tokens after its
    prefix, each as the prefix and that token (most probable first) and kept when at least as
    probable as min_alternative_expansion_prob. A beam of that width whose step limit is the next
    token, with EOS banned there: one call per prefix length."""
    found = {}
    for length in sorted({len(prefixes[i]) for i in chosen}):
        expansion = {
            **args,
            "beam_size": args["num_hypotheses"],
            "sampling_topk": 1,
            "max_decoding_length": length + 1,
            "min_decoding_length": length + 1,
            "repetition_penalty": 1.0,
            "no_repeat_ngram_size": 0,
            "return_attention": False,
            "replace_unknowns": False,
        }
        group = [i for i in chosen if len(prefixes[i]) == length]
        for i, hyps in zip(group, _decoded(translator, sources, prefixes, group, options_for(expansion))):
            found[i] = [h for h in hyps if math.exp(h.token_scores[-1]) >= args["min_alternative_expansion_prob"]]
    return found


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
