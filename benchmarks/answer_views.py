"""What the linear CRM's answer view costs: the relevance features and the view (crm/relevance.py) computed from
one pass over each answer's sentences (`relevance_and_views`, what crm/linear.py does) against two passes
(`relevance_matrix`, then `supported_text` per answer), on Auto-J's responses. Prints answers per second and the
ratio, per repeat (a ratio measured in one run holds under machine load; the rates do not).

    USL_DATA_DIR=../shared/data .venv/bin/python benchmarks/answer_views.py [--answers 1200] [--repeats 3]
"""

import argparse
import json
import os
import time
from pathlib import Path

from usl_assets.crm import relevance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    path = Path(os.environ.get("USL_DATA_DIR", "../shared/data")) / "preferences" / "autoj_pairwise.jsonl"
    with path.open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle][:(args.answers + 1) // 2]
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


if __name__ == "__main__":
    main()
