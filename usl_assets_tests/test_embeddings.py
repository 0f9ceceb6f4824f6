import json

import numpy as np
import pytest

from usl_assets.embeddings import EMBEDDING_DIM, SentenceEncoder, encode_cached
from usl_assets.settings import UslConfigError


@pytest.fixture(scope="module")
def queries(shared_data_dir) -> list[str]:
    path = shared_data_dir / "preferences" / "autoj_scenario_queries_test.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[:24]]
    return [row["instruction"] for row in rows]


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder(max_length=64, batch_size=5)


def test_vectors_are_unit_length_and_in_the_callers_order(encoder, queries):
    vectors = encoder.encode(queries)
    assert vectors.shape == (len(queries), EMBEDDING_DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    one_by_one = np.stack([encoder.encode([text])[0] for text in queries[:6]])
    assert np.allclose(vectors[:6], one_by_one, atol=1e-5)  # sorting and padding change nothing


def test_similar_texts_are_closer_than_unrelated_ones(encoder):
    vectors = encoder.encode(["Write a poem about the sea.", "Compose a short poem about the ocean.",
                              "Fix the bug in this Python function that sorts a list."])
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_max_length_truncates(queries):
    long_text = " ".join(queries)
    short = SentenceEncoder(max_length=16).encode([long_text, long_text[:2000]])
    assert np.allclose(short[0], short[1], atol=1e-5)  # both cut to the same first 16 tokens


def test_bf16_stays_close_to_float32(encoder, queries):
    bf16 = SentenceEncoder(max_length=64, bf16=True).encode(queries[:8])
    assert (bf16 * encoder.encode(queries[:8])).sum(axis=1).min() > 0.99


def test_cache_encodes_each_text_once(encoder, queries, tmp_path):
    first, encoded = encode_cached(encoder, queries[:10] + queries[:2], tmp_path)
    assert encoded == 10
    again, encoded_again = encode_cached(encoder, queries[5:15], tmp_path)
    assert encoded_again == 5
    assert np.allclose(again[:5], first[5:10])
    assert np.allclose(first[10:], first[:2])


def test_damaged_cache_is_rebuilt_not_fatal(encoder, queries, tmp_path):
    (tmp_path / f"{encoder.cache_tag}.npz").write_bytes(b"not a numpy file")
    vectors, encoded = encode_cached(encoder, queries[:3], tmp_path)
    assert encoded == 3 and vectors.shape == (3, EMBEDDING_DIM)


def test_empty_input_and_bad_settings(encoder):
    assert encoder.encode([]).shape == (0, EMBEDDING_DIM)
    with pytest.raises(UslConfigError, match="max_length"):
        SentenceEncoder(max_length=4096)
