"""The documentation against the code: README.md and docs/*.md.

* Every `nmtdecode SUBCOMMAND ...` in a fenced code block (and in an inline code
  span) names an existing subcommand and only options that subcommand has, read
  by the CLI's own click parser: nothing runs, no value is converted, no file
  is opened.
* Every `make TARGET` names a target of the Makefile it runs.
* Every relative link leads to an existing file, and to an existing heading
  where it names one.
* README.md stays a front page (at most 300 lines), the docs hold no absolute
  path of this checkout, and the options DESIGN.md plans but the CLI does not
  have yet are not presented.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from nmtdecode.cli import cli

from tests.helpers import REPO

ROOT = REPO
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300
# Named in DESIGN.md, not (yet) in the CLI: the docs must not present them.
NOT_YET: tuple[str, ...] = ()

FENCE = re.compile(r"^\s*(```|~~~)")
SHELL_SEPARATORS = {"|", "||", "&&", ";", "&"}
SINGLE_DASH_LONG = re.compile(r"^-[A-Za-z][A-Za-z0-9_-]+$")  # -beam_size: click would read -b eam_size


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def split_page(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(code lines, prose lines) of a markdown page, each as (line number, text); the fence
    lines themselves belong to neither."""
    code, prose, fenced = [], [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            code.append((number, line))
        else:
            prose.append((number, line))
    return code, prose


def code_lines(path: Path) -> list[tuple[int, str]]:
    """Shell lines of the fenced blocks, lines continued with a backslash joined."""
    joined, pending, start = [], "", None
    for number, line in split_page(path)[0]:
        if start is None:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append((start, pending + line))
        pending, start = "", None
    if pending:
        joined.append((start, pending))
    return joined


def inline_spans(path: Path) -> list[tuple[int, str]]:
    """The inline code spans of the prose, a paragraph's lines joined (a span may wrap)."""
    spans, paragraph = [], []

    def flush():
        text = " ".join(line for _, line in paragraph)
        for match in re.finditer(r"`([^`]+)`", text):
            spans.append((paragraph[0][0], match.group(1)))
        paragraph.clear()

    for number, line in split_page(path)[1]:
        if line.strip():
            paragraph.append((number, line))
        else:
            flush()
    if paragraph:
        flush()
    return spans


def shell_commands(text: str) -> list[list[str]]:
    """The simple commands of one shell line, as words: the prompt dropped, split at pipes,
    `&&`, `||`, `;` and `&`, cut at an output redirection or a comment, and input
    redirections (`< FILE`) left out."""
    text = re.sub(r"^\s*\$\s+", "", text)
    commands, words, skip_next, redirected = [], [], False, False
    split = []
    for word in shlex.split(text, comments=True):  # `a.de; ls`: the `;` ends the word's command
        split += [word[:-1], ";"] if len(word) > 1 and word.endswith(";") else [word]
    for word in split:
        if word in SHELL_SEPARATORS:
            commands.append(words)
            words, skip_next, redirected = [], False, False
        elif skip_next:
            skip_next = False
        elif redirected or re.match(r"^\d*>", word):
            redirected = True  # `> FILE`, `2>&1`: the rest of this command is not its arguments
        elif word == "<":
            skip_next = True
        elif not word.startswith("<"):
            words.append(word)
    return commands + [words]


@dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str  # as written in the page
    words: tuple[str, ...]  # from the subcommand's name on
    error: str | None = None  # why the line cannot be read as a command

    def __str__(self):
        return f"{self.page}:{self.line}: `{self.text.strip()}`"


INVOCATION = re.compile(r"(^|[\s/])nmtdecode\s+[a-z]")


def nmtdecode_command(page: str, line: int, text: str) -> Command | None:
    """The `nmtdecode NAME ARGS` in a line, if it holds one (also `.venv/bin/nmtdecode`,
    `python -m nmtdecode`, `torchrun ... -m nmtdecode`, `echo ... | nmtdecode ...`)."""
    if not INVOCATION.search(text):
        return None
    try:
        commands = shell_commands(text)
    except ValueError as e:  # unbalanced quotes: a command nobody could paste
        return Command(page, line, text, (), f"does not split as a shell line: {e}")
    for words in commands:
        for i, word in enumerate(words[:-1]):
            if os.path.basename(word) == "nmtdecode" and re.fullmatch(r"[a-z][a-z_-]*", words[i + 1]):
                return Command(page, line, text, tuple(words[i + 1 :]))
    return None


def documented_commands() -> list[Command]:
    commands = []
    for path in PAGES:
        for line, text in code_lines(path) + inline_spans(path):
            command = nmtdecode_command(rel(path), line, text)
            if command is not None:
                commands.append(command)
    return commands


def check_command(command: Command):
    """Parse the command's arguments with its click command's own parser, which only sorts the
    words into options and arguments (no value converted, no callback run, no file opened); an
    unknown subcommand or option fails naming it."""
    if command.error:
        pytest.fail(f"{command}: {command.error}")
    name, args = command.words[0], list(command.words[1:])
    if name not in cli.commands:
        pytest.fail(f"{command}: nmtdecode has no subcommand {name!r} (it has: {', '.join(sorted(cli.commands))})")
    for word in args:
        if SINGLE_DASH_LONG.match(word):
            pytest.fail(f"{command}: {word}: nmtdecode's long options start with two dashes")
    subcommand = cli.commands[name]
    # Not resilient_parsing: click's parser then swallows its own usage errors, unknown options included.
    group = click.Context(cli, info_name="nmtdecode")
    context = click.Context(subcommand, info_name=name, parent=group)
    try:
        subcommand.make_parser(context).parse_args(args=args)
    except click.NoSuchOption as e:
        pytest.fail(f"{command}: `nmtdecode {name}` has no option {e.option_name}")
    except click.ClickException as e:
        pytest.fail(f"{command}: `nmtdecode {name}` refuses it: {e.format_message()}")


COMMANDS = documented_commands()


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.page}:{c.line}" for c in COMMANDS])
def test_documented_command_parses(command):
    check_command(command)


