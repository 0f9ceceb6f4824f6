"""Scoring speed, printed as figures (never asserted).

1. throughput: the CRM's batched scorer (length-sorted, dynamic padding, inference mode) against the paper's
   evaluation loop (batch size 1; chosen and rejected in separate forward passes) on the same backbone, the same
   real Auto-J pairs and the same token ids; prints pairs/s of both, the ratio, and the max |difference| of the
   scores (batching must not change them).
2. adhoc: `score_adhoc_profile` latency over the AlpacaEval pool with the factorized CRM: nothing cached (every
   response embedded), new criteria over cached embeddings (the custom-leaderboard case), and fully cached.

    .venv/bin/python benchmarks/scoring_throughput.py --part throughput --backbone smollm2 --pairs 32
    .venv/bin/python benchmarks/scoring_throughput.py --part adhoc --models 27

USL_DATA_DIR must point at the public data. The adhoc part writes a scratch warehouse in a temporary folder; the
backbones (smollm2 is converted once) and, when none is given, a small factorized CRM trained for the benchmark go
under --usl-home (default $USL_HOME or .usl).
"""

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from usl_assets.crm.backbones import convert_if_missing, resolve_backbone
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.model import collate, encode_cross
from usl_assets.crm.checkpoints import default_checkpoint
from usl_assets.crm.checkpoints import load_scorer
from usl_assets.crm.scorer import base_scorer
from usl_assets.preferences.criteria import criteria_texts
from usl_assets.resources import Warehouse
from usl_assets.scoring.score import score_adhoc_profile
from usl_assets.settings import UslConfigError, data_dir, usl_home

torch.manual_seed(0)


