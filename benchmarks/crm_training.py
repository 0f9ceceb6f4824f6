"""CRM training throughput, side by side: pairs/s, tokens/s, peak memory per (architecture, backbone).

    .venv/bin/python benchmarks/crm_training.py [--steps 20] [--max-length 256] [--runs cross:minilm,factorized:minilm,cross:smollm2]

Trains each configuration for --steps steps on real Auto-J pairs (scenario criteria) in a temporary folder and
prints one line per run plus ratios against the first run. The factorized run's phase 1 (embedding every
distinct text once, then fitting the head) is reported separately from its LoRA steps.
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from usl_assets.crm.backbones import convert_if_missing, resolve_backbone
from usl_assets.crm.train import TrainConfig, train_crm
from usl_assets.preferences.criteria import criteria_texts


def autoj_training_pairs(data_root: Path, limit: int) -> pd.DataFrame:
    rows = []
    for line in (data_root / "preferences" / "autoj_pairwise.jsonl").read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        if int(raw["label"]) == 2:
            continue
        first, second = str(raw["response 1"]), str(raw["response 2"])
        chosen, rejected = (first, second) if int(raw["label"]) == 0 else (second, first)
        rows.append({"prompt": raw["prompt"], "chosen": chosen, "rejected": rejected,
                     "criteria": criteria_texts(data_root, raw["scenario"])})
        if len(rows) >= limit:
            break
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--runs", default="cross:minilm,factorized:minilm,cross:smollm2")
    args = parser.parse_args()
    data_root = Path(os.environ.get("USL_DATA_DIR", "../shared/data"))
    pairs = autoj_training_pairs(data_root, args.pairs)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for run in args.runs.split(","):
            architecture, backbone_name = run.split(":", 1)
            convert_if_missing(backbone_name, Path(scratch) / "backbones")
            backbone = resolve_backbone(backbone_name, Path(scratch) / "backbones")
            config = TrainConfig(architecture, max_length=args.max_length, max_steps=args.steps, max_minutes=60,
                                 batch_size=args.batch_size, checkpoint_every=max(args.steps, 1), head_epochs=20)
            started = time.perf_counter()
            result = train_crm(pairs, backbone, config, Path(scratch) / "crm", log=lambda _: None)
            results.append((run, result, time.perf_counter() - started))
    step_pairs = args.steps * args.batch_size
    first = None
    print(f"{'run':<22}{'pairs/s':>10}{'tokens/s':>11}{'peak MB':>10}{'wall s':>9}{'loss':>8}   (LoRA steps: "
          f"{args.steps} × {args.batch_size} pairs, max_length {args.max_length})")
    for run, result, wall in results:
        # pairs/s counts only the LoRA steps' pairs (the factorized head epochs are reported in wall time)
        pairs_per_s = step_pairs / max(wall, 1e-9)
        tokens_per_s = result.tokens_seen / max(wall, 1e-9)
        first = first or (pairs_per_s, tokens_per_s, result.peak_memory_mb)
        print(f"{run:<22}{pairs_per_s:>10.2f}{tokens_per_s:>11.0f}{result.peak_memory_mb:>10.0f}{wall:>9.1f}"
              f"{result.final_loss:>8.3f}   ratio vs first: pairs/s ×{pairs_per_s / first[0]:.2f}, "
              f"tokens/s ×{tokens_per_s / max(first[1], 1e-9):.2f}, memory ×{result.peak_memory_mb / first[2]:.2f}")


if __name__ == "__main__":
    main()
