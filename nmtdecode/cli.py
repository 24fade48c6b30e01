"""Command line: `nmtdecode translate | score | inspect`.

Thin by design: parse flags, merge them over the YAML file into a `Config`,
call the library. Errors become one line on stderr and an exit code:
2 for usage/configuration mistakes, 1 for runtime failures, 130 on Ctrl-C, 143 on
SIGTERM (signals.py: at once during start-up, unwinding the job after it). `--debug`
shows the traceback instead.

`run` does one command in this process and returns its exit code; `main`, the
program, adds the signal handlers and exits with it.
"""

from __future__ import annotations

import os
import signal
import sys

import click

from . import signals
from .config import FORMATS, KEY_SECTION, PLAN_KEYS, Config, ConfigError, default_of, expand_aliases
from .config_file import load_yaml
from .jobs import plan_jobs
from .usage import UsageError, check_spelling, one_line
from .signals import Terminated


OPTION_OF_KEY = {}  # config key -> its click option, for commands that take a few of them


def _option(*names, key, type=None, help, flag=False):
    """A flag whose value is None unless given, so the YAML file and model defaults can fill it."""
    default = default_of(key)
    shown = f" [default: {str(default).lower() if isinstance(default, bool) else default}]" if default is not None else ""
    if flag:
        long = names[0][2:]  # --NAME/--no-NAME, and a short name (e.g. -q) switches it on
        option = click.option(f"--{long}/--no-{long}", *names[1:], key, default=None, help=help + shown)
    else:
        option = click.option(*names, key, type=type, default=None, help=help + shown)
    OPTION_OF_KEY[key] = option
    return option


