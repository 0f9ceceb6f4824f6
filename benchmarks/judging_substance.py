"""Dev measures for judging substance (gaming and criteria wording), on a `make run` warehouse, without rerunning
the pipeline: rebuild crm.training_pairs from its validated tables with the current code, fit the linear CRM under
each variant, then print

- accuracy per test split (gaming_pairs per trick too) beside the length baseline;
- the gaming audit on each pool: where the probe models built from the pool's own answers rank (usl_soft point
  estimate, temperature 1, default profile) among the real models;
- criteria fidelity: for each held-out phrasing, Spearman over the pool's models between their score under that
  phrasing and the property measured on their answers (median, min, and what mean length alone gives);
- LMArena 2025 agreement of the AlpacaEval pool's default ranking;
- dev fidelity (`--dev-fidelity`): the same Spearman on a dev pool that is no response pool: the AI judge's models
  that are in no pool, on 200 seeded AlpacaEval prompts, reference claude-2, under the TRAIN phrasings (what the
  criteria rows teach, read at leaderboard level), beside ranking by the property itself (its ceiling there).

    .venv/bin/python benchmarks/judging_substance.py [--home .usl] [--variants default relevance=false …]

Variants override LinearConfig fields (joined by +, as in benchmarks/graded_answers.py).
"""

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import spearmanr

import probes_under_wishes
from graded_answers import parse_variant
from usl_assets.crm import data, feature_workers, gaming, graded_answers, judge_pairs, linear, linear_crm, linear_rows
from usl_assets.crm.backbones import resolve_backbone
from usl_assets.crm.features import response_counts
from usl_assets.leaderboards import validity

REFERENCES = {"alpaca_eval": "gpt4_1106_preview", "mt_bench": "gpt-4"}


def memoized_rows(function):
    """Per-(prompt, answer) memo of a row-feature function, so variants in one run compute features once."""
    memo: dict = {}

    def rows(*columns):
        keys = list(zip(*columns))
        missing = list(dict.fromkeys(k for k in keys if k not in memo))
        if missing:
            memo.update(zip(missing, function(*map(list, zip(*missing)))))
        return np.stack([memo[k] for k in keys]) if keys else function(*columns)
    return rows


os.environ.setdefault(feature_workers.WORKERS_ENV, "1")  # the memos below must live in this process
for _name in ("answer_features", "degeneration_matrix"):
    setattr(linear_rows, _name, memoized_rows(getattr(linear_rows, _name)))


def memoized_relevance(function):
    """linear_rows.relevance_and_views, memoized per (prompt, answer, views, common stems): the rows and the views
    together."""
    memo: dict = {}

    def read(prompts, answers, views, common=frozenset()):
        keys = [(p, a, views, common) for p, a in zip(prompts, answers)]
        missing = list(dict.fromkeys(k for k in keys if k not in memo))
        if missing:
            rows, found = function([k[0] for k in missing], [k[1] for k in missing], views, common)
            memo.update(zip(missing, zip(rows, found)))
        if not keys:
            return function(prompts, answers, views, common)
        return np.stack([memo[k][0] for k in keys]), [memo[k][1] for k in keys]
    return read


linear_rows.relevance_and_views = memoized_relevance(linear_rows.relevance_and_views)


def load(home: Path) -> dict:
    with duckdb.connect(str(home / "published" / "warehouse.duckdb"), read_only=True) as con:
        return {
            "tagged": con.execute("SELECT * FROM validated.tagged_preferences").df(),
            "criteria": con.execute("SELECT * FROM validated.scenario_criteria").df(),
            "responses": con.execute("""
                SELECT r.pool, r.prompt_id, r.model, r.prompt, r.response, p.criteria
                FROM responses.responses r
                JOIN responses.prompt_sample s ON s.pool = r.pool AND s.prompt_id = r.prompt_id AND s.sampled
                JOIN scoring.criteria_profiles p ON p.kind = 'scenario_default' AND p.scenario = r.scenario
                ORDER BY r.pool, r.prompt_id, r.model""").df(),
        }


def probes(pool: pd.DataFrame, strongest: str, weakest: str, seed: int = 0) -> pd.DataFrame:
    prompts = pool.drop_duplicates("prompt_id")[["prompt_id", "prompt", "criteria"]].reset_index(drop=True)
    strong = prompts.merge(pool[pool["model"] == strongest][["prompt_id", "response"]], on="prompt_id")
    weak = prompts.merge(pool[pool["model"] == weakest][["prompt_id", "response"]], on="prompt_id")
    moved = gaming.shifted(list(strong["prompt_id"]), seed)
    frames = {
        "padded": weak.assign(response=[gaming.padded(r, "heldout", seed, i)
                                        for i, r in zip(weak["prompt_id"], weak["response"])]),
        "off_topic": strong.assign(response=[strong["response"].iloc[j] for j in moved]),
        "generic": prompts.assign(response=gaming.generic("heldout", seed, "audit")),
        "echo": prompts.assign(response=[gaming.echo(p, "heldout", seed, i)
                                         for i, p in zip(prompts["prompt_id"], prompts["prompt"])]),
        "truncated": strong.assign(response=strong["response"].map(gaming.truncated)),
    }
    return pd.concat([f.assign(model=f"probe:{name}") for name, f in frames.items()], ignore_index=True)


