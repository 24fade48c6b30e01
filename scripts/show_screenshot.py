"""Make docs/images/show.png, the picture of `nmtdecode show` in docs/output.md: the demo model's
search for a few lines, drawn by the page and photographed by the browser test's renderer
(tests/browser.py, headless Chromium).

    .venv/bin/python scripts/show_screenshot.py
"""

import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nmtdecode.cli import run  # noqa: E402
from tests import browser  # noqa: E402

LINES = ["good morning", "I love you.", "the children"]


def main(target: Path = REPO / "docs" / "images" / "show.png"):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "in.en").write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
        dump, page = folder / "beams.jsonl", folder / "show.html"
        code = run(
            [
                "translate",
                "--model",
                str(REPO / "data" / "demo"),
                "--src",
                str(folder / "in.en"),
                "--output",
                str(folder / "out.de"),
                "--beam-size",
                "4",
                "--attention",
                "--dump-beam",
                str(dump),
                "-q",
            ]
        )
        code = code or run(["show", str(dump), "--output", str(page)])
        if code:
            sys.exit(code)
        html = page.read_text(encoding="utf-8")  # show the second line, as a click on it would
        page.write_text(
            html.replace('id="line-1" data-index="0">', 'id="line-1" data-index="0" hidden>', 1).replace(
                'id="line-2" data-index="1" hidden>', 'id="line-2" data-index="1">', 1
            ),
            encoding="utf-8",
        )
        browser.screenshot(page, target, size=(1100, 860))
    print(f"{target}: {target.stat().st_size} bytes")


if __name__ == "__main__":
    main()
