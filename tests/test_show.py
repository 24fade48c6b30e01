"""nmtdecode show: every node of the dump is drawn where the layout puts it, the highlighted
paths are the output's hypotheses, the page is self-contained; and, in a real browser (headless
Chromium), the page renders, its script runs, and the nodes are where the SVG says."""

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from nmtdecode.show.tree import ended_id, slot_id
from tests import browser
from tests.helpers import DEMO, REPO

LINES = ["the children", "", "I love you.", "good morning"]
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture()
def dumped(cli, tmp_path, lines_file):
    """`dumped(*options)`: the demo model's dump of LINES and its jsonl output, as (dump path, outputs)."""

    def run(*args, model=DEMO):
        out, dump = tmp_path / "out.jsonl", tmp_path / "beams.jsonl"
        result = cli(
            "translate",
            "--model",
            model,
            "--src",
            lines_file(LINES),
            "--output",
            out,
            "--format",
            "jsonl",
            "--token-scores",
            "--dump-beam",
            dump,
            "-q",
            *args,
            text=True,
        )
        assert result.returncode == 0, result.stderr
        return dump, [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]

    return run


def trees_of(page: str) -> list[ET.Element]:
    return [ET.fromstring(svg) for svg in re.findall(r'<svg class="tree".*?</svg>', page, re.S)]


def expected_nodes(record: dict) -> set[str]:
    ids = {"start"}
    for g, beam in enumerate(record["beams"]):
        ids |= {slot_id(g, t, j) for t, step in enumerate(beam["predicted_ids"]) for j in range(len(step))}
        ids |= {ended_id(g, i) for i in range(len(beam["finished"]))}
    return ids


@pytest.mark.parametrize(
    "options",
    [
        ["--beam-size", 5, "--n-best", 3],
        ["--beam-size", 1],
        ["--sampling", "--n-best", 2],
        ["--beam-size", 4, "--beam-groups", 2, "--diversity-penalty", 1, "--n-best", 2],
    ],
)
def test_every_node_is_drawn_and_the_highlighted_paths_are_the_output(options, dumped, cli, tmp_path):
    dump, outputs = dumped(*options)
    page = tmp_path / "page.html"
    run = cli("show", dump, "--output", page, text=True)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    html = page.read_text(encoding="utf-8")
    records = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    decoded = [r for r in records if r["beams"]]
    trees = trees_of(html)
    assert len(trees) == len(decoded) == 3
    for record, svg in zip(decoded, trees):
        nodes = {g.get("data-node"): g for g in svg.iter(f"{SVG}g") if g.get("data-node")}
        assert set(nodes) == expected_nodes(record)
        for g in nodes.values():  # drawn where the layout says
            x, y = map(float, re.fullmatch(r"translate\(([-\d.]+),([-\d.]+)\)", g.get("transform")).groups())
            assert (x, y) == (float(g.get("data-x")), float(g.get("data-y")))
        edges = {p.get("data-child") for p in svg.iter(f"{SVG}path")}
        assert edges == set(nodes) - {"start"}  # an edge to its parent from every node
        hyps = outputs[record["index"]]["hypotheses"]
        for rank, hyp in enumerate(hyps):
            on_path = sorted(
                (n for n in nodes.values() if str(rank) in (n.get("data-ranks") or "").split()),
                key=lambda n: float(n.get("data-x")),
            )
            tokens = [int(n.get("data-token")) for n in on_path if n.get("data-token") is not None]
            assert tokens[: len(hyp["tokens"])] == hyp["tokens"]
            assert tokens[len(hyp["tokens"]) :] == ([record["eos_id"]] if hyp["ended"] else [])
        best = [n for n in nodes.values() if "best" in n.get("class").split()]
        assert {n.get("data-node") for n in best} == {
            n.get("data-node") for n in nodes.values() if "0" in (n.get("data-ranks") or "").split()
        }


