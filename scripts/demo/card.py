"""The model card (README.md of the model directory): `card.md` filled in with
the run's facts. The template uses str.format fields (`{args.seed}`,
`{sizes[test]:,}`); literal braces are doubled (`{{n}}`)."""

from __future__ import annotations

import re
from pathlib import Path

from .freedict import read_header

TEMPLATE = Path(__file__).with_name("card.md")


def dictionary_facts(dict_dir: str) -> dict:
    """Edition, date and licence text, quoted from the dictionary's own header."""
    header = read_header(dict_dir, "eng-deu")
    edition = re.search(r"Edition: (\S+)", header)
    date = re.search(r"Publication date: (\S+?)\.?\n", header)
    availability = re.search(r"Availability:\n(.*?)\n\n", header, re.S)
    licence = " ".join(availability.group(1).split()) if availability else ""
    licence = re.sub(r" <[^>]*>", "", licence)  # no e-mail addresses in the card
    return {"edition": edition.group(1) if edition else "?", "date": date.group(1) if date else "?", "licence": licence}


def final_phase_text(state: dict, args) -> str:
    if "polish" not in state:
        return "none (`--final-share 0`)."
    return (
        f"from step {state['polish']['from_step']:,} (the last {args.final_share:.0%} of training), "
        "batches come\n  from the everyday pairs with their copies plus half as many other pairs\n"
        f"  drawn at random ({state['polish_examples']:,} examples per pass), so that bare everyday "
        "words\n  are not outvoted by the compounds built on them."
    )


def card_text(
    *,
    args,
    command: str,
    facts: dict,
    sizes: dict,
    cfg,
    n_params: int,
    size: int,
    state: dict,
    timings: dict,
    weights: str,
    metrics: dict,
    chosen: list,
    demo: list,
) -> str:
    """card.md with every field filled in."""
    return TEMPLATE.read_text(encoding="utf-8").format(
        args=args,
        command=command,
        facts=facts,
        sizes=sizes,
        cfg=cfg,
        n_params=n_params,
        state=state,
        weights=weights,
        metrics=metrics,
        minutes={name: seconds / 60 for name, seconds in timings.items()},
        megabytes=size / 1e6,
        final_phase=final_phase_text(state, args),
        compute="bfloat16 autocast, float32 weights" if args.precision == "bf16" else "float32",
        epochs=state["epoch"] + state["position"] / max(1, state.get("epoch_batches", 1)),
        history=", ".join(f"{nll:.2f} @ {step}" for step, nll in state["history"][-6:]) or "none recorded",
        n_common=len(chosen),
        examples="\n".join(f"| {src} | {out} |" for src, out in demo),
    )


def write_card(path: Path, **facts):
    path.write_text(card_text(**facts), encoding="utf-8")
