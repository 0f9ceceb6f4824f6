"""How fast the page answers a custom leaderboard: new criteria (scored and ranked) and the same again (kept).

Input: the published warehouse of a `make run` ($USL_HOME/published/warehouse.duckdb) and the default CRM, loaded
once as `usl serve` loads them. 20 requests of criteria the page has not seen (each 2–3 lines drawn, seeded, from
the named profiles' criteria, plus a request number so no two are alike) over the pool, then the same 20 again.
Each request is the tab's handler (Page.show_custom: check, score, rank, table, chart) — what a button press
runs on the server, without the browser's round trip. Prints load time and p50/p95 of each.

    .venv/bin/python benchmarks/page_latency.py [--pool alpaca_eval] [--requests 20] [--topics Code,Math]
"""

import argparse
import os
import time

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from usl_assets.page.app import Page  # noqa: E402
from usl_assets.page.data import PageData  # noqa: E402
from usl_assets.resources import Warehouse  # noqa: E402
from usl_assets.settings import usl_home  # noqa: E402


def criteria_sets(data: PageData, n: int, seed: int = 0) -> list[str]:
    lines = sorted({line for criteria in data.profiles.values() for line in criteria}) or ["The answer is short."]
    rng = np.random.default_rng(seed)
    return ["\n".join([*rng.choice(lines, size=min(len(lines), int(rng.integers(2, 4))), replace=False),
                       f"Request {i} of the page benchmark."]) for i in range(n)]


def percentiles(seconds: list[float]) -> str:
    return f"p50 {np.percentile(seconds, 50):.3f} s, p95 {np.percentile(seconds, 95):.3f} s, max {max(seconds):.3f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", default="alpaca_eval")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--topics", default="", help="comma-separated topics (default: none, overall only)")
    args = parser.parse_args()
    started = time.perf_counter()
    data = PageData(Warehouse().published_path(), usl_home())
    print(f"load (CRM + published copy, once per server): {time.perf_counter() - started:.1f} s; "
          f"CRM {data.version}; {len(data.models(args.pool))} models in {args.pool}")
    page = Page(data)
    topics = [t for t in args.topics.split(",") if t]
    groups = [t for t in topics if t in data.groups(args.pool)]
    scenarios = [t for t in topics if t not in groups]
    asked = criteria_sets(data, args.requests)
    timings = {}
    for label in ("uncached", "cached"):
        seconds = []
        for criteria in asked:
            began = time.perf_counter()
            header, table, _, status = page.show_custom(args.pool, groups, scenarios, criteria, "usl",
                                                        progress=lambda *_, **__: None)
            seconds.append(time.perf_counter() - began)
            if status:
                raise SystemExit(f"request failed: {status}")
        timings[label] = seconds
        print(f"{label:>8} ({len(seconds)} requests, {len(table)} models, topics {topics or 'overall only'}): "
              f"{percentiles(seconds)}")


if __name__ == "__main__":
    main()