DECODING_OPTIONS = [
    _option("--beam-size", "-k", key="beam_size", type=int, help="Beam width; 1 runs greedy search."),
    _option("--n-best", key="n_best", type=int, help="Hypotheses returned per input line (<= beam size)."),
    _option("--max-length", key="max_length", type=int, help="Most decoding steps (target tokens, EOS included)."),
    _option("--max-len-a", key="max_len_a", type=float, help="Step limit a*|src|+b: the a (with --max-len-b)."),
    _option("--max-len-b", key="max_len_b", type=int, help="Step limit a*|src|+b: the b; enables the relative limit."),
    _option("--min-length", key="min_length", type=int, help="Fewest target tokens before EOS may be chosen."),
    _option("--length-penalty", key="length_penalty", type=str,
            help="Score normalisation: none, avg (total/len^alpha), wu (GNMT); a number A means avg with alpha A."),
    _option("--alpha", key="alpha", type=float, help="Length penalty strength."),
    _option("--coverage-penalty", key="coverage_penalty", type=click.Choice(["none", "wu", "summary"]),
            help="Penalise finished hypotheses by their cross-attention coverage of the source (OpenNMT-py)."),
    _option("--beta", key="beta", type=float, help="Coverage penalty strength (>= 0)."),
    _option("--early-stopping", key="early_stopping", type=click.Choice(["top", "true", "false", "never"]),
            help="When a sentence stops (Hugging Face semantics)."),
    _option("--sampling", key="sampling", flag=True,
            help="Random sampling instead of beam search: --n-best N samples per line, sorted by score."),
    _option("--temperature", key="temperature", type=float, help="Sampling: divide the log-probs by T."),
    _option("--top-k", key="top_k", type=int, help="Sampling: only from the K most probable tokens (0: off)."),
    _option("--top-p", key="top_p", type=float,
            help="Sampling: only from the most probable tokens holding mass P (1.0: off)."),
    _option("--seed", key="seed", type=int,
            help="Sampling: the same seed and line give the same samples, whatever the batch or input order."),
    _option("--no-repeat-ngram-size", key="no_repeat_ngram_size", type=int,
            help="Never repeat an n-gram of this size (0: off)."),
    _option("--repetition-penalty", key="repetition_penalty", type=float,
            help="CTRL penalty on the logits of tokens already generated (> 1 discourages repeats; 1: off)."),
    _option("--block-ngram-repeat", key="block_ngram_repeat", type=int,
            help="OpenNMT-py's blocking: a continuation repeating an n-gram of this size scores -1e21 (0: off)."),
    _option("--ignore-when-blocking", key="ignore_when_blocking", type=str,
            help="Target pieces, space-separated: an n-gram containing one may repeat (--block-ngram-repeat)."),
    _option("--ban-unk", key="ban_unk", flag=True, help="Never generate the unknown token."),
    _option("--banned-tokens", key="banned_tokens", type=str,
            help="Target pieces, space-separated, never generated (e.g. '\u2581the ,')."),
    _option("--beam-groups", key="beam_groups", type=int,
            help="Diverse beam search: split the beam into G groups (Hugging Face's group beam search)."),
    _option("--diversity-penalty", key="diversity_penalty", type=float,
            help="Diverse beam search: subtracted per beam of an earlier group that chose the same token."),
    _option("--alignment", key="alignment", flag=True,
            help="JSONL: add each target token's source token position (argmax of the cross-attention)."),
    _option("--attention", key="attention", flag=True,
            help="JSONL: add each target token's cross-attention weights over the source tokens."),
    _option("--src-lang", key="src_lang", type=str, help="Source language code (mBART, M2M100, NLLB)."),
    _option("--tgt-lang", key="tgt_lang", type=str, help="Target language code for multilingual models."),
]
RUN_OPTIONS = [
    _option("--model", "-m", key="model", type=str,
            help="Model directory (native, Hugging Face, eole) or OpenNMT-py .pt checkpoint."),
    click.option("--src", "-s", "src", multiple=True, metavar="FILE...",
                 help="Input file(s), one sentence per line; - is stdin. Several: --src a.en b.en, one job each, "
                      "one model load.  [default: -]"),
    click.option("--output", "-o", "output", multiple=True, metavar="FILE...",
                 help="Output file(s), one per --src; - is stdout.  [default: -]"),
    click.option("--output-dir", "output_dir", default=None, metavar="DIR",
                 help="Instead of --output: each input's output is DIR/its name (with --suffix).  [default: the input's directory]"),
    click.option("--suffix", "suffix", default=None, metavar="SUFFIX",
                 help="Instead of --output: the input name's last extension replaced by SUFFIX (a.en -> a.de with .de)."),
    _option("--prefix", key="prefix", type=str,
            help="File of target prefixes, one per --src line (may be empty): each output starts with its prefix."),
    _option("--format", key="format", type=click.Choice(FORMATS), help="Output format."),
    _option("--token-scores", key="token_scores", flag=True, help="JSONL: add tokens and per-token log-probs."),
    _option("--on-invalid-utf8", key="on_invalid_utf8", type=click.Choice(["error", "replace"]),
            help="Invalid UTF-8 input: stop with the line number, or decode it as U+FFFD."),
    _option("--resume", key="resume", flag=True, help="Continue an interrupted job from its partial --output."),
    _option("--stream", key="stream", flag=True, help="Answer each input line as soon as it arrives."),
    _option("--batch-size", "-b", key="batch_size", type=int, help="Sentences (or tokens) per batch."),
    _option("--batch-type", key="batch_type", type=click.Choice(["sents", "tokens"]), help="Unit of --batch-size."),
    _option("--max-src-length", key="max_src_length", type=int, help="Cut longer sources (tokens) with a warning."),
    _option("--device", key="device", type=str, help="auto, cpu, cuda or cuda:N."),
    _option("--dtype", key="dtype", type=str,
            help="Compute precision: float32 (fp32), float16 (fp16, half) or bfloat16 (bf16)."),
    _option("--quantize", key="quantize", type=click.Choice(["none", "int8"]),
            help="int8: dynamic int8 quantization of the linear layers (CPU)."),
    _option("--gemm", key="gemm", type=click.Choice(["auto", "onednn", "torch"]),
            help="CPU matrix products: oneDNN with prepacked weights, torch's linear (MKL on x86), "
                 "or auto: the faster on this machine, measured once and remembered."),
    _option("--threads", key="threads", type=int, help="CPU threads (torch.set_num_threads)."),
    _option("--quiet", "-q", key="quiet", flag=True, help="No progress bar or summary on stderr."),
]
# Command line only (not a config key): `run` looks for it before anything is parsed.
DEBUG = click.option("--debug", is_flag=True, help="Show tracebacks on errors (command line only).")
DUMP_CONFIG = click.option("--dump-config", is_flag=True,
                           help="Print the effective options (flags over -c file over the model's defaults) "
                                "as YAML and exit; loads the model's defaults, decodes nothing (command line only).")


