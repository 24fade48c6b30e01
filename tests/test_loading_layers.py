"""The loading layer's shape: checkpoint.py <- formats/* <- loading.py, and nothing above it.

Reading a checkpoint must not import the search or the decoding loop, and the
dispatcher imports the formats at the top, so a cycle would fail at import
time. Each import check runs in a fresh interpreter: in this one, other tests
have already imported everything. (The fresh interpreters are forked from one that has
imported torch but nothing of nmtdecode: one start instead of one per check.)
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nmtdecode.config import ConfigError
from nmtdecode.models import loading
from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.formats import eole, huggingface, native, opennmt

from .helpers import build_native_model

ROOT = Path(__file__).resolve().parents[1]
ABOVE_LOADING = ("nmtdecode.search", "nmtdecode.translator", "nmtdecode.run", "nmtdecode.cli")
LAYER = ["nmtdecode.models.checkpoint", "nmtdecode.models.formats.native", "nmtdecode.models.formats.huggingface",
         "nmtdecode.models.formats.hf_tokenizers", "nmtdecode.models.formats.opennmt", "nmtdecode.models.formats.eole", "nmtdecode.models.loading"]


FIRSTS = ["", "import nmtdecode.models.formats.native; ", "import nmtdecode.models.formats.huggingface; "]
STATEMENTS = [f"import {module}" for module in LAYER] + [f"{first}import nmtdecode.models.loading" for first in FIRSTS]

# Runs each statement (argv[1], a JSON list) in a child forked from an interpreter that has imported
# torch, the costly part of a start, and nothing of nmtdecode; prints {statement: the nmtdecode
# modules the child then holds, or the error it raised}.
FORKING = """
import json, os, sys, traceback
import torch  # noqa: F401
assert not [m for m in sys.modules if m.startswith("nmtdecode")]
results = {}
for statement in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            exec(statement, {})
            result = sorted(m for m in sys.modules if m.startswith("nmtdecode"))
        except BaseException:
            result = traceback.format_exc()
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        results[statement] = json.loads(pipe.read())
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imported_after():
    """`imported_after[statement]`: the nmtdecode modules a fresh interpreter holds after running
    `statement`, for each of STATEMENTS (one process start for them all: see FORKING)."""
    run = subprocess.run([sys.executable, "-c", FORKING, json.dumps(STATEMENTS)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.subprocess
@pytest.mark.parametrize("module", LAYER)
def test_loading_a_checkpoint_imports_nothing_above_the_loading_layer(imported_after, module):
    modules = imported_after[f"import {module}"]
    assert isinstance(modules, list), modules  # else the error the import raised
    assert module in modules
    assert not [m for m in modules if m.startswith(ABOVE_LOADING)]


@pytest.mark.subprocess
@pytest.mark.parametrize("first", FIRSTS)
def test_loading_imports_the_formats_at_the_top_without_a_cycle(imported_after, first):
    """Whichever module comes first, importing the dispatcher brings in every format."""
    modules = imported_after[f"{first}import nmtdecode.models.loading"]
    assert isinstance(modules, list), modules  # else the error the import raised
    assert {"nmtdecode.models.formats.native", "nmtdecode.models.formats.huggingface"} <= set(modules)


def nmtdecode_imports(path: Path) -> set[str]:
    """Modules a file imports from its own package, as written (`..checkpoint`, `...config`, `.hf_tokenizers`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.add("." * node.level + (node.module or ""))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            found.update(n for n in names if n and n.split(".")[0] == "nmtdecode")
    return found


@pytest.mark.parametrize("name", ["native", "huggingface", "hf_tokenizers", "opennmt", "eole"])
def test_formats_depend_only_on_checkpoint_transformer_tokenizer_config(name):
    allowed = {"..checkpoint", "..transformer", "...tokenizer", "...config", ".hf_tokenizers", ".opennmt"}
    assert nmtdecode_imports(ROOT / "nmtdecode" / "models" / "formats" / f"{name}.py") <= allowed


def test_checkpoint_is_a_leaf():
    assert nmtdecode_imports(ROOT / "nmtdecode" / "models" / "checkpoint.py") <= {".transformer", "..config"}


def test_formats_are_tried_native_first():
    assert loading.FORMATS == [native, eole, huggingface, opennmt]
    assert [f.FORMAT for f in loading.FORMATS] == ["native", "eole", "huggingface", "opennmt-py"]


def test_load_model_dispatches_on_the_file_each_format_detects(tmp_path):
    model_dir = build_native_model(tmp_path / "native")
    assert native.detect(str(model_dir)) and not huggingface.detect(str(model_dir))
    assert loading.load_model(str(model_dir)).format == "native"
    (model_dir / "config.json").write_text(json.dumps({"model_type": "t5"}))
    assert loading.load_model(str(model_dir)).format == "native"  # config.yaml wins over config.json
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(json.dumps({"model_type": "t5", "d_model": 8}))
    assert huggingface.detect(str(hf_dir)) and not native.detect(str(hf_dir))
    with pytest.raises(ModelError, match="model_type 't5' is not supported"):  # only the HF format says this
        loading.load_model(str(hf_dir))


def test_load_model_error_texts(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError) as error:
        loading.load_model(str(missing))
    assert str(error.value) == f"model: {missing} does not exist"
    (tmp_path / "file.txt").write_text("not a model")
    for path in (tmp_path, tmp_path / "file.txt"):
        with pytest.raises(ConfigError) as error:
            loading.load_model(str(path))
        assert str(error.value) == (f"model: {path} is not a model directory (no config.yaml for the native format, "
                                    "no config.json for Hugging Face) nor an OpenNMT-py .pt checkpoint")
