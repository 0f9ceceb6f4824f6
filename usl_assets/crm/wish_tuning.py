"""The wish reader's own encoder (crm/wish_reader.py): the backbone with its upper layers fine-tuned to tell the
property directions of wishes apart, started from the reader's logistic regression (a linear probe, then fine-tuning:
"LP-FT", which keeps what the probe reads while the layers learn).

Why: the reader's logistic regression reads a mean-pooled sentence embedding of the frozen backbone, which keeps
which property a wish is about far better than which way it goes ("never show the code" sits next to "show the
code"). Of the wordings it got wrong on the sets it was not fitted on, half were the right property the wrong way
(docs/crm.md, run 38). Leaving each of the seven wording sets out in turn (1,124 wordings), the logistic regression
labels 0.862 of them right; on the same embedding with max or [CLS] pooling added, 0.868 and 0.867; MiniLM fine-tuned
from a fresh head for 4 epochs, 0.835 (underfit); fine-tuned from the probe, as here, 0.895, better on each of the
seven sets (docs/crm.md, run 39).

Deterministic: seeded, a fixed number of steps and threads; the same wordings and backbone give the same weights.
So a fit is kept by the hash of what it was fitted on (backbone, wordings, settings, the probe) in memory and in
CACHE_DIR, as a wheel or a downloaded model is: it takes a minute on 2 quiet cores and several beside other work,
and every CRM training on the same wordings (a rerun, the tests' many) reads it instead.
"""

import hashlib
import os
import time
from pathlib import Path

import numpy as np

TUNED_FROM = 2  # the layers below stay frozen; the reader's encoder shares them with the criteria encoder
EPOCHS = 3
BATCH = 16
LEARNING_RATE = 2e-5
WARMUP_STEPS = 30
WEIGHT_DECAY = 0.01
LOGIT_SCALE = 20.0  # the head reads the L2-normalized embedding times this (the probe's weights divided by it)
MAX_LENGTH = 128
THREADS = 2  # fixed, so the sums' order (and the weights) do not depend on the machine's cores
SEED = 0
SETTINGS = {"tuned_from": TUNED_FROM, "epochs": EPOCHS, "batch": BATCH, "learning_rate": LEARNING_RATE,
            "warmup_steps": WARMUP_STEPS, "weight_decay": WEIGHT_DECAY, "logit_scale": LOGIT_SCALE,
            "max_length": MAX_LENGTH, "threads": THREADS, "seed": SEED}
TUNED_PREFIX = "encoder.layer."
HEAD_KEYS = ("head.coef", "head.intercept")
CACHE_DIR = Path(os.environ.get("USL_CACHE_DIR", Path.home() / ".cache" / "usl")) / "wish_reader"
_FITTED: dict[str, tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]] = {}


def tuned_layer(name: str) -> bool:
    """Whether a backbone weight (NumpyBertEncoder's names) is one of the fine-tuned layers'."""
    return name.startswith(TUNED_PREFIX) and int(name.split(".")[2]) >= TUNED_FROM


def _key(folder, labels: list[str], texts: list[str], coef: np.ndarray, intercept: np.ndarray) -> str:
    digest = hashlib.sha256(repr([str(folder), SETTINGS, labels, texts]).encode())
    digest.update(np.ascontiguousarray(coef, np.float64).tobytes())
    digest.update(np.ascontiguousarray(intercept, np.float64).tobytes())
    return digest.hexdigest()


def tune(folder, directions: list[str], labels: list[str], texts: list[str], coef: np.ndarray,
         intercept: np.ndarray, log=print) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Fine-tune the BERT backbone in `folder` from layer TUNED_FROM up, with a head started from the probe
    (`coef`, `intercept`: directions × embedding, directions) on the wordings `texts` labelled `labels`.
    Returns (the tuned layers' weights by NumpyBertEncoder's names, the head's coef and intercept, scaled so that
    the reader's logits are embedding @ coef.T + intercept)."""
    key = _key(folder, labels, texts, coef, intercept)
    if key not in _FITTED:
        _FITTED[key] = _read(key) or _write(key, _tune(folder, directions, labels, texts, coef, intercept, log), log)
    weights, coef, intercept = _FITTED[key]
    return dict(weights), coef.copy(), intercept.copy()


def _read(key: str):
    from safetensors.numpy import load_file

    path = CACHE_DIR / f"{key}.safetensors"
    if not path.exists():
        return None
    arrays = load_file(path)
    coef, intercept = (arrays.pop(name) for name in HEAD_KEYS)
    return arrays, coef, intercept


def _write(key: str, fitted, log):
    """Keep a fit in CACHE_DIR (written aside, then renamed: a reader never sees half a file); where it cannot be
    written, say so once and go on."""
    from safetensors.numpy import save_file

    weights, coef, intercept = fitted
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        partial = CACHE_DIR / f"{key}.{os.getpid()}.partial"
        save_file({**weights, HEAD_KEYS[0]: coef, HEAD_KEYS[1]: intercept}, partial)
        os.replace(partial, CACHE_DIR / f"{key}.safetensors")
    except OSError as error:
        log(f"wish reader: the fine-tuned layers are not kept for the next training ({error})")
    return fitted


def _tune(folder, directions, labels, texts, coef, intercept, log):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from usl_assets.crm.model import embed_texts

    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            tokenizer = AutoTokenizer.from_pretrained(folder)
            encoder = AutoModel.from_pretrained(folder, add_pooling_layer=False)
            for name, parameter in encoder.named_parameters():
                parameter.requires_grad = tuned_layer(name)
            head = torch.nn.Linear(coef.shape[1], len(directions))
            with torch.no_grad():
                head.weight.copy_(torch.tensor(np.asarray(coef) / LOGIT_SCALE, dtype=torch.float32))
                head.bias.copy_(torch.tensor(np.asarray(intercept), dtype=torch.float32))
            trained = [p for p in encoder.parameters() if p.requires_grad] + list(head.parameters())
            optimizer = torch.optim.AdamW(trained, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
            per_epoch = len(texts) // BATCH
            steps = EPOCHS * per_epoch
            schedule = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: min(1.0, (step + 1) / WARMUP_STEPS) * max(0.0, 1.0 - step / steps))
            targets = torch.tensor([directions.index(label) for label in labels])
            order_rng = np.random.default_rng(SEED)
            started, step = time.perf_counter(), 0
            encoder.train()
            for epoch in range(EPOCHS):
                order = order_rng.permutation(len(texts))
                for start in range(0, per_epoch * BATCH, BATCH):
                    batch = order[start:start + BATCH]
                    pooled = embed_texts(encoder, tokenizer, [texts[i] for i in batch], MAX_LENGTH,
                                         torch.device("cpu"))
                    loss = torch.nn.functional.cross_entropy(head(LOGIT_SCALE * pooled), targets[batch])
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    schedule.step()
                    step += 1
                log(f"wish reader: fine-tuned epoch {epoch + 1}/{EPOCHS} ({step}/{steps} steps of {BATCH} "
                    f"wordings, loss {loss.item():.3f}, {time.perf_counter() - started:.0f} s)")
    finally:
        torch.set_num_threads(threads)
    weights = {name: tensor.detach().numpy().copy() for name, tensor in encoder.state_dict().items()
               if tuned_layer(name)}
    return (weights, LOGIT_SCALE * head.weight.detach().double().numpy(),
            head.bias.detach().double().numpy())
