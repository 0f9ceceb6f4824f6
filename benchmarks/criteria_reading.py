"""How the linear CRM reads criteria wordings, by the prototype bank alone and with the property words first: the
share of phrasings whose strongest reading is the property direction they mean, per family of crm/property_phrasings.yaml (train families, whose phrasings are in the
bank, and held-out ones), and on FRESH: one wording per direction written after the reading's rules were designed
(clauses, dislikes). FRESH and the blind sets were first measured untouched; run 32 designed the complaint and list
rules on their failures, so since then they are dev wordings and only the held-out families test (docs/crm.md);
run 33 did the same with blind3 and kept blind4 unread for its first measure. The listing of wrong readings at
the end leaves out the sets named in USL_UNREAD_SETS (e.g. blind4), so a set can be measured without being read.

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/criteria_reading.py [--home .usl]

Needs the MiniLM backbone only (no warehouse); about a minute on 2 cores.
"""

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

import yaml

from usl_assets.crm import criteria_prototypes, criteria_vocabulary, linear_crm, properties, wish_reader
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


# Wordings written by someone who had not seen how USL reads criteria (a helper told not to open the repository),
# from the properties' one-line definitions: 6 per direction, in 6 styles. `outside`, 2026-12-05, was read by the
# author of crm/criteria_vocabulary.py before writing it; `blind` was written by a second helper that saw neither the
# code nor the other wordings, and was not read by that author before its first measure here, on the rules of
# 1f2911d (bank 0.708, bank + words 0.819 of 144); `blind2`, a third helper's written the same way, first measured
# on 4961023; `blind3`, a fourth helper's, 8 styles per direction (terse, long context, non-native, complaint,
# specification, description, polite question, idiom), first measured on b950053 (0.786) and dev since run 33;
# `blind4`, a fifth helper's, 6 styles (complaint, first-person complaint, idiom, polite request, taste, long
# context), written the same day and not read by the author of run 33's rules before its first measure, on run 33
# (dev since run 34). Since run 34 all five are what the wish reader is fitted on (crm/wish_wordings/), so their
# shares here are fit, not test. `blind5`, a sixth helper's, 8 styles (rhetorical question, first-person complaint,
# complaint about the assistant, idiom, contrast, negation only, conditional, reported need): first measured on run
# 33's code (0.599), before the reader existed; `blind6`, a seventh helper's, 8 styles (complaint, rhetorical
# question, feeling, workplace context, analogy, short imperative, "I wish", mixed wish and reason): 0.693 on run
# 33's code, 0.760 on the reader, 0.786 with the rhetorical-question rule designed on blind5. Since run 35 both are
# fitted on too. `blind7`, an eighth helper's, 8 styles (praise of the opposite, question to the assistant, sarcasm,
# audience, comparison, hedged, negative rule, situation then wish), stays here, out of the reader's and the rules'
# reach and unread: 0.807 on run 34's code, 0.823 on run 35's.
FITTED_SETS = ("outside", "blind", "blind2", "blind3", "blind4", "blind5", "blind6")  # in crm/wish_wordings/
UNSEEN_SET = "blind7"
OUTSIDE = {path.stem.removeprefix("criteria_wordings_"): path
           for path in (*(wish_reader.WORDINGS_DIR / f"{name}.yaml" for name in FITTED_SETS),
                        Path(__file__).with_name(f"criteria_wordings_{UNSEEN_SET}.yaml"))
           if path.stem.removeprefix("criteria_wordings_") in os.environ.get(
               "USL_OUTSIDE_SETS", ",".join([*FITTED_SETS, UNSEEN_SET])).split(",")}
STYLES = {"blind3": ("terse", "long context", "non-native", "complaint", "specification", "description",
                     "polite question", "idiom"),
          "blind4": ("complaint", "first-person complaint", "idiom", "polite request", "taste", "long context"),
          "blind5": ("rhetorical question", "first-person complaint", "complaint", "idiom", "contrast",
                     "negation only", "conditional", "reported need"),
          "blind6": ("complaint", "rhetorical question", "feeling", "workplace context", "analogy", "short imperative",
                     "I wish", "mixed wish and reason"),
          "blind7": ("praise of the opposite", "question to the assistant", "sarcasm", "audience", "comparison",
                     "hedged", "negative rule", "situation then wish")}
MIN_READING = 0.5  # of criteria_prototypes.SCALE's 4: a weaker strongest reading is read as nothing


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
    for name, path in OUTSIDE.items():
        wordings = yaml.safe_load(path.read_text(encoding="utf-8"))
        rows += [(name, direction, text) for direction, texts in wordings.items() for text in texts]
    table = pd.DataFrame(rows, columns=["family", "direction", "text"])
    for reader, vocabulary in (("bank", False), ("bank+words", True)):
        criteria_prototypes.VOCABULARY = vocabulary
        readings = bank.read_lines(list(table["text"]), encoder.embed_lines)
        table[f"read_as_{reader}"] = [bank.directions[int(np.argmax(r))] if r.max() >= MIN_READING else "nothing"
                                      for r in readings]
        table[reader] = table[f"read_as_{reader}"] == table["direction"]
    table["kind"] = np.select([table["family"] == "fresh",
                               table["family"].isin(FITTED_SETS), table["family"] == UNSEEN_SET,
                               table["family"].isin(properties.HELDOUT_FAMILIES)],
                              ["fresh (dev since run 32)", "the wish reader's wordings (fitted on since run 34)",
                               f"{UNSEEN_SET} (kept out of everything and unread; first measured on run 34's code)",
                               "held-out families"], "train families")
    print("share read as the direction they mean (a reading under MIN_READING counts as nothing):")
    print(table.groupby("kind")[["bank", "bank+words"]].agg(["mean", "size"]).round(3).to_string())
    print(table.groupby("family")[["bank", "bank+words"]].mean().round(3).to_string())
    for name, styles in STYLES.items():  # these sets list their styles in one order under every direction
        styled = table[table["family"] == name]
        if len(styled):
            by_style = styled.groupby(styled.groupby("direction").cumcount().map(dict(enumerate(styles))))
            print(f"{name} by style:\n" + by_style[["bank", "bank+words"]].mean().round(3).to_string())
    named = [criteria_vocabulary.read(text) for text in table["text"]]
    table["words_alone"] = ["none" if not reading else "right" if reading.get(direction, 0) == max(reading.values())
                            else "other" for reading, direction in zip(named, table["direction"])]
    print("the words alone (crm/criteria_vocabulary.read of the whole line; 'none': the bank reads it):")
    print(table.groupby(["kind", "words_alone"]).size().unstack(fill_value=0).to_string())
    unread = os.environ.get("USL_UNREAD_SETS", "").split(",")
    wrong = table[~table["family"].isin([*properties.TRAIN_FAMILIES, *unread]) & ~table["bank+words"]]
    with pd.option_context("display.max_colwidth", 90, "display.width", 250):
        print("held-out, fresh and outside wordings bank+words reads wrong:\n"
              + (wrong[["direction", "read_as_bank+words", "text"]].to_string(index=False) if len(wrong) else "none"))


if __name__ == "__main__":
    main()
