"""The leaderboards' audits (leaderboards/audits.py, fidelity.py, audit_assets.py): the probes are built as
crm/gaming.py says from the pool's own answers, a probe that beats a real model fails, criteria fidelity measures
what a criterion ranks, and one materialize() of the leaderboards group with a real (tiny, linear) CRM over real slices writes both
tables for every pool without a probe reaching the leaderboard."""

import shutil
from pathlib import Path

import dagster as dg
import duckdb
import numpy as np
import pandas as pd
import pytest

from usl_assets.crm import gaming
from usl_assets.crm.assets import CrmSettings, crm_default_checkpoint
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.features import response_counts
from usl_assets.crm.checkpoints import write_default_architecture
from usl_assets.crm.checkpoints import load_scorer
from usl_assets.crm.train import TrainConfig, train_crm
from usl_assets.leaderboards import audit_assets, audits, fidelity, ranking
from usl_assets.resources import DataDir, UslHome, Warehouse
from usl_assets.responses.pools import content_hash
from usl_assets.scoring import score
from usl_assets_tests.test_leaderboards_assets import FAST, GROUP_ASSETS, GROUP_CHECKS
from usl_assets_tests.test_leaderboards_fixtures import write_upstream
from usl_assets_tests.test_scoring_support import training_pairs

SEED = 3
MODELS = ["ref", "strong", "middle", "weak"]  # best first; "ref" is the reference
LENGTHS = {"ref": 4, "strong": 6, "middle": 2, "weak": 1}  # sentences per answer, on top of the prompt's own


def answers_frame(n_prompts: int = 6) -> pd.DataFrame:
    rows = []
    for model in MODELS:
        for i in range(n_prompts):
            text = f"{model} answers question {i}. " + "It explains the matter in plain words. " * (i + LENGTHS[model])
            rows.append({"pool": "p", "prompt_id": f"{i:02d}", "model": model, "prompt": f"Question {i}: why?",
                         "response": text, "scenario": "open_question", "scenario_group": "General",
                         "length_chars": len(text)})
    return pd.DataFrame(rows)


def standing() -> pd.DataFrame:
    return pd.DataFrame({"model": MODELS, "score": [50.0, 48.0, 30.0, 10.0], "rank": [1, 1, 2, 3]})


