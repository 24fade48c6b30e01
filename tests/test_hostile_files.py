"""Files made to hurt a loader: values that explode when walked, files that block when opened,
structures nested deeper than a parser's stack, weights of the wrong kind. Each ends in one
short line and an exit code, at once; none hangs, none prints a traceback."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from nmtdecode.options.bounded import SHOWN, TooLarge, check_size, shown

from tests.helpers import REPO, one_line


def command(*args):
    return [sys.executable, "-m", "nmtdecode", *map(str, args)]


def alias_bomb(key: str, levels: int = 9) -> str:
    """YAML of ~360 bytes whose `key` expands to 9**levels values: each anchor a list of nine
    references to the one before."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\n{key}: *a{levels - 1}\n"


def test_the_bomb_is_small_and_its_size_is_counted_without_walking_it():
    text = alias_bomb("banned_ids")
    assert len(text) < 600
    data = yaml.safe_load(text)
    with pytest.raises(TooLarge, match="expands to more than 1,000,000 values"):
        check_size(data)
    assert len(shown(data)) <= SHOWN  # shown without expanding it either


def test_a_structure_that_contains_itself_is_refused():
    loop = yaml.safe_load("a: &a [1, *a]")
    with pytest.raises(TooLarge, match="refers to itself"):
        check_size(loop)


@pytest.mark.subprocess
@pytest.mark.parametrize("key", ["d_model", "banned_ids", "decoding"])
def test_an_alias_bomb_in_a_models_config_yaml_is_one_line(model_dir, tmp_path, key):
    """In the model's config.yaml: under `model: d_model:`, as `banned_ids:`, as `decoding:`. A
    real process with a timeout: before, the error message expanded it (a hang, gigabytes)."""
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    config = yaml.safe_load((model / "config.yaml").read_text())
    text = alias_bomb("bomb")
    if key == "d_model":
        body = yaml.safe_dump({k: v for k, v in config.items() if k != "model"})
        model_lines = yaml.safe_dump({"model": {k: v for k, v in config["model"].items() if k != "d_model"}})
        text += body + model_lines.rstrip("\n") + "\n  d_model: *a8\n"
    else:
        text += yaml.safe_dump({k: v for k, v in config.items() if k != key}) + f"{key}: *a8\n"
    (model / "config.yaml").write_text(text)
    for args in (("inspect", model), ("translate", "--model", model)):
        run = subprocess.run(command(*args), input=b"hello\n", capture_output=True, timeout=60)
        assert run.returncode == 1, run.stderr
        line = one_line(run.stderr.decode())
        assert (
            line.endswith(
                "config.yaml cannot be read: it expands to more than 1,000,000 values (YAML aliases of aliases?)"
            )
            and len(line) < 300
        )


