"""Trained CRMs as RewardScorers (usl_assets/crm/interface.py); where the checkpoints are: crm/checkpoints.py.

`load_neural_scorer` returns a CrossScorer or a FactorizedScorer (a CachedResponseScorer) for a neural checkpoint;
checkpoints.load_scorer(dir) is the entry point for every architecture (the linear CRM needs no torch).
Adapters are merged into the backbone at load time, so scoring runs the plain model under inference mode,
batched by length with dynamic padding.
"""

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from usl_assets.crm.backbones import Backbone, resolve_backbone
from usl_assets.crm.features import feature_matrix
from usl_assets.crm.interface import ScoreItem
from usl_assets.crm.interface import criteria_text
from usl_assets.crm.model import (FactorizedHead, collate, embed_texts, encode_cross,
                                  load_cross_model, load_encoder)
from usl_assets.crm.checkpoints import checkpoint_backbone
from usl_assets.crm.train import device_and_dtype



def _length_batches(lengths: list[int], batch_size: int) -> Iterator[list[int]]:
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for start in range(0, len(order), batch_size):
        yield order[start:start + batch_size]


def _autocast(device: torch.device, dtype: torch.dtype | None):
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


class CrossScorer:
    architecture = "cross"

    def __init__(self, model, tokenizer, kind: str, max_length: int, checkpoint_id: str):
        self.model, self.tokenizer, self.kind = model.eval(), tokenizer, kind
        self.max_length, self.checkpoint_id = max_length, checkpoint_id
        self.device = next(model.parameters()).device
        self.autocast_dtype = device_and_dtype()[1] if self.device.type == "cuda" else None

    def score(self, items: list[ScoreItem], batch_size: int = 16, progress: bool = False) -> np.ndarray:
        encoded = encode_cross(self.tokenizer, self.kind, items, self.max_length)
        rewards = np.zeros(len(items), dtype=np.float32)
        batches = list(_length_batches([len(e["input_ids"]) for e in encoded], batch_size))
        for batch in tqdm(batches, disable=not progress, desc="scoring", unit="batch"):
            inputs = collate(self.tokenizer, [encoded[i] for i in batch], self.device)
            with torch.inference_mode(), _autocast(self.device, self.autocast_dtype):
                logits = self.model(**inputs).logits[:, 0].float()
            rewards[batch] = logits.cpu().numpy()
        return rewards