def autoj_pairs(data_root: Path, n: int) -> list[tuple[ScoreItem, ScoreItem]]:
    """(chosen, rejected) items of the first n non-tie Auto-J pairs, under their scenario's criteria."""
    pairs = []
    with open(data_root / "preferences" / "autoj_pairwise.jsonl", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if str(row["label"]) not in ("0", "1") or len(pairs) >= n:
                continue
            criteria = tuple(criteria_texts(data_root, row["scenario"]))
            first, second = str(row["response 1"]), str(row["response 2"])
            chosen, rejected = (first, second) if str(row["label"]) == "0" else (second, first)
            pairs.append((ScoreItem(row["prompt"], chosen, criteria), ScoreItem(row["prompt"], rejected, criteria)))
    return pairs


def paper_loop(scorer, pairs: list[tuple[ScoreItem, ScoreItem]]) -> np.ndarray:
    """The paper's evaluation: one pair at a time, chosen then rejected, each its own forward pass."""
    rewards = []
    with torch.inference_mode():
        for chosen, rejected in pairs:
            for item in (chosen, rejected):
                encoded = encode_cross(scorer.tokenizer, scorer.kind, [item], scorer.max_length)
                logits = scorer.model(**collate(scorer.tokenizer, encoded, scorer.device)).logits
                rewards.append(float(logits[0, 0]))
    return np.asarray(rewards)


def throughput(args: argparse.Namespace, data_root: Path, home: Path) -> None:
    if args.checkpoint:
        scorer = load_scorer(args.checkpoint)
    else:
        convert_if_missing(args.backbone, home / "models" / "backbones")
        scorer = base_scorer(args.backbone, home / "models" / "backbones", args.max_length, seed=0)
    if args.float32:
        scorer.model.float()
    pairs = autoj_pairs(data_root, args.pairs)
    items = [item for pair in pairs for item in pair]
    scorer.score(items[:4], batch_size=4)  # warm-up: first-call allocations are not what we measure

    started = time.perf_counter()
    unbatched = paper_loop(scorer, pairs)
    paper_s = time.perf_counter() - started
    started = time.perf_counter()
    batched = scorer.score(items, batch_size=args.batch_size)
    batched_s = time.perf_counter() - started

    print(f"backbone {args.checkpoint or args.backbone} ({scorer.kind}, {scorer.model.dtype}), "
          f"max_length {scorer.max_length}, "
          f"{len(pairs)} Auto-J pairs, torch threads {torch.get_num_threads()}, device {scorer.device}")
    print(f"paper loop (batch 1, chosen/rejected separately): {len(pairs) / paper_s:8.2f} pairs/s ({paper_s:.1f} s)")
    print(f"batched scorer (batch {args.batch_size}, length-sorted):    {len(pairs) / batched_s:8.2f} pairs/s "
          f"({batched_s:.1f} s)")
    print(f"throughput ratio batched / paper: {paper_s / batched_s:.2f}x")
    print(f"max |score difference|: {np.abs(unbatched - batched).max():.2e} over {len(items)} responses")
    agree = np.mean((unbatched[0::2] > unbatched[1::2]) == (batched[0::2] > batched[1::2]))
    print(f"pairwise decisions identical: {agree:.1%}")


def alpaca_pool(data_root: Path, n_models: int) -> pd.DataFrame:
    """responses.responses rows (contract columns) for the first n_models AlpacaEval models, every prompt."""
    rows = []
    for path in sorted((data_root / "responses" / "alpaca_eval").glob("*.json.gz"))[:n_models]:
        model = path.name.removesuffix(".json.gz")
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for index, output in enumerate(json.load(handle)):
                rows.append({"pool": "alpaca_eval", "prompt_id": f"{index:04d}", "prompt": output["instruction"],
                             "model": model, "response": str(output["output"]), "scenario": None,
                             "scenario_group": None, "category": output["dataset"],
                             "length_chars": len(str(output["output"])), "response_hash": ""})
    return pd.DataFrame(rows)


def factorized_checkpoint(args: argparse.Namespace, data_root: Path, home: Path) -> Path:
    if args.factorized_checkpoint:
        return Path(args.factorized_checkpoint)
    try:
        return default_checkpoint(home, "factorized")
    except UslConfigError:
        pass
    from usl_assets.crm.train import TrainConfig, train_crm

    print("no factorized CRM under --usl-home: training a small MiniLM one (latency does not depend on accuracy)")
    pairs = pd.DataFrame([{"prompt": c.prompt, "chosen": c.response, "rejected": r.response,
                           "criteria": list(c.criteria)} for c, r in autoj_pairs(data_root, 64)])
    config = TrainConfig(architecture="factorized", max_length=args.max_length, max_steps=4, head_epochs=5)
    backbone = resolve_backbone("minilm", home / "models" / "backbones")
    return train_crm(pairs, backbone, config, home / "models" / "crm", log=lambda _: None).checkpoint_dir


def adhoc(args: argparse.Namespace, data_root: Path, home: Path) -> None:
    checkpoint = factorized_checkpoint(args, data_root, home)
    with tempfile.TemporaryDirectory() as scratch:
        warehouse = Warehouse(path=str(Path(scratch) / "warehouse.duckdb"))
        pool = alpaca_pool(data_root, args.models)
        warehouse.replace_table("responses.responses", pool)
        print(f"factorized CRM {checkpoint.name}; AlpacaEval pool: {pool['model'].nunique()} models × "
              f"{pool['prompt_id'].nunique()} prompts = {len(pool):,} responses")
        runs = [("nothing cached (embeds every response)", ["Answers are short and direct."]),
                ("cached embeddings, new criteria", ["Uses vivid, concrete examples.", "Avoids jargon."]),
                ("everything cached (same criteria again)", ["Uses vivid, concrete examples.", "Avoids jargon."])]
        for label, criteria in runs:
            started = time.perf_counter()
            rewards = score_adhoc_profile(warehouse, home, "alpaca_eval", criteria, batch_size=args.batch_size,
                                          checkpoint=str(checkpoint), progress=args.progress)
            seconds = time.perf_counter() - started
            stats = rewards.attrs["stats"]
            print(f"{label:<42} {seconds:8.2f} s  ({len(rewards):,} rewards, {stats.embedded:,} embedded, "
                  f"{stats.scored:,} scored, {stats.cache_hits:,} from cache)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["throughput", "adhoc", "both"], default="both")
    parser.add_argument("--backbone", default="smollm2", help="smollm2, minilm or a local model folder")
    parser.add_argument("--checkpoint", default="", help="a cross CRM checkpoint instead of a bare backbone")
    parser.add_argument("--factorized-checkpoint", default="")
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--float32", action="store_true", help="run the backbone in float32 (smollm2 is stored "
                        "in bf16, whose rounding depends on the batch shape)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--models", type=int, default=27, help="AlpacaEval models in the ad hoc pool")
    parser.add_argument("--usl-home", default="")
    parser.add_argument("--progress", action="store_true")
    args = parser.parse_args()
    data_root, home = data_dir(), usl_home(args.usl_home)
    if args.part in ("throughput", "both"):
        throughput(args, data_root, home)
    if args.part in ("adhoc", "both"):
        adhoc(args, data_root, home)


if __name__ == "__main__":
    main()