def test_every_subcommand_is_documented_with_a_command():
    """The extraction finds the commands (an extraction that finds none would pass everything)."""
    assert {c.words[0] for c in COMMANDS if c.words} >= {"translate", "score", "inspect"}
    assert {c.page for c in COMMANDS} >= {"README.md", "docs/usage.md"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("nmtdecode translate --model m --bogus 3", "has no option --bogus"),
        ("nmtdecode score --model m --beam-size 5", "has no option --beam-size"),
        ("nmtdecode translate -beam_size 5", "start with two dashes"),
        ("nmtdecode draw beams.json --output page.html", "no subcommand 'draw'"),
        (
            "echo hi | nmtdecode translate --model m --src a.en b.en --output a.de b.de --dump-beams x.json",
            "has no option --dump-beams",
        ),
        ("nmtdecode translate --model", "refuses it"),
    ],
)
def test_the_check_fails_on_a_wrong_command(text, message):
    """The checker itself: what it must refuse, it refuses, naming the option."""
    command = nmtdecode_command("example.md", 1, text)
    with pytest.raises(pytest.fail.Exception, match=re.escape(message)):
        check_command(command)


def test_the_check_reads_shell_lines_as_written():
    line = "$ echo x | nmtdecode translate -c job.yaml --n-best 3 < in.txt > out.jsonl 2>&1 | head # note --bogus"
    assert nmtdecode_command("example.md", 1, line).words == ("translate", "-c", "job.yaml", "--n-best", "3")
    line = "make demo && .venv/bin/nmtdecode score -m data/demo --src a.en --tgt a.de; ls"
    assert nmtdecode_command("example.md", 1, line).words == (
        "score",
        "-m",
        "data/demo",
        "--src",
        "a.en",
        "--tgt",
        "a.de",
    )
    assert nmtdecode_command("example.md", 1, "nmtdecode: 10 sentences, 24 target tokens") is None
    check_command(nmtdecode_command("example.md", 1, "python -m nmtdecode inspect --model data/demo"))


def make_targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([A-Za-z0-9_.-]+)\s*:", makefile.read_text(encoding="utf-8"), flags=re.M))


def documented_make_calls() -> list[tuple[str, int, str, list[str]]]:
    calls = []
    for path in PAGES:
        for line, text in code_lines(path) + inline_spans(path):
            if not re.search(r"(^|\s|\$ )make(\s|$)", text):
                continue
            try:
                commands = shell_commands(text)
            except ValueError:
                continue
            calls += [(rel(path), line, text, words[1:]) for words in commands if words[:1] == ["make"]]
    return calls


def test_documented_make_targets_exist():
    calls = documented_make_calls()
    assert any(words[:1] == ["demo"] for _, _, _, words in calls)
    for page, line, text, words in calls:
        directory, targets, i = ROOT, [], 0
        while i < len(words):
            word = words[i]
            if word == "-C":
                directory, i = ROOT / words[i + 1], i + 2
                continue
            if not word.startswith("-") and "=" not in word:
                targets.append(word)
            i += 1
        missing = [t for t in targets if t not in make_targets(directory / "Makefile")]
        assert not missing, (
            f"{page}:{line}: `{text.strip()}`: no make target {missing[0]!r} in {rel(directory)}/Makefile"
        )


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub gives a page: lower case, punctuation dropped (hyphens and
    underscores kept), spaces as hyphens, a repeated one numbered -1, -2, ..."""
    found, seen = set(), {}
    for _, line in split_page(path)[1]:
        match = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.replace("`", "").lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    links = []
    for line, text in split_page(path)[1]:
        text = re.sub(r"`[^`]*`", "", text)  # a link spelt inside inline code is not one
        targets = LINK.findall(text) + [m.group(1) for m in [REFERENCE.match(text)] if m]
        links += [(line, target) for target in targets if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target)]
    return links


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_resolve(page):
    problems = []
    for line, target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        if file_part.startswith("/"):
            problems.append(f"{rel(page)}:{line}: {target}: an absolute path; links are relative")
            continue
        destination = (page.parent / file_part).resolve() if file_part else page
        if not destination.exists():
            problems.append(f"{rel(page)}:{line}: {target}: no such file")
        elif ROOT not in destination.parents and destination != ROOT:
            problems.append(f"{rel(page)}:{line}: {target}: outside the repository")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{rel(page)}:{line}: {target}: no heading #{anchor} in {rel(destination)}")
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in relative_links(ROOT / "README.md")}
    assert not [rel(p) for p in PAGES[1:] if p.resolve() not in linked]


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_no_machine_paths_and_no_planned_options_presented(page):
    text = page.read_text(encoding="utf-8")
    assert str(ROOT) not in text, f"{rel(page)} holds this checkout's absolute path"
    named = [name for name in NOT_YET if name in text]
    assert not named, f"{rel(page)} names {named[0]}, which nmtdecode does not have"