@pytest.mark.subprocess
def test_an_alias_bomb_in_a_config_file_is_one_line(model_dir, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(f"model: {model_dir}\n" + alias_bomb("beam_size"))
    run = subprocess.run(command("translate", "-c", job), input=b"hello\n", capture_output=True, timeout=60)
    assert run.returncode == 2, run.stderr
    line = one_line(run.stderr.decode())
    assert line.endswith("larger than any config: it expands to more than 1,000,000 values (YAML aliases of aliases?)")


def test_a_long_value_in_a_message_is_shown_cut(model_dir, tmp_path, cli):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    config = yaml.safe_load((model / "config.yaml").read_text())
    config["banned_ids"] = ["x" * 100_000, 2, 3]
    (model / "config.yaml").write_text(yaml.safe_dump(config))
    run = cli("translate", "--model", model, stdin="hello\n", text=True)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert "banned_ids: expected a list of token ids, got ['xxx" in line and len(line) < 250


def marian_config(path, **changes):
    """A tiny Hugging Face Marian config.json (no weights): enough to be read as one."""
    config = dict(
        model_type="marian",
        vocab_size=16,
        decoder_vocab_size=16,
        d_model=8,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        max_position_embeddings=32,
        pad_token_id=15,
        eos_token_id=0,
        decoder_start_token_id=15,
        activation_function="swish",
        scale_embedding=True,
        **changes,
    )
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.subprocess
@pytest.mark.parametrize("subcommand", ["inspect", "translate"])
def test_a_fifo_in_place_of_config_json_is_refused_not_waited_on(tmp_path, subcommand):
    """Format detection opens config.json (to tell eole's from Hugging Face's): a FIFO there
    would block it forever. It is refused by name before anything opens it."""
    model = tmp_path / "hf"
    model.mkdir()
    os.mkfifo(model / "config.json")
    args = ("inspect", model) if subcommand == "inspect" else ("translate", "--model", model)
    run = subprocess.run(command(*args), input=b"hello\n", capture_output=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert one_line(run.stderr.decode()) == (
        f"nmtdecode: error: model: {model / 'config.json'} is not a regular "
        "file (a FIFO, device or folder): a model's files must be files"
    )


@pytest.mark.subprocess
def test_a_fifo_in_place_of_model_safetensors_is_named_not_called_missing(tmp_path):
    model = marian_config(tmp_path / "hf")
    os.mkfifo(model / "model.safetensors")
    run = subprocess.run(command("translate", "--model", model), input=b"hello\n", capture_output=True, timeout=60)
    assert run.returncode == 1, run.stderr
    assert one_line(run.stderr.decode()) == (
        f"nmtdecode: error: {model / 'model.safetensors'} is not a regular file "
        "(a FIFO, device or folder): a model's files must be files"
    )


@pytest.mark.parametrize("subcommand", ["inspect", "translate"])
def test_a_config_json_nested_deeper_than_the_parser_names_its_file(tmp_path, cli, subcommand):
    model = tmp_path / "hf"
    model.mkdir()
    (model / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    args = ("inspect", model) if subcommand == "inspect" else ("translate", "--model", model)
    run = cli(*args, stdin="hello\n", text=True)
    assert run.returncode == 1
    assert one_line(run.stderr) == (
        f"nmtdecode: error: {model / 'config.json'} cannot be read: it nests too deeply for a config"
    )


def relabelled(model_dir, tmp_path, change):
    """A copy of the native model whose weights file `change` rewrote (its header, or its tensors)."""
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    change(model / "model.safetensors")
    return model


def integers_in_place_of_floats(path):
    """The first tensor's dtype label changed from F32 to I32: the same bytes, read as integers."""
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = data[8 : 8 + size].replace(b'"F32"', b'"I32"', 1)
    path.write_bytes(data[:8] + header + data[8 + size :])


def all_nan(path):
    tensors = load_file(str(path))
    save_file({name: torch.full_like(t, float("nan")) for name, t in tensors.items()}, str(path))


@pytest.mark.parametrize(
    "change, message",
    [
        (integers_in_place_of_floats, "holds int32; weights must be float32, float16 or bfloat16"),
        (all_nan, "holds NaN or infinite values; the checkpoint is damaged (or was saved after training diverged)"),
    ],
)
def test_weights_of_the_wrong_kind_fail_the_load(model_dir, tmp_path, cli, change, message):
    """Before: integers were converted to floats, and NaN weights decoded one word for every line,
    both with exit 0."""
    run = cli("translate", "--model", relabelled(model_dir, tmp_path, change), stdin="hello\n", text=True)
    assert run.returncode == 1 and run.stdout == ""
    assert one_line(run.stderr).endswith(message)


def test_the_repository_has_no_alias_bomb_of_its_own():
    """The shipped configs load within the limits (a limit too tight would refuse real files)."""
    for path in [*REPO.glob("configs/*.yaml"), REPO / "data/demo/config.yaml"]:
        check_size(yaml.safe_load(path.read_text()))


def test_a_line_for_the_user_is_one_write_even_on_an_unbuffered_stderr(monkeypatch):
    """With PYTHONUNBUFFERED print writes the text and the newline apart; under torchrun two ranks'
    "terminated" lines said at once became one line. `say` writes each line whole, once."""
    import io

    from nmtdecode.engine import messages

    class Unbuffered(io.StringIO):
        def __init__(self):
            super().__init__()
            self.writes = []

        def write(self, text):
            self.writes.append(text)
            return super().write(text)

    stderr = Unbuffered()
    monkeypatch.setattr(sys, "stderr", stderr)
    messages.say("nmtdecode: terminated; partial output kept, rerun with --resume to continue")
    messages.print_warning("x")
    assert stderr.writes == [
        "nmtdecode: terminated; partial output kept, rerun with --resume to continue\n",
        "nmtdecode: warning: x\n",
    ]


@pytest.mark.parametrize("jobs", ["5", "yes", "{src: a.en}", "bom"])
def test_jobs_that_are_not_a_list_name_jobs_and_exit_2(model_dir, tmp_path, cli, jobs):
    config = tmp_path / "job.yaml"
    config.write_text(f"model: {model_dir}\njobs: {jobs}\n")
    run = cli("translate", "-c", config, text=True)
    assert run.returncode == 2
    assert one_line(run.stderr).startswith(
        f"nmtdecode: error: config file {config}: jobs: expected a list of {{src: FILE, output: FILE, ...}} items, got "
    )


def test_a_bad_decoding_default_names_the_model_s_file(model_dir, tmp_path, cli):
    """A model's own defaults are checked where its file is read: before, the message was the
    option's alone (`beam_size: expected int, got nan`), as if the user had given it."""
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    config = yaml.safe_load((model / "config.yaml").read_text())
    config["decoding"] = {"beam_size": float("nan")}
    (model / "config.yaml").write_text(yaml.safe_dump(config))
    run = cli("translate", "--model", model, stdin="hello\n", text=True)
    assert run.returncode == 1
    assert one_line(run.stderr) == (
        f"nmtdecode: error: {model}/config.yaml: decoding defaults: beam_size: expected int, got nan"
    )


BIG = 5 << 20  # bytes: beyond MAX_CONFIG_BYTES (4 MiB); before, a 100 MB config.json was parsed whole (66 s, 727 MB)


@pytest.mark.parametrize("subcommand", ["inspect", "translate"])
def test_a_config_json_larger_than_any_config_is_refused_before_it_is_parsed(tmp_path, cli, subcommand):
    model = marian_config(tmp_path / "hf", padding="x" * BIG)
    args = ("inspect", model) if subcommand == "inspect" else ("translate", "--model", model)
    run = cli(*args, stdin="hello\n", text=True)
    assert run.returncode == 1
    size = (model / "config.json").stat().st_size
    assert one_line(run.stderr) == (
        f"nmtdecode: error: {model / 'config.json'} cannot be read: it holds {size:,} bytes; "
        "no such file needs more than 4,194,304"
    )


def test_a_native_config_yaml_larger_than_any_config_is_refused(model_dir, tmp_path, cli):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    with open(model / "config.yaml", "a") as f:
        f.write(f"padding: {'x' * BIG}\n")
    run = cli("translate", "--model", model, stdin="hello\n", text=True)
    assert run.returncode == 1
    assert one_line(run.stderr).startswith(f"nmtdecode: error: {model}/config.yaml cannot be read: it holds ")


def test_a_job_config_larger_than_any_config_is_refused(model_dir, tmp_path, cli):
    job = tmp_path / "job.yaml"
    job.write_text(f"model: {model_dir}\npadding: {'x' * BIG}\n")
    run = cli("translate", "-c", job, stdin="hello\n", text=True)
    assert run.returncode == 2
    assert one_line(run.stderr) == (
        f"nmtdecode: error: config file {job}: larger than any config: it holds {job.stat().st_size:,} bytes; "
        "no such file needs more than 4,194,304"
    )


@pytest.mark.parametrize("how", ["rewritten in place", "replaced by a rename", "truncated"])
def test_weights_saved_again_while_the_load_reads_them_fail_the_load(how, model_dir, tmp_path, cli, monkeypatch):
    """The threads that read a model's weights each open the file; a model saved again meanwhile
    (the same size, other values) would give the model half of each, and decode with exit 0."""
    from nmtdecode.models import weights

    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    path = model / "model.safetensors"
    other = {name: tensor + 0.5 for name, tensor in load_file(path).items()}
    reads, read_rows = [], weights.StoredTensor.read_rows

    def saved_again_at_the_third_read(self, first, out):
        reads.append(self.name)
        if len(reads) == 3:
            if how == "replaced by a rename":
                save_file(other, tmp_path / "new.safetensors")
                os.replace(tmp_path / "new.safetensors", path)
            elif how == "truncated":
                os.truncate(path, 100)
            else:
                data = path.read_bytes()
                path.write_bytes(data[:-8] + bytes(8))  # the same size, the last values zero
        return read_rows(self, first, out)

    monkeypatch.setattr(weights.StoredTensor, "read_rows", saved_again_at_the_third_read)
    run = cli("translate", "-m", model, stdin="a b\n", text=True)
    assert run.returncode == 1 and run.stdout == ""
    expected = "(truncated?)" if how == "truncated" else "the file changed while it was read"
    assert expected in one_line(run.stderr)


@pytest.mark.parametrize("where", ["cli", "config", "model"])
def test_an_integer_of_400_digits_is_refused_by_name(where, model_dir, tmp_path, cli):
    """A beam of 10^400 reached float arithmetic (the memory a beam needs) and ended in Python's
    "integer division result too large for a float", naming nothing; a length of 10^400 in
    `max_len_b`, "int too large to convert to float"."""
    huge = "1" + "0" * 400
    args = ["translate", "-m", model_dir, "-q"]
    if where == "cli":
        args += ["--beam-size", huge]
    elif where == "config":
        (tmp_path / "job.yaml").write_text(f"max_len_b: {huge}\n")
        args += ["--config", tmp_path / "job.yaml"]
    else:
        model = tmp_path / "model"
        shutil.copytree(model_dir, model)
        config = yaml.safe_load((model / "config.yaml").read_text())
        config["decoding"] = {"beam_size": int(huge)}
        (model / "config.yaml").write_text(yaml.safe_dump(config))
        args[2] = model
    run = cli(*args, stdin="a b\n", text=True)
    line = one_line(run.stderr)
    assert run.returncode == (1 if where == "model" else 2) and run.stdout == ""
    assert "is larger than any setting of it (each is below 2^64)" in line and len(line) < 200 + len(str(tmp_path))
