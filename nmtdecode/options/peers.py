"""Other tools' option names and nmtdecode's for each: one table per tool, data only.

A user of OpenNMT-py, eole, Marian, fairseq, CTranslate2 or transformers brings their names: on
the command line (`-beam_size 5`, `--sampling-topk 10`, `-w 4000`), in a YAML file
(`random_sampling_topk: 10`, Marian's decoder.yml) and as keyword arguments
(`translate(..., num_beams=4)`). Each table is read by all three ways in (options/foreign.py
says it in each one's spelling): a name that is not ours is answered with ours, or with why
nmtdecode has none, never with the nearest spelling of something else.

A name is the tool's long option name with `_` for `-` (fairseq's `--sampling-topk` is
`sampling_topk`, transformers' `num_beams=` is `num_beams`). What to write instead is in a
notation each way in spells its own way: `{beam_size=K}` is `--beam-size K` on the command
line, `beam_size: K` in YAML and `beam_size=K` in Python; `{sampling}`, a switch, is
`--sampling`, `sampling: true`, `sampling=True`. A name two tables share means the same in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Peer:
    """One tool's names that are not ours. `ours`: name -> what to write here; `without`: name ->
    why nmtdecode has no equivalent (the answer then asks to remove it); `shorts`: its one-letter
    flags -> their long names (a long name may be ours: Marian's `-b` is its --beam-size)."""

    name: str  # as a YAML or API message says whose name it is: "an OpenNMT-py/eole name"
    flags_of: str  # as a command-line message says whose flag it is: "OpenNMT-py's"
    ours: dict[str, str]
    without: dict[str, str]
    shorts: dict[str, str] = field(default_factory=dict)


_PRECISION = "{dtype=D} (float32, float16 or bfloat16; int8 is {quantize=int8})"
_N_BEST = "{n_best=N} (with {format=nbest} or jsonl)"
_SUBWORDS = "the model's own tokenizer (the SentencePiece models it names) cuts the source and joins the output"
_CONSTRAINED = "there is no constrained decoding; {prefix=FILE} forces how each output starts"
_LOGGING = "messages go to stderr (2> FILE keeps them)"
_TEXT_OUT = "the output is text already, its pieces joined by the model's own tokenizer"
_WHOLE_VOCABULARY = "every step scores the whole target vocabulary (no lexical shortlist)"
_MODEL_SAYS = "the model's own files say what it is"
_INT8 = "{quantize=int8} stores int8 weights as the model is read ({gemm=B} picks the CPU matrix products)"

OPENNMT = Peer(
    "OpenNMT-py/eole",
    "OpenNMT-py",
    ours={
        "max_length_ratio": "{max_len_a=R} with {max_len_b=5} (their step limit is |src| x R + 5)",
        "random_sampling_topk": "{top_k=K} with {sampling} (their -1, the whole distribution, is {top_k=0}; "
        "their 1, the arg-max, is {beam_size=1} without sampling)",
        "random_sampling_topp": "{top_p=P} with {sampling} (their 0, no nucleus, is {top_p=1})",
        "random_sampling_temp": "{temperature=T} with {sampling}",
        "ban_unk_token": "{ban_unk}",
        "gpu": "{device=cuda:N} for their GPU N ({device=cpu} for their -1)",
        "precision": _PRECISION,
        "compute_dtype": _PRECISION,
        "fp32": "{dtype=float32}",
        "int8": "{quantize=int8}",
        "with_score": "{format=nbest} or jsonl",
    },
    without={
        "verbose": "{format=nbest} or jsonl write each hypothesis with its score, and the summary line is on stderr",
        "report_time": "the summary line on stderr gives the load and decoding times",
        "log_file": _LOGGING,
        "attn_debug": "{attention} adds each token's attention weights to jsonl, and {dump_beam=FILE} records the "
        "search for nmtdecode show",
        "align_debug": "{alignment} adds the alignment to jsonl, {report_align} Pharaoh pairs after the text",
        "world_size": "several GPUs are several processes under torchrun (docs/distributed.md)",
        "gpu_ranks": "several GPUs are several processes under torchrun (docs/distributed.md)",
        "tgt": "translate scores no reference; nmtdecode score --tgt FILE gives the log-probability of given targets",
        "phrase_table": "{replace_unk} copies the source piece attended most, without a phrase table",
        "stepwise_penalty": "the coverage penalty scores finished hypotheses only",
        "ratio": "a sentence's search stops by the {early_stopping} rule and the step limit",
        "transforms": _SUBWORDS,
        "src_subword_model": _SUBWORDS,
        "tgt_subword_model": _SUBWORDS,
    },
)

MARIAN = Peer(
    "Marian",
    "Marian",
    ours={
        "models": "{model=PATH} (several models decode as an ensemble)",
        "input": "{src=FILE}",
        "normalize": "{length_penalty=A} (a number means avg: score / length^A, </s> counted, as Marian's; "
        "its --normalize alone is 1)",
        "max_length_factor": "{max_len_a=F} with {max_len_b=0} (at most F x the source's tokens, </s> counted; "
        "Marian's limit is per batch, nmtdecode's per sentence)",
        "max_length_crop": "{max_src_length=N} (Marian's --max-length N is the source's limit; nmtdecode's "
        "{max_length=N} is the output's)",
        "mini_batch": "{batch_size=N}",
        "mini_batch_words": "{batch_size=N} with {batch_type=tokens}",
        "word_scores": "{token_scores} (with {format=nbest-marian} or jsonl)",
        "devices": "{device=cuda:N} (one GPU a process; torchrun starts one per GPU)",
        "cpu_threads": "{inter_threads=N} with {threads=1} (N batches at once, one thread each, as Marian's N "
        "workers), or {threads=N} (one batch at a time on N threads)",
        "weights": "{ensemble_weights=W} (one per model)",
        "output_sampling": "{sampling} (its topk K is {top_k=K}, its temperature {temperature=T})",
        "quiet_translation": "{quiet}",
        "fp16": "{dtype=float16}",
        "precision": _PRECISION,
    },
    without={
        "vocabs": "the vocabularies are the model's (give {model} its folder, whose decoder.yml names them, or "
        "its .npz with decoder.yml beside it)",
        "workspace": "nothing is preallocated (memory is taken as it is needed, and a batch that runs out of it "
        "is decoded in halves)",
        "maxi_batch": "lines are read many batches at a time and sorted by length before batching, without a setting",
        "maxi_batch_sort": "lines are read many batches at a time and sorted by length before batching, without "
        "a setting",
        "allow_unk": "a Marian model's decoder.yml says whether <unk> may be written (allow-unk: true there); "
        "other models write it unless {ban_unk}",
        "word_penalty": "there is no word penalty; {length_penalty=A} normalises by length",
        "allow_special": "a Marian model's decoder.yml says whether its control pieces may be written "
        "(allow-special: true there)",
        "shortlist": _WHOLE_VOCABULARY,
        "output_approx_knn": _WHOLE_VOCABULARY,
        "skip_cost": "every hypothesis is scored",
        "no_spm_decode": _TEXT_OUT,
        "gemm_type": _INT8,
        "optimize": _INT8,
        "quantize_range": _INT8,
        "type": _MODEL_SAYS,
        "ignore_model_config": "the model's own config is always read",
        "tsv": "one input line is one source sentence",
        "tsv_fields": "one input line is one source sentence",
        "stat_freq": "the summary line on stderr gives the speed",
        "relative_paths": "decoder.yml's paths are always read from its folder",
        "log": _LOGGING,
        "log_level": _LOGGING,
        "log_time_zone": _LOGGING,
        "num_devices": "one GPU a process ({device=cuda:N}); torchrun starts one per GPU",
    },
    shorts={
        "-v": "vocabs",
        "-w": "workspace",
        "-i": "input",
        "-n": "normalize",
        "-d": "devices",
        "-b": "beam_size",
        "-g": "gemm_type",
    },
)
# The keys by which a -c file is Marian's decoder.yml (answered as a whole: its folder goes to --model).
MARIAN_DECODER_YML = ("models", "vocabs")
# Marian's `--alignment hard|soft`: our --alignment is a switch (JSONL source positions).
MARIAN_ALIGNMENT = ("hard", "soft")

_TWO_PASS = "there is no two-pass decoding (a first-pass decoder's settings)"
_ITERATIVE = "there is no iterative refinement (non-autoregressive models)"

FAIRSEQ = Peer(
    "fairseq",
    "fairseq",
    ours={
        "path": "{model=PATH} for a model nmtdecode reads: not fairseq's .pt checkpoints, but a Hugging Face "
        "copy (M2M100, NLLB, mBART, BART) or the folder ct2-fairseq-converter writes; their colon-separated "
        "ensemble is several models given to {model}",
        "input": "{src=FILE}",
        "beam": "{beam_size=K}",
        "nbest": _N_BEST,
        "lenpen": "{length_penalty=A} (a number means avg: score / length^A, as fairseq's)",
        "sampling_topk": "{top_k=K} with {sampling} (their -1, the whole distribution, is {top_k=0})",
        "sampling_topp": "{top_p=P} with {sampling} (their -1, no nucleus, is {top_p=1})",
        "min_len": "{min_length=N}",
        "max_tokens": "{batch_size=N} with {batch_type=tokens}",
        "max_sentences": "{batch_size=N}",
        "cpu": "{device=cpu}",
        "fp16": "{dtype=float16}",
        "bf16": "{dtype=bfloat16}",
        "print_alignment": "{report_align} (Pharaoh pairs after the text)",
        "source_lang": "{src_lang=LANG} for a multilingual model (mBART, M2M100, NLLB); a bilingual one needs none",
        "target_lang": "{tgt_lang=LANG} for a multilingual model (mBART, M2M100, NLLB); a bilingual one needs none",
        "diverse_beam_groups": "{beam_groups=G}",
        "diverse_beam_strength": "{diversity_penalty=D}",
        "prefix_size": "{prefix=FILE} (a file of target prefixes, one per source line)",
        "results_path": "{output=FILE}",
        "max_source_positions": "{max_src_length=N} (longer sources are cut, with a warning)",
    },
    without={
        "unkpen": "there is no finite <unk> penalty; {ban_unk} never writes <unk>",
        "buffer_size": "lines are read many batches at a time and sorted by length; {stream} answers each line as "
        "it arrives",
        "remove_bpe": _TEXT_OUT,
        "post_process": _TEXT_OUT,
        "bpe": _SUBWORDS,
        "task": _MODEL_SAYS,
        "model_overrides": _MODEL_SAYS,
        "match_source_len": "no output is forced to the source's length; {max_len_a=1} with {max_len_b=0} "
        "caps it there",
        "no_early_stop": "a beam stops by the {early_stopping} rule",
        "print_step": "{dump_beam=FILE} records every step of the search (nmtdecode show draws it)",
        "sacrebleu": "no metric is computed; sacrebleu reads the output",
        "beam_mt": _TWO_PASS,
        "lenpen_mt": _TWO_PASS,
        "max_len_a_mt": _TWO_PASS,
        "max_len_b_mt": _TWO_PASS,
        "iter_decode_eos_penalty": _ITERATIVE,
        "iter_decode_max_iter": _ITERATIVE,
        "iter_decode_force_max_iter": _ITERATIVE,
        "iter_decode_with_beam": _ITERATIVE,
        "iter_decode_with_external_reranker": _ITERATIVE,
        "retain_iter_history": _ITERATIVE,
        "decoding_format": _ITERATIVE,
        "retain_dropout": "decoding runs without dropout",
        "retain_dropout_modules": "decoding runs without dropout",
        "user_dir": "there are no plugins",
        "num_workers": "one process reads, decodes and writes; {inter_threads=N} decodes N batches at once",
        "diversity_rate": "there is no diverse siblings search; diverse beam search is {beam_groups=G} with "
        "{diversity_penalty=D}",
        "constraints": _CONSTRAINED,
        "unnormalized": "scores are always log-probabilities",
        "lm_path": "there is no language-model fusion",
        "lm_weight": "there is no language-model fusion",
        "score_reference": "nmtdecode score --tgt FILE gives the log-probability of given targets",
        "skip_invalid_size_inputs_valid_test": "no line is skipped: {max_src_length=N} cuts longer sources, "
        "with a warning",
    },
    shorts={"-t": "target_lang"},  # its -s (--source-lang) is our --src: not told apart
)

CTRANSLATE2 = Peer(
    "CTranslate2",
    "CTranslate2",
    ours={
        "max_batch_size": "{batch_size=N}",
        "num_hypotheses": _N_BEST,
        "compute_type": _PRECISION,
        "max_decoding_length": "{max_length=N}",
        "min_decoding_length": "{min_length=N}",
        "sampling_temperature": "{temperature=T} with {sampling}",
        "return_attention": "{attention}",
        "replace_unknowns": "{replace_unk}",
        "disable_unk": "{ban_unk}",
        "max_input_length": "{max_src_length=N}",
        "intra_threads": "{threads=N}",
        "device_index": "{device=cuda:N}",
    },
    without={},
)

_DECIDED_BY_THE_MODEL = "the model's own files (config.json, generation_config.json) say it"
_OTHER_SAMPLING = "sampling is restricted by {top_k=K} and {top_p=P} only"

TRANSFORMERS = Peer(
    "transformers",
    "transformers",
    ours={
        "num_beams": "{beam_size=K}",
        "max_new_tokens": "{max_length=N} (both count the tokens generated, EOS and a forced language token "
        "included; transformers' max_length counts the decoder's start token too, nmtdecode's does not)",
        "min_new_tokens": "{min_length=N} (both count the tokens generated; transformers' min_length counts the "
        "start token too)",
        "do_sample": "{sampling} (transformers' top_k is then 50 unless given; nmtdecode's default {top_k=0} "
        "samples the whole distribution, so give {top_k=50} for theirs; sampling a beam, num_beams above 1, "
        "is not offered)",
        "num_return_sequences": "{n_best=N} (the N best of the beam, or N samples, best first)",
        "num_beam_groups": "{beam_groups=G} (with {diversity_penalty=D})",
        "bad_words_ids": "{banned_tokens=PIECES} (target pieces, one token each)",
        "suppress_tokens": "{banned_tokens=PIECES} (target pieces)",
        "forced_bos_token_id": "{tgt_lang=LANG} (the language code, whose token is forced first)",
        "output_attentions": "{attention}",
        "torch_dtype": _PRECISION,
        "device_map": "{device=cuda:N} (the whole model on one device)",
    },
    without={
        "max_time": "a call has no time limit",
        "use_cache": "the decoder always keeps its keys and values",
        "penalty_alpha": "there is no contrastive search",
        "typical_p": _OTHER_SAMPLING,
        "epsilon_cutoff": _OTHER_SAMPLING,
        "eta_cutoff": _OTHER_SAMPLING,
        "min_p": _OTHER_SAMPLING,
        "generation_config": "the model's generation_config.json is read as its defaults, under the options given",
        "streamer": "generate_tokens() yields each token as it is chosen, translate_iterable() each translation "
        "as it is ready",
        "output_scores": "translate_batch() returns each hypothesis with its score, log_prob and token_scores",
        "return_dict_in_generate": "translate_batch() returns each hypothesis with its score, log_prob and "
        "token_scores",
        "decoder_start_token_id": _DECIDED_BY_THE_MODEL,
        "eos_token_id": _DECIDED_BY_THE_MODEL,
        "pad_token_id": _DECIDED_BY_THE_MODEL,
        "forced_eos_token_id": _DECIDED_BY_THE_MODEL,
        "constraints": _CONSTRAINED,
        "force_words_ids": _CONSTRAINED,
        "assistant_model": "there is no assisted (speculative) decoding",
    },
)

# In the order their answers are listed when a name is several tools'.
PEERS = (OPENNMT, MARIAN, FAIRSEQ, CTRANSLATE2, TRANSFORMERS)
