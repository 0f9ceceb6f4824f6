"""The linear CRM's criteria encoder without torch: a BERT-family backbone (MiniLM, the default) run in NumPy, so
`usl leaderboard --criteria …` and the page embed a new criterion in milliseconds after loading no deep-learning
library (importing torch and transformers and loading the model through them cost most of the command's seconds).

It computes what model.embed_texts computes with transformers' BertModel (eval mode): the tokenizer's own
`tokenizer.json` through the `tokenizers` library (truncation to max_length, [CLS] … [SEP]), word + position +
token-type embeddings, LayerNorm, then per layer multi-head self-attention over the real tokens, the dense output
with its residual LayerNorm, the GELU (erf) feed-forward with its residual LayerNorm; mean pooling over the real
tokens and L2 normalization. Float32 throughout; it agrees with the torch encoder to about 1e-6 per coordinate
(usl_assets_tests/test_crm_numpy_encoder.py). Other backbones (decoders) keep the torch encoder (linear_crm.CriteriaEncoder).
"""

import functools
import json
from pathlib import Path

import numpy as np

SUPPORTED_MODEL_TYPES = ("bert",)
# In the linear checkpoint's id (linear_crm.linear_fit_key): its criteria vectors come from this encoder where the
# backbone is supported, so a checkpoint trained through torch is not taken for one trained through NumPy.
VERSION = "numpy-bert-2"


def supports(folder: Path) -> bool:
    """Whether `folder` holds a backbone this encoder runs: a BERT config, safetensors weights, a tokenizer.json."""
    config = folder / "config.json"
    if not (config.exists() and (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()):
        return False
    settings = json.loads(config.read_text(encoding="utf-8"))
    return settings.get("model_type") in SUPPORTED_MODEL_TYPES and settings.get("hidden_act") == "gelu" and \
        settings.get("position_embedding_type", "absolute") == "absolute"


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.float32(np.sqrt(2.0)))).astype(np.float32)


@functools.cache
def _backbone_weights(folder: str) -> dict[str, np.ndarray]:
    """A backbone's weights (names without "bert."), read once per process: the criteria encoder and the wish
    reader's (crm/wish_reader.py, which replaces its tuned layers in its own copy of the dict) share the arrays."""
    from safetensors.numpy import load_file

    weights = {name.removeprefix("bert."): value
               for name, value in load_file(Path(folder) / "model.safetensors").items()}
    for value in weights.values():
        value.flags.writeable = False  # shared: no encoder may change another's
    return weights


class NumpyBertEncoder:
    """embed(texts) -> L2-normalized mean-pooled embeddings (float32), as model.embed_texts."""

    def __init__(self, folder: Path, max_length: int, replaced: dict[str, np.ndarray] | None = None):
        """replaced: weights (by name, without "bert.") that stand in for the folder's (a fine-tuned layer's)."""
        from tokenizers import Tokenizer

        self.config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
        self.weights = dict(_backbone_weights(str(Path(folder).resolve())))
        if unknown := set(replaced or {}) - self.weights.keys():
            raise ValueError(f"{folder} has no weights named {sorted(unknown)[:3]}")
        self.weights.update({name: np.asarray(value, np.float32) for name, value in (replaced or {}).items()})
        self.tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.no_padding()
        self.max_length = max_length
        self._transposed: dict[str, np.ndarray] = {}

    def _w(self, name: str) -> np.ndarray:
        return self.weights[name]

    def _linear(self, x: np.ndarray, prefix: str) -> np.ndarray:
        """x @ W.T + b over the last axis, as one 2-D product with W.T stored contiguous (several times faster)."""
        if prefix not in self._transposed:
            self._transposed[prefix] = np.ascontiguousarray(self._w(f"{prefix}.weight").T)
        weight = self._transposed[prefix]
        flat = np.ascontiguousarray(x).reshape(-1, x.shape[-1]) @ weight + self._w(f"{prefix}.bias")
        return flat.reshape(*x.shape[:-1], weight.shape[1])

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Texts in batches of similar length (padding masked out of attention and pooling), in input order."""
        if not texts:
            return np.zeros((0, self.config["hidden_size"]), np.float32)
        encodings = [encoding.ids for encoding in self.tokenizer.encode_batch(list(texts))]
        order = np.argsort([len(ids) for ids in encodings], kind="stable")
        out = np.zeros((len(texts), self.config["hidden_size"]), np.float32)
        for start in range(0, len(order), batch_size):
            members = order[start:start + batch_size]
            out[members] = self._embed_batch([encodings[i] for i in members])
        return out

    def _embed_batch(self, batch: list[list[int]]) -> np.ndarray:
        eps = float(self.config["layer_norm_eps"])
        heads = int(self.config["num_attention_heads"])
        width = max(len(ids) for ids in batch)
        ids = np.zeros((len(batch), width), np.int64)
        mask = np.zeros((len(batch), width), np.float32)
        for row, tokens in enumerate(batch):
            ids[row, :len(tokens)], mask[row, :len(tokens)] = tokens, 1.0
        x = (self._w("embeddings.word_embeddings.weight")[ids]
             + self._w("embeddings.position_embeddings.weight")[np.arange(width)][None]
             + self._w("embeddings.token_type_embeddings.weight")[0])
        x = _layer_norm(x, self._w("embeddings.LayerNorm.weight"), self._w("embeddings.LayerNorm.bias"), eps)
        n, size = len(batch), x.shape[-1] // heads
        padding = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]  # as transformers masks keys
        for layer in range(int(self.config["num_hidden_layers"])):
            prefix = f"encoder.layer.{layer}"
            q, k, v = (self._linear(x, f"{prefix}.attention.self.{name}").reshape(n, width, heads, size)
                       .transpose(0, 2, 1, 3) for name in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(size)) + padding
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            context = (scores / scores.sum(-1, keepdims=True)) @ v
            attended = self._linear(context.transpose(0, 2, 1, 3).reshape(n, width, -1),
                                    f"{prefix}.attention.output.dense")
            x = _layer_norm(attended + x, self._w(f"{prefix}.attention.output.LayerNorm.weight"),
                            self._w(f"{prefix}.attention.output.LayerNorm.bias"), eps)
            hidden = _gelu(self._linear(x, f"{prefix}.intermediate.dense"))
            x = _layer_norm(self._linear(hidden, f"{prefix}.output.dense") + x,
                            self._w(f"{prefix}.output.LayerNorm.weight"), self._w(f"{prefix}.output.LayerNorm.bias"),
                            eps)
        pooled = (x * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return (pooled / norms).astype(np.float32)