class FactorizedScorer:
    architecture = "factorized"

    def __init__(self, encoder, tokenizer, head: FactorizedHead, max_length: int, checkpoint_id: str):
        self.encoder, self.tokenizer, self.head = encoder.eval(), tokenizer, head.eval()
        self.max_length, self.checkpoint_id = max_length, checkpoint_id
        self.device = next(head.parameters()).device
        self.dim = head.dim
        self._rows: dict[tuple[str, str], np.ndarray] = {}  # (prompt, response) -> row, kept across score() calls

    def _embed(self, texts: list[str], max_length: int, batch_size: int) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for batch in _length_batches([len(t) for t in texts], batch_size):
            with torch.inference_mode():
                vectors = embed_texts(self.encoder, self.tokenizer, [texts[i] for i in batch], max_length,
                                      self.device)
            out[batch] = vectors.cpu().numpy()
        return out

    def embed_responses(self, prompts: list[str], responses: list[str], batch_size: int = 32) -> np.ndarray:
        """Rows of [response embedding, query embedding, measured features] (float32)."""
        unique_prompts = sorted(set(prompts))
        prompt_rows = self._embed(unique_prompts, self.max_length // 2, batch_size)
        by_prompt = dict(zip(unique_prompts, prompt_rows))
        query = np.stack([by_prompt[p] for p in prompts]) if prompts else np.zeros((0, self.dim), np.float32)
        response = self._embed(list(responses), self.max_length, batch_size)
        return np.concatenate([response, query, feature_matrix(list(responses))], axis=1).astype(np.float32)

    def embed_criteria(self, criteria: list[tuple[str, ...]]) -> np.ndarray:
        return self._embed([criteria_text(tuple(c)) for c in criteria], self.max_length // 2, 32)

    def score_embedded(self, response_rows: np.ndarray, criteria_row: np.ndarray) -> np.ndarray:
        rows = torch.as_tensor(response_rows, device=self.device)
        crit = torch.as_tensor(criteria_row, device=self.device).reshape(1, -1).expand(len(rows), -1)
        with torch.inference_mode():
            rewards = self.head(rows[:, :self.dim], rows[:, self.dim:2 * self.dim], crit, rows[:, 2 * self.dim:])
        return rewards.float().cpu().numpy()

    def cached_rows(self, prompts: list[str], responses: list[str], batch_size: int = 32) -> np.ndarray:
        """embed_responses, remembering rows in memory so a second criteria profile costs no encoder pass."""
        missing = sorted({(p, r) for p, r in zip(prompts, responses)} - self._rows.keys())
        if missing:
            fresh = self.embed_responses([p for p, _ in missing], [r for _, r in missing], batch_size)
            self._rows.update(zip(missing, fresh))
        if not prompts:
            return np.zeros((0, 2 * self.dim + self.head.n_features), dtype=np.float32)
        return np.stack([self._rows[(p, r)] for p, r in zip(prompts, responses)])

    def score(self, items: list[ScoreItem], batch_size: int = 16, progress: bool = False) -> np.ndarray:
        prompts = [_with_history(item) for item in items]
        rows = self.cached_rows(prompts, [item.response for item in items], batch_size=max(batch_size, 32))
        profiles = sorted({tuple(item.criteria) for item in items})
        criteria_rows = dict(zip(profiles, self.embed_criteria(profiles)))
        rewards = np.zeros(len(items), dtype=np.float32)
        for profile in tqdm(profiles, disable=not progress, desc="criteria profiles"):
            members = [i for i, item in enumerate(items) if tuple(item.criteria) == profile]
            rewards[members] = self.score_embedded(rows[members], criteria_rows[profile])
        return rewards


def _with_history(item: ScoreItem) -> str:
    if not item.history:
        return item.prompt
    return "\n".join(content for _, content in item.history) + "\n" + item.prompt


# ----------------------------------------------------------------------------------------------------------------
# Loading


def load_neural_scorer(folder: Path, info: dict):
    """A CrossScorer or FactorizedScorer for a finished neural checkpoint (checkpoints.load_scorer dispatches)."""
    backbone = checkpoint_backbone(info)
    max_length = int(info["hyperparameters"]["max_length"])
    if info["architecture"] == "cross":
        model, tokenizer = load_merged_cross(folder, backbone)
        return CrossScorer(model, tokenizer, backbone.kind, max_length, info["checkpoint_id"])
    encoder, tokenizer, head = load_factorized_parts(folder, backbone)
    return FactorizedScorer(encoder, tokenizer, head, max_length, info["checkpoint_id"])




def load_merged_cross(folder: Path, backbone: Backbone):
    from peft import PeftModel

    device, _ = device_and_dtype()
    model, _ = load_cross_model(backbone, device, None, seed=0)
    merged = PeftModel.from_pretrained(model, folder / "adapter").merge_and_unload()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    tokenizer.padding_side = "right"
    return merged.eval(), tokenizer


MERGED_ENCODER_DIR = "merged_encoder"


def load_factorized_parts(folder: Path, backbone: Backbone):
    from safetensors.torch import load_file

    device, _ = device_and_dtype()
    encoder, tokenizer = _merged_encoder(folder, backbone, device)
    shape = json.loads((folder / "head.json").read_text(encoding="utf-8"))
    head = FactorizedHead(shape["dim"], shape["n_features"], shape["hidden"])
    head.load_state_dict(load_file(folder / "head.safetensors"))
    return encoder, tokenizer, head.to(device).eval()


def _merged_encoder(folder: Path, backbone: Backbone, device: torch.device):
    """The LoRA-merged encoder, saved once beside the adapter: later loads skip peft (whose import alone takes
    seconds), which is what keeps a custom leaderboard interactive."""
    from transformers import AutoModel

    merged_dir = folder / MERGED_ENCODER_DIR
    if not (merged_dir / "config.json").exists():
        from peft import PeftModel

        encoder, tokenizer = load_encoder(backbone, device, None)
        encoder = PeftModel.from_pretrained(encoder, folder / "adapter").merge_and_unload()
        partial = folder / f"{MERGED_ENCODER_DIR}.partial"
        encoder.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        partial.replace(merged_dir)
    from transformers import AutoTokenizer

    encoder = AutoModel.from_pretrained(merged_dir, add_pooling_layer=False).to(device).eval()
    return encoder, AutoTokenizer.from_pretrained(merged_dir)


def base_scorer(backbone_name: str, backbones_root: Path, max_length: int, seed: int) -> CrossScorer:
    """The backbone with its untrained (seeded) score head: the `base_model` baseline."""
    backbone = resolve_backbone(backbone_name, backbones_root)
    device, _ = device_and_dtype()
    model, tokenizer = load_cross_model(backbone, device, None, seed)
    return CrossScorer(model, tokenizer, backbone.kind, max_length, f"base-{backbone.identity}")