def rewards_under(weights, vectors_of, frame: pd.DataFrame, criteria=None) -> np.ndarray:
    rows = weights.response_rows(list(frame["prompt"]), list(frame["response"]))
    if criteria is not None:
        return weights.score_rows(rows, vectors_of(tuple(criteria)))
    out = np.zeros(len(frame))
    keys = [tuple(c) for c in frame["criteria"]]
    for key in set(keys):
        members = [i for i, k in enumerate(keys) if k == key]
        out[members] = weights.score_rows(rows[members], vectors_of(key))
    return out


def reward_terms_gap(weights, vectors_of, real: pd.DataFrame, probe: pd.DataFrame, top: int = 6) -> str:
    """The reward terms that differ most, on average, between a probe's answers and a real model's (same prompts,
    same order), under the pool's criteria: what pays for the padding, or what keeps an off-topic answer up."""
    def terms(frame: pd.DataFrame) -> np.ndarray:
        rows = weights.response_rows(list(frame["prompt"]), list(frame["response"]))
        scaled = (rows[:, 1:][:, weights.columns].astype(np.float64) - weights.feature_mean) / weights.feature_std
        coefficients = np.stack([weights.v + weights.gate @ np.asarray(vectors_of(tuple(c)), np.float64)
                                 for c in frame["criteria"]])
        return np.concatenate([rows[:, :1].astype(np.float64), scaled * coefficients], axis=1)

    names = ["ngrams", *(linear_rows.ROW_FEATURES[c] for c in weights.columns)]
    gap = (terms(probe.reset_index(drop=True)) - terms(real.reset_index(drop=True))).mean(axis=0)
    order = np.argsort(-np.abs(gap))[:top]
    return f"total {gap.sum():+.3f}: " + ", ".join(f"{names[i]} {gap[i]:+.3f}" for i in order)


def soft_scores(frame: pd.DataFrame, rewards: np.ndarray, reference: str) -> pd.Series:
    wide = frame.assign(reward=rewards).pivot_table(index="prompt_id", columns="model", values="reward")
    return (100 * expit(wide.sub(wide[reference], axis=0))).mean().sort_values(ascending=False)


