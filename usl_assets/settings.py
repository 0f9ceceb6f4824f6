"""Where USL reads and writes, resolved from the environment when asked (never at import time).

USL_DATA_DIR  the public data folder (see docs/data_sources.md); no default outside the Makefile.
USL_HOME      everything USL writes: warehouse.duckdb, the embedded Dagster home, models/, inbox/, published/.
              Default: `.usl/` under the current directory.
"""

import os
from pathlib import Path


class UslConfigError(Exception):
    """A setting or argument is wrong; the message is one line a user can act on."""


class StaleCheckpoint(UslConfigError, ValueError):
    """A checkpoint this code reads differently from how it was trained (another feature layout, other criteria
    reading settings): it must be retrained (`usl run`), never scored as it is."""


class SlotWaitTimeout(Exception):
    """A step waited for a pool slot longer than --wait-timeout (its message is the one line to print;
    slot_wait.py raises it)."""


def data_dir(configured: str = "") -> Path:
    raw = configured or os.environ.get("USL_DATA_DIR", "")
    if not raw:
        raise UslConfigError(
            "USL_DATA_DIR is not set: point it at the public data folder (e.g. export USL_DATA_DIR=../shared/data; "
            "docs/data_sources.md says where each file comes from)"
        )
    path = Path(raw).expanduser().resolve()
    if not path.is_dir():
        raise UslConfigError(f"USL_DATA_DIR={raw} is not a folder: point it at the public data folder")
    return path


def usl_home(configured: str = "") -> Path:
    path = Path(configured or os.environ.get("USL_HOME", "") or ".usl").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path
