"""Command line: `nmtdecode translate | score | inspect | show | convert`.

Thin by design: parse flags (each built from its option's declaration in options/table.py),
layer them over the YAML file into a `Config`, call the library. Flags that are not the
command's, other tools' (`-beam_size 5`, `--sampling-topk 10`) or unknown, are refused all at
once, naming ours (`check_flags`).
Errors become one line on stderr and an exit code:
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
import typing
from typing import Any, Callable, Mapping, NoReturn
from dataclasses import replace

import click

from .jobs import signals
from .options.config import (
    DTYPE_ALIASES,
    KEY_SECTION,
    OPTIONS,
    PLAN_KEYS,
    PLAN_OPTIONS,
    SCORE_FORMATS,
    SCORE_KEYS,
    TYPES,
    Config,
    ConfigError,
    Option,
    default_of,
)
from .options.layers import checked_layer
from .options.yaml_file import dump, load_yaml
from .options.plan import plan_jobs
from .jobs.files import make_output_dir
from .options.foreign import flag_problems, listed
from .jobs.signals import STOPPED_NOTE, Terminated
from .engine.importing import own_the_process
from .engine.messages import say


def _click_type(key: str, declared: Option) -> click.ParamType | type:
    hint = TYPES.get(key, str)
    # list[float]: float
    kinds = [k for kind in typing.get_args(hint) or (hint,) for k in (typing.get_args(kind) or (kind,))]
    if declared.choices is not None and declared.aliases is None:
        return click.Choice(declared.choices, case_sensitive=False)  # --early-stopping True, as Python writes it
    return int if int in kinds else float if float in kinds else str


def cli_option(key: str, required: bool = False, **changes: Any) -> Callable:
    """The click option of config key `key`, from its declaration (table.OPTIONS, PLAN_OPTIONS);
    `changes` adapt it to a command where the key means something narrower (score's --src), which
    may require it (then no default is shown). Its value is None unless given, so the YAML file and
    model defaults can fill it."""
    declared = replace(OPTIONS.get(key) or PLAN_OPTIONS[key], **changes)
    names = [f"--{key.replace('_', '-')}"] + ([declared.short] if declared.short else [])
    default = default_of(key) if key in KEY_SECTION and not required else None
    shown = (
        f"  [default: {str(default).lower() if isinstance(default, bool) else default}]" if default is not None else ""
    )
    if TYPES.get(key) is bool:
        return click.option(
            f"{names[0]}/--no-{names[0][2:]}", *names[1:], key, default=None, help=declared.help + shown
        )
    return click.option(
        *names,
        key,
        type=_click_type(key, declared),
        default=None,
        multiple=declared.many,
        metavar=declared.metavar,
        help=declared.help + shown,
    )


# translate's options in --help order: files, batching, runtime, then the search.
TRANSLATE_KEYS = [
    "model",
    "src",
    "output",
    "output_dir",
    "suffix",
    *[k for k, section in KEY_SECTION.items() if section == "io" and k not in ("model", "src", "output")],
    *[k for k, section in KEY_SECTION.items() if section in ("batching", "runtime")],
    *[k for k, section in KEY_SECTION.items() if section == "decoding"],
]
# score's own: one source and one target file, one output, and its own formats.
SCORE_OPTIONS: dict[str, dict[str, Any]] = {
    "src": dict(
        help="Source file, one sentence per line (- is stdin).  [required]", many=False, metavar="FILE", required=True
    ),
    "output": dict(help="Output file (written whole, through OUTPUT.tmp); - is stdout.", many=False, metavar="FILE"),
    "format": dict(
        help="text: one log-prob a line; jsonl: also tokens and per-token log-probs.", choices=SCORE_FORMATS
    ),
}
CONFIG_FILE = click.option(
    "--config", "-c", "config_file", type=click.Path(dir_okay=False), help="YAML file of options."
)
# Command line only (not config keys): `run` looks for --debug before anything is parsed.
DEBUG = click.option("--debug", is_flag=True, help="Show tracebacks on errors (command line only).")
DUMP_CONFIG = click.option(
    "--dump-config",
    is_flag=True,
    help="Print the effective options (flags over -c file over the model's defaults) "
    "as YAML and exit; loads the model's defaults, decodes nothing (command line only).",
)


def _apply(options: list[Callable]) -> Callable:
    def decorate(function: Callable) -> Callable:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


class UsageError(click.UsageError):
    """A command-line mistake found before click parses (exit code 2)."""


def command_flags(group: click.Group, name: str) -> dict[str, bool]:
    """Command `name`'s flags (`--help` included), each -> whether it takes a value."""
    command = group.commands[name]
    context = click.Context(command, info_name=name, parent=click.Context(group, **group.context_settings))
    return {
        flag: not (param.is_flag or param.count)
        for param in command.get_params(context)
        if isinstance(param, click.Option)
        for flag in param.opts + param.secondary_opts
    }


def check_flags(group: click.Group, argv: list[str]) -> None:
    """Refuse, in one error, every flag of the command that is not its own: other tools' (their
    answers in options/peers.py: OpenNMT-py's `-beam_size`, fairseq's `--sampling-topk`, Marian's
    `-w`) naming ours, and unknown ones naming the nearest; before click reads `-beam_size` as
    `-b eam_size` or stops at the first."""
    names = [i for i, arg in enumerate(argv) if arg in group.commands]
    if not names:
        return
    name = argv[names[0]]
    problems = flag_problems(argv[names[0] + 1 :], command_flags(group, name), name)
    if problems:
        raise UsageError(listed("", problems))


def one_line(error: click.ClickException) -> str:
    """click's error without its `Usage: ... Try ...` block, plus where the help is."""
    message = " ".join(error.format_message().split())
    ctx = getattr(error, "ctx", None)
    if isinstance(error, click.UsageError) and ctx is not None:
        message += f" ({ctx.command_path} --help)"
    return message


# Options that take several values: `--src a b` is read as `--src a --src b`.
MANY_VALUED = ("--src", "-s", "--output", "-o", "--model", "-m", "--ensemble-weights")


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

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = spread_values(args)
        _, _, order = self.make_parser(ctx).parse_args(args=list(args))
        seen = set()
        for param in order:
            if param in seen and not param.multiple and not getattr(param, "is_flag", False):
                name = max(param.opts, key=len)
                raise click.UsageError(f"{name}: given more than once; give it once")
            seen.add(param)
        return super().parse_args(ctx, args)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="nmtdecode")
