"""Training and scoring the linear CRM (crm/linear.py): its checkpoint folder, its length-only twin, and the
CachedResponseScorer that scoring and the leaderboards use.

A checkpoint folder holds `crm.json` (written by train.train_crm), `linear.safetensors` + `linear.json` (the
reward), `length_only/` (the same fit restricted to the length features: the baseline that shows what the CRM
adds beyond length) and nothing else: the criteria encoder is the frozen backbone named in crm.json.
"""

import time
from pathlib import Path

import numpy as np
import pandas as pd

from usl_assets.crm import linear, linear_rows, linear_weights, relevance
from usl_assets.crm import criteria_prototypes, wish_reader
from usl_assets.crm.backbones import Backbone
from usl_assets.crm.criteria_prototypes import PrototypeBank
from usl_assets.crm.wish_reader import WishReader
from usl_assets.crm.graded_answers import GradedAnswers
from usl_assets.crm.interface import NEUTRAL_CRITERIA, ScoreItem, criteria_text
from usl_assets.crm import numpy_encoder
from usl_assets.crm.numpy_encoder import NumpyBertEncoder, supports

LENGTH_ONLY_DIR = "length_only"


class CriteriaEncoder:
    """The frozen backbone as a criteria embedder (mean pooling, L2 norm), with an in-memory cache; with a
    prototype bank, each profile's vector also carries its reading (crm/criteria_prototypes.py). A BERT backbone
    (MiniLM, the default) runs in NumPy (crm/numpy_encoder.py: no torch is loaded), any other through torch."""

    def __init__(self, backbone: Backbone, max_length: int, bank: PrototypeBank | None = None):
        self.numpy = NumpyBertEncoder(Path(backbone.path), max_length) if supports(Path(backbone.path)) else None
        if self.numpy is None:
            import torch

            from usl_assets.crm.model import load_encoder

            with torch.random.fork_rng(devices=[]):  # seeded load, the caller's RNG untouched
                torch.manual_seed(0)
                self.encoder, self.tokenizer = load_encoder(backbone, torch.device("cpu"), None)
            self.encoder.eval()
        self.max_length = max_length
        self.backbone_path = Path(backbone.path)
        self.bank = bank
        self._cache: dict[str, np.ndarray] = {}
        if bank is not None and bank.texts is not None:  # its phrasings, embedded when it was built
            self._cache.update(zip(bank.texts, bank.vectors))
        if bank is not None and bank.reader is not None:
            bank.reader.attach(backbone.path)

    def with_training_bank(self, log=print) -> "CriteriaEncoder":
        """Build the prototype bank from the training phrasings and fit the wish reader on them and the wording
        sets (crm/wish_reader.py), each line embedded once; on a BERT backbone (run in NumPy) the reader's own
        encoder is fine-tuned too (crm/wish_tuning.py)."""
        labels, texts = criteria_prototypes.bank_phrasings()
        reader_labels, reader_texts = wish_reader.fitted_on(labels, texts)
        vectors = self.embed_lines(list(dict.fromkeys([*texts, *reader_texts])))
        self.bank = PrototypeBank(labels, np.stack([vectors[text] for text in texts]),
                                  [criteria_prototypes.negated(text) for text in texts], list(texts))
        self.bank.reader = WishReader.fit(self.bank.directions, reader_labels,
                                          np.stack([vectors[text] for text in reader_texts]), reader_texts,
                                          self.backbone_path if self.numpy is not None else None, log)
        return self

    def embed_lines(self, lines: list[str], batch_size: int = 32) -> dict[str, np.ndarray]:
        missing = sorted(set(lines) - self._cache.keys())
        for start in range(0, len(missing), batch_size):
            batch = missing[start:start + batch_size]
            self._cache.update(zip(batch, self._embed_batch(batch).astype(np.float64)))
        return {line: self._cache[line] for line in lines}

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        if self.numpy is not None:
            return self.numpy.embed(batch)
        import torch

        from usl_assets.crm.model import embed_texts

        with torch.inference_mode():
            return embed_texts(self.encoder, self.tokenizer, batch, self.max_length, torch.device("cpu")).numpy()

    def embed(self, criteria: list[tuple[str, ...]]) -> np.ndarray:
        """One row per criteria profile: the normalized mean of its criteria's embeddings, each criterion
        embedded once (a profile is a set of criteria; noise-augmented profiles reuse the same lines)."""
        profiles = [tuple(criteria_lines(c)) for c in criteria]
        vectors = self.embed_lines(sorted({line for profile in profiles for line in profile}))
        rows = [np.mean([vectors[line] for line in profile], axis=0) for profile in profiles]
        rows = [row / max(np.linalg.norm(row), 1e-12) for row in rows]
        if self.bank is not None and profiles:  # each line read once: the fit's 11,564 profiles share 670 lines
            distinct = list(dict.fromkeys(line for profile in profiles for line in profile))
            readings = dict(zip(distinct, self.bank.read_lines(distinct, self.embed_lines)
                                * self.bank.strengths(distinct)[:, None]))
            wishes = dict(zip(distinct, self.bank.wishes(distinct)))
            rows = [np.concatenate([row, criteria_prototypes.profile_halves(
                        np.stack([readings[line] for line in profile]), [wishes[line] for line in profile])])
                    for row, profile in zip(rows, profiles)]
        return np.stack(rows) if rows else np.zeros((0, 1))