def _apply(options):
    def decorate(function):
        for option in reversed(options):
            function = option(function)
        return function
    return decorate


def build_jobs(config_file: str | None, flags: dict) -> list[Config]:
    """The jobs of one `translate` run: the config file's, with the command line's flags over them."""
    given = {k: (list(v) if isinstance(v, tuple) else v) for k, v in flags.items() if v is not None and v != ()}
    return plan_jobs(load_yaml(config_file) if config_file else {}, expand_aliases(given))


# Options that take several values: `--src a b` is read as `--src a --src b`.
MANY_VALUED = ("--src", "-s", "--output", "-o")


def spread_values(args: list[str]) -> list[str]:
    """`--src a.en b.en` -> `--src a.en --src b.en`: click's options take one value each.
    The values of --src/--output run up to the next option (`-` alone is a value)."""
    spread, option, has_value = [], None, False
    for arg in args:
        if option is not None and (arg == "-" or not arg.startswith("-")):
            spread += [option, arg] if has_value else [arg]
            has_value = True
            continue
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        option, has_value = (name, name != arg) if name in MANY_VALUED else (None, False)
        spread.append(arg)
    return spread


class OneValueCommand(click.Command):
    """A command whose single-valued options are refused when given twice (click keeps the
    last silently), and whose --src/--output take several values."""

    def parse_args(self, ctx, args):
        args = spread_values(args)
        _, _, order = self.make_parser(ctx).parse_args(args=list(args))
        seen = set()
        for param in order:
            if param in seen and not param.multiple and not getattr(param, "is_flag", False):
                name = max(param.opts, key=len)
                if param.name == "model":
                    raise click.UsageError(f"{name}: given more than once; ensembles are not supported, "
                                           "give one model")
                raise click.UsageError(f"{name}: given more than once; give it once")
            seen.add(param)
        return super().parse_args(ctx, args)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nmtdecode")
def cli():
    """Fast, exact decoding for encoder-decoder translation and summarization models."""


@cli.command(cls=OneValueCommand)
@click.option("--config", "-c", "config_file", type=click.Path(dir_okay=False), help="YAML file of options.")
@_apply(RUN_OPTIONS + DECODING_OPTIONS)
@DUMP_CONFIG
@DEBUG
def translate(config_file, dump_config, debug, **flags):
    """Translate text files or stdin, one output entry per input line, in input order.

    \b
    Examples:
      nmtdecode translate -c configs/demo.yaml --src data/demo/sample.en
      echo "good morning" | nmtdecode translate --model data/demo --beam-size 5
      nmtdecode translate -m data/demo --src a.en b.en --output-dir out --suffix .de
    """
    jobs = build_jobs(config_file, flags)
    if dump_config:
        from .usage import dump

        if len(jobs) > 1:
            raise ConfigError(f"--dump-config shows one job's configuration; this run has {len(jobs)} (give one --src)")
        click.echo(dump(jobs[0]), nl=False)
        return
    from .run import translate_job

    translate_job(jobs)


SCORE_KEYS = ("batch_size", "max_src_length", "device", "dtype", "src_lang", "tgt_lang")


@cli.command(cls=OneValueCommand)
@click.option("--config", "-c", "config_file", type=click.Path(dir_okay=False),
              help="YAML file of options (model, batch_size, device, dtype, src_lang, tgt_lang).")
@click.option("--model", "-m", "model", default=None, help="Model directory (or `model:` in the -c file).")
@click.option("--src", "-s", "src", default=None, help="Source file, one sentence per line.  [required]")
@click.option("--tgt", "-t", "tgt", default=None, help="Target file, aligned with --src.  [required]")
@click.option("--output", "-o", "output", default="-", show_default=True,
              help="Output file (written whole, through OUTPUT.tmp); - is stdout.")
@click.option("--format", "fmt", type=click.Choice(["text", "jsonl"]), default="text", show_default=True,
              help="text: one log-prob a line; jsonl: also tokens and per-token log-probs.")
