"""Exports that work without this project.

- cross: adapter merged into the backbone, saved as a plain Hugging Face folder (config, safetensors, tokenizer;
  a decoder's with its chat template) that `AutoModelForSequenceClassification.from_pretrained` loads;
  `usl_crm.json` holds the input format and the truncation rule that reproduce the scores.
- factorized: the merged encoder (`encoder/`), the head (`head.safetensors`, `head.json`), the feature code
  (`usl_features.py`, a copy of crm/features.py), the pooling (`usl_pooling.py`, a copy of
  usl_assets/pooling.py), the head's code (`usl_head.py`, FactorizedHead's source) and `load_factorized.py`, the
  short loader docs/crm.md shows.
- test splits: the paper's JSONL (idx, prompt, model_a, model_b, criteria, preference), one file per split.
"""

import inspect
import json
import shutil
from pathlib import Path

import pandas as pd

from usl_assets import pooling as pooling_module
from usl_assets.crm import features as features_module
from usl_assets.crm.evaluate import TEST_SPLITS, stable_rank
from usl_assets.crm.model import (CRITERIA_INTRO, SYSTEM_PREAMBLE, TRUNCATION_RULE, FactorizedHead, input_budget,
                                  system_message)
from usl_assets.crm.checkpoints import checkpoint_backbone, read_checkpoint_info
from usl_assets.crm.scorer import load_factorized_parts, load_merged_cross

FACTORIZED_LOADER = '''"""Load the exported factorized CRM with torch + transformers only (see docs/crm.md)."""
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from usl_features import feature_matrix
from usl_pooling import mean_pool
from usl_head import FactorizedHead


def load(folder):
    folder = Path(folder)
    shape = json.loads((folder / "head.json").read_text())
    head = FactorizedHead(shape["dim"], shape["n_features"], shape["hidden"])
    head.load_state_dict(load_file(folder / "head.safetensors"))
    encoder = AutoModel.from_pretrained(folder / "encoder").eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "encoder")

    def embed(texts, max_length):
        batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return torch.nn.functional.normalize(mean_pool(encoder(**batch).last_hidden_state, batch["attention_mask"]),
                                             dim=-1)

    @torch.inference_mode()
    def score(prompt, responses, criteria):
        """Rewards of `responses` to `prompt` under `criteria` (a list of lines)."""
        n, half = len(responses), shape["max_length"] // 2
        crit_text = "\\n".join(f"* {c}" for c in criteria) if criteria else "* (no criteria)"
        c = embed([crit_text], half).expand(n, -1)
        q = embed([prompt], half).expand(n, -1)
        r = embed(list(responses), shape["max_length"])
        return head.eval()(r, q, c, torch.as_tensor(feature_matrix(list(responses)))).tolist()

    return score
'''

CROSS_INPUT = {
    "decoder": ("the tokenizer's chat template over [system, earlier turns, user: prompt, assistant: response], "
                "tokenized without adding special tokens"),
    "encoder": ("a text pair, tokenizer(first, response), first = system prompt + '\\n\\n' + earlier turns "
                "(one a line, then '\\n') + prompt; the tokenizer has no chat template"),
}
HEAD_MODULE = '''"""The factorized CRM's head: FactorizedHead from usl_assets/crm/model.py, copied by `usl export-crm`."""
import torch
from torch import nn

from usl_features import FEATURE_NAMES


'''


def export_cross(checkpoint_dir: Path, out_dir: Path) -> Path:
    info = read_checkpoint_info(checkpoint_dir)
    model, tokenizer = load_merged_cross(checkpoint_dir, checkpoint_backbone(info))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.to("cpu").save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    kind, max_length = info["backbone"]["kind"], info["hyperparameters"]["max_length"]
    (out_dir / "usl_crm.json").write_text(json.dumps({
        "checkpoint_id": info["checkpoint_id"],
        "backbone": info["backbone"]["identity"],
        "kind": kind,
        "max_length": max_length,
        "system_prompt": f"{SYSTEM_PREAMBLE} {CRITERIA_INTRO}\n* <criterion>\n* <criterion>",
        "system_prompt_without_criteria": system_message(()),
        "input": CROSS_INPUT[kind],
        "truncation": {"rule": TRUNCATION_RULE, "max_tokens": input_budget(max_length)},
        "reward": "logits[:, 0]; only differences under the same criteria mean anything",
    }, indent=2), encoding="utf-8")
    return out_dir


def export_factorized(checkpoint_dir: Path, out_dir: Path) -> Path:
    info = read_checkpoint_info(checkpoint_dir)
    encoder, tokenizer, _ = load_factorized_parts(checkpoint_dir, checkpoint_backbone(info))
    out_dir.mkdir(parents=True, exist_ok=True)
    encoder.to("cpu").save_pretrained(out_dir / "encoder")
    tokenizer.save_pretrained(out_dir / "encoder")
    for name in ("head.safetensors", "head.json"):
        shutil.copyfile(checkpoint_dir / name, out_dir / name)
    shutil.copyfile(features_module.__file__, out_dir / "usl_features.py")
    shutil.copyfile(pooling_module.__file__, out_dir / "usl_pooling.py")
    (out_dir / "usl_head.py").write_text(HEAD_MODULE + inspect.getsource(FactorizedHead), encoding="utf-8")
    (out_dir / "load_factorized.py").write_text(FACTORIZED_LOADER, encoding="utf-8")
    return out_dir


def paper_rows(pairs: pd.DataFrame, seed: int = 0) -> list[dict]:
    """The paper's test format; the chosen side is put at model_a or model_b by a seeded hash of pair_id."""
    rows = []
    for row in pairs.itertuples(index=False):
        chosen_first = stable_rank(str(row.pair_id), seed) % 2 == 0
        a, b = (row.chosen, row.rejected) if chosen_first else (row.rejected, row.chosen)
        rows.append({
            "idx": str(row.pair_id),
            "prompt": str(row.prompt),
            "model_a": [{"role": "user", "content": str(row.prompt)}, {"role": "assistant", "content": str(a)}],
            "model_b": [{"role": "user", "content": str(row.prompt)}, {"role": "assistant", "content": str(b)}],
            "criteria": [str(c) for c in row.criteria],
            "preference": "model_a" if chosen_first else "model_b",
        })
    return rows


def export_test_splits(pairs: pd.DataFrame, out_dir: Path) -> dict[str, int]:
    """One JSONL per test split under out_dir/test_splits/; returns rows written per split."""
    target = out_dir / "test_splits"
    target.mkdir(parents=True, exist_ok=True)
    written = {}
    for split in TEST_SPLITS:
        rows = paper_rows(pairs[pairs["split"] == split])
        with open(target / f"{split}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        written[split] = len(rows)
    return written
