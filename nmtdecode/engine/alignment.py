"""What a hypothesis's alignment says in pieces and words: --replace-unk and --report-align.

Both start from each target token's alignment, the source position its step attended
most (search/base.py's Hypothesis.alignment, the argmax of the recorded cross-attention),
and from the source and target pieces the tokenizer spells (tokenizer.py).

* --replace-unk (OpenNMT-py's -replace_unk, onmt/translate/translation.py
  TranslationBuilder._build_target_tokens): each generated <unk> becomes the source
  *piece* at its aligned position, spelt as the source text spells it (OpenNMT-py copies
  the source vocabulary's entry, which is <unk> again for an unknown source piece). An
  <unk> aligned to EOS or a language tag stays as it is.
* --report-align: Pharaoh pairs `SRC-TGT`, 0-based, sorted by source then target index
  (onmt/utils/alignment.py build_align_pharaoh's order), over the text's pieces (EOS and
  tags have no index). When the pieces mark word starts (SentencePiece's \u2581), pairs are
  between words: a piece with the mark starts a new word, the first piece starts word 0,
  and a word pair is linked when any of its pieces are (to_word_align with the "spacer"
  rule of subword_map_by_spacer); whitespace-split vocabularies are words already.
"""

from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING

from .batching import Result

if TYPE_CHECKING:
    from ..models.checkpoint import Tokenizer


def word_indexes(pieces: list[str], marker: str | None) -> list[int]:
    """The word of each piece: a new word at each piece holding `marker` (not at the first piece);
    with no marker (a whitespace split, or a vocabulary that does not mark words), one word each."""
    if marker is None or marker == " ":
        return list(range(len(pieces)))
    return list(accumulate(int(i > 0 and marker in piece) for i, piece in enumerate(pieces)))


def pharaoh(
    alignment: list[int | None],
    source_text: list[int],
    target_text: list[int],
    source_pieces: list[str],
    target_pieces: list[str],
    marker: str | None,
) -> str:
    """`SRC-TGT` pairs of one hypothesis. alignment: the source position of each target token;
    source_text/target_text: the positions that are text (not EOS, tags, a forced token), in order;
    the pieces: all positions' spellings."""
    source_word = dict(zip(source_text, word_indexes([source_pieces[p] for p in source_text], marker)))
    target_word = dict(zip(target_text, word_indexes([target_pieces[p] for p in target_text], marker)))
    pairs = {
        (source_word[s], target_word[t]) for t in target_text if (s := alignment[t]) is not None and s in source_word
    }
    return " ".join(f"{s}-{t}" for s, t in sorted(pairs))


def unknown_replacements(
    tokens: list[int], alignment: list[int | None], unk_id: int, source_pieces: list[str], source_text: set[int]
) -> dict[int, str]:
    """{position of a generated <unk>: the source piece it becomes}, for each <unk> aligned to a text piece."""
    return {
        t: source_pieces[s]
        for t, token in enumerate(tokens)
        if token == unk_id and (s := alignment[t]) is not None and s in source_text
    }


def decode_replacing(
    tokenizer: Tokenizer, tokens: list[int], replacements: dict[int, str], special_ids: set[int]
) -> str:
    """The text of `tokens` with each position of `replacements` spelt as given: the runs between them
    decoded by the tokenizer, a word start (SentencePiece's mark, or a whitespace split) kept as a space."""
    marker, parts, run = tokenizer.word_marker, list[str](), list[int]()

    def flush() -> None:
        text_ids = [i for i in run if i not in special_ids]
        if text_ids:
            text = tokenizer.decode(text_ids)
            starts_word = marker is not None and marker in (tokenizer.target_piece(text_ids[0]) or "")
            parts.append((" " if starts_word and marker != " " else "") + text)
        run.clear()

    for position, token in enumerate(tokens):
        if position in replacements:
            flush()
            parts.append(replacements[position] if marker is None else replacements[position].replace(marker, " "))
        else:
            run.append(token)
    flush()
    if marker == " ":
        return " ".join(part.strip() for part in parts)
    return "".join(parts).lstrip(" ") if marker is not None else "".join(parts)


def aligned_result(
    index: int,
    hyps: list,
    tokenizer: Tokenizer,
    source_ids: list[int],
    source_pieces: list[str],
    special_ids: set[int],
    unk_id: int,
    replace_unk: bool,
    report_align: bool,
) -> Result:
    """A line's result with what --replace-unk and --report-align make of each hypothesis's alignment.
    special_ids: the ids that are not text (EOS, BOS, pad, language tags), on either side."""
    source_text = [p for p, i in enumerate(source_ids) if i not in special_ids]
    texts, pieces, pairs = [], [], []
    for hyp in hyps:
        replaced = (
            unknown_replacements(hyp.tokens, hyp.alignment, unk_id, source_pieces, set(source_text))
            if replace_unk
            else {}
        )
        texts.append(
            decode_replacing(tokenizer, hyp.tokens, replaced, special_ids) if replaced else tokenizer.decode(hyp.tokens)
        )
        if report_align:
            target_pieces = [tokenizer.target_piece(t) or "" for t in hyp.tokens]
            for position, piece in replaced.items():
                target_pieces[position] = piece
            target_text = [t for t, i in enumerate(hyp.tokens) if i not in special_ids]
            pairs.append(
                pharaoh(hyp.alignment, source_text, target_text, source_pieces, target_pieces, tokenizer.word_marker)
            )
            pieces.append(target_pieces)
    if not report_align:
        return Result(index, hyps, texts)
    return Result(index, hyps, texts, source_pieces=source_pieces, pieces=pieces, pharaoh=pairs)
