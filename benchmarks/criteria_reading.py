"""How the linear CRM's criteria prototypes read wordings: the share of phrasings whose strongest reading is the
property direction they mean, per family of crm/property_phrasings.yaml (train families, whose phrasings are in the
bank, and held-out ones), and on FRESH: one wording per direction written after the reading's rules were designed
(clauses, dislikes), never used to design or tune anything.

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/criteria_reading.py [--home .usl]

Needs the MiniLM backbone only (no warehouse); about a minute on 2 cores.
"""

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from usl_assets.crm import linear_crm, properties
from usl_assets.crm.backbones import resolve_backbone

FRESH = {
    "length:more": "My thesis advisor wants every nuance covered, so spare no detail.",
    "length:less": "Honestly, anything beyond a few lines and I stop reading.",
    "structure:more": "I scan replies, so chop them into bulleted chunks with headers.",
    "structure:less": "I find lists of fragments exhausting; write connected paragraphs.",
    "code:more": "Show me the actual snippet, I learn from reading source.",
    "code:less": "I'm not a programmer, so skip the code and just explain in words.",
    "numbers:more": "Back every claim with figures and percentages.",
    "numbers:less": "Statistics bore me; keep it qualitative.",
    "questions:more": "Before answering, check with me what I actually need by asking.",
    "questions:less": "Don't quiz me back, just answer.",
    "emphasis:more": "Highlight the crucial words in bold so my eye catches them.",
    "emphasis:less": "Bold everywhere looks like shouting to me; keep the type plain.",
    "paragraphs:more": "Give each idea its own short paragraph with space around it.",
    "paragraphs:less": "Keep it as a single block of text, one paragraph only.",
    "sentence_length:more": "I enjoy long, winding sentences full of subordinate clauses.",
    "sentence_length:less": "Write in short sentences. Five to eight words each.",
    "examples:more": "Whenever you explain a concept, illustrate it with a concrete case.",
    "examples:less": "Spare me the illustrations; the abstract rule is enough.",
    "steps:more": "Lay it out as a numbered sequence of actions I can follow in order.",
    "steps:less": "I don't need a procedure, just the general idea.",
    "formality:more": "Address me as you would in an official letter.",
    "formality:less": "Talk to me like a buddy, slang is fine.",
    "direct_answer:more": "Lead with the answer itself; skip any warm-up.",
    "direct_answer:less": "A friendly opening line before the answer makes me feel welcome.",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("USL_HOME", ".usl"))
    home = Path(parser.parse_args().home)
    encoder = linear_crm.CriteriaEncoder(resolve_backbone("minilm", home / "models" / "backbones"),
                                         128).with_training_bank()
    bank = encoder.bank
    rows = [(family, f"{name}:{direction}", text)
            for name, prop in properties.PROPERTIES.items() for direction in ("more", "less")
            for family, texts in prop.family_phrasings(direction).items() for text in texts]
    rows += [("fresh", direction, text) for direction, text in FRESH.items()]
    readings = bank.read_lines([text for *_, text in rows], encoder.embed_lines)
    table = pd.DataFrame(rows, columns=["family", "direction", "text"])
    table["read_as"] = [bank.directions[int(np.argmax(r))] for r in readings]
    table["right"] = table["read_as"] == table["direction"]
    table["kind"] = np.where(table["family"] == "fresh", "fresh (never used to design)",
                             np.where(table["family"].isin(properties.HELDOUT_FAMILIES), "held-out families",
                                      "train families"))
    print(table.groupby("kind")["right"].agg(["mean", "size"]).round(3).to_string())
    print(table.groupby("family")["right"].mean().round(3).to_string())
    wrong = table[(table["family"] == "fresh") & ~table["right"]]
    print("fresh wordings read wrong:\n" + (wrong[["direction", "read_as", "text"]].to_string(index=False)
                                             if len(wrong) else "none"))


if __name__ == "__main__":
    main()