def property_target(pool: pd.DataFrame, counts: list[dict], name: str) -> pd.Series:
    from usl_assets.crm.properties import property_value

    values = [property_value(name, c) for c in counts]
    return pool.assign(value=values).groupby("model")["value"].mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=os.environ.get("USL_HOME", ".usl"))
    parser.add_argument("--variants", nargs="*", default=["default"])
    parser.add_argument("--fidelity-pool", default="alpaca_eval")
    parser.add_argument("--dev-fidelity", action="store_true", help="also the dev pool's fidelity (docstring)")
    parser.add_argument("--no-prototypes", action="store_true", help="criteria read by their embedding alone")
    parser.add_argument("--prototype-scales", default="", help="comma-separated criteria_prototypes.SCALE values")
    parser.add_argument("--profile-readings", default="", help="comma-separated criteria_prototypes.PROFILE_READING "
                                                                "values (max, mean)")
    args = parser.parse_args()
    home, started = Path(args.home), time.perf_counter()
    frames = load(home)
    data_root = Path(os.environ.get("USL_DATA_DIR", "../shared/data"))
    pool_texts = judge_pairs.public_response_texts(data_root)
    pairs, _, graded_table = data.build_training_pairs(frames["tagged"], frames["criteria"], data.PairsConfig(),
                                                       judge_pairs.JudgePairsConfig(), pool_texts)
    print(f"training pairs rebuilt: {len(pairs):,} rows ({time.perf_counter() - started:.0f} s); per split "
          f"{pairs['split'].value_counts().to_dict()}", flush=True)
    train = pairs[pairs["split"] == "train"].reset_index(drop=True)
    graded = graded_answers.GradedAnswers.build(graded_table)
    encoder = linear_crm.CriteriaEncoder(resolve_backbone("minilm", home / "models" / "backbones"), 128)
    if not args.no_prototypes:  # as linear_crm.train_linear reads them: rubric lines calibrated, wishes apart
        encoder.with_training_bank().bank.calibrated = linear_crm.calibrated_lines(train)

    def vectors_of(profile: tuple) -> np.ndarray:
        return encoder.embed([profile])[0]

    profiles = {linear_crm.criteria_key(c): tuple(linear_crm.criteria_lines(c)) for c in train["criteria"]}
    test = pairs[pairs["split"] != "train"]
    test = test.groupby("split", group_keys=False).apply(lambda g: g.sample(min(len(g), 600), random_state=0))
    responses = frames["responses"]
    from usl_assets.crm import criteria_prototypes

    runs = [(scale, reading, variant)
            for scale in (args.prototype_scales.split(",") if args.prototype_scales else [None])
            for reading in (args.profile_readings.split(",") if args.profile_readings else [None])
            for variant in args.variants]
    for scale, reading, variant in runs:
        if scale is not None:
            criteria_prototypes.SCALE = float(scale)
            variant = f"{variant} (prototype scale {scale})"
        if reading is not None:
            criteria_prototypes.PROFILE_READING = reading
            variant = f"{variant} (profile reading {reading})"
        if encoder.bank:
            encoder.bank.emphasized = False  # the fit reads every line at its own strength, scoring emphasizes wishes
        vectors = dict(zip(profiles, encoder.embed(list(profiles.values()))))
        if encoder.bank:
            encoder.bank.emphasized = True
        config = replace(linear.LinearConfig(), **parse_variant(variant.split(" (")[0]))
        weights = linear.fit_linear(train, vectors, config, linear_crm.criteria_key, log=lambda _: None,
                                    graded=graded, reading_directions=encoder.bank.reading_columns if encoder.bank
                                    else []).weights
        print(f"\n== {variant} (fitted at {time.perf_counter() - started:.0f} s)")
        chosen = rewards_under(weights, vectors_of, test.assign(response=test["chosen"]))
        rejected = rewards_under(weights, vectors_of, test.assign(response=test["rejected"]))
        result = test.assign(correct=chosen > rejected,
                             length=test["chosen"].str.len() > test["rejected"].str.len())
        result["group"] = np.where(result["split"] == "gaming_pairs", "gaming:" + result["augmentation"],
                                   result["split"])
        print(result.groupby("group")[["correct", "length"]].mean().round(3).assign(
            n=result.groupby("group").size()).to_string())
        for pool_name, reference in REFERENCES.items():
            pool = responses[responses["pool"] == pool_name].reset_index(drop=True)
            scores = soft_scores(pool, rewards_under(weights, vectors_of, pool), reference)
            real = scores.drop(reference)
            probed = probes(pool, real.index[0], real.index[-1])
            both = pd.concat([pool, probed], ignore_index=True)
            ranked = soft_scores(both, rewards_under(weights, vectors_of, both), reference)
            places = {name: (int(list(ranked.index).index(name)) + 1, round(float(ranked[name]), 1))
                      for name in ranked.index if name.startswith("probe:")}
            print(f"{pool_name}: {len(ranked)} ranked; weakest {real.index[-1]} {real.iloc[-1]:.1f}, lowest real "
                  f"{scores.min():.1f}, strongest {real.index[0]} {real.iloc[0]:.1f}; probes {places}")
            source = pool[pool["model"] == real.index[-1]].sort_values("prompt_id")
            padded = probed[probed["model"] == "probe:padded"].sort_values("prompt_id")
            print(f"  padded probe vs its source, mean reward terms: "
                  f"{reward_terms_gap(weights, vectors_of, source, padded)}")
            off_topic = probed[probed["model"] == "probe:off_topic"].sort_values("prompt_id")
            print(f"  off-topic probe vs the weakest real model, mean reward terms: "
                  f"{reward_terms_gap(weights, vectors_of, source, off_topic)}")
            wishes = probes_under_wishes.wish_report(weights, vectors_of, pool, reference)
            print(f"  under blind wishes: {probes_under_wishes.summary(wishes)}")
            if pool_name == "alpaca_eval":
                external, names = validity.load_external_rankings(data_root), validity.load_name_map(data_root)
                ours = validity.to_external_names(scores, "lmarena_2025", external["lmarena_2025"], names)
                print(f"  LMArena 2025 Spearman {validity.correlate(ours, external['lmarena_2025'])['spearman']:.3f}")
        fidelity(weights, vectors_of, responses[responses["pool"] == args.fidelity_pool], args.fidelity_pool)
        if args.dev_fidelity:
            dev_fidelity(weights, vectors_of, dev_pool(home, set(responses["model"])))


