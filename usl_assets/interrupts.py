"""Ctrl-C and SIGTERM end a CLI command alike. Kept apart from launch.py, which imports Dagster, so a command that
runs nothing in Dagster (`usl leaderboard`, `usl --help`) sets its handlers without loading it."""

import signal

received = {"signal": None}


def interrupt(signum, _frame):
    received["signal"] = signum
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """SIGTERM stops a CLI run as Ctrl-C does. Dagster turns either into a failed step and a failed run (its
    writes are transactions or `.partial` files renamed at the end, so nothing half-written is published) and
    would carry on with `raise_on_error=False`; launch.raise_if_interrupted then stops the command."""
    received["signal"] = None
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
