"""The package's import graph, read from its source (no interpreter is started): every import
counts, at the top of a module, inside a function, or under TYPE_CHECKING.

The package's folders are its layers, bottom to top (LAYERS): a module imports only modules
of its own folder and of the folders below it. No cycle anywhere."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nmtdecode"

# Bottom to top; the front doors (api, show, compat, cli, __main__) each on its own.
LAYERS = ["version", "options", "search", "models", "engine", "jobs", "api", "show", "compat", "cli", "__main__"]


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


def layer_of(module: str) -> str:
    """A module's layer: its folder under the package (or, at the top, the module itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from its own layer or one above it, in other folders."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    found = []
    for module, imported in sorted(graph.items()):
        here = layer_of(module)
        if here == "__init__":  # the package's face (nmtdecode.Translator) may import anything
            continue
        for other in sorted(imported):
            there = layer_of(other)
            if there != here and (there == "__init__" or rank[there] >= rank[here]):
                found.append(f"{module} -> {other}")
    return found


def test_every_module_is_in_a_known_layer():
    assert {layer_of(m) for m in GRAPH} <= set(LAYERS) | {"__init__"}


def test_a_folder_imports_only_the_folders_below_it():
    assert layer_violations(GRAPH) == []


def test_the_layer_check_sees_an_import_from_above_inside_a_function(tmp_path):
    package = tmp_path / "nmtdecode"
    for folder in ("models", "engine"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "engine" / "loop.py").write_text("from ..models.cache import Cache\n")
    (package / "models" / "cache.py").write_text("def reorder():\n    from ..engine import loop\n")
    assert layer_violations(import_graph(package)) == ["nmtdecode.models.cache -> nmtdecode.engine.loop"]


def test_the_models_use_the_search_only_through_its_step_contract():
    """The decoder cache follows the search's step output (search/base.py); no model module knows
    a strategy, its records or its rules."""
    used = {other for m in GRAPH if layer_of(m) == "models" for other in GRAPH[m] if layer_of(other) == "search"}
    assert used <= {"nmtdecode.search.base"}


# What options/config.py is made of: the option table and its checks, the peers' option names,
# and how a message shows a value.
CONFIG_PARTS = {
    f"nmtdecode.options.{name}"
    for name in ("table", "option", "rules", "entries", "layers", "foreign", "peers", "bounded")
}


def test_the_options_import_nothing_but_their_own_parts():
    """options/config.py is read by every layer and before torch: it reaches only the option table
    and the checks made of it (CONFIG_PARTS); what an option is (option.py) imports nothing but how
    a message shows a value (bounded.py), and the other tools' names (peers.py, data) nothing."""
    assert reachable(GRAPH, "nmtdecode.options.config") == CONFIG_PARTS
    assert GRAPH["nmtdecode.options.option"] == {"nmtdecode.options.bounded"}
    assert GRAPH["nmtdecode.options.peers"] == set()


# The halves of the formats that read a model's files without torch, and the modules they read with.
WITHOUT_TORCH = {
    "nmtdecode.models.architecture",
    "nmtdecode.models.checkpoint",
    "nmtdecode.models.defaults",
    "nmtdecode.models.stored",
    "nmtdecode.models.npz",
    "nmtdecode.models.tokenizer",
    "nmtdecode.options.config",
    "nmtdecode.options.bounded",
    "nmtdecode.models.formats.hf_tokenizers",
    "nmtdecode.models.formats.opennmt_shared",
    "nmtdecode.models.formats.native_config",
    "nmtdecode.models.formats.native_tokenizer",
    "nmtdecode.models.formats.hf_config",
    "nmtdecode.models.formats.hf_fields",
    "nmtdecode.models.formats.hf_t5",
    "nmtdecode.models.formats.hf_spiece",
    "nmtdecode.models.formats.eole_config",
    "nmtdecode.models.formats.marian_config",
    "nmtdecode.models.formats.marian_vocab",
    "nmtdecode.models.formats.marian_yaml",
    "nmtdecode.models.formats.marian_weights",
    "nmtdecode.models.formats.ct2_binary",
    "nmtdecode.models.formats.ct2_spec",
    "nmtdecode.models.formats.ct2_t5",
    "nmtdecode.models.formats.ct2_vocab",
    "nmtdecode.models.formats.ct2_config",
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
        "native_tokenizer",
        "hf_config",
        "hf_fields",
        "hf_t5",
        "hf_spiece",
        "eole_config",
        "opennmt_shared",
        "marian",
        "marian_config",
        "marian_vocab",
        "marian_yaml",
        "marian_weights",
        "ct2",
        "ct2_binary",
        "ct2_spec",
        "ct2_t5",
        "ct2_vocab",
        "ct2_config",
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


@pytest.mark.parametrize("name", sorted(WITHOUT_TORCH - {"nmtdecode.options.config"}))
def test_what_reads_a_model_without_torch_imports_only_modules_without_torch(name):
    """What `nmtdecode inspect` reads a model with (tests/models/test_inspect.py checks that
    torch is not imported); config.py's own imports are pinned above."""
    assert reachable(GRAPH, name) <= WITHOUT_TORCH | CONFIG_PARTS


def test_what_a_message_may_show_is_a_leaf_every_layer_can_use():
    assert GRAPH["nmtdecode.options.bounded"] == set()


def test_checkpoint_is_a_leaf_of_the_loading_layer():
    assert GRAPH["nmtdecode.models.checkpoint"] == {"nmtdecode.models.architecture", "nmtdecode.options.bounded"}


def test_the_compat_modules_sit_on_top_of_the_api():
    """nmtdecode.compat.* are other tools' APIs over ours: they import the API (api.py), and nothing
    of the package imports them."""
    compat = {m for m in GRAPH if m.startswith("nmtdecode.compat")}
    assert "nmtdecode.api" in GRAPH["nmtdecode.compat.ctranslate2"]
    assert not any(GRAPH[m] & compat for m in GRAPH if m not in compat)