def fidelity(weights, vectors_of, pool: pd.DataFrame, pool_name: str) -> None:
    try:
        from usl_assets.crm.properties import heldout_phrasings
    except ImportError:
        return
    reference = REFERENCES[pool_name]
    rows = weights.response_rows(list(pool["prompt"]), list(pool["response"]))
    length = pool.assign(n=pool["response"].str.len()).groupby("model")["n"].mean()
    targets, found = {}, []
    counts = [response_counts(text) for text in pool["response"]]
    for prop, direction, family, text in heldout_phrasings():
        if prop not in targets:
            targets[prop] = property_target(pool, counts, prop)
        sign = 1.0 if direction == "more" else -1.0
        scores = soft_scores(pool, weights.score_rows(rows, vectors_of((text,))), reference)
        target = sign * targets[prop]
        found.append({"property": prop, "direction": direction, "family": family, "text": text,
                      "spearman": spearmanr(scores[target.index], target)[0],
                      "length": spearmanr(length[target.index], target)[0]})
    table = pd.DataFrame(found)
    print(f"criteria fidelity on {pool_name}: median {table['spearman'].median():.3f}, min "
          f"{table['spearman'].min():.3f}, below 0.5: {(table['spearman'] < 0.5).sum()} of {len(table)}; "
          f"length alone median {table['length'].median():.3f}")
    print(table.groupby(["property", "direction"])[["spearman", "length"]].median().round(2).to_string())
    print(table.groupby("family")["spearman"].median().round(3).to_string())
    worst = table.nsmallest(8, "spearman")
    print(worst[["property", "direction", "text", "spearman"]].round(2).to_string(index=False))


DEV_REFERENCE, DEV_PROMPTS = "claude-2", 200
MADE_UP = {"gpt4_gamed", "example", "alpaca-7b_concise", "alpaca-7b_verbose"}  # AlpacaEval's own probes


def dev_pool(home: Path, pool_models: set[str]) -> pd.DataFrame:
    """The AI judge's compared answers of the models in no response pool (nor AlpacaEval's made-up ones), on
    DEV_PROMPTS seeded prompts that every one of them answered (also benchmarks/reading_gain.py's dev pool)."""
    with duckdb.connect(str(home / "published" / "warehouse.duckdb"), read_only=True) as con:
        judged = con.execute("""SELECT instruction->>'$' AS prompt, generator_2->>'$' AS model,
                                       output_2->>'$' AS response
                                FROM raw.alpaca_eval_judgments WHERE raw_error IS NULL""").df()
    judged = judged.dropna().drop_duplicates(["prompt", "model"])
    judged = judged[~judged["model"].isin(pool_models | MADE_UP)]
    chosen = set(np.random.default_rng(0).choice(sorted(judged["prompt"].unique()), DEV_PROMPTS, replace=False))
    judged = judged[judged["prompt"].isin(chosen)]
    complete = judged.groupby("model")["prompt"].nunique()
    judged = judged[judged["model"].isin(complete[complete == DEV_PROMPTS].index)]
    ids = {prompt: str(i) for i, prompt in enumerate(sorted(chosen))}
    return judged.assign(prompt_id=judged["prompt"].map(ids)).reset_index(drop=True)


def dev_fidelity(weights, vectors_of, pool: pd.DataFrame) -> None:
    from usl_assets.crm.properties import PROPERTIES, property_value

    rows = weights.response_rows(list(pool["prompt"]), list(pool["response"]))
    counts = [response_counts(text) for text in pool["response"]]
    found = []
    for prop, rule in PROPERTIES.items():
        values = pd.Series([property_value(prop, c) for c in counts])
        target_of = pool.assign(value=values).groupby("model")["value"].mean()
        for direction, sign in (("more", 1.0), ("less", -1.0)):
            standard = (values - values.mean()) / max(values.std(), 1e-9)
            ceiling = soft_scores(pool, sign * standard.to_numpy() * 10.0, DEV_REFERENCE)
            for text in rule.phrasings(direction, "train"):
                scores = soft_scores(pool, weights.score_rows(rows, vectors_of((text,))), DEV_REFERENCE)
                found.append({"property": prop, "direction": direction,
                              "spearman": spearmanr(scores[target_of.index], sign * target_of)[0],
                              "ceiling": spearmanr(ceiling[target_of.index], sign * target_of)[0]})
    table = pd.DataFrame(found)
    print(f"dev fidelity ({pool['model'].nunique()} judged models, {pool['prompt_id'].nunique()} prompts, "
          f"{len(table)} train phrasings): median {table['spearman'].median():.3f}, below 0.5: "
          f"{(table['spearman'] < 0.5).sum()}; ranking by the property itself: median {table['ceiling'].median():.3f}")
    print(table.groupby(["property", "direction"])[["spearman", "ceiling"]].median().round(2).unstack().to_string())


if __name__ == "__main__":
    main()
