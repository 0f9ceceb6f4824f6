"""Graded answers: what the AI judge said about other models' answers to the same prompt, as one CRM feature.

The AlpacaEval judge graded 34 training models' answers to each of its 805 prompts (a strength per answer:
l = logit P(answer beats the shared reference), crm/judge_pairs.py). For a new answer to one of those prompts,

    graded(p, a) = Σ_m w_m (l_m − mean l) / Σ_m w_m,   w_m = exp(cos(a, a_m) / τ)

over the graded answers a_m to the same prompt p (TF-IDF of word 1–2-grams, τ = 0.1): an answer that says what
the judge's favourite answers said scores high. It is how a reference-guided judge works, with 34 graded
references instead of one; prompts the judge never saw get 0 (the feature is absent, the rest of the CRM
decides). In training, an answer is compared only with the other model families' answers (leave one family out),
so the feature is as honest there as on an unseen model's answer. Nothing of the pools' models is in it: the
answers come from crm.graded_answers (judged models of the training split, answers in a public pool excluded).

The TF-IDF is hashed (the linear CRM's 2^18 buckets), so a checkpoint stores the answers' vectors and the IDF
(`graded_answers.npz`), not the texts, and loading needs no fitting.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse

from usl_assets.crm.judge_pairs import model_family
from usl_assets.crm.splits import prompt_key

FILE = "graded_answers.npz"
TEMPERATURE = 0.1  # chosen on judge_heldout_models (docs/crm.md)
N_BUCKETS = 2**18


def _counts(texts: list[str]) -> sparse.csr_matrix:
    from sklearn.feature_extraction.text import HashingVectorizer

    vectorizer = HashingVectorizer(ngram_range=(1, 2), n_features=N_BUCKETS, alternate_sign=False, norm=None,
                                   lowercase=True, dtype=np.float32)
    counts = vectorizer.transform([str(t) for t in texts]).tocsr()
    counts.data = 1.0 + np.log(counts.data)  # sublinear term frequency
    return counts


@dataclass
class GradedAnswers:
    prompt_keys: np.ndarray  # per graded answer (str)
    families: np.ndarray  # per graded answer: its model's family (str)
    strengths: np.ndarray  # per graded answer: logit P(it beats the judge's reference)
    vectors: sparse.csr_matrix  # per graded answer: L2-normalized TF-IDF
    idf: np.ndarray  # N_BUCKETS

    @classmethod
    def build(cls, table: pd.DataFrame) -> "GradedAnswers":
        """From crm.graded_answers rows (prompt, model, response, strength), in a canonical order."""
        from sklearn.preprocessing import normalize  # here: loading a checkpoint needs no scikit-learn

        table = table.assign(prompt_key=table["prompt"].map(prompt_key)).sort_values(
            ["prompt_key", "model"], kind="stable").reset_index(drop=True)
        counts = _counts(list(table["response"]))
        document_frequency = np.bincount(counts.indices, minlength=N_BUCKETS)
        idf = (np.log((1.0 + len(table)) / (1.0 + document_frequency)) + 1.0).astype(np.float32)
        return cls(table["prompt_key"].to_numpy(str), table["model"].map(model_family).to_numpy(str),
                   table["strength"].to_numpy(float),
                   normalize(counts @ sparse.diags(idf)).tocsr(), idf)

    def __len__(self) -> int:
        return len(self.strengths)

    def feature(self, prompts: list, responses: list, exclude_families: list | None = None) -> np.ndarray:
        """graded(p, a) per (prompt, response); `exclude_families[i]` (or None) leaves that family's answers out."""
        return self.features(prompts, responses, exclude_families)[0]

    def features(self, prompts: list, responses: list,
                 exclude_families: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(graded(p, a), the best cosine with a graded answer to p) per (prompt, response); both 0 for prompts
        with fewer than two graded answers (after leaving `exclude_families[i]`'s answers out)."""
        out, best = np.zeros(len(responses)), np.zeros(len(responses))
        if not len(self) or not len(responses):
            return out, best
        keys = np.array([prompt_key(p) for p in prompts], dtype=str)
        starts = np.searchsorted(self.prompt_keys, keys, side="left")
        ends = np.searchsorted(self.prompt_keys, keys, side="right")
        known = np.flatnonzero(ends - starts >= 2)
        if not len(known):
            return out, best
        from sklearn.preprocessing import normalize

        queries = normalize(_counts([responses[i] for i in known]) @ sparse.diags(self.idf)).tocsr()
        by_prompt: dict[tuple[int, int], list[int]] = {}
        for row, i in enumerate(known):
            by_prompt.setdefault((int(starts[i]), int(ends[i])), []).append(row)
        for (start, end), rows in by_prompt.items():
            similarity = (self.vectors[start:end] @ queries[rows].T).toarray()  # answers × queries
            for column, row in enumerate(rows):
                i = known[row]
                keep = np.ones(end - start, bool)
                if exclude_families is not None and exclude_families[i] is not None:
                    keep = self.families[start:end] != model_family(str(exclude_families[i]))
                if keep.sum() < 2:
                    continue
                s, strengths = similarity[keep, column], self.strengths[start:end][keep]
                w = np.exp((s - s.max()) / TEMPERATURE)
                out[i] = float(w @ (strengths - strengths.mean()) / w.sum())
                best[i] = float(s.max())
        return out, best

    def save(self, folder: Path) -> None:
        np.savez_compressed(folder / FILE, prompt_keys=self.prompt_keys, families=self.families,
                            strengths=self.strengths, idf=self.idf, shape=np.array(self.vectors.shape),
                            indptr=self.vectors.indptr, indices=self.vectors.indices, data=self.vectors.data)

    @classmethod
    def load(cls, folder: Path) -> "GradedAnswers | None":
        if not (folder / FILE).exists():
            return None
        z = np.load(folder / FILE, allow_pickle=False)
        vectors = sparse.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        return cls(z["prompt_keys"], z["families"], z["strengths"], vectors, z["idf"])
