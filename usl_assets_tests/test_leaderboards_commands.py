"""`usl leaderboard` through usl_assets.cli.main, on a published warehouse built by the real assets."""

import io
import re
import json
import shutil

import pandas as pd
import pytest

from usl_assets.cli import main
from usl_assets.resources import DataDir, UslHome, Warehouse
from usl_assets_tests.test_leaderboards_assets import materialize_leaderboards
from usl_assets_tests.page_support import train_small_linear_crm
from usl_assets_tests.test_leaderboards_fixtures import ALPACA_MODELS, write_upstream


@pytest.fixture(scope="module")
def published_home(tmp_path_factory, shared_data_dir):
    """USL_HOME with the leaderboards materialized and published; USL_HOME points at it for the module."""
    home = tmp_path_factory.mktemp("leaderboard_cli") / "usl_home"
    resources = {"data_dir": DataDir(path=str(shared_data_dir)), "usl_home": UslHome(path=str(home)),
                 "warehouse": Warehouse(path=str(home / "warehouse.duckdb"))}
    write_upstream(resources["warehouse"], shared_data_dir)
    assert materialize_leaderboards(resources).success
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("USL_HOME", str(home))
        patch.setenv("USL_DATA_DIR", str(shared_data_dir))
        yield home


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["leaderboard", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_table_shows_overall_and_topic_columns_with_intervals(published_home, capsys):
    code, out, _ = run(capsys, "--pool", "alpaca_eval", "--topic", "Code", "--topic", "open_question")
    assert code == 0
    header, *rows, note, legend, latency = out.splitlines()
    assert header.split() == ["rank", "model", "overall", "Code", "open_question", "Code", "+", "open_question"]
    assert len(rows) == len(ALPACA_MODELS)
    assert note.startswith("ranked by Code + open_question: ") and "too few prompts to separate" in note
    assert re.search(r"gpt4_1106_preview \(reference\)\s+50\.0 \[50\.0, 50\.0\]", out)
    assert latency.startswith("latency: ")
    # the rank rule is stated, shared ranks are marked, the reference is named as such
    assert legend.startswith("Rank: 1 + the number of models whose 95% interval lies wholly above")
    assert "gpt4_1106_preview is the reference every other model is compared with" in legend
    ranks = [row.split()[0] for row in rows]
    assert any(rank.endswith("=") for rank in ranks), ranks  # the fixture has overlapping intervals
    for rank in ranks:
        assert rank.endswith("=") == (sum(r.rstrip("=") == rank.rstrip("=") for r in ranks) > 1), ranks
    code, out, _ = run(capsys, "--pool", "alpaca_eval", "--method", "bradley_terry")
    assert "(reference)" not in out and "is the reference" not in out  # Bradley–Terry has no reference


def test_csv_and_json_match_the_published_rankings(published_home, capsys):
    code, out, err = run(capsys, "--pool", "alpaca_eval", "--topic", "Code", "--format", "csv")
    assert code == 0 and err.startswith("latency: ")
    table = pd.read_csv(io.StringIO(out)).set_index("model")
    published = Warehouse(path=str(published_home / "published" / "warehouse.duckdb")).query(
        "SELECT model, score FROM leaderboard.rankings WHERE pool = 'alpaca_eval' AND profile = 'default' "
        "AND method = 'usl_soft' AND scenario = 'Code'").set_index("model")["score"]  # the default method
    assert table["Code"].to_dict() == pytest.approx(published.round(2).to_dict(), abs=0.006)
    assert list(table.columns[:5]) == ["rank", "n_prompts", "overall", "overall_low", "overall_high"]
    code_ranks = Warehouse(path=str(published_home / "published" / "warehouse.duckdb")).query(
        "SELECT model, rank, n_prompts FROM leaderboard.rankings WHERE pool = 'alpaca_eval' AND profile = 'default' "
        "AND method = 'usl_soft' AND scenario = 'Code'").set_index("model")
    assert table["rank"].to_dict() == code_ranks["rank"].to_dict()  # one topic: ranked by its prompts
    assert table["n_prompts"].to_dict() == code_ranks["n_prompts"].to_dict()
    assert list(table["rank"]) == sorted(table["rank"])  # best first by the topic's rank
    code, out, _ = run(capsys, "--pool", "mt_bench", "--format", "json", "--method", "bradley_terry")
    document = json.loads(out)
    assert code == 0 and {r["model"] for r in document["models"]} == {"gpt-4", "gpt-3.5-turbo", "vicuna-13b-v1.3",
                                                                        "llama-13b"}
    published_checkpoints = Warehouse(path=str(published_home / "published" / "warehouse.duckdb")).query(
        "SELECT DISTINCT checkpoint_id FROM leaderboard.response_scores WHERE pool = 'mt_bench'")["checkpoint_id"]
    assert document["checkpoint_id"] == published_checkpoints.item() and document["criteria"] is None
    assert document["method"] == "bradley_terry" and document["topics"][0]["topic"] == "all"
    assert document["topics"][0]["n_prompts"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--pool", "nope"], "unknown pool 'nope': the published leaderboard has alpaca_eval, mt_bench"),
    (["--pool", "alpaca_eval", "--topic", "astrology"], "unknown topic 'astrology' for pool alpaca_eval"),
])
def test_bad_arguments_are_one_clear_line(published_home, capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and message in err


def test_own_criteria_are_scored_then_ranked(published_home, capsys, shared_data_dir, tiny_backbone):
    """--criteria scores the pool under the user's criteria with a real (tiny, briefly trained) CRM checkpoint in
    USL_HOME, through score_adhoc_profile, and ranks the rewards the way the assets do."""
    from usl_assets.crm.checkpoints import write_default_architecture
    from usl_assets_tests.test_scoring_support import train_tiny_crm

    train_tiny_crm(shared_data_dir, str(tiny_backbone), "cross", published_home / "models")
    write_default_architecture(published_home / "models" / "crm", "cross")
    argv = ["--pool", "alpaca_eval", "--topic", "Code", "--criteria", "Prefers brief answers.", "--format", "csv"]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    table = pd.read_csv(io.StringIO(out)).set_index("model")
    assert set(table.index) == set(ALPACA_MODELS)
    code_prompts = Warehouse(path=str(published_home / "published" / "warehouse.duckdb")).query(
        "SELECT count(DISTINCT prompt_id) AS n FROM leaderboard.response_scores WHERE pool = 'alpaca_eval' "
        "AND scenario_group = 'Code'")["n"].item()
    assert table.loc["gpt4_1106_preview", "Code"] == 50.0 and table["n_prompts"].eq(code_prompts).all()
    assert 0 < code_prompts < 30  # ranked over Code's prompts, not the pool's 30
    assert ((table["overall_low"] <= table["overall"]) & (table["overall"] <= table["overall_high"])).all()
    live = Warehouse(path=str(published_home / "warehouse.duckdb"))
    assert not live.table_exists("scoring.reward_cache")  # the file Dagster writes is never touched
    cache = Warehouse(path=str(published_home / "adhoc" / "scores.duckdb"))  # the CLI's own
    cached = cache.query("SELECT count(*) AS n FROM scoring.reward_cache")["n"].iloc[0]
    assert cached == len(ALPACA_MODELS) * 30  # every response of the pool scored once under the new criteria
    again, out_again, _ = run(capsys, *argv)
    assert again == 0 and out_again == out  # cached and seeded: the same table
    assert cache.query("SELECT count(*) AS n FROM scoring.reward_cache")["n"].iloc[0] == cached


@pytest.mark.parametrize("method", ["usl_soft", "usl", "usl_lc", "bradley_terry"])
def test_rewards_ranked_on_demand_score_as_the_assets_score_them(published_home, method):
    """The CLI's and the page's path (build_leaderboard over rewards handed to it) and the assets' path
    (response_scores → the SQL models → leaderboard.rankings) give the same point scores for the same rewards:
    here the default profile's rewards of the published slice. The intervals are seeded by different keys."""
    from usl_assets.leaderboards.commands import build_leaderboard
    from usl_assets.leaderboards.ranking import BootstrapSettings

    published = published_home / "published" / "warehouse.duckdb"
    warehouse = Warehouse(path=str(published))
    rewards = warehouse.query("SELECT pool, prompt_id, model, scenario, length_chars, reward "
                              "FROM leaderboard.response_scores WHERE pool = 'alpaca_eval' AND profile = 'default'")
    board = build_leaderboard("alpaca_eval", ["Code", "open_question"], ["Any criterion."], method,
                              BootstrapSettings(usl_rounds=20, bt_rounds=5), score=lambda pool, _: rewards,
                              published=published)
    assets = warehouse.query(
        "SELECT scenario, model, score, n_prompts FROM leaderboard.rankings WHERE pool = 'alpaca_eval' "
        "AND profile = 'default' AND method = ? AND scenario IN ('all', 'Code', 'open_question')", [method])
    on_demand = board.long.loc[board.long["scenario"] != "Code + open_question", ["scenario", "model", "score",
                                                                                    "n_prompts"]]
    key = ["scenario", "model"]
    assert len(assets) == 3 * len(ALPACA_MODELS)
    pd.testing.assert_frame_equal(on_demand.sort_values(key, ignore_index=True),
                                  assets.sort_values(key, ignore_index=True), check_dtype=False, rtol=1e-9)


def test_several_topics_rank_by_their_pooled_prompts(published_home):
    """Two topics: the rank is over both topics' prompts together, under the default criteria ranked from the
    published rewards exactly as the same rewards are ranked on demand; one topic: the published topic ranking."""
    from usl_assets.leaderboards.commands import build_leaderboard, scope_note
    from usl_assets.leaderboards.ranking import BootstrapSettings

    published = published_home / "published" / "warehouse.duckdb"
    warehouse = Warehouse(path=str(published))
    rewards = warehouse.query("SELECT pool, prompt_id, model, scenario, length_chars, reward FROM "
                              "leaderboard.response_scores WHERE pool = 'alpaca_eval' AND profile = 'default'")
    settings = BootstrapSettings(usl_rounds=50, bt_rounds=5)
    topics = ["Code", "open_question"]
    default = build_leaderboard("alpaca_eval", topics, [], "usl_soft", settings, published=published)
    on_demand = build_leaderboard("alpaca_eval", topics, ["Any criterion."], "usl_soft", settings,
                                  score=lambda pool, _: rewards, published=published)
    assert default.scope == on_demand.scope == "Code + open_question"
    pooled = [board.long[board.long["scenario"] == board.scope].set_index("model").sort_index()
              for board in (default, on_demand)]
    pd.testing.assert_frame_equal(*pooled, check_dtype=False, check_like=True)
    n_code, n_open = (default.long[default.long["scenario"] == t]["n_prompts"].max() for t in topics)
    assert pooled[0]["n_prompts"].max() == n_code + n_open  # the topics' prompts, pooled
    assert default.wide["rank"].tolist() == sorted(pooled[0]["rank"])  # ordered by the pooled rank
    assert default.wide.set_index("model")["rank"].to_dict() == pooled[0]["rank"].to_dict()
    overall = build_leaderboard("alpaca_eval", topics, [], "usl_soft", settings, published=published,
                                rank_by_topics=False)
    ranks = overall.long[overall.long["scenario"] == "all"].set_index("model")["rank"]
    assert overall.wide.set_index("model")["rank"].to_dict() == ranks.to_dict()  # the page's default tab
    assert "too few prompts" not in scope_note(overall.long, "all")


EXPLAINED = ["The user prefers brief answers.", "The user prefers thorough, detailed answers.", "qwz zzz"]


@pytest.fixture(scope="module")
def linear_home(published_home, tmp_path_factory, shared_data_dir):
    """A USL_HOME of its own: a copy of the published warehouse and a small linear CRM (real pairs) as the default,
    so --explain has a linear CRM to read and the other tests' caches stay as they are."""
    from usl_assets.crm.checkpoints import write_default_architecture

    home = tmp_path_factory.mktemp("leaderboard_explain") / "usl_home"
    shutil.copytree(published_home / "published", home / "published")
    train_small_linear_crm(shared_data_dir, home / "models")
    write_default_architecture(home / "models" / "crm", "linear")
    return home


def explained_argv(*extra: str) -> list[str]:
    criteria = [part for line in EXPLAINED for part in ("--criteria", line)]
    return ["--pool", "alpaca_eval", "--bootstrap-rounds", "20", *criteria, *extra]


def test_explain_prints_how_the_crm_reads_each_criterion_and_the_set(linear_home, monkeypatch, capsys):
    from usl_assets.crm.reading import read_criteria, render_reading
    from usl_assets.scoring.score import load_scorer

    monkeypatch.setenv("USL_HOME", str(linear_home))
    code, out, err = run(capsys, *explained_argv("--explain"))
    assert code == 0, err
    reading = render_reading(read_criteria(load_scorer(linear_home), EXPLAINED))
    assert out.index("rank") < out.index(reading) < out.index("latency: ")  # after the table, to stdout
    lines = reading.splitlines()
    assert lines[1].startswith("  all 3 criteria: length ")
    assert lines[2].startswith(f"  '{EXPLAINED[0]}': length ↓") and lines[3].startswith(f"  '{EXPLAINED[1]}': length ↑")
    assert f"warning: criterion '{EXPLAINED[2]}' is read as almost nothing" in reading
    assert "warning: criteria pull length in opposite directions" in reading
    assert "  read as a wish: the rest of the CRM's judgment counts " in reading  # the wish focus's share

    code, out, err = run(capsys, *explained_argv("--explain", "--format", "json"))
    document = json.loads(out)  # stdout stays one JSON document
    assert code == 0 and len(document["models"]) == len(ALPACA_MODELS)
    assert document["criteria"] == EXPLAINED and document["pool"] == "alpaca_eval"
    assert document["checkpoint_id"] == load_scorer(linear_home).checkpoint_id
    assert document["topics"] == [{"topic": "all", "n_prompts": 30}]
    assert reading in err and err.rstrip().splitlines()[-1].startswith("latency: ")


def test_explain_costs_nothing_unless_asked_and_says_when_there_is_nothing(linear_home, monkeypatch, capsys):
    from usl_assets.crm import reading

    monkeypatch.setenv("USL_HOME", str(linear_home))
    monkeypatch.setattr(reading, "read_criteria", lambda *_: pytest.fail("read without --explain"))
    code, out, err = run(capsys, *explained_argv("--format", "csv"))
    assert code == 0 and "how the CRM reads" not in out + err
    code, out, _ = run(capsys, "--pool", "alpaca_eval", "--explain")  # the default profile: no CRM is loaded
    assert code == 0 and "nothing of yours to explain" in out and out.index("rank") < out.index("nothing of yours")
    with pytest.raises(SystemExit):
        main(["leaderboard", "--help"])
    assert "--explain" in capsys.readouterr().out


def test_the_command_line_keeps_library_chatter_for_verbose(published_home, shared_data_dir, tiny_backbone):
    """transformers' weight-loading bars and load reports reach stderr only with --verbose (`usl` as users run it),
    here with a neural CRM as the default (the linear one loads no transformers at all)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from usl_assets.crm.checkpoints import write_default_architecture
    from usl_assets_tests.test_scoring_support import train_tiny_crm

    train_tiny_crm(shared_data_dir, str(tiny_backbone), "cross", published_home / "models")  # reused when there
    write_default_architecture(published_home / "models" / "crm", "cross")
    usl = Path(sys.executable).with_name("usl")
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    env["USL_HOME"] = str(published_home)

    def stderr(*flags: str) -> str:
        done = subprocess.run([str(usl), *flags, "leaderboard", "--pool", "mt_bench", "--bootstrap-rounds", "20",
                               "--criteria", f"Chatter check {' '.join(flags)}."], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "Loading weights" in stderr("--verbose")
    quiet = stderr()
    assert "LOAD REPORT" not in quiet and "Loading weights" not in quiet


def test_a_new_criterion_reuses_the_response_rows_scoring_published(linear_home, tmp_path, monkeypatch):
    """Scoring caches each answer's response row (scoring.response_embeddings) in the warehouse it publishes; the
    CLI's ad hoc cache copies them, so a new criterion embeds no answer, and its rewards are the same as when every
    row is computed afresh."""
    from usl_assets.leaderboards.commands import score_in_warehouse
    from usl_assets.responses.pools import content_hash
    from usl_assets.scoring.cache import EMBEDDINGS, ensure_tables, store_embeddings
    from usl_assets.scoring.score import load_scorer

    fresh_home, reused_home = tmp_path / "fresh", tmp_path / "reused"
    for home in (fresh_home, reused_home):
        shutil.copytree(linear_home, home)
        shutil.rmtree(home / "adhoc", ignore_errors=True)  # what the other tests scored there
    published = Warehouse(path=str(reused_home / "published" / "warehouse.duckdb"))
    answers = published.query("SELECT prompt, response FROM responses.responses WHERE pool = 'alpaca_eval'")
    scorer = load_scorer(reused_home)
    rows = scorer.embed_responses(list(answers["prompt"]), list(answers["response"]))
    ensure_tables(published, (EMBEDDINGS,))
    with published.transaction() as writer:  # what the scoring stage leaves in the warehouse it publishes
        store_embeddings(writer, scorer.checkpoint_id,
                         [content_hash(p, r) for p, r in zip(answers["prompt"], answers["response"])], rows)
    criteria = ["Answer in two sentences at most."]
    monkeypatch.setenv("USL_HOME", str(reused_home))
    reused = score_in_warehouse("alpaca_eval", criteria)
    monkeypatch.setenv("USL_HOME", str(fresh_home))
    fresh = score_in_warehouse("alpaca_eval", criteria)
    assert reused.attrs["stats"].embedded == 0 and fresh.attrs["stats"].embedded == len(answers)
    key = ["prompt_id", "model"]
    assert reused.sort_values(key)["reward"].to_numpy() == pytest.approx(fresh.sort_values(key)["reward"].to_numpy(),
                                                                          rel=1e-5)


def test_explain_model_splits_its_reward_gap_to_the_reference_into_the_crm_terms(linear_home, monkeypatch, capsys):
    """--explain MODEL: the model's mean reward difference against the reference, over the prompts ranked, split into
    the linear CRM's terms; the terms add up to the reward scoring gave each answer, and the total to the mean
    difference of the rewards the ranking used."""
    from usl_assets.leaderboards.commands import score_in_warehouse
    from usl_assets.leaderboards.explain import NGRAM_TERM, reward_terms
    from usl_assets.scoring.score import load_scorer

    monkeypatch.setenv("USL_HOME", str(linear_home))
    model = next(m for m in ALPACA_MODELS if m != "gpt4_1106_preview")
    code, out, err = run(capsys, *explained_argv("--topic", "Code", "--explain", model))
    assert code == 0, err
    assert f"why {model} ranks here: its reward against gpt4_1106_preview's (the reference)" in out
    assert "(Code)" in out and "how the CRM reads the criteria" in out  # the reading comes with it
    rewards = score_in_warehouse("alpaca_eval", EXPLAINED)
    code_rewards = rewards[rewards["prompt_id"].isin(
        Warehouse(path=str(linear_home / "published" / "warehouse.duckdb")).query(
            "SELECT prompt_id FROM responses.responses WHERE pool = 'alpaca_eval' AND scenario_group = 'Code'"
        )["prompt_id"])].pivot(index="prompt_id", columns="model", values="reward")
    gap = (code_rewards[model] - code_rewards["gpt4_1106_preview"]).mean()
    shown = float(re.search(r"reward difference ([+-][0-9.]+) on average", out).group(1))
    assert shown == pytest.approx(gap, abs=6e-4)
    terms = re.findall(r"^    (.+?)\s+([+-][0-9.]+)  \(\d+% of the moves\)$", out, flags=re.M)
    assert NGRAM_TERM in dict(terms) and "length" in dict(terms)
    assert sum(float(value) for _, value in terms) == pytest.approx(shown, abs=0.002 * len(terms))

    scorer = load_scorer(linear_home)  # the terms of any answer add up to its reward
    rows = scorer.embed_responses(["Say hi.", "Sort a list in Python."], ["Hi!", "Use `sorted(xs)`.\n\n- one\n- two"])
    vector = scorer.embed_criteria([tuple(EXPLAINED)])
    assert reward_terms(scorer.weights, rows, vector).sum(axis=1).to_numpy() == pytest.approx(
        scorer.score_embedded(rows, vector[0]), abs=1e-4)

    code, out, _ = run(capsys, *explained_argv("--explain", "gpt4_1106_preview"))
    assert code == 0 and "it is the pool's reference model" in out
    code, out, err = run(capsys, *explained_argv("--explain", "no-such-model"))
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "not a ranked model of pool alpaca_eval" in err


def test_a_new_criterion_with_the_linear_crm_loads_no_torch_and_no_dagster(linear_home):
    """What made `usl leaderboard --criteria …` slow was loading torch and transformers for the criteria encoder
    (the linear CRM embeds criteria in NumPy, crm/numpy_encoder.py), Dagster for the warehouse resource (the ad
    hoc cache is a plain WarehouseFile) and, for --explain, the reading's references computed anew in every process
    (kept in the ad hoc folder)."""
    import os
    import subprocess
    import sys

    code = ("import sys; from usl_assets.cli import main;"
            "code = main(['leaderboard', '--pool', 'alpaca_eval', '--bootstrap-rounds', '20', '--criteria', "
            "'Keep it under fifty words, thanks.', '--format', 'csv', '--explain']);"
            "print(*(m in sys.modules for m in ('torch', 'transformers', 'dagster')), code, file=sys.stderr)")
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "USL_HOME": str(linear_home)},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines()[-1] == "False False False 0", done.stderr
        assert "how the CRM reads the criteria (" in done.stderr
        assert len(pd.read_csv(io.StringIO(done.stdout))) == len(ALPACA_MODELS)
        assert len(list((linear_home / "adhoc").glob("reading_reference_*.json"))) == 1


def test_a_checkpoint_the_code_reads_differently_is_one_clear_line(linear_home, tmp_path, monkeypatch, capsys):
    """A CRM trained under other criteria-reading rules is never scored as it is: one line says to retrain it."""
    from usl_assets.crm import criteria_prototypes

    home = tmp_path / "usl_home"
    shutil.copytree(linear_home, home)
    for shape_file in (home / "models").rglob(criteria_prototypes.SHAPE_FILE):
        shape = json.loads(shape_file.read_text())
        shape_file.write_text(json.dumps({**shape, "vocabulary": "an-older-rule-set"}))
    monkeypatch.setenv("USL_HOME", str(home))
    code, out, err = run(capsys, "--pool", "alpaca_eval", "--criteria", "Use bullet points.")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "other prototype settings than this code: retrain it" in err
