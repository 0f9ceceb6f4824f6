"""The linear CRM's response rows on every core (crm/feature_workers.py): real worker processes give the same rows,
to the bit, as one pass in this process, whatever the number of workers; a bad USL_FEATURE_WORKERS is one line."""

import json

import numpy as np
import pytest

from usl_assets.crm import feature_workers, linear_rows
from usl_assets.settings import UslConfigError


def answers(data_root, limit: int = 300) -> tuple[list[str], list[str]]:
    prompts, texts = [], []
    for line in (data_root / "preferences" / "autoj_pairwise.jsonl").read_text(encoding="utf-8").splitlines():
        raw = json.loads(line)
        for side in ("response 1", "response 2"):
            prompts.append(str(raw["prompt"]))
            texts.append(str(raw[side]))
        if len(texts) >= limit:
            break
    return prompts, texts


@pytest.fixture
def real_answers(shared_data_dir):
    prompts, texts = answers(shared_data_dir)
    assert len(texts) >= feature_workers.MIN_ROWS  # enough rows to be cut into chunks
    return prompts, texts


def rows_with(monkeypatch, workers: int, prompts, texts):
    monkeypatch.setenv(feature_workers.WORKERS_ENV, str(workers))
    graded = np.arange(2 * len(texts), dtype=np.float64).reshape(-1, 2)  # distinct per row: a shuffle would show
    raw, views = linear_rows.raw_features(prompts, texts, graded, supported_view=True)
    return raw, views, linear_rows.ngram_matrix(views)


def test_workers_give_the_same_rows_as_one_pass(monkeypatch, real_answers):
    prompts, texts = real_answers
    one = rows_with(monkeypatch, 1, prompts, texts)
    for workers in (2, 3):
        many = rows_with(monkeypatch, workers, prompts, texts)
        assert np.array_equal(one[0], many[0]) and one[1] == many[1]
        assert (one[2] != many[2]).nnz == 0 and np.array_equal(one[2].indptr, many[2].indptr)
    assert one[0].shape == (len(texts), len(linear_rows.ROW_FEATURES))


def test_workers_really_run_in_other_processes(monkeypatch):
    monkeypatch.setenv(feature_workers.WORKERS_ENV, "2")
    pids = feature_workers.map_chunks(_pids, feature_workers.MIN_ROWS, (list(range(feature_workers.MIN_ROWS)),))
    assert len(pids) == 2 * feature_workers.CHUNKS_PER_WORKER
    assert sum(n for _, n in pids) == feature_workers.MIN_ROWS  # every row once, in chunks
    workers = {pid for pid, _ in pids}  # which worker takes which chunk is up to the scheduler
    assert 1 <= len(workers) <= 2 and _pids([])[0] not in workers
    # too few rows for the workers: one call here
    assert feature_workers.map_chunks(_pids, 3, ([1, 2, 3],)) == [_pids([1, 2, 3])]


def _pids(rows: list) -> tuple[int, int]:
    import os

    return os.getpid(), len(rows)


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_a_bad_worker_count_is_one_clear_line(monkeypatch, value):
    monkeypatch.setenv(feature_workers.WORKERS_ENV, value)
    with pytest.raises(UslConfigError, match=feature_workers.WORKERS_ENV):
        feature_workers.workers()


def test_workers_started_first_hold_no_pipe_opened_after(monkeypatch):
    """A pipe opened after start() reaches end-of-file when this process closes its end: no worker holds a copy
    (a server's sockets work the same way)."""
    import os

    monkeypatch.setenv(feature_workers.WORKERS_ENV, "3")  # a new pool: the count differs from the other tests'
    feature_workers.start()
    read_end, write_end = os.pipe()
    try:
        pids = feature_workers.map_chunks(_pids, feature_workers.MIN_ROWS, (list(range(feature_workers.MIN_ROWS)),))
        assert _pids([])[0] not in {pid for pid, _ in pids}  # the workers really ran
        os.close(write_end)
        write_end = None
        os.set_blocking(read_end, False)
        assert os.read(read_end, 1) == b""  # end of file, not "would block": nobody else can still write
    finally:
        os.close(read_end)
        if write_end is not None:
            os.close(write_end)
