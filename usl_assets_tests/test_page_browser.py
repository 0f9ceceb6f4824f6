"""The page in a real headless Chromium (Debian's /usr/bin/chromium through Playwright; no browser download),
served by `usl serve`'s launch() on a small real published warehouse.

Screenshots of each tab go to docs/screenshots/ when USL_UPDATE_SCREENSHOTS=1, else to a temporary folder.
"""

import io
import os
import re
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from usl_assets.cli import main
from usl_assets.crm import feature_workers
from usl_assets.leaderboards.ranking import DEFAULT_METHOD
from usl_assets_tests.page_support import linear_checkpoint, linear_page_url, page_home, page_url  # noqa: F401
from usl_assets_tests.test_leaderboards_fixtures import ALPACA_MODELS, MT_BENCH_MODELS

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium keeps calling home on a closed network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
CRITERIA = ["The answer comes first, in one short sentence.", "No bullet lists."]
READ_TABLE = """id => {
  const root = document.getElementById(id);
  const headers = Array.from(root.querySelectorAll('th[role=columnheader]')).map(c => c.innerText.trim());
  const rows = Array.from(root.querySelectorAll('[role=row].virtual-row')).map(
    row => Array.from(row.querySelectorAll('[role=gridcell]')).map(c => c.innerText.trim()));
  return {headers, rows};
}"""

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # The linear CRM's feature workers fork once per process; forked after the driver starts, they would hold its
    # pipes open and the driver would never see this module end.
    feature_workers.start()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser, page_url):
    """A fresh tab on the page; every request it makes is recorded (the page must need nothing from outside)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.requested = []
    tab.on("request", lambda request: tab.requested.append(request.url))
    tab.goto(page_url, wait_until="networkidle")
    yield tab
    context.close()


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory) -> Path:
    if os.environ.get("USL_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path_factory.mktemp("screenshots")


def read_table(tab, element_id: str) -> pd.DataFrame:
    tab.wait_for_function("id => document.querySelectorAll(`#${id} [role=row].virtual-row`).length > 0",
                          arg=element_id)
    shown = tab.evaluate(READ_TABLE, element_id)
    return pd.DataFrame(shown["rows"], columns=shown["headers"])


def rank_custom(tab) -> None:
    """Press *Rank the models* and wait for the custom leaderboard; when a new problem (⚠️) comes instead, fail with
    it (while it runs, the status shows the progress)."""
    before = tab.locator("#status-custom").inner_text().strip()
    tab.locator("#run-custom").click()
    tab.wait_for_function("""before => {
        const status = document.querySelector('#status-custom').innerText.trim();
        return document.querySelector('#header-custom').innerText.includes('#Models')
            || (status.startsWith('⚠️') && status !== before);
    }""", arg=before, timeout=240_000)
    assert "#Models" in tab.locator("#header-custom").inner_text(), tab.locator("#status-custom").inner_text()


def published_rankings(home: Path, pool: str, method: str = DEFAULT_METHOD) -> pd.DataFrame:
    with duckdb.connect(str(home / "published" / "warehouse.duckdb"), read_only=True) as conn:
        return conn.execute("SELECT scenario, model, score, ci_low, ci_high, rank, n_prompts FROM leaderboard.rankings "
                            "WHERE pool = ? AND profile = 'default' AND method = ?", [pool, method]).df()


def test_default_tab_shows_the_published_rankings(page, page_home, page_url, screenshot_dir):
    table = read_table(page, "table-default").set_index("model")
    rankings = published_rankings(page_home, "alpaca_eval")
    overall = rankings[rankings["scenario"] == "all"].set_index("model")
    assert set(table.index) == set(ALPACA_MODELS) == set(overall.index)
    for model, row in overall.iterrows():
        assert float(table.loc[model, "score"]) == pytest.approx(row["score"], abs=0.051)
        assert int(table.loc[model, "rank"]) == row["rank"]
        assert table.loc[model, "95% interval"] == f"[{row['ci_low']:.1f}, {row['ci_high']:.1f}]"
    groups = rankings[rankings["scenario"].isin(table.columns)]
    assert len(set(groups["scenario"])) >= 2  # a column per scenario group, each from the published rows
    for row in groups.itertuples():
        assert float(table.loc[row.model, row.scenario]) == pytest.approx(row.score, abs=0.051)
    assert page.locator("#chart-default img, #chart-default svg, #chart-default canvas").count() > 0
    assert "External validity" in page.locator("#validity").inner_text()
    status = page.locator("#status-default").inner_text()  # the rank rule and the reference, stated on the page
    assert "Rank: 1 + the number of models whose 95% interval lies wholly above" in status
    assert "gpt4_1106_preview is the reference every other model is compared with" in status
    shared = (overall["rank"].value_counts() > 1).sum()
    assert (f"Here {shared} ranks are shared." in status) == (shared > 0)
    page.screenshot(path=str(screenshot_dir / "page_default.png"), full_page=True)
    hosts = {url.split("/")[2] for url in page.requested if url.startswith("http")}
    assert hosts == {page_url.split("/")[2]}  # no CDN, no fonts, no analytics: everything from the page itself


def test_pool_and_method_switch_the_table(page, page_home):
    page.locator("#method-default input").click()
    page.get_by_role("option", name="bradley_terry").click()
    page.wait_for_function("() => document.querySelector('#status-default').innerText.includes('bradley_terry')")
    table = read_table(page, "table-default").set_index("model")
    rankings = published_rankings(page_home, "alpaca_eval", "bradley_terry")
    overall = rankings[rankings["scenario"] == "all"].set_index("model")["score"]
    assert table["score"].astype(float).to_dict() == pytest.approx(overall.round(1).to_dict(), abs=0.051)


def test_custom_tab_ranks_typed_criteria_as_usl_leaderboard_does(page, page_home, screenshot_dir, capsys):
    page.get_by_role("tab", name="Customizable leaderboard").click()
    page.locator("#groups").get_by_label("Code").check()
    page.locator("#criteria textarea").fill("\n".join(CRITERIA))
    rank_custom(page)
    shown = read_table(page, "table-custom").set_index("model")
    header = page.locator("#header-custom").inner_text()
    assert f"#Models {len(ALPACA_MODELS)}" in header and "**Ranked over**" not in header  # rendered, not raw
    assert "Ranked over Code" in header
    page.screenshot(path=str(screenshot_dir / "page_custom.png"), full_page=True)
    page.wait_for_function("() => document.querySelector('#reading-custom').innerText.includes('linear CRM')")
    assert "this checkpoint is factorized" in page.locator("#reading-custom").inner_text()  # no reading to show

    argv = ["leaderboard", "--pool", "alpaca_eval", "--topic", "Code", "--format", "csv"]
    assert main([*argv, *[part for line in CRITERIA for part in ("--criteria", line)]]) == 0
    cli = pd.read_csv(io.StringIO(capsys.readouterr().out)).set_index("model")
    assert set(shown.index) == set(cli.index) == set(ALPACA_MODELS)
    n_code = int(cli["n_prompts"].max())
    assert f"#Examples {n_code}" in header and n_code < 30  # ranked over Code's prompts, not the pool's 30
    assert list(shown.columns[2:4]) == ["Code", "Code 95% interval"]  # the ranked-by column first
    for model, row in cli.iterrows():
        assert int(shown.loc[model, "rank"]) == row["rank"]
        assert float(shown.loc[model, "overall"]) == pytest.approx(row["overall"], abs=0.051)
        assert float(shown.loc[model, "Code"]) == pytest.approx(row["Code"], abs=0.051)
        low, high = map(float, shown.loc[model, "overall 95% interval"].strip("[]").split(", "))
        assert (low, high) == pytest.approx((row["overall_low"], row["overall_high"]), abs=0.051)
    default = published_rankings(page_home, "alpaca_eval")
    default_rank = default[default["scenario"] == "Code"].set_index("model")["rank"]  # over the same prompts
    for model, row in shown.iterrows():
        moved = int(default_rank[model]) - int(row["rank"])
        assert row["vs default"] == ("=" if moved == 0 else f"▲ {moved}" if moved > 0 else f"▼ {-moved}")


def test_cancel_ends_in_cancelled_with_no_stale_table(page):
    page.get_by_role("tab", name="Customizable leaderboard").click()
    page.locator("#criteria textarea").fill("\n".join(CRITERIA))
    rank_custom(page)
    assert len(read_table(page, "table-custom")) == len(ALPACA_MODELS)
    page.locator("#cancel-custom").click()
    page.wait_for_function("() => document.querySelector('#status-custom').innerText.includes('cancelled')")
    page.wait_for_function("() => document.querySelectorAll('#table-custom [role=row].virtual-row').length === 0")
    assert "#Models" not in page.locator("#header-custom").inner_text()
    assert "cancelling" not in page.locator("#status-custom").inner_text()


READ_CRITERIA = ["The user prefers brief answers.", "The user prefers thorough, detailed answers.", "qwz zzz",
                 "<i>Réponses brèves</i>"]


def test_custom_tab_shows_how_the_linear_crm_reads_the_criteria(browser, linear_page_url, linear_checkpoint,
                                                                 screenshot_dir):
    """Under the criteria box, once the leaderboard is computed: the arrows of crm/reading.py for the set and for
    each criterion, and its warnings, with the criteria shown as text."""
    from usl_assets.crm.reading import TIED, arrows_line, read_criteria
    from usl_assets.crm.checkpoints import load_scorer

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.goto(linear_page_url, wait_until="networkidle")
    tab.get_by_role("tab", name="Customizable leaderboard").click()
    tab.locator("#criteria textarea").fill("\n".join(READ_CRITERIA))
    tab.locator("#run-custom").click()
    tab.wait_for_function("() => document.querySelector('#reading-custom').innerText.includes('How the CRM reads')",
                          timeout=240_000)
    shown = tab.locator("#reading-custom").inner_text()
    tab.screenshot(path=str(screenshot_dir / "page_custom_reading.png"), full_page=True)
    expected = read_criteria(load_scorer(linear_checkpoint), READ_CRITERIA)
    assert f"all 4 criteria: {arrows_line(expected.table)}" in shown
    for i, criterion in enumerate(READ_CRITERIA):
        assert f"“{criterion}”: {arrows_line(expected.table, f'criterion_{i + 1}_arrow', TIED)}" in shown
    assert "“The user prefers brief answers.”: length ↓" in shown  # the small CRM reads its own phrasings
    assert expected.warnings and all(f"⚠️ {warning}" in shown for warning in expected.warnings)
    assert f"criterion '{READ_CRITERIA[2]}' is read as almost nothing" in shown
    assert tab.locator("#reading-custom i").count() == 0 and "“<i>Réponses brèves</i>”" in shown  # text, not markup
    assert "#Models" in tab.locator("#header-custom").inner_text()
    context.close()


def test_criteria_with_markup_are_text_and_bad_input_is_a_message(page):
    page.get_by_role("tab", name="Customizable leaderboard").click()
    status = page.locator("#status-custom")
    page.locator("#run-custom").click()  # empty criteria
    page.wait_for_function("() => document.querySelector('#status-custom').innerText.includes('at least one')")
    page.locator("#criteria textarea").fill("x" * 100_000)
    page.locator("#run-custom").click()
    page.wait_for_function("() => document.querySelector('#status-custom').innerText.includes('100,000')")
    injected = "<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>" * 10
    page.locator("#criteria textarea").fill(injected)
    page.locator("#run-custom").click()
    page.wait_for_function("() => document.querySelector('#status-custom').innerText.includes('at most 500')")
    assert "Traceback" not in status.inner_text()
    page.locator("#criteria textarea").fill("<b>Réponses brèves</b>, 简洁的回答 <script>window.pwned=3</script>")
    rank_custom(page)
    assert page.evaluate("window.pwned") is None and page.locator("#header-custom b, #status-custom img").count() == 0


def test_unknown_pool_in_the_url_is_a_message(browser, page_url):
    context = browser.new_context()
    tab = context.new_page()
    tab.goto(f"{page_url}/?pool=%3Cscript%3Enope&topics=astrology", wait_until="networkidle")
    tab.wait_for_function("() => document.querySelector('#status-default').innerText.includes('unknown pool')")
    text = tab.locator("#status-default").inner_text()
    assert "<script>nope" in text and "unknown topic 'astrology'" in text
    assert len(read_table(tab, "table-default")) == len(ALPACA_MODELS)  # the first pool is shown instead
    context.close()


def test_compare_tab_shows_both_responses_with_rewards(page, page_home, screenshot_dir):
    page.get_by_role("tab", name="Compare two models").click()
    page.locator("#pool-compare input").click()
    page.get_by_role("option", name="mt_bench").click()
    page.wait_for_function("() => document.querySelector('#model-a input').value === 'gpt-3.5-turbo'")
    page.locator("#run-compare").click()
    page.wait_for_function("() => document.querySelector('#reward-a').innerText.startsWith('reward')",
                           timeout=240_000)
    response_a = page.locator("#response-a textarea").input_value()
    with duckdb.connect(str(page_home / "published" / "warehouse.duckdb"), read_only=True) as conn:
        expected = conn.execute("SELECT response FROM responses.responses WHERE pool = 'mt_bench' AND model = ? "
                                "ORDER BY TRY_CAST(prompt_id AS BIGINT) LIMIT 1", [sorted(MT_BENCH_MODELS)[0]]
                                ).fetchone()[0]
    assert response_a == expected
    assert page.locator("#reward-b").inner_text().startswith("reward")
    verdict = page.locator("#verdict").inner_text()
    assert "wins" in verdict or "equal" in verdict
    assert "Criteria applied:" in verdict and "σ(d/" in verdict  # the criteria and the scale are stated
    assert "No breakdown: the factorized CRM" in verdict
    rendered = page.locator("#rendered-a").inner_text()  # the answer rendered, its raw text under it
    assert rendered.split()[:3] == expected.replace("*", "").replace("#", "").split()[:3]
    assert page.locator("#topic-compare input").input_value() == "any topic"  # the topic list starts filled
    page.screenshot(path=str(screenshot_dir / "page_compare.png"), full_page=True)


def test_compare_tab_breaks_the_linear_crm_rewards_into_terms(browser, linear_page_url, linear_checkpoint):
    """With the linear CRM the verdict lists the reward terms that separate the two answers, the same numbers as
    leaderboards/explain.reward_terms gives for those answers."""
    from usl_assets.crm.checkpoints import load_scorer
    from usl_assets.leaderboards.explain import reward_terms

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.goto(linear_page_url, wait_until="networkidle")
    tab.get_by_role("tab", name="Compare two models").click()
    tab.locator("#run-compare").click()
    tab.wait_for_function("() => document.querySelector('#verdict').innerText.includes('What separates them')",
                          timeout=240_000)
    verdict = tab.locator("#verdict").inner_text()
    prompt = tab.locator("#prompt-text textarea").input_value()
    answers = [tab.locator(f"#response-{side} textarea").input_value() for side in "ab"]
    context.close()
    scorer = load_scorer(linear_checkpoint)
    criteria = re.search(r"Criteria applied: (.+)", verdict).group(1).split(" · ")
    terms = reward_terms(scorer.weights, scorer.embed_responses([prompt] * 2, answers),
                         scorer.embed_criteria([tuple(c.strip("“”") for c in criteria)]))
    gaps = (terms.iloc[0] - terms.iloc[1]).sort_values(key=abs, ascending=False)
    shown = dict(re.findall(r"^(?:- )?(.+?): ([+-][0-9.]+)$", verdict, flags=re.M))
    top = gaps.index[0]
    assert float(shown[top]) == pytest.approx(gaps[top], abs=1.5e-3)


READ_WHY = """id => Array.from(document.querySelectorAll(`#${id} table tbody tr`)).map(
  row => Array.from(row.querySelectorAll('td')).map(cell => cell.innerText.trim()))"""


def open_why(tab, which: str, model: str) -> str:
    """Pick `model` in the tab's "Why?" list, press Why?, and return the breakdown's text once shown."""
    tab.wait_for_function("id => (document.querySelector(`#why-model-${id} input`) || {value: ''}).value !== ''",
                          arg=which)  # the list may not be rendered yet when the page first settles
    tab.locator(f"#why-model-{which} input").click()
    tab.get_by_role("option", name=model, exact=True).click()
    tab.locator(f"#why-run-{which}").click()
    tab.wait_for_function("([id, model]) => document.querySelector(`#why-${id}`).innerText.includes(`Why ${model}`)",
                          arg=[which, model], timeout=240_000)
    return tab.locator(f"#why-{which}").inner_text()


def shown_terms(tab, which: str) -> dict[str, float]:
    """The breakdown's table as term -> model − reference (the last row is the total)."""
    return {row[0]: float(row[1]) for row in tab.evaluate(READ_WHY, f"why-{which}")}


