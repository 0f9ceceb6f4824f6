"""The one markdown table of the project's Dagster metadata: a pipe table of a frame's columns (no index)."""

import pandas as pd


def markdown_table(frame: pd.DataFrame, digits: int = 3, empty: str = "(no rows)") -> str:
    """Floats with `digits` decimals, every other value as str(); `empty` when there are no rows."""
    if frame.empty:
        return empty
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(_cell(value, digits) for value in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def _cell(value: object, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)