def cli() -> None:
    """Fast, exact decoding for encoder-decoder translation and summarization models."""


def _model_defaults(config: Config) -> dict | None:
    """The decoding defaults of the job's model, which --dump-config shows under the options (the
    model is loaded for them); None without a model."""
    if config.io.model is None:
        return None
    from .models.loading import load_model

    io = config.io
    return load_model(io.model, io.ensemble_rule, io.ensemble_weights, tokenizer=io.tokenizer).defaults


@cli.command(cls=OneValueCommand)
@CONFIG_FILE
@_apply([cli_option(key) for key in TRANSLATE_KEYS])
@DUMP_CONFIG
@DEBUG
def translate(config_file: str | None, dump_config: bool, debug: bool, **flags: Any) -> None:
    """Translate text files or stdin, one output entry per input line, in input order.

    \b
    Examples:
      nmtdecode translate -c configs/demo.yaml --src data/demo/sample.en
      echo "good morning" | nmtdecode translate --model data/demo --beam-size 5
      nmtdecode translate -m data/demo --src a.en b.en --output-dir out --suffix .de
    """
    file_values, given = load_yaml(config_file) if config_file else {}, _given(flags)
    jobs = plan_jobs(file_values, given)
    if dump_config:
        if len(jobs) > 1:
            raise ConfigError(f"--dump-config shows one job's configuration; this run has {len(jobs)} (give one --src)")
        click.echo(dump(jobs[0], _model_defaults(jobs[0])), nl=False)
        return
    make_output_dir(file_values, given)
    from .jobs.run import translate_job

    translate_job(jobs)


@cli.command(cls=OneValueCommand)
@CONFIG_FILE
@_apply([cli_option(key, **SCORE_OPTIONS.get(key, {})) for key in ("model", "src", "output", "format")])
@click.option("--tgt", "-t", "tgt", default=None, metavar="FILE", help="Target file, aligned with --src.  [required]")
@click.option(
    "--normalize",
    is_flag=True,
    help="Each line's log-probability per scored token (its target tokens and "
    "EOS; marian-scorer's --normalize): text prints it instead of the total, jsonl adds it as "
    "mean_log_prob (command line only).",
)
@_apply([cli_option(key) for key in SCORE_KEYS if key != "model"])
@DUMP_CONFIG
@DEBUG
def score(
    config_file: str | None, tgt: str | None, normalize: bool, dump_config: bool, debug: bool, **flags: Any
) -> None:
    """Forced decoding: the total log-probability of each target line given its source
    (natural log, EOS included; a forced target-language tag or BOS counts 0, as in translate).
    Pairs are sorted and batched as translate batches; the summary gives the perplexity."""
    config = score_config(load_yaml(config_file) if config_file else {}, _given(flags))
    if dump_config:
        click.echo(dump(config, _model_defaults(config)), nl=False)
        return
    if config.io.model is None:
        raise UsageError("score: give the model as --model DIR (or `model:` in the -c file)")
    if flags["src"] is None or tgt is None:
        raise UsageError(f"score: give {'--src' if flags['src'] is None else '--tgt'} FILE")
    from .jobs.scoring import score_job

    score_job(config, tgt, normalize)