def assert_same_breakdown(shown: dict[str, float], text: str, expected) -> None:
    """The page's breakdown is explain.py's: the total, each term, the prompts compared, the scale."""
    assert shown.pop("total") == pytest.approx(expected.total, abs=6e-4)
    assert f"Total: {expected.total:+.3f}" in text and f"σ(d/{expected.temperature:.2f})" in text
    assert f"on the same {expected.n_prompts} prompts" in text
    assert shown == pytest.approx(expected.table.set_index("term")["difference"].to_dict(), abs=6e-4)


def test_why_breaks_a_models_reward_gap_into_the_terms_explain_computes(browser, page_home, linear_page_url,
                                                                        linear_checkpoint, screenshot_dir):
    """Each leaderboard tab opens one model's "Why?": its mean reward difference against the reference over the
    ranked prompts, by the linear CRM's terms, equal to leaderboards/explain.py's for the same model, topics and
    criteria (default tab: each prompt's scenario criteria; custom tab: Code under CRITERIA)."""
    from usl_assets.crm.checkpoints import load_scorer
    from usl_assets.leaderboards.commands import build_leaderboard
    from usl_assets.leaderboards.explain import cli_breakdown
    from usl_assets.leaderboards.ranking import BootstrapSettings

    scorer = load_scorer(linear_checkpoint)
    published = page_home / "published" / "warehouse.duckdb"
    model, reference = "claude-3-opus-20240229", "gpt4_1106_preview"
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.goto(linear_page_url, wait_until="networkidle")

    text = open_why(tab, "default", model)
    board = build_leaderboard("alpaca_eval", [], [], DEFAULT_METHOD, BootstrapSettings(), published=published)
    expected = cli_breakdown(model, board, "alpaca_eval", [], scorer=scorer)
    assert f"against {reference}'s (the reference)" in text and "(every prompt)" in text
    assert "each prompt's scenario default criteria" in text
    assert_same_breakdown(shown_terms(tab, "default"), text, expected)
    assert "no breakdown" in open_why(tab, "default", reference) and "it is the pool's reference model" in \
        tab.locator("#why-default").inner_text()

    tab.get_by_role("tab", name="Customizable leaderboard").click()
    tab.locator("#groups").get_by_label("Code").check()
    tab.locator("#criteria textarea").fill("\n".join(CRITERIA))
    rank_custom(tab)
    text = open_why(tab, "custom", model)
    tab.screenshot(path=str(screenshot_dir / "page_why.png"), full_page=True)
    board = build_leaderboard("alpaca_eval", ["Code"], [], DEFAULT_METHOD, BootstrapSettings(), published=published)
    expected = cli_breakdown(model, board, "alpaca_eval", CRITERIA, scorer=scorer)
    assert_same_breakdown(shown_terms(tab, "custom"), text, expected)
    assert "(Code)" in text and all(f"“{criterion}”" in text for criterion in CRITERIA)
    context.close()


def test_why_says_a_neural_crm_has_no_breakdown(page):
    page.wait_for_function("() => document.querySelector('#why-model-default input').value !== ''")
    page.locator("#why-run-default").click()
    page.wait_for_function("() => document.querySelector('#why-default').innerText.includes('no breakdown')")
    assert "the default CRM is factorized, whose reward is not a sum of readable terms" in \
        page.locator("#why-default").inner_text()
    assert page.locator("#why-default table").count() == 0
