"""models/model_files.py names, without torch, every file a load reads: checked against the files
the load itself records (LoadedModel.files) for each format, on models built by the formats' own
test builders. An OpenNMT-py checkpoint names its tokenizers inside the pickle: only the .pt is
known before the load (jobs/run.py checks the rest once it has loaded)."""

import os
import shutil

import pytest

from nmtdecode.models.loading import load_model
from nmtdecode.models.model_files import files_read


def assert_names_what_the_load_reads(path) -> list[str]:
    named = {os.path.realpath(name) for name in files_read(str(path))}
    read = set(load_model(str(path)).files)
    assert read and read <= named, sorted(read - named)
    return sorted(named)


def test_a_native_directory(model_dir):
    named = assert_names_what_the_load_reads(model_dir)
    assert {os.path.basename(n) for n in named} >= {"config.yaml", "model.safetensors", "spm.model"}


def test_a_native_tokenizer_outside_the_directory_is_named(model_dir, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    (model / "spm.model").rename(tmp_path / "shared.model")
    (model / "config.yaml").write_text((model / "config.yaml").read_text().replace("spm.model", "../shared.model"))
    assert os.path.realpath(tmp_path / "shared.model") in assert_names_what_the_load_reads(model)


def test_an_ensemble_names_every_member_s_files(model_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    named = files_read([str(model_dir), str(other)])
    assert str(other / "model.safetensors") in named and str(model_dir / "model.safetensors") in named


def test_no_model_names_nothing(tmp_path):
    assert files_read(str(tmp_path / "nowhere")) == files_read(str(tmp_path)) == []


@pytest.mark.parity  # built with transformers and eole
@pytest.mark.parametrize("family", ["marian", "mbart"])
def test_a_hugging_face_directory(tmp_path, family):
    from tests.models.formats.test_inspect_formats import with_tokenizer

    assert_names_what_the_load_reads(with_tokenizer(family, tmp_path / "model"))


@pytest.mark.parity
def test_an_eole_directory(tmp_path):
    from tests import peer_eole

    _, path = peer_eole.build(tmp_path / "model")
    assert_names_what_the_load_reads(path)


def test_a_marian_directory_and_its_npz(tmp_path):
    from tests.models.formats.marian_files import train_spm, vocabulary
    from tests.models.formats.test_marian_npz import build

    spm_path = tmp_path / "spm" / "source.spm"
    spm_path.parent.mkdir()
    root = build(tmp_path / "m", (spm_path, vocabulary(train_spm(spm_path, seed=0), tags=("fra", "deu"))))
    assert_names_what_the_load_reads(root)
    assert_names_what_the_load_reads(root / "model.npz")


def test_an_opennmt_checkpoint_is_the_pt_itself(tmp_path):
    from tests.models.formats.test_opennmt_files import tiny_checkpoint

    path = tiny_checkpoint(tmp_path / "model.pt")
    assert files_read(str(path)) == [str(path)]


def test_a_ctranslate2_folder_with_its_sentencepiece_model_above_it(tmp_path):
    """An Argos Translate package: the folder in model/, sentencepiece.model beside it."""
    from tests.helpers import tiny_transformer, train_sentencepiece
    from tests.models.formats.ct2_files import write_folder

    shutil.move(train_sentencepiece(tmp_path, vocab_size=40), tmp_path / "sentencepiece.model")
    tokens = ["<blank>", "<unk>", "<s>", "</s>", *(f"w{i}" for i in range(36))]
    write_folder(tmp_path / "model", tiny_transformer(vocab=40), tokens)
    named = assert_names_what_the_load_reads(tmp_path / "model")
    assert os.path.realpath(tmp_path / "sentencepiece.model") in named
