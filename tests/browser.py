"""Headless Chromium for the tests of `nmtdecode show` (and the docs' screenshot): render a page
to a PNG, read back where the page's script says it drew each node, and read a PNG's pixels.

Chromium is Debian's `chromium` package (.ci/run installs it). Each call starts a fresh
browser with its own profile, no network services, no GPU.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import numpy as np

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(args: list[str], timeout: float = 60) -> str:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=timeout
        )
    if done.returncode != 0:
        raise RuntimeError(f"chromium failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def screenshot(page: Path, png: Path, size=(1200, 800)):
    _run([f"--window-size={size[0]},{size[1]}", f"--screenshot={png}", page.resolve().as_uri()])


def drawn_layout(page: Path, size=(1200, 800)) -> dict:
    """Where the page's script found each node of the shown tree: {node id: [x, y]} of its box's
    centre relative to the tree's svg, and "svg": the svg's top-left in the window."""
    dom = _run([f"--window-size={size[0]},{size[1]}", "--dump-dom", page.resolve().as_uri() + "#layout"])
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S)
    if found is None:
        raise AssertionError("the page's script wrote no layout")
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def read_png(path: Path) -> np.ndarray:
    """An 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes) -> (height, width, 3) uint8."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    channels = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * channels)
    rows = np.zeros((height, width * channels), dtype=np.uint8)
    for y in range(height):  # undo each row's filter (PNG specification, section 9)
        kind, line = raw[y, 0], raw[y, 1:]
        above = rows[y - 1] if y else np.zeros_like(line)
        if kind == 0:
            rows[y] = line
        elif kind == 2:
            rows[y] = line + above  # uint8 arithmetic wraps, as the filters' mod 256
        else:
            rows[y] = _unfilter(kind, line.tolist(), above.tolist(), channels)
    return rows.reshape(height, width, channels)[:, :, :3].astype(np.uint8)


def _unfilter(kind: int, line: list[int], above: list[int], bpp: int) -> list[int]:
    """Sub (1), Average (3) and Paeth (4), byte by byte: each byte depends on the one to its left."""
    out = [0] * len(line)
    for x, value in enumerate(line):
        left = out[x - bpp] if x >= bpp else 0
        up = above[x]
        if kind == 1:
            predictor = left
        elif kind == 3:
            predictor = (left + up) >> 1
        else:
            upper_left = above[x - bpp] if x >= bpp else 0
            p = left + up - upper_left
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - upper_left)
            predictor = left if pa <= pb and pa <= pc else up if pb <= pc else upper_left
        out[x] = (value + predictor) & 255
    return out