def test_probes_are_built_from_the_pools_answers_with_the_heldout_bank():
    answers = answers_frame()
    sources = audits.probe_sources(standing(), reference_model="ref")
    assert sources == {"weakest": "weak", "strongest": "strong"}  # the reference is never the strongest source
    prompts = answers.drop_duplicates("prompt_id")
    probes = audits.build_probes(answers, prompts, sources, SEED, "p")
    assert probes.groupby("probe").size().to_dict() == {name: 6 for name in audits.PROBES}
    by_probe = {name: rows.set_index("prompt_id") for name, rows in probes.groupby("probe")}
    own = {m: rows.set_index("prompt_id")["response"] for m, rows in answers.groupby("model")}
    padded = by_probe["padded"]
    assert set(padded["derives_from"]) == {"weak"} and set(padded["expectation"]) == {audits.AT_OR_BELOW_SOURCE}
    for prompt_id, text in padded["response"].items():
        assert own["weak"][prompt_id].strip() in text and "### Introduction" in text  # held-out headings
        assert "## Overview" not in text  # never the training bank's
        assert text == gaming.padded(own["weak"][prompt_id], "heldout", SEED, "audit", "p", prompt_id)
    off_topic = by_probe["off_topic"]
    assert set(off_topic["derives_from"]) == {"strong"}
    assert set(off_topic["expectation"]) == {audits.BELOW_EVERY_REAL_MODEL}
    assert sorted(off_topic["response"]) == sorted(own["strong"])  # the strong answers, each moved elsewhere
    assert all(text != own["strong"][prompt_id] for prompt_id, text in off_topic["response"].items())
    assert by_probe["generic"]["response"].nunique() == 1
    assert by_probe["generic"]["response"].iloc[0] in gaming._GENERIC["heldout"]
    assert by_probe["generic"]["derives_from"].isna().all()
    for prompt_id, text in by_probe["echo"]["response"].items():
        assert f"Question {int(prompt_id)}: why?" in text
    truncated = by_probe["truncated"]
    assert set(truncated["derives_from"]) == {"strong"}
    for prompt_id, text in truncated["response"].items():
        words = own["strong"][prompt_id].split()
        assert text.split() == words[:max(1, len(words) // 8)]
    again = audits.build_probes(answers.sample(frac=1, random_state=1), prompts, sources, SEED, "p")
    assert again.sort_values(["probe", "prompt_id"], ignore_index=True).equals(
        probes.sort_values(["probe", "prompt_id"], ignore_index=True))  # seeded, not row order


def ranked_frame(probe_scores: dict[str, float]) -> pd.DataFrame:
    scores = {**dict(zip(MODELS, [50.0, 48.0, 30.0, 10.0])),
              **{audits.PROBE_PREFIX + name: value for name, value in probe_scores.items()}}
    frame = pd.DataFrame({"model": list(scores), "score": list(scores.values())})
    return ranking.with_ranks(frame.assign(ci_low=frame["score"] - 1, ci_high=frame["score"] + 1))


def probe_rows() -> pd.DataFrame:
    sources = {"weakest": "weak", "strongest": "strong"}
    return pd.DataFrame([{"probe": name, "derives_from": sources[source] if source else None, "expectation": kind}
                         for name, (source, kind) in audits.PROBES.items()])


def test_a_probe_that_beats_a_real_model_fails():
    losing = {"padded": 8.0, "off_topic": 2.0, "generic": 3.0, "echo": 1.0, "truncated": 9.0}
    rows = audits.audit_rows(ranked_frame(losing), probe_rows(), "p", "ckpt").set_index("probe")
    assert rows["passed"].all()
    assert (rows["n_ranked"] == 9).all() and (rows["lowest_real_score"] == 10.0).all()
    assert rows.loc["padded", "source_score"] == 10.0 and rows.loc["truncated", "source_score"] == 48.0
    assert rows.loc["echo", "rank"] > rows.loc["echo", "lowest_real_rank"]
    # generic beats the weakest real model; padded beats its own source; truncated ties its source (allowed)
    bought = {**losing, "generic": 12.0, "padded": 11.0, "truncated": 48.0}
    rows = audits.audit_rows(ranked_frame(bought), probe_rows(), "p", "ckpt").set_index("probe")
    assert rows["passed"].to_dict() == {"padded": False, "off_topic": True, "generic": False, "echo": True,
                                        "truncated": True}
    assert audits.probe_passed(audits.BELOW_EVERY_REAL_MODEL, 10.0, 10.0, np.nan) is False  # equal is not below
    assert audits.probe_passed(audits.AT_OR_BELOW_SOURCE, np.nan, 10.0, 20.0) is False  # unscored fails
    missing = audits.audit_rows(ranked_frame({}), probe_rows(), "p", "ckpt")
    assert not missing["passed"].any()


def test_probes_are_ranked_with_the_real_models_by_the_leaderboards_functions():
    answers = answers_frame()
    real = answers.assign(reward=answers["model"].map({"ref": 2.0, "strong": 1.5, "middle": 1.0, "weak": 0.0}),
                          checkpoint_id="ckpt")
    probes = real[real["model"] == "weak"].assign(model=audits.PROBE_PREFIX + "echo", reward=-3.0)
    settings = ranking.BootstrapSettings(usl_rounds=100)
    ranked = audits.rank_with_probes(real, probes, "ref", 1.0, settings, "p").set_index("model")
    assert ranked.index[-1] == audits.PROBE_PREFIX + "echo" and len(ranked) == 5
    assert ranked.loc["ref", "score"] == pytest.approx(50.0)
    assert ranked.loc["weak", "score"] == pytest.approx(100 / (1 + np.exp(2.0)))  # σ(k · Δreward)
    assert ranked.loc[audits.PROBE_PREFIX + "echo", "score"] == pytest.approx(100 / (1 + np.exp(5.0)))


class PropertyScorer:
    """A CachedResponseScorer whose response row is [words, questions] and whose criteria embedding picks the
    property the criterion names (or nothing, `blind`): the audit must see which one follows its criterion."""

    checkpoint_id, architecture = "fake", "linear"

    def __init__(self, blind: bool = False):
        self.blind, self.embedded = blind, 0

    def embed_responses(self, prompts, responses, batch_size=32):
        self.embedded += len(responses)
        counts = [response_counts(text) for text in responses]
        return np.array([[c["words"], c["questions"]] for c in counts], dtype=np.float32)

    def embed_criteria(self, criteria):
        def vector(text):
            sign = -1.0 if "brief" in text else 1.0
            return [0.0, 0.0] if self.blind else ([sign, 0.0] if "brief" in text or "long" in text else [0.0, sign])
        return np.array([vector(c[0]) for c in criteria], dtype=np.float32)

    def score_embedded(self, rows, criteria_row):
        return rows @ criteria_row

    def score(self, items, batch_size=16, progress=False):
        rows = self.embed_responses([i.prompt for i in items], [i.response for i in items])
        return np.array([row @ self.embed_criteria([i.criteria])[0] for row, i in zip(rows, items)])


K = 0.05  # usl_soft's temperature here: differences of a few words stay away from 0 and 1
PHRASINGS = [("length", "more", "plain", "Prefers long answers."), ("length", "less", "plain", "Prefers brief ones."),
             ("questions", "more", "plain", "Asks questions back.")]


def property_value(name: str, counts: dict) -> float:
    return float(counts["words"] if name == "length" else counts["questions"])


def fidelity_answers() -> pd.DataFrame:
    answers = answers_frame()
    asks = {"ref": 1, "strong": 3, "middle": 0, "weak": 2}
    return answers.assign(response=[text + " Why?" * asks[m] for text, m in zip(answers["response"],
                                                                                answers["model"])]) \
        .assign(length_chars=lambda f: f["response"].str.len())


def test_criteria_fidelity_measures_whether_a_criterion_ranks_what_it_says():
    answers = fidelity_answers()
    table = fidelity.fidelity_pool("p", answers, "ref", PHRASINGS, property_value, PropertyScorer(), {}, K)
    assert list(table.columns) == fidelity.FIDELITY_COLUMNS and len(table) == 3
    assert (table["n_models"] == 4).all() and (table["checkpoint_id"] == "fake").all()
    assert table["spearman"].tolist() == pytest.approx([1.0, 1.0, 1.0])
    # over the prompts where the property differs between answers, the same ranking here
    assert (table["varying_prompts"] > 0).all()
    assert table["spearman_where_it_varies"].tolist() == pytest.approx([1.0, 1.0, 1.0])
    by_text = table.set_index("phrasing")
    # length alone ranks the length property perfectly in both directions, but not the questions asked
    assert by_text.loc["Prefers long answers.", "length_spearman"] == pytest.approx(1.0)
    assert by_text.loc["Prefers brief ones.", "length_spearman"] == pytest.approx(1.0)
    assert by_text.loc["Asks questions back.", "length_spearman"] < 0.5
    # a perfect reader (per prompt, more of the property than the reference wins) ranks the questions too: the
    # strong and weak models both ask more than the reference on every prompt, so they tie
    assert by_text.loc["Asks questions back.", "property_spearman"] == pytest.approx(0.9487, abs=1e-3)
    assert by_text.loc["Prefers long answers.", "property_spearman"] == by_text.loc["Prefers brief ones.",
                                                                                    "property_spearman"]
    # made decisive, the property settles every comparison here (no answer ties with the reference's in it), so
    # the rewards' magnitudes are lost and the decisive reading is the perfect reader's
    assert table["decisive_spearman"].tolist() == pytest.approx(table["property_spearman"].tolist())
    blind = fidelity.fidelity_pool("p", answers, "ref", PHRASINGS, property_value, PropertyScorer(blind=True), {}, K)
    assert blind["spearman"].isna().all()  # every model scores 50: no ranking, no correlation
    passed, per_pool = fidelity.fidelity_verdict(table)
    assert passed and per_pool["median_spearman"].item() == pytest.approx(1.0)
    assert not fidelity.fidelity_verdict(blind)[0]
    assert not fidelity.fidelity_verdict(table.assign(spearman=[0.9, 0.4, 0.3]))[0]
    # a property the CRM never trained on is reported, but the check reads the trained ones
    untrained = fidelity.fidelity_pool("p", answers, "ref", PHRASINGS, property_value, PropertyScorer(), {}, K,
                                     trained={"length"})
    assert untrained["trained"].tolist() == [name == "length" for name, *_ in PHRASINGS]
    assert fidelity.fidelity_verdict(untrained.assign(spearman=[0.9, 0.9, -1.0]))[0]
    assert not fidelity.fidelity_verdict(untrained.assign(spearman=[0.9, 0.2, 1.0]))[0]


def test_decisive_scores_let_the_property_decide_and_the_reward_break_its_ties():
    # two prompts; "same" never differs from the reference in bold and has the better answers, "bold" has more
    # bold than the reference on one prompt and the worse answers
    answers = pd.DataFrame({"model": ["ref", "ref", "same", "same", "bold", "bold"],
                            "prompt_id": ["a", "b"] * 3})
    bold = pd.Series([0.0, 0.0, 0.0, 0.0, 2.0, 0.0])
    rewards = np.array([0.0, 0.0, 10.0, 10.0, -10.0, -10.0])
    more = fidelity.decisive_scores(answers, bold, rewards, "more", "ref", temperature=1.0)
    less = fidelity.decisive_scores(answers, bold, rewards, "less", "ref", temperature=1.0)
    tied_better, tied_worse = 1 / (1 + np.exp(-10.0)), 1 / (1 + np.exp(10.0))
    assert more["same"] == pytest.approx(100 * tied_better) == less["same"]  # the reward decides every tie
    assert more["bold"] == pytest.approx(100 * (1.0 + tied_worse) / 2)  # bold wins its prompt under "more"
    assert less["bold"] == pytest.approx(100 * (0.0 + tied_worse) / 2)  # and loses it under "less"
    assert more["ref"] == pytest.approx(50.0)
    # so even an infinitely strong "more bold" cannot lift the bold model over the better one that ties on bold
    assert more["bold"] < more["same"]


def test_criteria_fidelity_uses_cached_response_rows_and_matches_the_full_crm():
    answers = fidelity_answers()
    scorer = PropertyScorer()
    hashes = [content_hash(p, r) for p, r in zip(answers["prompt"], answers["response"])]
    cached = dict(zip(hashes[:10], scorer.embed_responses(None, answers["response"].iloc[:10].tolist())))
    scorer.embedded = 0
    cheap = fidelity.fidelity_pool("p", answers, "ref", PHRASINGS, property_value, scorer, cached, K)
    assert scorer.embedded == len(answers) - 10  # only what scoring did not cache
    full = fidelity.fidelity_pool("p", answers, "ref", PHRASINGS, property_value, PropertyScorer(), None, K)
    pd.testing.assert_frame_equal(cheap, full)


def test_the_checkpoint_must_be_the_one_that_scored_the_pool():
    assert audits.checkpoint_problem("a", {"a"}) is None
    assert "re-score" in audits.checkpoint_problem("a", {"b"})
    assert audits.checkpoint_problem("a", {"a", "b"})
    assert audits.checkpoint_problem("a", set())


# ---------------------------------------------------------------------------------------------------------------
# The assets, on real slices with a real (tiny) linear CRM


def tiny_linear_crm(data_root: Path, models_root: Path):
    """A real linear CRM (usl_assets.crm.train) fitted on a few Auto-J pairs, installed as the default."""
    pairs = training_pairs(data_root, n=40).assign(source="autoj", label_kind="human", soft_label=1.0)
    result = train_crm(pairs, resolve_backbone("minilm", models_root / "backbones"),
                       TrainConfig(architecture="linear", max_steps=20, max_length=64), models_root / "crm",
                       log=lambda _: None)
    write_default_architecture(models_root / "crm", "linear", result.checkpoint_id)
    return load_scorer(result.checkpoint_dir)


AUDIT_CONFIG = {"ops": {**FAST["ops"], "gaming_audit": {"config": {"usl_bootstrap_rounds": 200, "seed": 1}}}}


@pytest.fixture(scope="module")
def audited(tmp_path_factory, shared_data_dir):
    home = tmp_path_factory.mktemp("audits") / "usl_home"
    env = {"data_dir": DataDir(path=str(shared_data_dir)), "usl_home": UslHome(path=str(home)),
           "warehouse": Warehouse(path=str(home / "warehouse.duckdb"))}
    warehouse = env["warehouse"]
    responses = write_upstream(warehouse, shared_data_dir, n_prompts=12)
    scorer = tiny_linear_crm(shared_data_dir, home / "models")
    profiles = warehouse.query("SELECT * FROM scoring.criteria_profiles WHERE kind <> 'adhoc'")
    for pool, model in responses[["pool", "model"]].drop_duplicates().itertuples(index=False):
        score.score_partition(warehouse, scorer, pool, model, profiles)  # the fixture's rewards, re-scored for real
    calibration = warehouse.read_table("crm.calibration").assign(checkpoint_id=scorer.checkpoint_id)
    warehouse.replace_table("crm.calibration", calibration)
    before = {table: len(warehouse.read_table(table)) for table in
              ("scoring.reward_cache", "scoring.response_rewards", "scoring.criteria_profiles")}
    # Which CRM is the default comes from crm_default_checkpoint's materialization, as for response_rewards: a
    # default.json changed behind Dagster's back (no cross CRM exists) must not matter.
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([crm_default_checkpoint], instance=instance,
                          resources={**env, "crm_settings": CrmSettings(architecture="linear")}).success
    write_default_architecture(home / "models" / "crm", "cross")
    result = dg.materialize([*GROUP_ASSETS, *GROUP_CHECKS, *audit_assets.ASSETS, *audit_assets.CHECKS],
                            instance=instance, resources=env, run_config=AUDIT_CONFIG)
    assert result.success
    return warehouse, responses, scorer, result, before, instance


def test_the_audits_cover_every_pool_and_no_probe_reaches_the_leaderboard(audited):
    warehouse, responses, scorer, result, before, _ = audited
    pools = set(responses["pool"])
    gaming_table = warehouse.read_table("leaderboard.gaming_audit")
    assert list(gaming_table.columns) == audit_assets.GAMING_COLUMNS
    assert set(gaming_table["pool"]) == pools
    assert gaming_table.groupby("pool")["probe"].apply(set).to_dict() == {p: set(audits.PROBES) for p in pools}
    assert (gaming_table["checkpoint_id"] == scorer.checkpoint_id).all()
    ranked = warehouse.query("SELECT pool, count(DISTINCT model) AS n FROM leaderboard.rankings WHERE profile = "
                             "'default' AND scenario = 'all' AND method = 'usl_soft' GROUP BY pool")
    assert gaming_table.groupby("pool")["n_ranked"].first().to_dict() == {
        pool: n + len(audits.PROBES) for pool, n in zip(ranked["pool"], ranked["n"])}
    # the real models stand where leaderboard.rankings puts them: the same comparisons, temperature and method
    scores = warehouse.query("SELECT pool, model, score FROM leaderboard.rankings WHERE profile = 'default' AND "
                             "scenario = 'all' AND method = 'usl_soft'").set_index(["pool", "model"])["score"]
    sourced = gaming_table.dropna(subset=["derives_from"])
    assert sourced["source_score"].to_numpy() == pytest.approx(
        scores.loc[list(zip(sourced["pool"], sourced["derives_from"]))].to_numpy())
    assert gaming_table.groupby("pool")["lowest_real_score"].first().to_dict() == pytest.approx(
        scores.groupby(level="pool").min().to_dict())
    references = dict(warehouse.query("SELECT pool, reference_model FROM leaderboard.reference_models").values)
    for pool, rows in gaming_table.set_index("probe").groupby("pool"):
        pool_scores = scores.loc[pool]
        assert rows.loc["padded", "derives_from"] == pool_scores.idxmin()
        assert rows.loc["off_topic", "derives_from"] == rows.loc["truncated", "derives_from"] == \
            pool_scores.drop(references[pool]).idxmax()
    below = gaming_table["expectation"] == audits.BELOW_EVERY_REAL_MODEL
    assert (gaming_table.loc[below, "passed"] == (gaming_table.loc[below, "score"]
                                                  < gaming_table.loc[below, "lowest_real_score"])).all()
    measured = warehouse.read_table("leaderboard.criteria_fidelity")
    assert list(measured.columns) == audit_assets.FIDELITY_TABLE_COLUMNS and set(measured["pool"]) == pools
    assert measured["spearman"].dropna().between(-1, 1).all() and len(measured["spearman"].dropna())
    # probes and phrasings stay in the audit tables: never ranked, never answers, never scored into the warehouse
    for table, column in [("leaderboard.rankings", "model"), ("responses.responses", "model"),
                          ("leaderboard.response_scores", "model"), ("scoring.response_rewards", "model")]:
        assert not warehouse.read_table(table)[column].str.startswith(audits.PROBE_PREFIX).any(), table
    assert {t: len(warehouse.read_table(t)) for t in before} == before
    with duckdb.connect(str(warehouse.published_path()), read_only=True) as published:
        assert published.execute("SELECT count(*) FROM leaderboard.gaming_audit").fetchone()[0] == len(gaming_table)
        assert published.execute("SELECT count(*) FROM leaderboard.criteria_fidelity").fetchone()[0] == len(measured)


def test_the_audit_checks_report(audited):
    warehouse, _, _, result, _, _ = audited
    evaluations = {e.asset_check_key.name: e for e in result.get_asset_check_evaluations()}
    gaming_check, fidelity_check = evaluations["gaming_audit_probes_lose"], evaluations["criteria_fidelity_median"]
    gaming_table = warehouse.read_table("leaderboard.gaming_audit")
    assert gaming_check.passed == bool(gaming_table["passed"].all())
    assert gaming_check.severity == dg.AssetCheckSeverity.ERROR
    assert gaming_check.metadata["failing"].value == int((~gaming_table["passed"]).sum())
    assert fidelity_check.severity == dg.AssetCheckSeverity.WARN
    measured = warehouse.read_table("leaderboard.criteria_fidelity")
    assert fidelity_check.passed == fidelity.fidelity_verdict(measured)[0]
    assert fidelity_check.metadata["below_0_5"].value == int((measured["spearman"] < 0.5).sum())
    decisive = measured["decisive_spearman"].dropna()
    assert decisive.between(-1, 1).all() and len(decisive)
    metadata = result.asset_materializations_for_node("criteria_fidelity")[0].metadata
    assert {"by_pool", "by_family"} <= set(metadata)


def test_a_pool_scored_by_another_checkpoint_is_not_audited(audited, tmp_path, shared_data_dir):
    warehouse, _, scorer, _, _, instance = audited
    copy = Warehouse(path=str(shutil.copyfile(warehouse.published_path(), tmp_path / "w.duckdb")))
    with duckdb.connect(str(copy.database_path())) as conn:
        conn.execute("UPDATE leaderboard.response_scores SET checkpoint_id = 'another'")
    env = {"data_dir": DataDir(path=str(shared_data_dir)),
           "usl_home": UslHome(path=str(warehouse.database_path().parent)), "warehouse": copy}
    result = dg.materialize([audit_assets.gaming_audit], instance=instance, resources=env, raise_on_error=False)
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error.message
    assert "re-score" in failure and scorer.checkpoint_id in failure


def test_a_rebuild_audits_again_only_the_pools_whose_inputs_changed(audited, tmp_path, shared_data_dir):
    warehouse, responses, _, _, _, instance = audited
    copy = Warehouse(path=str(shutil.copyfile(warehouse.database_path(), tmp_path / "w.duckdb")))
    env = {"data_dir": DataDir(path=str(shared_data_dir)),
           "usl_home": UslHome(path=str(warehouse.database_path().parent)), "warehouse": copy}
    pools = sorted(set(responses["pool"]))
    before = {table: copy.read_table(table) for table in (audit_assets.GAMING_TABLE, audit_assets.FIDELITY_TABLE)}

    def rebuild() -> dict[str, str]:
        config = {"ops": {name: AUDIT_CONFIG["ops"][name] for name in ("gaming_audit", "criteria_fidelity")
                          if name in AUDIT_CONFIG["ops"]}}
        result = dg.materialize([audit_assets.gaming_audit, audit_assets.criteria_fidelity], instance=instance,
                                resources=env, run_config=config)
        assert result.success
        return {node: result.asset_materializations_for_node(node)[0].metadata["pools_reused"].value
                for node in ("gaming_audit", "criteria_fidelity")}

    assert rebuild() == {"gaming_audit": ", ".join(pools), "criteria_fidelity": ", ".join(pools)}
    for table, rows in before.items():
        pd.testing.assert_frame_equal(copy.read_table(table), rows)
    with duckdb.connect(str(copy.database_path())) as conn:  # one answer of the first pool changes
        prompt_id, model = conn.execute(
            "SELECT r.prompt_id, r.model FROM responses.responses r JOIN responses.prompt_sample s "
            "USING (pool, prompt_id) WHERE s.sampled AND r.pool = ? ORDER BY 1, 2 LIMIT 1", [pools[0]]).fetchone()
        conn.execute("UPDATE responses.responses SET response = response || ' Changed.' WHERE pool = ? AND "
                     "prompt_id = ? AND model = ?", [pools[0], prompt_id, model])
    assert rebuild() == {"gaming_audit": ", ".join(pools[1:]) or "none",
                         "criteria_fidelity": ", ".join(pools[1:]) or "none"}
