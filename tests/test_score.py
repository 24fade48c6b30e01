"""`score` feeds the decoder what `translate` feeds it, and counts what `translate` counts (issue 19).

The decoder input of a scored target is the decoder start token, then the token
forced at step 0 where the model has one (mBART-50/M2M100/NLLB's target-language
tag, BART's BOS), then the target; EOS is predicted last. The forced token counts
0, as in `translate` (it is forced, not chosen). So, for every family, the score of
the model's own ended translation equals translate's `log_prob`, and equals the sum
of the `transformers` model's log-softmax over the same decoder input.
"""

import json

import pytest
import torch

from nmtdecode.config import DecodingConfig
from nmtdecode.models.loading import load_model
from nmtdecode.translator import Translator

from .test_parity_hf import EOS, batch, build, ours_generate

# The generation settings that make each family force a first token as its real checkpoints do:
# BART (bart-large-cnn) forces BOS, mBART-50 and M2M100/NLLB the target-language tag. The tags and
# the input batches (seeds) are chosen so that the random models end hypotheses at many lengths.
FORCED = {"marian": {}, "bart": {"forced_bos_token_id": 0}, "mbart": {"forced_bos_token_id": 60},
          "m2m_100": {"forced_bos_token_id": 30}}
BATCH = {"marian": 0, "bart": 3, "mbart": 0, "m2m_100": 2}
MAX_LENGTH = 20


def prefix_of(model, rules) -> list[int]:
    return [model.cfg.decoder_start_id] + ([] if rules.forced_bos_id is None else [rules.forced_bos_id])


@pytest.mark.parametrize("family", FORCED)
def test_score_of_own_translations_is_their_log_prob_and_transformers_sum(family, tmp_path):
    hf, ours, defaults, rules = build(family, tmp_path, num_beams=4, max_length=MAX_LENGTH, **FORCED[family])
    assert (rules.forced_bos_id is None) == (family == "marian")
    prefix = prefix_of(ours, rules)
    rows, _, _ = batch(BATCH[family])
    nbest = ours_generate(ours, defaults, rules, rows, n_best=4)
    sources, targets, totals, decoder_inputs = [], [], [], []
    for row, hyps in zip(rows, nbest):
        for hyp in hyps:
            # ended with EOS, and before the step limit (where no EOS would be forced)
            if not hyp.ended or len(hyp.tokens) + 1 >= MAX_LENGTH - 1:
                continue
            forced, target = hyp.tokens[: len(prefix) - 1], hyp.tokens[len(prefix) - 1 :]
            assert forced == prefix[1:]  # translate generated the forced token first
            sources.append(row)
            targets.append(target)
            totals.append(hyp.total)
            decoder_inputs.append(prefix + target)
    assert len(sources) >= 6 and len({len(t) for t in targets}) > 2  # padded batch of mixed lengths

    scores = Translator(ours, DecodingConfig(), rules).score(sources, targets)
    assert scores == pytest.approx(totals, abs=1e-4)

    expected = []
    with torch.no_grad():
        for source, target, decoder_input in zip(sources, targets, decoder_inputs):
            logits = hf(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder_input])).logits[0]
            logprobs = torch.log_softmax(logits.float(), dim=-1)[len(prefix) - 1 :]  # after the forced token
            gold = torch.tensor(target + [EOS])
            expected.append(logprobs.gather(1, gold[:, None]).sum().item())
    assert scores == pytest.approx(expected, abs=1e-4)


def test_native_score_of_own_translations_is_their_log_prob(model_dir, lines_file, cli):
    """translate's JSONL tokens and log_prob from the command line, scored through the decoder that
    `score` runs (the random model's text does not re-tokenize to the same ids, so ids are scored)."""
    from .test_cli import LINES

    lines = [line for line in LINES if line.strip()] + ["the dog is in the house .", "a red cat"]
    run = cli("translate", "--model", model_dir, "--src", lines_file(lines), "--beam-size", 4, "--n-best", 4,
              "--max-length", 30, "--format", "jsonl", "--token-scores", "--quiet", text=True)
    assert run.returncode == 0, run.stderr
    loaded = load_model(str(model_dir))
    sources, targets, totals = [], [], []
    for line, record in zip(lines, run.stdout.splitlines()):
        for hyp in json.loads(record)["hypotheses"]:
            if hyp["ended"]:
                sources.append(loaded.tokenizer.encode(line))
                targets.append(hyp["tokens"])
                totals.append(hyp["log_prob"])
    assert len(sources) >= 8 and len({len(t) for t in targets}) > 1
    assert loaded.rules.forced_bos_id is None  # native models force nothing
    scores = Translator(loaded.model, DecodingConfig(), loaded.rules).score(sources, targets)
    assert scores == pytest.approx(totals, abs=1e-4)
