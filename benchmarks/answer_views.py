"""What the linear CRM's answer view costs: the relevance features and the view (crm/relevance.py) computed from
one pass over each answer's sentences (`relevance_and_views`, what crm/linear.py does) against two passes
(`relevance_matrix`, then `supported_text` per answer), on Auto-J's responses. Prints answers per second and the
ratio, per repeat (a ratio measured in one run holds under machine load; the rates do not).

With `--drops MODEL ...`: what the view keeps, read on AlpacaEval answers of those pool models (a dev read, no
training input): the share of the real answers' sentences it drops, and of the held-out padding's filler sentences
(crm/gaming.py's `padded`) it drops; chains skip the stems common to Auto-J's responses (as training's are).

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/answer_views.py --drops gemma-2b-it gpt4_1106_preview
"""

import argparse
import json
import os
import time
from pathlib import Path

from usl_assets.crm import gaming, relevance
from usl_assets.responses import pools


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--drops", nargs="+", metavar="MODEL", help="AlpacaEval pool models to read the view on")
    args = parser.parse_args()
    data = Path(os.environ.get("USL_DATA_DIR", "../shared/data"))
    path = data / "preferences" / "autoj_pairwise.jsonl"
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    if args.drops:
        common = relevance.common_stems([r["response 1"] for r in rows] + [r["response 2"] for r in rows])
        print_drops(data, args.drops, args.answers, common)
        return
    rows = rows[:(args.answers + 1) // 2]
    prompts = [row["prompt"] for row in rows] * 2
    answers = [row["response 1"] for row in rows] + [row["response 2"] for row in rows]
    relevance.relevance_and_views(prompts, answers, views=True)  # warm the stop words and the prompts' stems
    for _ in range(args.repeats):
        started = time.perf_counter()
        relevance.relevance_matrix(prompts, answers)
        [relevance.supported_text(p, a) for p, a in zip(prompts, answers)]
        two = time.perf_counter() - started
        started = time.perf_counter()
        relevance.relevance_and_views(prompts, answers, views=True)
        one = time.perf_counter() - started
        print(f"{len(answers):,} answers: two passes {len(answers) / two:,.0f}/s, one pass {len(answers) / one:,.0f}/s, "
              f"ratio {two / one:.2f}")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in relevance._SENTENCE.split(text) if len(relevance.stems(s)) >= 3]


def print_drops(data: Path, models: list[str], answers: int, common: frozenset) -> None:
    filler = set(gaming._FILLER["heldout"])
    for model in models:
        records = pools.read_model_records("alpaca_eval", pools.public_model_files(data, "alpaca_eval")[model])
        real = dropped_real = padding = dropped_padding = 0
        for record in records[:answers]:
            prompt, answer = record["instruction"], str(record["output"])
            view = relevance.supported_text(prompt, answer, common)
            own = _sentences(answer)
            real += len(own)
            dropped_real += sum(sentence not in view for sentence in own)
            padded = gaming.padded(answer, "heldout", 0, "audit", "alpaca_eval", prompt)
            view = relevance.supported_text(prompt, padded, common)
            added = [s for s in _sentences(padded) if s.removeprefix("- ").split(":** ")[-1] in filler]
            padding += len(added)
            dropped_padding += sum(sentence not in view for sentence in added)
        print(f"{model}: {min(answers, len(records))} answers, real sentences dropped {dropped_real / real:.1%} "
              f"({dropped_real}/{real}), filler sentences dropped {dropped_padding / padding:.1%} "
              f"({dropped_padding}/{padding})")


if __name__ == "__main__":
    main()