def criteria_lines(criteria) -> list[str]:
    """The criteria as the encoder sees them, one line each (no criteria: one neutral line)."""
    lines = [str(c) for c in (criteria if criteria is not None else ())]
    return lines or [criteria_text(())]


def calibrated_lines(pairs: pd.DataFrame) -> frozenset[str]:
    """The criteria lines the training rows carry as the setting of a labelled pair (every row but the
    criteria-defined property rows: scenario rubrics, harmless criteria, criteria noise), and the lines that stand
    for no criteria: what scoring reads at the fitted strength (criteria_prototypes.EMPHASIS)."""
    settings = pairs["criteria"] if "property" not in pairs else pairs.loc[pairs["property"].isna(), "criteria"]
    return (frozenset(line for criteria in settings for line in criteria_lines(criteria))
            | {criteria_text(()), *NEUTRAL_CRITERIA})


def criteria_key(criteria) -> str:
    return criteria_text(tuple(str(c) for c in (criteria if criteria is not None else ())))


def linear_config(train_config) -> linear.LinearConfig:
    weights = dict(linear.DEFAULT_SOURCE_WEIGHTS, alpaca_eval_judge=train_config.judge_weight,
                   hh_rlhf_harmless=train_config.harmless_weight)
    return linear.LinearConfig(iterations=train_config.max_steps, source_weights=weights)


def linear_fit_key(train_config) -> dict:
    """What of the linear fit the checkpoint id hashes beyond TrainConfig: a changed default retrains."""
    from usl_assets.crm import graded_answers

    return {**linear.config_dict(linear_config(train_config)), "graded_temperature": graded_answers.TEMPERATURE,
            "unsupported_tolerance": relevance.UNSUPPORTED_TOLERANCE,
            "row_features": list(linear_rows.ROW_FEATURES), "criteria_prototypes": criteria_prototypes.SETTINGS,
            "criteria_encoder": numpy_encoder.VERSION}


