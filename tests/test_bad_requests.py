"""Requests that must be refused with one clear line, and the paths of a config file.

Bad numbers and files in the configuration exit 2 naming the key or the file; a model
whose own configuration is malformed exits 1 naming its file and key; a closed stdin is
said as such. Each case runs the CLI in this process (the `cli` fixture).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from nmtdecode.cli import run

from tests.helpers import REPO


def one_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("nmtdecode: error: "), stderr
    return lines[0]


@pytest.mark.parametrize(
    "key, value",
    [("alpha", ".nan"), ("alpha", ".inf"), ("alpha", "-.inf"), ("max_len_a", ".nan"), ("max_len_a", ".inf")],
)
def test_non_finite_numbers_in_a_config_file_are_refused(model_dir, tmp_path, cli, key, value):
    config = tmp_path / "job.yaml"
    config.write_text(f"model: {model_dir}\n{key}: {value}\n")
    run = cli("translate", "-c", config, stdin="hello\n", text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert f"{key}: must be a finite number" in one_line(run.stderr)


@pytest.mark.parametrize("flag", ["--alpha", "--max-len-a"])
def test_non_finite_numbers_on_the_command_line_are_refused(model_dir, cli, flag):
    run = cli("translate", "--model", model_dir, flag, "nan", stdin="hello\n", text=True)
    assert run.returncode == 2
    assert f"{flag[2:].replace('-', '_')}: must be a finite number" in one_line(run.stderr)


def test_config_file_with_invalid_utf8_exits_2_naming_it(tmp_path, cli):
    config = tmp_path / "job.yaml"
    config.write_bytes(b"beam_size: 4\nsrc_lang: caf\xe9\n")  # Latin-1, not UTF-8
    run = cli("translate", "-c", config, stdin="hello\n", text=True)
    assert run.returncode == 2
    assert f"config file {config}:2: invalid UTF-8" in one_line(run.stderr)


def test_demo_config_works_from_another_directory(tmp_path, cli):
    """configs/demo.yaml names its model relative to itself, not to the working directory."""
    sample = os.path.join(REPO, "data", "demo", "sample.en")
    run = cli(
        "translate",
        "-c",
        os.path.join(REPO, "configs", "demo.yaml"),
        "--src",
        sample,
        "--quiet",
        cwd=tmp_path,
        stdin="hello\n",
        text=True,
    )
    assert run.returncode == 0, run.stderr
    with open(sample, encoding="utf-8") as f:
        assert len(run.stdout.splitlines()) == len(f.read().splitlines())


def test_paths_in_a_config_file_are_relative_to_it_and_flags_to_the_cwd(model_dir, tmp_path, cli):
    jobs, elsewhere = tmp_path / "jobs", tmp_path / "elsewhere"
    jobs.mkdir()
    elsewhere.mkdir()
    (jobs / "in.txt").write_text("good morning\nthank you\n")
    (elsewhere / "other.txt").write_text("water\n")
    config = jobs / "job.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": os.path.relpath(model_dir, jobs),
                "src": "in.txt",
                "output": "out.txt",
                "quiet": True,
                "max_length": 8,
            }
        )
    )
    run = cli("translate", "-c", config, cwd=elsewhere, stdin="hello\n", text=True)
    assert run.returncode == 0, run.stderr
    assert len((jobs / "out.txt").read_text().splitlines()) == 2  # beside the config, not in the cwd
    assert not (elsewhere / "out.txt").exists()
    run = cli(
        "translate",
        "-c",
        config,
        "--src",
        "other.txt",
        "--output",
        "flag.txt",
        cwd=elsewhere,
        stdin="hello\n",
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert len((elsewhere / "flag.txt").read_text().splitlines()) == 1  # flags: relative to the cwd


def native_copy(model_dir, tmp_path, edit):
    """A copy of the test model whose config.yaml went through `edit(data)`."""
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    data = yaml.safe_load((copy / "config.yaml").read_text())
    edit(data)
    (copy / "config.yaml").write_text(yaml.safe_dump(data))
    return copy


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["model"].pop("src_vocab_size"), "src_vocab_size is missing"),
        (lambda d: d["model"].update(heads=0), "heads: must be >= 1, got 0"),
        (lambda d: d["model"].update(heads=5), "d_model (32) must be divisible by heads (5)"),
        (lambda d: d["model"].update(d_model="32"), "d_model: expected int, got '32'"),
        (lambda d: d["model"].update(decoder_layers=-1), "decoder_layers: must be >= 1, got -1"),
        (lambda d: d["model"].update(encoder_layers=20000), "encoder_layers: 20000 is more than any model"),
        (lambda d: d["model"].update(max_positions=300000), "max_positions: 300000 is more than any model"),
        (lambda d: d["model"].update(eos_id=48), "eos_id: 48 is outside the source vocabulary (48 tokens)"),
        (lambda d: d["model"].update(norm_eps=float("nan")), "norm_eps: expected a finite float, got nan"),
        (lambda d: d.update(banned_ids=[0, 999]), "banned_ids: 999 is outside the target vocabulary"),
        (lambda d: d.update(banned_ids="pad"), "banned_ids: expected a list of token ids"),
        (lambda d: d.update(tokenizer=["spm.model"]), "tokenizer: expected a mapping"),
    ],
)
def test_malformed_native_config_names_file_and_key(model_dir, tmp_path, cli, edit, message):
    broken = native_copy(model_dir, tmp_path, edit)
    run = cli("translate", "--model", broken, stdin="hello\n", text=True)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert f"{broken}/config.yaml: " in line and message in line


def test_native_config_with_invalid_utf8_names_the_file(model_dir, tmp_path, cli):
    broken = native_copy(model_dir, tmp_path, lambda d: None)
    with open(broken / "config.yaml", "ab") as f:
        f.write(b"# caf\xe9\n")
    run = cli("translate", "--model", broken, stdin="hello\n", text=True)
    assert run.returncode == 1 and f"{broken}/config.yaml cannot be read" in one_line(run.stderr)


MARIAN = {
    "model_type": "marian",
    "vocab_size": 64,
    "d_model": 16,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "max_position_embeddings": 64,
    "pad_token_id": 63,
    "eos_token_id": 0,
    "decoder_start_token_id": 63,
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"vocab_size": None}, "vocab_size is missing"),
        (
            {"encoder_attention_heads": 0, "decoder_attention_heads": 0},
            "encoder_attention_heads: expected a positive integer, got 0",
        ),
        (
            {"encoder_attention_heads": 3, "decoder_attention_heads": 3},
            "d_model (16) is not divisible by encoder_attention_heads (3)",
        ),
        ({"d_model": 16.5}, "d_model: expected a positive integer, got 16.5"),
        ({"max_position_embeddings": -2}, "max_position_embeddings: expected a positive integer, got -2"),
        (
            {"d_model": 4096 * 16, "encoder_attention_heads": 8, "decoder_attention_heads": 8},
            "d_model: 65536 is more than any model this decoder runs asks for (at most 32,768)",
        ),
        ({"eos_token_id": 64}, "eos_id: 64 is outside the source vocabulary (64 tokens)"),
        ({"pad_token_id": "63"}, "pad_token_id: expected a token id (an integer >= 0) or null, got '63'"),
        (
            {"decoder_start_token_id": True},
            "decoder_start_token_id: expected a token id (an integer >= 0) or null, got True",
        ),
        ({"forced_bos_token_id": -1}, "forced_bos_token_id: expected a token id (an integer >= 0) or null, got -1"),
    ],
)
def test_malformed_hugging_face_config_names_file_and_key(tmp_path, cli, change, message):
    model = tmp_path / "hf"
    model.mkdir()
    config = {k: v for k, v in {**MARIAN, **change}.items() if v is not None}
    (model / "config.json").write_text(json.dumps(config))
    run = cli("translate", "--model", model, stdin="hello\n", text=True)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert f"{model}/config.json: " in line and message in line


def test_malformed_generation_config_names_file_and_key(tmp_path, cli):
    model = tmp_path / "hf"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(MARIAN))
    (model / "generation_config.json").write_text(json.dumps({"forced_bos_token_id": [5]}))
    run = cli("translate", "--model", model, stdin="hello\n", text=True)
    assert run.returncode == 1
    assert (
        f"{model}/generation_config.json: forced_bos_token_id: expected a token id (an integer >= 0) or null, got [5]"
    ) in one_line(run.stderr)


def test_closed_stdin_is_said_clearly(model_dir, monkeypatch, capsysbinary):
    """`nmtdecode translate <&-`: Python starts with sys.stdin None."""
    monkeypatch.setattr(sys, "stdin", None)
    code = run(["translate", "--model", str(model_dir), "--quiet"])
    err = capsysbinary.readouterr().err.decode()
    assert code == 1
    assert one_line(err) == "nmtdecode: error: cannot read <stdin>: standard input is closed (give --src FILE)"


def test_closed_stdout_is_said_clearly_before_the_model_loads(model_dir, lines_file, monkeypatch, capsysbinary):
    """`nmtdecode translate >&-`: Python starts with sys.stdout None; the job is refused at once."""
    from nmtdecode.engine.engine import Engine

    monkeypatch.setattr(Engine, "load", lambda *a: pytest.fail("the model was loaded"))
    monkeypatch.setattr(sys, "stdout", None)
    code = run(["translate", "--model", str(model_dir), "--src", str(lines_file(["water"])), "--quiet"])
    err = capsysbinary.readouterr().err.decode()
    assert code != 0
    assert one_line(err) == "nmtdecode: error: output: standard output is closed (give --output FILE)"


@pytest.mark.subprocess
def test_closed_stdin_in_a_real_process(model_dir):
    shell = f"{sys.executable} -m nmtdecode translate --model {model_dir} --quiet <&-"
    done = subprocess.run(shell, shell=True, capture_output=True, timeout=300)
    assert done.returncode == 1 and b"standard input is closed" in done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda m: m.update(d_model=4096),
            "d_model: the config asks for src_embed.tokens.weight of shape (48, 4096), the weights hold (48, 32)",
        ),
        (
            lambda m: m.update(src_vocab_size=250000),
            "src_vocab_size: the config asks for src_embed.tokens.weight of "
            "shape (250000, 32), the weights hold (48, 32)",
        ),
        (
            lambda m: m.update(ffn_dim=100000),
            "ffn_dim: the config asks for encoder_layers.0.ffn.up.weight of shape "
            "(100000, 32), the weights hold (64, 32)",
        ),
        (lambda m: m.update(decoder_layers=200), "decoder_layers: the config asks for 200 layers, the weights hold 2"),
        (
            lambda m: m.update(positions="learned", max_positions=30000),
            "weights do not match the architecture; missing: ['src_embed.positions.weight']",
        ),
    ],
)
def test_config_sizes_are_checked_against_the_weights_before_the_model_is_allocated(
    model_dir, tmp_path, cli, monkeypatch, edit, message
):
    """A config that asks for more than its weights hold (issue 34: d_model 4,096 reached 2.6 GB
    before a shape mismatch) fails naming the key and both shapes, and nothing is allocated."""
    from nmtdecode.models.transformer import Transformer

    monkeypatch.setattr(Transformer, "uninitialised", lambda cfg: pytest.fail("allocated before the check"))
    broken = native_copy(model_dir, tmp_path, lambda d: edit(d["model"]))
    run = cli("translate", "--model", broken, stdin="hello\n", text=True)
    assert run.returncode == 1
    assert one_line(run.stderr) == f"nmtdecode: error: {broken}: {message}"


def test_shapes_of_each_format_are_checked_under_our_names():
    """check_dimensions on the shapes an OpenNMT-py checkpoint gives our parameters (mapped_shapes:
    fused projections counted as their parts together), and on a shared vocabulary."""
    import torch

    from nmtdecode.models.checkpoint import ModelError, check_dimensions
    from nmtdecode.models.formats.opennmt import mapped_shapes, weight_map
    from tests.helpers import tiny_config

    cfg = tiny_config(vocab=12, encoder_layers=1, decoder_layers=1)
    linear, direct = weight_map(cfg)
    theirs = {source: torch.empty(12, 32) for source in direct.values() if "embeddings" in source}
    theirs.update(
        {f"{p}.weight": torch.empty(64 if "w_1" in p else 32, 32) for parts in linear.values() for p in parts}
    )
    shapes = mapped_shapes(cfg, {name: tuple(t.shape) for name, t in theirs.items()}, linear, direct)
    assert shapes["encoder_layers.0.self_attn.qkv.weight"] == (96, 32)  # query, keys and values
    check_dimensions(cfg, shapes, "ckpt.pt")  # the sizes agree
    with pytest.raises(
        ModelError,
        match=r"^ckpt.pt: ffn_dim: the config asks for encoder_layers.0.ffn.up.weight of "
        r"shape \(2048, 32\), the weights hold \(64, 32\)$",
    ):
        check_dimensions(tiny_config(vocab=12, encoder_layers=1, decoder_layers=1, ffn_dim=2048), shapes, "ckpt.pt")
    shared = tiny_config(vocab=12, encoder_layers=1, decoder_layers=1, share_embeddings=True)
    check_dimensions(shared, {k: v for k, v in shapes.items() if k != "tgt_embed.tokens.weight"}, "ckpt.pt")


@pytest.mark.parametrize(
    "failure",
    [
        MemoryError(),
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 98304 bytes. Error code 12"),
    ],
)
def test_running_out_of_memory_building_the_model_names_what_asked_for_it(model_dir, cli, monkeypatch, failure):
    """One line, exit 1, naming the config's largest demand: the test model's decoder, 2 layers of
    8 d^2 + 2 d ffn parameters (d 32, ffn 64: 24,576 float32 numbers, 98,304 bytes)."""
    from nmtdecode.models.transformer import Transformer

    def fail(cfg):
        raise failure

    monkeypatch.setattr(Transformer, "uninitialised", fail)
    run = cli("translate", "--model", model_dir, stdin="hello\n", text=True)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert line.startswith(f"nmtdecode: error: {model_dir}: out of memory allocating the model (")
    # the decoder layers: 24,576 float32 parameters, 96 KiB
    assert line.endswith("most of it for decoder_layers 2 of d_model 32, ffn_dim 64 (0.1 MiB)")


def test_running_out_of_memory_placing_the_model_names_what_asked_for_it(model_dir, cli, monkeypatch):
    """Reading the weights onto the device in its dtype (CUDA's out-of-memory error raised in its
    place): one line, exit 1, naming what the weights need and the config's largest demand."""
    import torch

    from nmtdecode.models import placement

    def fail(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; ...)\nmore advice")

    monkeypatch.setattr(placement, "read", fail)
    run = cli("translate", "--model", model_dir, "--dtype", "bfloat16", stdin="hello\n", text=True)
    assert run.returncode == 1
    line = one_line(run.stderr)
    assert line.startswith("nmtdecode: error: out of memory placing the model on cpu in bfloat16: its weights need ")
    assert line.endswith("most of them for decoder_layers 2 of d_model 32, ffn_dim 64")


def test_every_path_option_of_a_config_file_is_read_relative_to_it(tmp_path):
    """Each option that names a file (the table's FILE metavar) is resolved from the config file's
    folder, the tokenizer of a CTranslate2 folder included."""
    from nmtdecode.options.table import OPTIONS, PLAN_OPTIONS
    from nmtdecode.options.yaml_file import PATH_KEYS, load_yaml

    declared = {**OPTIONS, **PLAN_OPTIONS}.items()
    named_files = {key for key, o in declared if (o.metavar or "").rstrip(".") in ("FILE", "DIR", "PATH")}
    assert {"model", "src", "output", "tokenizer"} <= named_files
    assert named_files <= set(PATH_KEYS), named_files - set(PATH_KEYS)
    (tmp_path / "job.yaml").write_text("tokenizer: spm.model\n")
    assert load_yaml(str(tmp_path / "job.yaml"))["tokenizer"] == str(tmp_path / "spm.model")
