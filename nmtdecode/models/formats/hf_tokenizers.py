"""Tokenizers of Hugging Face translation checkpoints, read without importing `transformers`.

`load_tokenizer` returns the protocol of `nmtdecode.models.tokenizer.SentencePieceTokenizer`, following
transformers 5 (`models/{marian,m2m_100,nllb,mbart,mbart50,roberta}/tokenization_*.py`):

  family    files                                      source ids         set_languages returns
  marian    source.spm, target.spm, vocab.json         [>>tgt<<] X </s>   None (the tag is on the source)
  m2m_100   vocab.json, sentencepiece.bpe.model        __src__ X </s>     __tgt__
  nllb      tokenizer.json | sentencepiece.bpe.model   src X </s>         tgt (legacy_behaviour: X </s> src)
  mbart-50  tokenizer.json | sentencepiece.bpe.model   src X </s>         tgt
  mbart     tokenizer.json | sentencepiece.bpe.model   X </s> src         None (decoder_start_token_id is the tag)
  bart      tokenizer.json | vocab.json + merges.txt   <s> X </s>         None

Differences from transformers 5, on purpose: decoding leaves every language tag out (it keeps
Marian's `>>xx<<` and M2M100's `__xx__`); Marian skips Moses punctuation normalisation (set up
there but never called); tokenizer.json is used as written, minus its post-processor, whereas
transformers rebuilds the NLLB/mBART normaliser from its class (files written by transformers 4 can
differ from it on whitespace and NFKC). Without tokenizer.json, NLLB/mBART text goes through
SentencePiece with fairseq ids, as the models were trained; transformers' rebuilt pipeline would
keep trailing spaces, cut special-token strings out of the text and, for NLLB, put `<mask>`
before the language codes.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Protocol

import sentencepiece as spm

from ...options.bounded import shown
from ...options.config import ConfigError
from ..tokenizer import spm_identity
from ..architecture import TransformerConfig
from ..checkpoint import ModelError, note_read, read_json

if TYPE_CHECKING:  # an optional library (the `tokenizers` extra), imported when a model needs it
    import tokenizers

# Language codes, in the order that gives their ids (taken as data from transformers 5).
M2M100_CODES = {
    "m2m100": """af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi
        hr ht hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa
        pl ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu""".split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}
NLLB_CODES = """ace_Arab ace_Latn acm_Arab acq_Arab aeb_Arab afr_Latn ajp_Arab aka_Latn amh_Ethi apc_Arab arb_Arab
    ars_Arab ary_Arab arz_Arab asm_Beng ast_Latn awa_Deva ayr_Latn azb_Arab azj_Latn bak_Cyrl bam_Latn ban_Latn bel_Cyrl
    bem_Latn ben_Beng bho_Deva bjn_Arab bjn_Latn bod_Tibt bos_Latn bug_Latn bul_Cyrl cat_Latn ceb_Latn ces_Latn cjk_Latn
    ckb_Arab crh_Latn cym_Latn dan_Latn deu_Latn dik_Latn dyu_Latn dzo_Tibt ell_Grek eng_Latn epo_Latn est_Latn eus_Latn
    ewe_Latn fao_Latn pes_Arab fij_Latn fin_Latn fon_Latn fra_Latn fur_Latn fuv_Latn gla_Latn gle_Latn glg_Latn grn_Latn
    guj_Gujr hat_Latn hau_Latn heb_Hebr hin_Deva hne_Deva hrv_Latn hun_Latn hye_Armn ibo_Latn ilo_Latn ind_Latn isl_Latn
    ita_Latn jav_Latn jpn_Jpan kab_Latn kac_Latn kam_Latn kan_Knda kas_Arab kas_Deva kat_Geor knc_Arab knc_Latn kaz_Cyrl
    kbp_Latn kea_Latn khm_Khmr kik_Latn kin_Latn kir_Cyrl kmb_Latn kon_Latn kor_Hang kmr_Latn lao_Laoo lvs_Latn lij_Latn
    lim_Latn lin_Latn lit_Latn lmo_Latn ltg_Latn ltz_Latn lua_Latn lug_Latn luo_Latn lus_Latn mag_Deva mai_Deva mal_Mlym
    mar_Deva min_Latn mkd_Cyrl plt_Latn mlt_Latn mni_Beng khk_Cyrl mos_Latn mri_Latn zsm_Latn mya_Mymr nld_Latn nno_Latn
    nob_Latn npi_Deva nso_Latn nus_Latn nya_Latn oci_Latn gaz_Latn ory_Orya pag_Latn pan_Guru pap_Latn pol_Latn por_Latn
    prs_Arab pbt_Arab quy_Latn ron_Latn run_Latn rus_Cyrl sag_Latn san_Deva sat_Beng scn_Latn shn_Mymr sin_Sinh slk_Latn
    slv_Latn smo_Latn sna_Latn snd_Arab som_Latn sot_Latn spa_Latn als_Latn srd_Latn srp_Cyrl ssw_Latn sun_Latn swe_Latn
    swh_Latn szl_Latn tam_Taml tat_Cyrl tel_Telu tgk_Cyrl tgl_Latn tha_Thai tir_Ethi taq_Latn taq_Tfng tpi_Latn tsn_Latn
    tso_Latn tuk_Latn tum_Latn tur_Latn twi_Latn tzm_Tfng uig_Arab ukr_Cyrl umb_Latn urd_Arab uzn_Latn vec_Latn vie_Latn
    war_Latn wol_Latn xho_Latn ydd_Hebr yor_Latn yue_Hant zho_Hans zho_Hant zul_Latn""".split()
MBART_CODES = """ar_AR cs_CZ de_DE en_XX es_XX et_EE fi_FI fr_XX gu_IN hi_IN it_IT ja_XX kk_KZ ko_KR lt_LT lv_LV my_MM
    ne_NP nl_XX ro_RO ru_RU si_LK tr_TR vi_VN zh_CN""".split()
MBART50_CODES = (
    MBART_CODES
    + """af_ZA az_AZ bn_IN fa_IR he_IL hr_HR id_ID ka_GE km_KH mk_MK ml_IN mn_MN mr_IN pl_PL
    ps_AF pt_XX sv_SE sw_KE ta_IN te_IN th_TH tl_XX uk_UA ur_PK xh_ZA gl_ES sl_SI""".split()
)
CODES = {"nllb": NLLB_CODES, "mbart50": MBART50_CODES, "mbart": MBART_CODES}
SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>", "mask": "<mask>"}  # role -> default text
CLEAN_UP = [
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
]  # transformers' clean_up_tokenization


def _load_spm(path: str) -> spm.SentencePieceProcessor:
    if not os.path.isfile(path):
        raise ModelError(f"{path} is missing")
    try:
        return spm.SentencePieceProcessor(model_file=note_read(path))
    except (OSError, RuntimeError) as e:
        raise ModelError(f"{path} cannot be read as a SentencePiece model: {e}") from None


def _specials(config: dict) -> dict[str, str]:
    """Role -> special token text, from tokenizer_config.json (a string or a serialised AddedToken)."""
    texts = {}
    for role, default in SPECIALS.items():
        value = config.get(f"{role}_token") or default
        texts[role] = str(value.get("content", default)) if isinstance(value, dict) else str(value)
    return texts


class _Backend(Protocol):
    """What HFTokenizer asks of the side that cuts and numbers text: `_Pieces`, `_FairseqPieces`
    or `_TokenizerJson`."""

    def ids(self, text: str) -> list[int]: ...

    def split_pieces(self, text: str) -> list[str]: ...  # one per id of `ids`, as the text spells it

    def id(self, piece: str) -> int | None: ...

    def piece(self, i: int) -> str | None: ...

    def identity(self) -> tuple: ...  # equal for two backends that give every text the same ids

    def text(self, ids: list[int]) -> str: ...


class _Pieces:
    """SentencePiece pieces mapped through vocab.json (Marian, M2M100; T5 and Pegasus through their
    own numbering, hf_spiece.py), as transformers' Python
    tokenizers do: added-token strings (`</s>`, ...) are cut out of the text first and become their
    ids; every other stretch is encoded on its own, and a piece missing from the vocabulary is <unk>.
    Marian also takes a leading `>>xx<<` of a stretch as one token."""

    def __init__(
        self,
        model: str | spm.SentencePieceProcessor,
        vocab: dict[str, int],
        unk_id: int,
        added: dict[str, int],
        marian: bool = False,
        detok: spm.SentencePieceProcessor | None = None,
        strip: bool = True,
    ) -> None:
        self.sp = model if isinstance(model, spm.SentencePieceProcessor) else _load_spm(model)
        self.detok = detok or self.sp  # Marian decodes with source.spm when the vocabulary is shared
        self.vocab, self.unk_id, self.added, self.marian = vocab, unk_id, added, marian
        self.strip = strip  # decoded text without its outer spaces (T5's and Pegasus's keep a trailing one)
        self.pieces = {i: p for p, i in vocab.items()}
        self.added_pieces = {i: p for p, i in added.items()}
        alternatives = "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))
        self.splitter = re.compile(f"({alternatives})") if added else None

    def ids(self, text: str) -> list[int]:
        return [i for _, i in self._pieces_and_ids(text)]

    def _pieces_and_ids(self, text: str) -> Iterator[tuple[str, int]]:
        """(piece as the text spells it, its id) for each piece: an added token whole, the rest
        split by the SentencePiece model and looked up in the vocabulary (<unk> when missing)."""
        for part in self.splitter.split(text) if self.splitter else [text]:
            if part in self.added:
                yield part, self.added[part]
            elif part:
                yield from ((p, self.vocab.get(p, self.unk_id)) for p in self._split(part))

    def id(self, piece: str) -> int | None:
        return self.added.get(piece, self.vocab.get(piece))

    def piece(self, i: int) -> str | None:
        return self.pieces.get(i, self.added_pieces.get(i))

    def identity(self) -> tuple:
        return (
            spm_identity(self.sp),
            tuple(sorted(self.vocab.items())),
            tuple(sorted(self.added.items())),
            self.unk_id,
            self.marian,
        )

    def split_pieces(self, text: str) -> list[str]:
        """One per id of `ids`, as the text spells it (a piece the vocabulary lacks too)."""
        return [p for p, _ in self._pieces_and_ids(text)]

    def _split(self, text: str) -> list[str]:
        code: list[str] = []
        if self.marian and text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        return code + self.sp.encode(text, out_type=str)

    def text(self, ids: list[int]) -> str:
        pieces = [self.pieces[i] for i in ids if i in self.pieces]
        if self.marian:
            return self.detok.decode_pieces(pieces).replace("\u2581", " ").strip()
        text = self.detok.decode(pieces)
        return text.strip() if self.strip else text


class _FairseqPieces:
    """NLLB/mBART without tokenizer.json: the SentencePiece model in fairseq's numbering, which
    puts <s> <pad> </s> <unk> at 0-3 and every other piece at its SentencePiece id + 1 (SentencePiece
    keeps <unk> <s> </s> at 0-2); the language codes follow the pieces, then <mask>."""

    UNK = 3

    def __init__(self, model: str) -> None:
        self.sp = _load_spm(model)
        if (self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) != (0, 1, 2):
            raise ModelError(f"{model}: expected fairseq's SentencePiece layout (<unk> <s> </s> = 0 1 2)")
        self.size = self.sp.get_piece_size()

    def special_ids(self, codes: list[str]) -> dict[str, int]:
        return {"bos": 0, "pad": 1, "eos": 2, "unk": self.UNK, "mask": self.size + 1 + len(codes)}

    def languages(self, codes: list[str]) -> dict[str, int]:
        return {c: self.size + 1 + i for i, c in enumerate(codes)}

    def ids(self, text: str) -> list[int]:
        return [self.UNK if self.sp.is_unknown(i) else i + 1 for i in self.sp.encode(text)]

    def split_pieces(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def id(self, piece: str) -> int | None:
        specials = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": self.UNK}
        if piece in specials:
            return specials[piece]
        found = self.sp.piece_to_id(piece)
        return found + 1 if self.sp.id_to_piece(found) == piece else None

    def piece(self, i: int) -> str | None:
        if 0 <= i <= self.UNK:
            return ("<s>", "<pad>", "</s>", "<unk>")[i]
        return self.sp.id_to_piece(i - 1) if self.UNK < i <= self.size else None  # beyond: language codes, <mask>

    def identity(self) -> tuple:
        return (spm_identity(self.sp),)

    def text(self, ids: list[int]) -> str:
        return self.sp.decode([i - 1 for i in ids if self.UNK < i <= self.size])


class _TokenizerJson:
    """A `tokenizers` pipeline (tokenizer.json, or BART's vocab.json + merges.txt) without its
    post-processor: the family rules add tags and EOS."""

    def __init__(self, tokenizer: tokenizers.Tokenizer) -> None:
        self.tok = tokenizer
        tokenizer.no_truncation()  # a saved max_length would cut long sentences silently
        tokenizer.no_padding()
        self.bpe = type(tokenizer.model).__name__ == "BPE"

    def id(self, token: str) -> int | None:
        return self.tok.token_to_id(token)

    def piece(self, i: int) -> str | None:
        return self.tok.id_to_token(i)

    def identity(self) -> tuple:
        return (self.tok.to_str(),)

    def ids(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def split_pieces(self, text: str) -> list[str]:
        return self.tok.encode(text, add_special_tokens=False).tokens

    @functools.cached_property
    def marks_words(self) -> bool:
        """Whether its pieces start words with SentencePiece's mark (NLLB's do, BART's byte-level ones not)."""
        return any(token.startswith("\u2581") for token in self.tok.get_vocab())

    def text(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)


def _tokenizers_library(path: str) -> ModuleType:
    """The optional `tokenizers` library (the `tokenizers` extra), which the tokenizer at `path` needs."""
    try:
        import tokenizers
    except ImportError:
        raise ModelError(f"{path} needs the `tokenizers` library: pip install tokenizers") from None
    return tokenizers


def _read_tokenizer_json(path: str) -> _TokenizerJson:
    tokenizers = _tokenizers_library(path)
    try:
        return _TokenizerJson(tokenizers.Tokenizer.from_file(note_read(path)))
    except Exception as e:  # the library raises plain Exceptions for bad files
        raise ModelError(f"{path} cannot be read: {e}") from None


class HFTokenizer:
    """The tokenizer protocol over a backend (`ids(text)`, `text(ids)`). `languages` maps codes to
    tag ids; the source tag goes first, or last where `tag_at_end` (mBART cc25, legacy NLLB)."""

    def __init__(
        self,
        source: _Backend,
        *,
        unk_id: int,
        eos_id: int,
        special_ids: Iterable[int] = (),
        target: _Backend | None = None,
        languages: Mapping[str, int] | None = None,
        src_lang: str | None = None,
        tag_at_end: bool = False,
        bos_id: int | None = None,
        cleanup: bool = False,
        tag_piece: str = "{}",
    ) -> None:
        self.source, self.target = source, target or source
        self.unk_id, self.eos_id, self.bos = unk_id, eos_id, [] if bos_id is None else [bos_id]
        self.languages = dict(languages or {})
        self.skip = frozenset(special_ids) | {unk_id, eos_id} | set(self.languages.values())
        self.tag_at_end, self.cleanup = tag_at_end, cleanup
        self.tag_piece = tag_piece  # how a language code is spelt as a piece: M2M100's __en__, else the code
        try:
            self.default_tag = self._tag("src_lang", src_lang) if src_lang else None
        except ConfigError as e:
            raise ModelError(f"tokenizer_config.json: {e}") from None
        self.set_languages(None, None)

    def encode(self, text: str) -> list[int]:
        """Source text -> model ids, with EOS and the family's tags."""
        return self.before + self.source.ids(text) + self.after

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        """Source pieces (text already cut as `encode` cuts it) -> model ids, with EOS and the
        family's tags; a piece the vocabulary lacks is <unk>."""
        ids = [self.source.id(piece) for piece in pieces]
        return self.before + [self.unk_id if i is None else i for i in ids] + self.after

    def encode_target(self, text: str) -> list[int]:
        """Target text -> model ids without EOS or tags (forced decoding)."""
        return self.target.ids(text)

    def decode(self, ids: list[int]) -> str:
        """Target ids -> text; pad, bos, eos, unk and language tags are left out."""
        text = self.target.text([i for i in ids if i not in self.skip])
        if self.cleanup:
            for old, new in CLEAN_UP:
                text = text.replace(old, new)
        return text

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None:
        """Source tag from `src_lang` (None: tokenizer_config.json's); returns the target tag to force."""
        forced = self._tag("tgt_lang", tgt_lang) if tgt_lang else None
        tag = self._tag("src_lang", src_lang) if src_lang else self.default_tag
        tags = [] if tag is None else [tag]
        self.before = self.bos + ([] if self.tag_at_end else tags)
        self.after = [self.eos_id] + (tags if self.tag_at_end else [])
        return forced

    def language_codes(self) -> list[str]:
        return list(self.languages)

    def source_identity(self) -> tuple:
        """Equal for two tokenizers exactly when they give every source line the same ids, for
        the same src_lang (an ensemble's models must: models/ensemble.py)."""
        return (
            type(self).__name__,
            self.source.identity(),
            tuple(sorted(self.languages.items())),
            self.unk_id,
            self.eos_id,
            tuple(self.bos),
            self.tag_at_end,
            self.default_tag,
            tuple(self.before),
            tuple(self.after),
        )

    def target_piece(self, token_id: int) -> str | None:
        """The target vocabulary's entry for an id, as transformers' convert_ids_to_tokens spells it
        (a piece, a special token, a language tag), or None for an id it does not know."""
        return self._piece(self.target, token_id)

    def source_piece(self, token_id: int) -> str | None:
        """The source vocabulary's entry for an id, as `target_piece` spells it."""
        return self._piece(self.source, token_id)

    def _piece(self, side: _Backend, token_id: int) -> str | None:
        found = side.piece(token_id)
        if found is None:
            code = next((c for c, i in self.languages.items() if i == token_id), None)
            found = None if code is None else self.tag_piece.format(code)
        return found

    # Pieces (--replace-unk, --report-align): the source's as its text spells them, one per id of
    # `encode`, tags and EOS as the vocabulary spells them; the target's: `target_piece`.
    @property
    def word_marker(self) -> str | None:
        """SentencePiece's word-start mark, or None for a byte-level BPE (GPT-2's, BART's)."""
        return "\u2581" if getattr(self.target, "marks_words", True) else None

    def source_pieces(self, text: str | list[str]) -> list[str]:
        """One piece per id of `encode` (of `encode_pieces` for a list of pieces), tags included."""
        pieces = text if isinstance(text, list) else self.source.split_pieces(text)
        return (
            [self.source_piece(i) or "" for i in self.before]
            + pieces
            + [self.source_piece(i) or "" for i in self.after]
        )

    def piece_id(self, piece: str) -> int | None:
        """The id of a target vocabulary entry (a piece or a language tag), or None."""
        found = self.target.id(piece)
        return self.languages.get(piece) if found is None else found

    def _tag(self, option: str, code: str) -> int:
        if not self.languages:
            raise ConfigError(f"{option}: this model has no language tags")
        if code not in self.languages:
            known = list(self.languages)
            close = difflib.get_close_matches(code, known, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise ConfigError(
                f"{option}: {shown(code)} is not a language of this model{hint}; it knows {len(known)}: "
                f"{', '.join(known[:12])}{', ...' if len(known) > 12 else ''}"
            )
        return self.languages[code]


class _MarianTokenizer(HFTokenizer):
    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> None:
        """Multi-target OPUS models read the target language as a `>>tgt<<` token before the source."""
        if src_lang:
            raise ConfigError("src_lang: Marian models have no source-language tag (tgt_lang picks >>xx<<)")
        if tgt_lang and tgt_lang.startswith(">>") and tgt_lang.endswith("<<"):
            tgt_lang = tgt_lang[2:-2]
        self.before, self.after = [self._tag("tgt_lang", tgt_lang)] if tgt_lang else [], [self.eos_id]
        return None


class _MBartTokenizer(HFTokenizer):
    """mBART cc25: the checkpoint's decoder_start_token_id is the target tag, nothing is forced."""

    def __init__(self, source: _Backend, decoder_start_id: int, **kw) -> None:
        self.decoder_start_id = decoder_start_id
        super().__init__(source, **kw)

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None:
        if tgt_lang and self._tag("tgt_lang", tgt_lang) != self.decoder_start_id:
            raise ConfigError(
                f"tgt_lang: this mBART checkpoint starts decoding with token {self.decoder_start_id} "
                f"(decoder_start_token_id), not with {tgt_lang}; it cannot switch target languages"
            )
        return super().set_languages(src_lang, None)


def load_tokenizer(path: str, hf: dict, cfg: TransformerConfig) -> HFTokenizer:
    """The tokenizer of the Hugging Face checkpoint in `path` (`hf`: its config.json)."""
    config = read_json(os.path.join(path, "tokenizer_config.json"), required=False)
    kind = str(config.get("tokenizer_class") or hf.get("tokenizer_class") or "").removesuffix("Fast")
    family = hf.get("model_type")
    if family == "marian":
        return _marian(path, config)
    if family == "bart":
        return _bart(path, config)
    if family == "m2m_100":  # M2M100 ships vocab.json, NLLB does not
        if kind == "M2M100Tokenizer" or kind != "NllbTokenizer" and os.path.isfile(os.path.join(path, "vocab.json")):
            return _m2m100(path, config)
        return _fairseq_family(path, config, cfg, "nllb")
    if family == "mbart":
        return _fairseq_family(path, config, cfg, {"MBart50Tokenizer": "mbart50", "MBartTokenizer": "mbart"}.get(kind))
    raise ModelError(f"{path}: no tokenizer for model_type {shown(family)}")


def _added_tokens(config: dict, vocab: dict[str, int], defaults: Iterable[str]) -> dict[str, int]:
    """Strings that transformers' Python tokenizers cut out of the text before SentencePiece."""
    saved = config.get("added_tokens_decoder") or {}
    added = {str(t.get("content") if isinstance(t, dict) else t): int(i) for i, t in saved.items()}
    return added or {t: vocab[t] for t in defaults if t in vocab}


def _marian(path: str, config: dict) -> HFTokenizer:
    vocab = read_json(os.path.join(path, "vocab.json"))
    separate = bool(config.get("separate_vocabs"))
    target_vocab = read_json(os.path.join(path, "target_vocab.json")) if separate else vocab
    names = _specials(config)
    for name, table in (("vocab.json", vocab), ("target_vocab.json", target_vocab)):
        if names["unk"] not in table or names["eos"] not in table:
            raise ModelError(f"{os.path.join(path, name)}: no {names['unk']} or {names['eos']} entry")
    added = _added_tokens(config, vocab, [names[r] for r in ("eos", "unk", "pad")])
    return marian_tokenizer(
        path, vocab, target_vocab, names, added, cleanup=bool(config.get("clean_up_tokenization_spaces"))
    )


def marian_tokenizer(
    path: str,
    vocab: dict,
    target_vocab: dict,
    names: dict[str, str],
    added: dict[str, int],
    cleanup: bool = False,
    special_ids: Iterable[int] = (),
) -> HFTokenizer:
    """OPUS-MT's tokenizer: source.spm and target.spm in `path` cut text into pieces, the
    vocabularies (piece -> id; `target_vocab` is `vocab` when they are shared) number them;
    `names`: role -> special token text, `added`: strings cut out of the text first. Shared by
    Hugging Face's Marian directories and Marian's own (formats/marian_vocab.py)."""
    separate = target_vocab is not vocab
    unk = names["unk"]
    source = _Pieces(os.path.join(path, "source.spm"), vocab, vocab[unk], added, marian=True)
    target = _Pieces(
        os.path.join(path, "target.spm"),
        target_vocab,
        target_vocab[unk],
        added,
        marian=True,
        detok=None if separate else source.sp,
    )
    is_tag = re.compile(r">>.+<<").fullmatch
    specials = {i for t, i in target_vocab.items() if is_tag(t) or t == names["pad"]} | set(added.values())
    return _MarianTokenizer(
        source,
        target=target,
        unk_id=vocab[unk],
        eos_id=vocab[names["eos"]],
        special_ids=specials | set(special_ids),
        languages={t[2:-2]: i for t, i in vocab.items() if is_tag(t)},
        cleanup=cleanup,
    )


def _m2m100(path: str, config: dict) -> HFTokenizer:
    """Language tag ids follow vocab.json: len(vocab) + index in the `language_codes` list."""
    vocab = read_json(os.path.join(path, "vocab.json"))
    codes = M2M100_CODES.get(config.get("language_codes", "m2m100"))
    if codes is None:
        raise ModelError(f"{path}: tokenizer_config.json's language_codes must be one of {', '.join(M2M100_CODES)}")
    names = [t for role, t in _specials(config).items() if role != "mask"]
    if missing := [t for t in names if t not in vocab]:
        raise ModelError(f"{os.path.join(path, 'vocab.json')}: no {', '.join(missing)} entry")
    unk, eos = vocab[names[3]], vocab[names[2]]
    added = _added_tokens(config, vocab, names)
    pieces = _Pieces(os.path.join(path, "sentencepiece.bpe.model"), vocab, unk, added)
    return HFTokenizer(
        pieces,
        unk_id=unk,
        eos_id=eos,
        special_ids={vocab[t] for t in names} | set(added.values()),
        languages={c: len(vocab) + i for i, c in enumerate(codes)},
        src_lang=config.get("src_lang") or "en",
        tag_piece="__{}__",
        cleanup=bool(config.get("clean_up_tokenization_spaces")),
    )


def _fairseq_family(path: str, config: dict, cfg: TransformerConfig, family: str | None) -> HFTokenizer:
    """NLLB, mBART-50 or mBART cc25 (family None: an mBART whose tokenizer_class does not say which)."""
    tok_file, spm_file = os.path.join(path, "tokenizer.json"), os.path.join(path, "sentencepiece.bpe.model")
    backend: _TokenizerJson | _FairseqPieces
    if os.path.isfile(tok_file):
        backend = _read_tokenizer_json(tok_file)
        family = family or ("mbart50" if backend.id(MBART50_CODES[-1]) is not None else "mbart")
        languages = {c: i for c in CODES[family] if (i := backend.id(c)) is not None}
        ids = {role: backend.id(text) for role, text in _specials(config).items()}
        if ids["eos"] is None or ids["unk"] is None:
            raise ModelError(f"{tok_file}: no end-of-sentence or unknown token")
        bpe = backend.bpe
    elif os.path.isfile(spm_file):
        backend = _FairseqPieces(spm_file)
        family = family or ("mbart50" if cfg.src_vocab_size > backend.size + len(MBART50_CODES) else "mbart")
        languages, ids = backend.languages(CODES[family]), backend.special_ids(CODES[family])
        bpe = family == "nllb"  # the `tokenizers` model transformers 5 would build
    else:
        raise ModelError(f"{path}: no tokenizer.json or sentencepiece.bpe.model")
    kw: dict[str, Any] = dict(  # HFTokenizer's keyword arguments, of several types
        unk_id=ids["unk"],
        eos_id=ids["eos"],
        special_ids={i for i in ids.values() if i is not None},
        languages=languages,
        src_lang=config.get("src_lang") or ("eng_Latn" if family == "nllb" else "en_XX"),
        cleanup=bool(config.get("clean_up_tokenization_spaces")) and not bpe,
    )  # as transformers 5
    if family == "mbart":
        return _MBartTokenizer(backend, cfg.decoder_start_id, tag_at_end=True, **kw)
    return HFTokenizer(backend, tag_at_end=family == "nllb" and bool(config.get("legacy_behaviour")), **kw)


def _bart(path: str, config: dict) -> HFTokenizer:
    """BART's byte-level BPE: tokenizer.json, else vocab.json + merges.txt built like RobertaTokenizer."""
    tok_file = os.path.join(path, "tokenizer.json")
    vocab_file, merges_file = os.path.join(path, "vocab.json"), os.path.join(path, "merges.txt")
    names = _specials(config)
    if os.path.isfile(tok_file):
        backend = _read_tokenizer_json(tok_file)
    elif os.path.isfile(vocab_file) and os.path.isfile(merges_file):
        backend = _byte_level_bpe(vocab_file, merges_file, names.values(), bool(config.get("add_prefix_space")))
    else:
        raise ModelError(f"{path}: no tokenizer.json, nor vocab.json and merges.txt")
    ids = {role: backend.id(text) for role, text in names.items()}
    if missing := [names[r] for r in ("bos", "eos", "unk") if ids[r] is None]:
        raise ModelError(f"{path}: the tokenizer has no {', '.join(missing)} token")
    return HFTokenizer(
        backend,
        unk_id=ids["unk"],
        eos_id=ids["eos"],
        bos_id=ids["bos"],
        special_ids={i for i in ids.values() if i is not None},
    )


def _byte_level_bpe(
    vocab_file: str, merges_file: str, specials: Iterable[str], add_prefix_space: bool
) -> _TokenizerJson:
    tokenizers = _tokenizers_library(vocab_file)
    try:
        tok = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(note_read(vocab_file), note_read(merges_file)))
    except Exception as e:
        raise ModelError(f"{vocab_file} / {merges_file} cannot be read: {e}") from None
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens([t for t in specials if tok.token_to_id(t) is not None])
    return _TokenizerJson(tok)