def _given(flags: dict) -> dict:
    """The flags given on the command line (click's None: not given), as one layer of options."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in flags.items() if v is not None and v != ()}


def score_config(file_values: dict, flags: dict) -> Config:
    """score's options: a config file's shared ones (SCORE_KEYS; its others, translate's, are
    checked but not used) under the command line's."""
    checked_layer({k: v for k, v in file_values.items() if k not in PLAN_KEYS})
    return Config.from_layers([{k: v for k, v in file_values.items() if k in SCORE_KEYS}, flags])


@cli.command()
@click.argument("paths", nargs=-1, metavar="PATH...")
@click.option("--model", "-m", "models", multiple=True, help="Model directory (or give it as PATH); several: each.")
@click.option(
    "--device",
    type=click.Choice(["cpu"]),
    default=None,
    help="cpu: the precisions this CPU runs natively and their kernels (or why one is refused); with a "
    "model, the kernels chosen for it.",
)
@DEBUG
def inspect(paths: tuple[str, ...], models: tuple[str, ...], device: str | None, debug: bool) -> None:
    """Show a model's format, architecture, vocabulary, stored dtype, target language and decoding
    defaults; of several (an ensemble's), each in turn. With --device cpu (a model optional): what
    this CPU runs natively."""
    if paths and models or not (paths or models or device):
        raise UsageError("inspect: give the model once, as --model PATH or as PATH (several: each in turn)")
    from .models.inspect import cpu_report, describe

    given = paths or models
    reports = [describe(path) for path in given]
    if device == "cpu":
        reports += [cpu_report(path) for path in given] or [cpu_report()]
    click.echo("\n".join(reports))