def train_linear(pairs: pd.DataFrame, backbone: Backbone, train_config, folder: Path, log,
                 graded_answers: pd.DataFrame | None = None) -> dict:
    """Fit the CRM and its length-only twin into `folder`; returns the figures train_crm records.
    `graded_answers`: crm.graded_answers rows, for the graded-answers feature (none: the feature is left out)."""
    started = time.perf_counter()
    encoder = CriteriaEncoder(backbone, train_config.max_length // 2).with_training_bank(log)
    # saved with the bank: scoring emphasizes every other line; the fit reads them all at its own strength, the
    # wishes (property rows) by their words where they name a property, as scoring does
    encoder.bank.calibrated, encoder.bank.emphasized = calibrated_lines(pairs), False
    profiles = {criteria_key(c): tuple(criteria_lines(c)) for c in pairs["criteria"]}
    lines = {line for profile in profiles.values() for line in profile}
    log(f"linear CRM: {len(profiles):,} criteria profiles of {len(lines):,} distinct criteria, embedded with the "
        f"frozen {backbone.name} encoder")
    vectors = dict(zip(profiles, encoder.embed(list(profiles.values()))))
    # the safety net is the fit's: the reader's fine-tuning above (crm/wish_tuning.py) has a fixed step count
    deadline = time.perf_counter() + train_config.max_minutes * 60
    config = linear_config(train_config)
    graded = None
    if graded_answers is not None and len(graded_answers):
        graded = GradedAnswers.build(graded_answers)
        log(f"graded answers: {len(graded):,} judged answers to {len(set(graded.prompt_keys)):,} prompts")
    fitted = linear.fit_linear(pairs, vectors, config, criteria_key, log=log, deadline=deadline, graded=graded,
                               reading_directions=encoder.bank.reading_columns)
    extra = {"criteria_max_length": encoder.max_length, "config": linear.config_dict(config),
             "weight_by_source": fitted.weight_by_source, "judge_style_beta": fitted.style_beta}
    fitted.weights.save(folder, extra)
    twin_config = linear.LinearConfig(iterations=config.iterations, ngrams=False, features="length",
                                      source_weights=config.source_weights, supported_view=False,
                                      reading_gate="own_property",  # no MEASURED_FEATURES for a wish to move
                                      wish_focus=None)  # a baseline: every term at its weight under any criteria
    twin = linear.fit_linear(pairs, vectors, twin_config, criteria_key, log=log, deadline=deadline,
                             reading_directions=encoder.bank.reading_columns)
    encoder.bank.emphasized = True
    encoder.bank.save(folder)
    (folder / LENGTH_ONLY_DIR).mkdir(exist_ok=True)
    twin.weights.save(folder / LENGTH_ONLY_DIR, {**extra, "config": linear.config_dict(twin_config)})
    return {"steps": fitted.iterations, "pairs_seen": fitted.rows, "tokens_seen": 0,
            "wall_seconds": round(time.perf_counter() - started, 2), "final_loss": fitted.loss,
            "judge_length_beta": fitted.weights.beta}


class LinearScorer:
    """A CachedResponseScorer: response rows are [n-gram score, raw features], criteria rows their embedding."""

    architecture = "linear"

    def __init__(self, weights: linear_weights.LinearWeights, encoder: CriteriaEncoder, checkpoint_id: str):
        self.weights, self.encoder, self.checkpoint_id = weights, encoder, checkpoint_id

    def embed_responses(self, prompts: list[str], responses: list[str], batch_size: int = 32) -> np.ndarray:
        return self.weights.response_rows([str(p) for p in prompts], [str(r) for r in responses])

    def embed_criteria(self, criteria: list[tuple[str, ...]]) -> np.ndarray:
        return self.encoder.embed(list(criteria)).astype(np.float32)

    def score_embedded(self, response_rows: np.ndarray, criteria_row: np.ndarray) -> np.ndarray:
        return self.weights.score_rows(np.asarray(response_rows), np.asarray(criteria_row).reshape(-1))

    def score(self, items: list[ScoreItem], batch_size: int = 16, progress: bool = False) -> np.ndarray:
        rows = self.embed_responses([i.prompt for i in items], [i.response for i in items])
        rewards = np.zeros(len(items), dtype=np.float32)
        profiles = sorted({tuple(item.criteria) for item in items})
        embedded = dict(zip(profiles, self.embed_criteria(profiles)))
        for profile in profiles:
            members = [i for i, item in enumerate(items) if tuple(item.criteria) == profile]
            rewards[members] = self.score_embedded(rows[members], embedded[profile])
        return rewards


def load_linear_scorer(folder: Path, backbone: Backbone, checkpoint_id: str, length_only: bool = False,
                       encoder: CriteriaEncoder | None = None) -> LinearScorer:
    import json

    weights_dir = folder / LENGTH_ONLY_DIR if length_only else folder
    shape = json.loads((weights_dir / linear_weights.SHAPE_FILE).read_text(encoding="utf-8"))
    encoder = encoder or CriteriaEncoder(backbone, int(shape["criteria_max_length"]), PrototypeBank.load(folder))
    suffix = "-length-only" if length_only else ""
    return LinearScorer(linear_weights.LinearWeights.load(weights_dir), encoder, checkpoint_id + suffix)