@_apply([OPTION_OF_KEY[key] for key in SCORE_KEYS])
@DEBUG
def score(config_file, model, src, tgt, output, fmt, debug, **flags):
    """Forced decoding: the total log-probability of each target line given its source
    (natural log, EOS included; a forced target-language tag or BOS counts 0, as in translate)."""
    from .scoring import score_job

    values = expand_aliases(load_yaml(config_file)) if config_file else {}
    unknown = {k: v for k, v in values.items() if k not in KEY_SECTION and k not in PLAN_KEYS}
    if unknown:
        Config.from_values(unknown)  # names the unknown option
    values.update(expand_aliases({k: v for k, v in {"model": model, **flags}.items() if v is not None}))
    values = {k: v for k, v in values.items() if k in ("model",) + SCORE_KEYS}  # the file's others: translate's
    if "model" not in values:
        raise UsageError("score: give the model as --model DIR (or `model:` in the -c file)")
    if src is None or tgt is None:
        raise UsageError(f"score: give {'--src' if src is None else '--tgt'} FILE")
    score_job(Config.from_values(values), src, tgt, output, fmt)


@cli.command()
@click.argument("path", required=False)
@click.option("--model", "-m", help="Model directory (or give it as PATH).")
@DEBUG
def inspect(path, model, debug):
    """Show a model's format, architecture, vocabulary, stored dtype, target language and decoding defaults."""
    if (path is None) == (model is None):
        raise UsageError("inspect: give the model once, as --model PATH or as PATH")
    from .models.inspect import describe

    click.echo(describe(path or model))


def run(argv: list[str]) -> int:
    """Parse and run one command in this process; returns its exit code.

    Errors become one line on stderr (the traceback with --debug, which re-raises).
    Never exits: `main` does, and tests call this directly.
    """
    debug = "--debug" in argv
    try:
        check_spelling(cli, list(argv))
        cli.main(args=list(argv), prog_name="nmtdecode", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.NoArgsIsHelpError as e:  # `nmtdecode` alone: the help, as click shows it
        e.show()
        return 2
    except (click.ClickException, UsageError) as e:  # click's usage errors: one line, as all ours
        print(f"nmtdecode: error: {one_line(e)}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, click.Abort):
        print("nmtdecode: interrupted; partial output kept, rerun with --resume to continue", file=sys.stderr)
        return 130
    except Terminated:
        print("nmtdecode: terminated; partial output kept, rerun with --resume to continue", file=sys.stderr)
        return 143
    except ConfigError as e:
        if debug:
            raise
        print(f"nmtdecode: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # runtime failures: one line, no traceback
        if debug:
            raise
        print(f"nmtdecode: error: {e}", file=sys.stderr)
        return 1
    return 0


# Variables by which a user has already chosen how OpenMP's idle workers wait (libgomp, which
# torch's CPU wheels use, and Intel's OpenMP).
OPENMP_WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
SPIN_ROUNDS = 10_000  # libgomp's default is 300,000 (OMP_WAIT_POLICY unset)


def openmp_environment(environ, torch_loaded: bool) -> dict:
    """What the program adds to its environment before torch loads: GOMP_SPINCOUNT=10000, so
    libgomp's idle workers (torch's CPU wheels) spin briefly, then sleep, instead of spinning
    for 300,000 rounds (its default), unless the user chose. Read once, when torch's OpenMP
    starts, so nothing is added once torch is loaded. On a 2-vCPU Intel Xeon, whole demo job
    (README, Speed): idle, 2.8 s against 2.9 s spinning and 4.1 s with OMP_WAIT_POLICY=PASSIVE;
    beside two busy processes, 6.4-9.5 s against 4.9-5.2 s passive and up to 100 s spinning."""
    if torch_loaded or any(name in environ for name in OPENMP_WAIT_SETTINGS):
        return {}
    return {"GOMP_SPINCOUNT": str(SPIN_ROUNDS)}


def main(argv=None):
    """The `nmtdecode` program: process-wide signal handling around `run` (signals.py)."""
    os.environ.update(openmp_environment(os.environ, "torch" in sys.modules))
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    signals.install()
    code = run(sys.argv[1:] if argv is None else argv)
    signals.ignore()  # the job is over: exit with its code
    sys.exit(code)
