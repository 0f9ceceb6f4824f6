"""The page's API and handlers: many users at once, cancelling, bad input, `usl serve`'s arguments."""

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from usl_assets.cli import main
from usl_assets.page.app import Page
from usl_assets.page.data import PageData
from usl_assets.scoring.profiles import MAX_CRITERIA
from usl_assets_tests.page_support import page_home, page_url  # noqa: F401 - fixtures

CRITERIA_SETS = ["The answer is short.", "Every claim is correct.\nCode runs as written.",
                 "The tone is warm.", "Gründliche Antworten.\n回答要有条理。"]


def custom(client, criteria: str, pool: str = "alpaca_eval", groups=("Code",)):
    header, table, _, status = client.predict(pool, list(groups), [], criteria, "usl",
                                              api_name="/custom_leaderboard")
    return header, table, status


def test_twenty_concurrent_requests_get_their_own_results(page_url, page_data):
    """20 requests at once over HTTP, 4 criteria sets the server has not seen, each answered as a page of its own
    (another PageData on the same published copy) answers it alone."""
    from gradio_client import Client

    page = Page(page_data)
    expected = {c: page.show_custom("alpaca_eval", ["Code"], [], c, "usl")[1].values.tolist() for c in CRITERIA_SETS}
    assert len({str(rows) for rows in expected.values()}) > 1  # the criteria really change the table
    asked = [CRITERIA_SETS[i % len(CRITERIA_SETS)] for i in range(20)]
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda c: custom(Client(page_url, verbose=False), c), asked))
    for criteria, (header, table, status) in zip(asked, answers):
        assert status == "" and table["data"] == expected[criteria], status
        assert "**#Models** 7" in header


@pytest.mark.parametrize("pool, groups, criteria, message", [
    ("nope", [], "Short.", "unknown pool 'nope'"),
    ("alpaca_eval", ["<script>alert(1)</script>"], "Short.", "unknown topic"),
    ("alpaca_eval", [], "", "type at least one criterion"),
    ("alpaca_eval", [], "\n".join(f"criterion {i}" for i in range(MAX_CRITERIA + 1)), "at most 20"),
    ("alpaca_eval", [], "y" * 501, "at most 500 characters"),
])
def test_bad_input_through_the_api_is_a_clear_message(page_home, page_data, pool, groups, criteria, message):
    header, table, chart, status = Page(page_data).show_custom(pool, groups, [], criteria, "usl")
    assert status.startswith("⚠️") and message in status.replace("&#x27;", "'") and "Traceback" not in status
    assert "<script>" not in status and table.empty and chart is None


@pytest.fixture(scope="module")
def page_data(page_home):
    return PageData(page_home / "published" / "warehouse.duckdb", page_home)


def test_unknown_pool_through_http_is_refused_with_its_reason(page_url):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="nope is not in the list of choices"):
        custom(Client(page_url, verbose=False), "Short.", pool="nope")


def test_cancel_stops_scoring_and_keeps_what_was_embedded(page_data):
    """Cancel is heard after the first scored chunk; the next request for the same pool re-embeds nothing."""
    page, request = Page(page_data), SimpleNamespace(session_hash="one user")
    count = "SELECT count(*) FROM scoring.response_embeddings"
    before = page_data._query(count).fetchone()[0]
    cancel_once = iter([lambda *_, **__: page.cancel(request)])

    def progress(*args, **kwargs):
        next(cancel_once, lambda *_, **__: None)(*args, **kwargs)

    _, table, _, status = page.show_custom("mt_bench", [], [], "Cancelled criteria.", "usl", request, progress)
    assert status.startswith("⚠️ cancelled") and table.empty
    status, header, table, chart = page.cancel(request)  # what the Cancel button shows: no stale table
    assert status.startswith("⚠️ cancelled") and header == "" and table.empty and chart is None
    embedded = page_data._query(count).fetchone()[0]
    assert embedded - before > 100  # the chunk scored before the cancel (MT-Bench's 4 × 30 answers) stays cached
    fractions = []
    _, table, _, status = page.show_custom("mt_bench", [], [], "Cancelled criteria.", "usl", request,
                                           lambda fraction, **_: fractions.append(fraction))
    assert status == "" and len(table) == 4
    assert fractions[0] == 0 and fractions[-1] == 1  # the bar ends full when the work is done
    assert page_data._query(count).fetchone()[0] == embedded


def test_progress_fraction_reads_the_scoring_log_lines():
    from usl_assets.page.app import progress_fraction

    assert progress_fraction("embedded 1,024/21,735 responses, 80.1/s") == pytest.approx(1024 / 21735)
    assert progress_fraction("scored 30/30 (response, profile) pairs, 9.0/s") == 1.0
    assert progress_fraction("loading the CRM") is None


def test_serve_arguments_are_one_line_errors(tmp_path, capsys):
    assert main(["serve", "--port", "0"]) == 2
    assert main(["serve", "--published", str(tmp_path / "missing.duckdb"), "--port", "7999"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "--port must be between 1 and 65535" in err[0]
    assert err[1].startswith("usl: error: no published warehouse at")
