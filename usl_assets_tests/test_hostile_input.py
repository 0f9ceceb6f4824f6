"""Hostile input (issue 10, cases 4 and 5): one bad line is quarantined or skipped with its reason, never a
crash; bad CLI arguments are one `usl: error:` line."""

import codecs
import hashlib
import json

import dagster as dg
import pytest

from usl_assets import cli
from usl_assets.preferences import assets as preference_assets
from usl_assets.responses import pools
from usl_assets_tests.test_preferences_assets import FIXTURES
from usl_assets_tests.test_scoring_support import crm_models, install_crm  # noqa: F401  (fixtures)

EXAMPLE = (FIXTURES / "user_preferences_example.jsonl").read_bytes().splitlines()
DEEP = b"[" * 100_000 + b"]" * 100_000  # 100k levels: json.loads raises RecursionError
LATIN1 = json.dumps({"idx": 9, "prompt": "caf\u00e9", "model_a": [], "model_b": []}).replace(
    "\\u00e9", "\u00e9").encode("latin-1")


def test_a_bom_and_a_100k_deep_line_do_not_stop_the_user_preferences(usl_env, tmp_path):
    path = tmp_path / "prefs.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + EXAMPLE[0] + b"\n" + b'{"idx": 3, "prompt": ' + DEEP + b"}\n" + EXAMPLE[1])
    config = {"ops": {"raw_user_preferences": {"config": {"path": str(path)}}}}
    result = dg.materialize([*preference_assets.defs.assets, *preference_assets.defs.asset_checks],
                            resources=usl_env, run_config=config)
    assert result.success
    warehouse = usl_env["warehouse"]
    raw = warehouse.query("SELECT row_number, split_part(raw_error, ':', 1) AS error FROM raw.user_preferences "
                          "ORDER BY row_number").values.tolist()
    assert raw == [[1, None], [2, "too_deeply_nested"], [3, None]]
    quarantined = warehouse.query("SELECT idx, rule FROM quality.quarantine WHERE source = 'user'").values.tolist()
    assert quarantined == [["user:2", "too_deeply_nested"]]
    valid = warehouse.query("SELECT count(*) AS n FROM validated.preferences WHERE source = 'user'")["n"].item()
    assert valid == 2  # the BOM line among them


def test_responses_over_20000_characters_are_quarantined_with_the_reason(shared_data_dir, tmp_path):
    prompts = pools.alpaca_prompts(shared_data_dir).assign(scenario="s", scenario_group="g")
    records = [{"instruction": text, "output": "ok " * (i + 1), "generator": "big"}
               for i, text in enumerate(prompts["prompt"][:3])]
    records[1]["output"] = "x" * 1_000_000
    path = tmp_path / "big.json"
    path.write_text(json.dumps(records))
    loaded = pools.load_model_responses("alpaca_eval", "big", path, prompts)
    assert len(loaded.responses) == 2 and loaded.responses["length_chars"].max() < 20_000
    too_long = loaded.quarantine[loaded.quarantine["rule"] == "response_too_long"]
    assert too_long["detail"].tolist() == ["output has 1,000,000 characters (limit 20,000)"]
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(b'{"question_id": 81, "choices": ' + DEEP + b"}\n")
    with pytest.raises(pools.ResponseFileError, match="nested too deeply"):
        pools.read_model_records("mt_bench", deep)


@pytest.mark.parametrize("argv, message", [
    (["leaderboard", "--pool", "alpaca_eval", "--criteria", "\udcff\udcfe"], "bad --criteria: 'ÿþ' is not UTF-8"),
    (["leaderboard", "--pool", "alpaca_eval", "--bootstrap-rounds", "-5"], "must be at least 1, got -5"),
    (["leaderboard", "--pool", "alpaca_eval", "--bootstrap-rounds", "0"], "must be at least 1, got 0"),
])
def test_bad_leaderboard_arguments_are_one_line(usl_env, argv, message, capsys):
    try:
        code = cli.main(argv)
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("usl") and "error:" in err[0] and message in err[0]


def test_evaluate_crm_skips_a_latin1_and_a_deep_line_and_never_overwrites_its_input(usl_env, crm_models, tmp_path,
                                                                                   capsys):
    install_crm(crm_models, usl_env["usl_home"].root(), "cross")
    path = tmp_path / "prefs.jsonl"
    canonical = [json.dumps({**(row := json.loads(line)),
                             "human_winner": row.get("human_winner") or row["preference"]}).encode()
                 for line in EXAMPLE]
    path.write_bytes(b"\n".join([canonical[0], LATIN1, DEEP, canonical[1]]) + b"\n")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()

    assert cli.main(["evaluate-crm", "--preferences", str(path), "--out", str(path)]) == 2
    assert cli.main(["evaluate-crm", "--preferences", str(path), "--out",
                     str(tmp_path / "." / "prefs.jsonl")]) == 2
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("is the preference file itself" in line for line in err)

    assert cli.main(["evaluate-crm", "--preferences", str(path)]) == 0
    out = capsys.readouterr().out
    assert "skipped line 2: not UTF-8 text" in out and "skipped line 3: JSON nested too deeply to parse" in out
    assert "pairs: 2 scored" in out and "2 skipped" in out
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