def test_the_page_is_self_contained_with_a_list_and_a_heatmap(dumped, cli, tmp_path):
    dump, _ = dumped("--beam-size", 3, "--attention", "--alignment")
    page = tmp_path / "page.html"
    assert cli("show", dump, "-o", page).returncode == 0
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", html) and "@import" not in html
    assert len(re.findall(r'<li value="\d+"><a href="#line-', html)) == len(LINES)
    heatmaps = re.findall(r'<svg class="heatmap".*?</svg>', html, re.S)
    records = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    for record, svg in zip([r for r in records if r["beams"]], heatmaps):
        best = record["nbest"][0]
        cells = ET.fromstring(svg).findall(f".//{SVG}rect")
        assert len(cells) == len(best["tokens"]) * len(record["source_pieces"])
        aligned = [i for i, c in enumerate(cells) if "aligned" in c.get("class")]
        width = len(record["source_pieces"])
        assert aligned == [row * width + column for row, column in enumerate(best["alignment"])]


def test_one_sentence_and_bad_dumps(dumped, cli, tmp_path):
    dump, _ = dumped("--beam-size", 2)
    page = tmp_path / "page.html"
    assert cli("show", dump, "-o", page, "--sentence", 3).returncode == 0
    html = page.read_text(encoding="utf-8")
    assert html.count('<section class="sentence') == 1 and 'id="line-3"' in html
    out_of_range = cli("show", dump, "-o", page, "--sentence", 9, text=True)
    assert out_of_range.returncode == 2 and "sentence: 9 is not a line" in out_of_range.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"index": 0}\n')
    run = cli("show", bad, "-o", tmp_path / "p.html", text=True)
    assert run.returncode == 2 and "line 1 is not a --dump-beam record" in run.stderr
    bad.write_text("not json\n")
    run = cli("show", bad, "-o", tmp_path / "p.html", text=True)
    assert run.returncode == 2 and "line 1 is not JSON" in run.stderr and len(run.stderr.splitlines()) == 1
    assert not (tmp_path / "p.html").exists()


@pytest.mark.subprocess
def test_show_loads_no_torch(dumped, tmp_path):
    dump, _ = dumped("--beam-size", 2)
    code = (
        "import sys; from nmtdecode.cli import run; "
        f"code = run(['show', {str(dump)!r}, '-o', {str(tmp_path / 'p.html')!r}]); "
        "assert code == 0 and 'torch' not in sys.modules, (code, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_page_renders_in_a_browser_with_the_nodes_where_the_svg_says(dumped, cli, tmp_path):
    assert browser.chromium() is not None, "chromium is needed (Debian package `chromium`; .ci/run installs it)"
    dump, _ = dumped("--beam-size", 4, "--n-best", 2, "--attention")
    page, png = tmp_path / "page.html", tmp_path / "page.png"
    assert cli("show", dump, "-o", page).returncode == 0
    svg = trees_of(page.read_text(encoding="utf-8"))[0]
    said = {
        g.get("data-node"): (float(g.get("data-x")), float(g.get("data-y")))
        for g in svg.iter(f"{SVG}g")
        if g.get("data-node")
    }
    drawn = browser.drawn_layout(page)
    origin = drawn.pop("svg")
    assert set(drawn) == set(said)
    for node, (x, y) in said.items():
        assert drawn[node] == pytest.approx([x, y], abs=0.5), node
    browser.screenshot(page, png)
    pixels = browser.read_png(png)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50  # not blank: text, boxes, colours
    best = [g for g in svg.iter(f"{SVG}g") if "best" in (g.get("class") or "").split()]
    seen = 0
    for g in best:  # the 1-best's boxes, filled with its colour where the SVG puts them
        x, y = said[g.get("data-node")]
        px, py = round(origin[0] + x - 40), round(origin[1] + y)
        if px < pixels.shape[1] and py < pixels.shape[0]:
            assert tuple(pixels[py, px]) == (0xF9, 0xC3, 0x6B), g.get("data-node")
            seen += 1
    assert seen >= 3  # the start, a token and the ended node at least


def test_without_output_the_page_goes_beside_the_dump(dumped, cli):
    """`nmtdecode show beams.jsonl` writes beams.html (it once refused to run without -o) and says so."""
    dump, _ = dumped("--beam-size", 2)
    run = cli("show", dump, text=True)
    page = dump.with_suffix(".html")
    assert run.returncode == 0 and run.stderr == f"nmtdecode: wrote {page}\n", run.stderr
    assert len(trees_of(page.read_text(encoding="utf-8"))) == 3