# `convert --quantize`'s precisions, with the spellings --dtype accepts (fp16, bf16, fp32)
CONVERT_PRECISIONS = {"int8": "int8", "bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}
CONVERT_PRECISIONS |= {alias: name for alias, name in DTYPE_ALIASES.items() if name in CONVERT_PRECISIONS}


@cli.command()
@click.argument("model", metavar="MODEL")
@click.option(
    "--quantize",
    "precision",
    required=True,
    type=click.Choice(list(CONVERT_PRECISIONS)),
    help="The stored weights: int8 (one scale per row: the linear layers, the token embeddings and an "
    "output projection of its own; the rest float32), bfloat16 (bf16), float16 (fp16) or float32.",
)
@click.option("--output", "-o", required=True, metavar="DIR", help="The new native model directory (must not exist).")
@DEBUG
def convert(model: str, precision: str, output: str, debug: bool) -> None:
    """Write MODEL (any format nmtdecode reads) as a native model directory with its weights in one
    precision, as CTranslate2's converters do. An int8 model loads by memory map without quantizing
    again, and decodes in int8 on a CPU unless --gemm or --dtype asks for float products.

    \b
    Example:
      nmtdecode convert opus-mt-en-de --quantize int8 --output opus-mt-en-de-int8
    """
    if os.path.lexists(output):
        raise UsageError(f"convert: {output} exists; give --output a new directory")
    from .models.convert import convert as convert_model

    convert_model(model, output, CONVERT_PRECISIONS[precision])
    say(f"nmtdecode: wrote {output} ({CONVERT_PRECISIONS[precision]})")


@cli.command()
@click.argument("dump")
@click.option(
    "--output",
    "-o",
    default=None,
    metavar="PAGE",
    help="The HTML page to write (one file: inline SVG, CSS and script).  [default: DUMP with .html for its extension]",
)
@click.option("--sentence", "-n", type=int, default=None, help="Only input line N (1-based).")
@DEBUG
def show(dump: str, output: str | None, sentence: int | None, debug: bool) -> None:
    """Draw the searches of a `translate --dump-beam` file as one HTML page: each line's beam tree
    (n-best paths highlighted, pruned branches faded) and, when recorded, its attention."""
    from .show import page_path, write_page

    path = output or page_path(dump)
    write_page(dump, path, sentence)
    if output is None:
        say(f"nmtdecode: wrote {path}")


def run(argv: list[str]) -> int:
    """Parse and run one command in this process; returns its exit code.

    Errors become one line on stderr (the traceback with --debug, which re-raises).
    Never exits: `main` does, and tests call this directly.
    """
    debug = "--debug" in argv
    try:
        try:
            check_flags(cli, list(argv))
            cli.main(args=list(argv), prog_name="nmtdecode", standalone_mode=False)
        finally:
            signals.job_ended()  # a signal from here on would only replace the line said below
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.NoArgsIsHelpError as e:  # `nmtdecode` alone: the help, as click shows it
        e.show()
        return 2
    except click.ClickException as e:  # click's usage errors and ours: one line
        say(f"nmtdecode: error: {one_line(e)}")
        return 2
    except (KeyboardInterrupt, click.Abort, Terminated) as e:
        return stopped(e)
    except ConfigError as e:
        if debug:
            raise
        say(f"nmtdecode: error: {e}")
        return 2
    except Exception as e:  # runtime failures: one line, no traceback
        if debug:
            raise
        say(f"nmtdecode: error: {e}")
        return 1
    return 0


def stopped(stop: BaseException) -> int:
    """One line for a job stopped by SIGINT or SIGTERM; its exit code."""
    terminated = isinstance(stop, Terminated)
    say(f"nmtdecode: {'terminated' if terminated else 'interrupted'}; {stopped_note(stop)}")
    return 143 if terminated else 130


def stopped_note(stop: BaseException) -> str:
    """What a stopped job left: the job layer says so on the exception (`STOPPED_NOTE`) when its
    output cannot be resumed. (click turns Ctrl-C into its Abort, the interrupt as its cause.)"""
    return getattr(stop.__cause__ or stop, STOPPED_NOTE, "partial output kept, rerun with --resume to continue")


# Variables by which a user has already chosen how OpenMP's idle workers wait (libgomp, which
# torch's CPU wheels use, and Intel's OpenMP).
OPENMP_WAIT_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
SPIN_ROUNDS = 10_000  # libgomp's default is 300,000 (OMP_WAIT_POLICY unset)


def openmp_environment(environ: Mapping[str, str], torch_loaded: bool) -> dict:
    """What the program adds to its environment before torch loads: GOMP_SPINCOUNT=10000, so
    libgomp's idle workers (torch's CPU wheels) spin briefly, then sleep, instead of spinning
    for 300,000 rounds (its default), unless the user chose: as fast as spinning on an idle
    machine, and far faster beside other busy processes (docs/speed.md#threads has the measurements).
    Read once, when torch's OpenMP starts, so nothing is added once torch is loaded."""
    if torch_loaded or any(name in environ for name in OPENMP_WAIT_SETTINGS):
        return {}
    return {"GOMP_SPINCOUNT": str(SPIN_ROUNDS)}


def distributed_log_environment(environ: Mapping[str, str], torch_loaded: bool) -> dict:
    """Under torchrun (WORLD_SIZE set), TORCH_CPP_LOG_LEVEL=FATAL unless the user chose a level:
    a rendezvous that times out or a peer that dies is one line of ours (ranks.PeerLost), not
    c10d's log lines with their C++ stack frames. Read when torch loads."""
    if torch_loaded or "TORCH_CPP_LOG_LEVEL" in environ or environ.get("WORLD_SIZE", "1") in ("", "1"):
        return {}
    return {"TORCH_CPP_LOG_LEVEL": "FATAL"}


def prepare_process() -> None:
    """What the program does to its process before torch loads: says the process is its own (what
    importing torch makes is then frozen for the collector, engine/importing.py) and adds to the
    environment what torch reads when it loads. The benchmark's worker starts the same way."""
    own_the_process()
    torch_loaded = "torch" in sys.modules
    os.environ.update(openmp_environment(os.environ, torch_loaded))
    os.environ.update(distributed_log_environment(os.environ, torch_loaded))


def main(argv: list[str] | None = None) -> None:
    """The `nmtdecode` program: process-wide signal handling around `run` (signals.py)."""
    prepare_process()
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends quietly
    signals.install()
    try:
        code = run(sys.argv[1:] if argv is None else argv)
    except (KeyboardInterrupt, Terminated) as stop:  # the instant before run() stopped listening
        code = stopped(stop)
    signals.ignore()  # the job is over: exit with its code
    exit_now(code)


def exit_now(code: int) -> NoReturn:
    """End the process with `code` once what it wrote is flushed, without the interpreter's
    teardown: freeing a loaded model object by object and unloading torch is a noticeable share
    of a short job, and gains nothing. Every file of a job is closed, renamed and unlocked by
    then (output_file.py); only the standard streams are still open."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # None: started with the stream closed (`>&-`)
                stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)
