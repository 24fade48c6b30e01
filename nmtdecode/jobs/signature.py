"""A job's resume signature: what its output depends on, so that --resume continues only
the same job (`output.OutputFile` keeps it in the output's journal)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from typing import Iterable

from ..version import __version__
from ..options.config import Config


HASHED_WHOLE = 64 << 20  # model files up to this size are identified by their whole content


def _content_identity(path: str) -> list:
    """A model file by content: its hash; a larger one by size, time and its first and last MiB."""
    st = os.stat(path)
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        if st.st_size <= HASHED_WHOLE:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
            return [digest.hexdigest()]
        digest.update(f.read(1 << 20))
        f.seek(-(1 << 20), os.SEEK_END)
        digest.update(f.read(1 << 20))
    return [digest.hexdigest(), st.st_size, st.st_mtime_ns]


def model_identity(path: str, files: Iterable[str] = ()) -> list:
    """The files of a model directory (or one file), each by content; and `files`, those its
    loader read from elsewhere (a tokenizer in a subfolder or beside a `.pt`, `../` paths,
    weight shards in subfolders: `LoadedModel.files`), named relative to the model's folder."""
    if not os.path.isdir(path):
        own, folder, seen = _content_identity(path), os.path.dirname(os.path.realpath(path)), {os.path.realpath(path)}
    else:
        names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n)))
        own, folder = [[n, *_content_identity(os.path.join(path, n))] for n in names], os.path.realpath(path)
        seen = {os.path.realpath(os.path.join(path, n)) for n in names}
    elsewhere = sorted({os.path.realpath(f) for f in files} - seen)
    if not elsewhere:
        return own  # as before: the signature of a model that reads nothing elsewhere is unchanged
    return [own, [[os.path.relpath(f, folder), *_content_identity(f)] for f in elsewhere]]


def job_signature(config: Config, model_files: Iterable[str] = ()) -> str:
    """What the output depends on: every option that changes it, the model files and the
    nmtdecode version (`model_files`: what the loader read, LoadedModel.files). A partial
    output is only resumed by a job with the same signature;
    the input is checked separately, by the hash of the lines already done (`output.py`).

    Left out on purpose: device, threads, gemm, cuda_graphs, traced_step and search_on choose how the same
    numbers are computed, not which; they differ only in rounding (about 1e-6), as two runs on different machines
    do. quantize and dtype change the numbers themselves and are in."""
    parts = {
        "version": __version__,
        "decoding": asdict(config.decoding),
        "batching": asdict(config.batching),
        "dtype": config.runtime.dtype,
        "quantize": config.runtime.quantize,
        "format": config.io.format,
        "token_scores": config.io.token_scores,
        "on_invalid_utf8": config.io.on_invalid_utf8,
        "stdin": config.io.src == "-",
    }
    if len(config.io.models) == 1:
        parts["model"] = model_identity(config.io.models[0], model_files)
    else:  # an ensemble: every model, in order, and how they are combined
        parts["model"] = [model_identity(path, model_files) for path in config.io.models]
        parts["ensemble"] = [config.io.ensemble_rule, config.io.ensemble_weights]
    if config.io.prefix is not None:  # the prefixes change the output as the input does
        parts["prefix"] = _content_identity(config.io.prefix) if os.path.isfile(config.io.prefix) else "a stream"
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
