"""The package's import graph, read from its source (no interpreter is started): every import
counts, at the top of a module, inside a function, or under TYPE_CHECKING.

No cycle anywhere; the engine imports nothing from the job layer; ranks.py nothing above it;
reading a checkpoint (the loading layer) nothing above models/."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nmtdecode"
JOB_LAYER = {
    "nmtdecode.run",
    "nmtdecode.ranks",
    "nmtdecode.scoring",
    "nmtdecode.jobs",
    "nmtdecode.api",
    "nmtdecode.cli",
    "nmtdecode.output_file",
    "nmtdecode.reading",
    "nmtdecode.writing",
    "nmtdecode.signature",
    "nmtdecode.config_file",
    "nmtdecode.signals",
    "nmtdecode.pipeline",
    "nmtdecode.resolve",
    "nmtdecode.progress",
}


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    names = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module `name` imports, wherever the import statement is."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # `from . import run` imports a module; `from .config import X` a name
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    modules = module_names(root)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state, stack = {}, []  # state: 1 on the current path, 2 done

    def visit(node):
        state[node] = 1
        stack.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == 1:
                return stack[stack.index(child) :] + [child]
            if child not in state and (cycle := visit(child)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for child in graph[todo.pop()] - seen:
            seen.add(child)
            todo.append(child)
    return seen


GRAPH = import_graph()


def test_the_package_has_no_import_cycle():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH))


def test_the_cycle_finder_finds_a_cycle_through_a_function_level_import(tmp_path):
    """What the graph saw before the engine existed: run.py imported api inside a function, api
    imported run inside its methods."""
    package = tmp_path / "nmtdecode"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "api.py").write_text("def load():\n    from . import run\n")
    (package / "run.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .api import X\n")
    (package / "leaf.py").write_text("from .run import y\n")
    graph = import_graph(package)
    assert graph == {
        "nmtdecode": set(),
        "nmtdecode.api": {"nmtdecode.run"},
        "nmtdecode.run": {"nmtdecode.api"},
        "nmtdecode.leaf": {"nmtdecode.run"},
    }
    assert find_cycle(graph) == ["nmtdecode.api", "nmtdecode.run", "nmtdecode.api"]


def test_the_engine_imports_nothing_from_the_job_layer():
    assert not reachable(GRAPH, "nmtdecode.engine") & JOB_LAYER


def test_score_and_the_api_run_jobs_through_the_pipeline_not_the_translate_command():
    """One pipeline (pipeline.py) for every job: score reaches neither run.py nor the API."""
    assert not reachable(GRAPH, "nmtdecode.scoring") & {"nmtdecode.run", "nmtdecode.api", "nmtdecode.cli"}
    assert "nmtdecode.pipeline" in GRAPH["nmtdecode.scoring"] and "nmtdecode.pipeline" in GRAPH["nmtdecode.api"]


def test_ranks_imports_nothing_that_runs_a_job():
    assert not reachable(GRAPH, "nmtdecode.ranks") & {
        "nmtdecode.run",
        "nmtdecode.engine",
        "nmtdecode.api",
        "nmtdecode.scoring",
        "nmtdecode.cli",
        "nmtdecode.decoding",
    }


@pytest.mark.parametrize(
    "module",
    [
        "nmtdecode.models.loading",
        "nmtdecode.models.checkpoint",
        "nmtdecode.models.formats.native",
        "nmtdecode.models.formats.huggingface",
        "nmtdecode.models.formats.hf_tokenizers",
        "nmtdecode.models.formats.opennmt",
        "nmtdecode.models.formats.eole",
        "nmtdecode.models.inspect",
        "nmtdecode.models.formats.native_config",
        "nmtdecode.models.formats.hf_config",
        "nmtdecode.models.formats.eole_config",
        "nmtdecode.models.formats.opennmt_shared",
        "nmtdecode.models.formats.marian",
        "nmtdecode.models.formats.marian_config",
    ],
)
def test_reading_a_checkpoint_imports_nothing_above_the_models(module):
    """The loading layer: checkpoint.py <- formats/* <- loading.py; it may use the options' errors
    (config.py, a leaf), the tokenizer and the step contract (search/base.py), never a search
    strategy, the decoding loop or the job layer."""
    above = {m for m in GRAPH if m.startswith(("nmtdecode.search", "nmtdecode.decoding", "nmtdecode.engine"))}
    above.discard("nmtdecode.search.base")  # the step contract, which the decoder cache follows
    assert not reachable(GRAPH, module) & (above | JOB_LAYER)


def test_the_options_import_nothing_but_their_peers_names():
    """config.py is read by every layer and before torch: it imports only what an option is
    (option.py) and the peers' option names (opennmt_options.py), which import nothing but how a
    message shows a value (bounded.py)."""
    assert GRAPH["nmtdecode.config"] == {"nmtdecode.option", "nmtdecode.opennmt_options", "nmtdecode.bounded"}
    assert GRAPH["nmtdecode.option"] == GRAPH["nmtdecode.opennmt_options"] == {"nmtdecode.bounded"}


# The halves of the formats that read a model's files without torch, and the modules they read with.
WITHOUT_TORCH = {
    "nmtdecode.models.architecture",
    "nmtdecode.models.checkpoint",
    "nmtdecode.models.stored",
    "nmtdecode.models.npz",
    "nmtdecode.tokenizer",
    "nmtdecode.config",
    "nmtdecode.bounded",
    "nmtdecode.models.formats.hf_tokenizers",
    "nmtdecode.models.formats.opennmt_shared",
    "nmtdecode.models.formats.native_config",
    "nmtdecode.models.formats.hf_config",
    "nmtdecode.models.formats.eole_config",
    "nmtdecode.models.formats.marian_config",
    "nmtdecode.models.formats.marian_vocab",
    "nmtdecode.models.formats.marian_weights",
}


@pytest.mark.parametrize(
    "name",
    [
        "native",
        "huggingface",
        "hf_tokenizers",
        "opennmt",
        "eole",
        "native_config",
        "hf_config",
        "eole_config",
        "opennmt_shared",
        "marian",
        "marian_config",
        "marian_vocab",
        "marian_weights",
    ],
)
def test_formats_depend_only_on_the_checkpoint_the_transformer_and_the_tokenizers(name):
    allowed = WITHOUT_TORCH | {
        "nmtdecode.models.transformer",
        "nmtdecode.models.weights",
        "nmtdecode.models.placement",
        "nmtdecode.models.formats.opennmt",
    }
    assert GRAPH[f"nmtdecode.models.formats.{name}"] <= allowed


@pytest.mark.parametrize("name", sorted(WITHOUT_TORCH - {"nmtdecode.config"}))
def test_what_reads_a_model_without_torch_imports_only_modules_without_torch(name):
    """What `nmtdecode inspect` reads a model with (tests/models/test_inspect.py checks that
    torch is not imported); config.py's own imports are pinned above."""
    assert reachable(GRAPH, name) <= WITHOUT_TORCH | {"nmtdecode.option", "nmtdecode.opennmt_options"}


def test_what_a_message_may_show_is_a_leaf_every_layer_can_use():
    assert GRAPH["nmtdecode.bounded"] == set()


def test_checkpoint_is_a_leaf_of_the_loading_layer():
    assert GRAPH["nmtdecode.models.checkpoint"] == {"nmtdecode.models.architecture"}  # no torch


def test_the_compat_modules_sit_on_top_of_the_api():
    """nmtdecode.compat.* are other tools' APIs over ours: they import the API (api.py), and nothing
    of the package imports them."""
    compat = {m for m in GRAPH if m.startswith("nmtdecode.compat")}
    assert "nmtdecode.api" in GRAPH["nmtdecode.compat.ctranslate2"]
    assert not any(GRAPH[m] & compat for m in GRAPH if m not in compat)
