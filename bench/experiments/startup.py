"""What every process pays before it decodes: whole `nmtdecode` commands that fail or do little.

    python bench/experiments/startup.py [--repeat 5]

Each command runs as its own process (the installed `nmtdecode` of this Python), the median
of --repeat runs: a mistyped flag, a model path that does not exist, an input that does not
exist, an output in a folder that does not exist, a directory that is not a model, a config
key typo, `inspect` on the demo model, and one line translated by it. The errors are found
before torch is imported (pipeline.py, `load_engine`); `inspect` reads the demo's files without torch
(models/inspect.py), the translation imports it.

Then what ending costs: the seconds from a process's last statement to its exit, after `import
torch` (and after `import ctranslate2` where it is installed), ended by the interpreter's teardown or
by `os._exit` as `nmtdecode translate` ends (cli.exit_now). The clock is time.monotonic, the same in
both processes on Linux.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, ROOT, timed  # noqa: E402


def commands(tmp: str) -> dict[str, tuple[list[str], str]]:
    """label -> (arguments, stdin)."""
    sample = os.path.join(DEMO, "sample.en")
    config = os.path.join(tmp, "typo.yaml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"model: {DEMO}\nbeam_sise: 4\n")
    return {
        "a mistyped flag": (["translate", "--model", DEMO, "--beam-siz", "3"], ""),
        "a model path that does not exist": (
            ["translate", "--model", os.path.join(tmp, "nothing"), "--src", sample],
            "",
        ),
        "an input that does not exist": (["translate", "--model", DEMO, "--src", os.path.join(tmp, "none.en")], ""),
        "an output folder that does not exist": (
            ["translate", "--model", DEMO, "--src", sample, "--output", os.path.join(tmp, "no", "out.de")],
            "",
        ),
        "a folder that is not a model": (["translate", "--model", tmp, "--src", sample], ""),
        "a config key typo": (["translate", "-c", config, "--src", sample], ""),
        "inspect the demo model": (["inspect", DEMO], ""),
        "translate one line (demo, beam 5)": (["translate", "--model", DEMO, "--quiet"], "good morning\n"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=ROOT)
    print("| command | exit code | seconds (median) |\n|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, (argv, stdin) in commands(tmp).items():
            times, code = [], None
            for _ in range(args.repeat):
                seconds, run = timed(
                    lambda: subprocess.run(
                        [sys.executable, "-m", "nmtdecode", *argv],
                        input=stdin,
                        capture_output=True,
                        text=True,
                        env=env,
                        cwd=ROOT,
                    )
                )
                times.append(seconds)
                code = run.returncode
            print(f"| {label} | {code} | {statistics.median(times):.2f} |", flush=True)
    print("\n| after | exit | seconds to exit (median) |\n|---|---|---|")
    for module in ("torch", "ctranslate2"):
        for ending in ("the interpreter's teardown", "os._exit"):
            times = [exit_seconds(module, ending == "os._exit") for _ in range(args.repeat)]
            if all(t is not None for t in times):
                print(f"| import {module} | {ending} | {statistics.median(times):.3f} |", flush=True)


def exit_seconds(module: str, quick: bool) -> float | None:
    """Seconds from the last statement of a process that imported `module` to its end (None
    where the module is not installed)."""
    end = "sys.stdout.flush(); os._exit(0)" if quick else "pass"
    code = f"import os, sys, time, {module}; print(time.monotonic()); {end}"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    ended = time.monotonic()
    return ended - float(run.stdout) if run.returncode == 0 else None


if __name__ == "__main__":
    main()
