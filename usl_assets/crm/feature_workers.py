"""Row-wise feature extraction on every core the process may use.

The linear CRM's features of an answer and its hashed n-grams (crm/linear_rows.py) read that answer and its prompt
alone, in pure Python that holds the GIL: one core does all of them while the other waits, in training, evaluation,
scoring and the audits alike. Here the rows are cut into contiguous chunks, each chunk goes to a worker process, and the
chunks' results are joined in order, so the numbers are the same, to the bit, as one pass in this process: they
never depend on the number of workers or on the machine's load.

USL_FEATURE_WORKERS sets the number of workers (default: the CPUs this process may run on; 1: every row in this
process). The workers are forked once per process (fork, not spawn or forkserver: those re-run the caller's main
script, which a notebook or a benchmark without a main guard cannot stand) and stay for the process's next calls
(scoring calls once per model partition). They take the default signal handlers, so Ctrl-C ends them at once.

A forked worker keeps a copy of every file descriptor its parent had open at the fork: a server that forks them in
the middle of a request leaves its listening socket and its open client connections in each worker, so a connection
the server closes stays open for the client. A long-lived process that opens sockets or pipes (the web page) calls
start() first.
"""

import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from usl_assets.settings import UslConfigError

WORKERS_ENV = "USL_FEATURE_WORKERS"
MIN_ROWS = 256  # below this one pass here is quicker than shipping the rows (a model partition has ~680)
CHUNKS_PER_WORKER = 2  # a slow chunk (long answers) leaves the other worker less idle time

_pool: ProcessPoolExecutor | None = None
_pool_workers = 0


def workers() -> int:
    """USL_FEATURE_WORKERS, else the CPUs this process may use."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not raw.isdigit() or int(raw) < 1:
        raise UslConfigError(f"{WORKERS_ENV} must be a whole number of at least 1, got {raw!r}")
    return int(raw)


def _executor(count: int) -> ProcessPoolExecutor:
    global _pool, _pool_workers
    if _pool is None or _pool_workers != count:
        if _pool is not None:
            _pool.shutdown(cancel_futures=True)
        _pool = ProcessPoolExecutor(max_workers=count, mp_context=multiprocessing.get_context("fork"),
                                    initializer=_default_signals)
        _pool_workers = count
    return _pool


def start() -> None:
    """Fork the workers now (when there are at least two), so they hold no socket or pipe opened after this call."""
    count = workers()
    if count >= 2:
        _executor(count).submit(os.getpid).result()  # a fork pool starts all its workers on the first task


def _default_signals() -> None:
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def map_chunks(function, rows: int, columns: tuple, constants: tuple = ()) -> list:
    """[function(*chunk_of_each_column, *constants) for each contiguous chunk of the rows], in row order; one call
    on the whole columns when there is one worker or fewer than MIN_ROWS rows. function must be a module-level
    function (the workers import it) whose rows do not depend on each other."""
    count = workers()
    if count < 2 or rows < MIN_ROWS:
        return [function(*columns, *constants)]
    bounds = np.linspace(0, rows, count * CHUNKS_PER_WORKER + 1).astype(int)
    pool = _executor(count)
    futures = [pool.submit(function, *(column[start:end] for column in columns), *constants)
               for start, end in zip(bounds[:-1], bounds[1:]) if end > start]
    return [future.result() for future in futures]
