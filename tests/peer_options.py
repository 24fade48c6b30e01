"""Other tools' decoding options as they define them, for tests/test_peer_names.py to check the
tables of nmtdecode/options/peers.py against (the tools themselves are not installed: Marian is
C++, fairseq is not in the test extra; OpenNMT-py, CTranslate2 and transformers are, and are
read directly). Each option's long name, then its other spellings (a short flag, an alias).

marian-decoder: marian-nmt/marian-dev, src/common/config_parser.cpp, as the translator builds its
parser: ConfigParser::addOptionsGeneral, addOptionsModel (translation mode: --models, not the
architecture options, which a model's own config gives), addOptionsTranslation,
addSuboptionsInputLength, addSuboptionsTSV, addSuboptionsDevices, addSuboptionsBatching.

fairseq-interactive: facebookresearch/fairseq, fairseq/dataclass/configs.py (GenerationConfig,
InteractiveConfig, CommonEvalConfig; the DatasetConfig and CommonConfig options a decoding command
uses, `argparse_alias` giving the second spelling; FairseqConfig's --task and --bpe) and
fairseq/tasks/translation.py (TranslationConfig: --source-lang/-s, --target-lang/-t,
--max-source-positions). Its --tokenizer (moses, ...) is spelt as ours, a tokenizer file.
"""

MARIAN_DECODER: dict[str, tuple[str, ...]] = {
    # addOptionsGeneral
    "authors": (),
    "cite": (),
    "build-info": (),
    "config": ("-c",),
    "workspace": ("-w",),
    "log": (),
    "log-level": (),
    "log-time-zone": (),
    "quiet": (),
    "quiet-translation": (),
    "seed": (),
    "check-nan": (),
    "interpolate-env-vars": (),
    "relative-paths": (),
    "dump-config": (),
    # addOptionsModel, translation mode
    "models": ("-m",),
    "ignore-model-config": (),
    "type": (),
    # addOptionsTranslation
    "input": ("-i",),
    "output": ("-o",),
    "vocabs": ("-v",),
    "beam-size": ("-b",),
    "normalize": ("-n",),
    "max-length-factor": (),
    "word-penalty": (),
    "allow-unk": (),
    "allow-special": (),
    "n-best": (),
    "alignment": (),
    "word-scores": (),
    "stat-freq": (),
    "no-spm-decode": (),
    "fp16": (),
    "precision": (),
    "skip-cost": (),
    "shortlist": (),
    "weights": (),
    "output-sampling": (),
    "output-approx-knn": (),
    "optimize": (),
    "gemm-type": ("-g",),
    "quantize-range": (),
    # addSuboptionsInputLength, addSuboptionsTSV
    "max-length": (),
    "max-length-crop": (),
    "tsv": (),
    "tsv-fields": (),
    # addSuboptionsDevices
    "devices": ("-d",),
    "num-devices": (),
    "cpu-threads": (),
    # addSuboptionsBatching
    "mini-batch": (),
    "mini-batch-words": (),
    "maxi-batch": (),
    "maxi-batch-sort": (),
}

FAIRSEQ_INTERACTIVE: dict[str, tuple[str, ...]] = {
    # GenerationConfig
    "beam": (),
    "beam-mt": (),
    "nbest": (),
    "max-len-a": (),
    "max-len-b": (),
    "max-len-a-mt": (),
    "max-len-b-mt": (),
    "min-len": (),
    "match-source-len": (),
    "unnormalized": (),
    "no-early-stop": (),
    "no-beamable-mm": (),
    "lenpen": (),
    "lenpen-mt": (),
    "unkpen": (),
    "replace-unk": (),
    "sacrebleu": (),
    "score-reference": (),
    "prefix-size": (),
    "no-repeat-ngram-size": (),
    "sampling": (),
    "sampling-topk": (),
    "sampling-topp": (),
    "constraints": (),
    "temperature": (),
    "diverse-beam-groups": (),
    "diverse-beam-strength": (),
    "diversity-rate": (),
    "print-alignment": (),
    "print-step": (),
    "lm-path": (),
    "lm-weight": (),
    "iter-decode-eos-penalty": (),
    "iter-decode-max-iter": (),
    "iter-decode-force-max-iter": (),
    "iter-decode-with-beam": (),
    "iter-decode-with-external-reranker": (),
    "retain-iter-history": (),
    "retain-dropout": (),
    "retain-dropout-modules": (),
    "decoding-format": (),
    # InteractiveConfig
    "buffer-size": (),
    "input": (),
    # CommonEvalConfig
    "path": (),
    "post-process": ("--remove-bpe",),
    "quiet": (),
    "model-overrides": (),
    "results-path": (),
    # DatasetConfig
    "max-tokens": (),
    "batch-size": ("--max-sentences",),
    "num-workers": (),
    "skip-invalid-size-inputs-valid-test": (),
    # CommonConfig
    "cpu": (),
    "fp16": (),
    "bf16": (),
    "seed": (),
    "user-dir": (),
    # FairseqConfig
    "task": (),
    "bpe": (),
    # TranslationConfig
    "source-lang": ("-s",),
    "target-lang": ("-t",),
    "max-source-positions": (),
}
