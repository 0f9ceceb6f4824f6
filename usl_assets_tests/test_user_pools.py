"""User pools (`usl add-pool`, user_pools.py): hostile prompt files quarantined line by line, a pool registered
whole or not at all, its prompts through the real pool_prompts / prompt_sample / model_responses assets (the
TF-IDF tagger in place of the MiniLM one), models in the generic format, and `usl remove-pool` archiving."""

import json
from pathlib import Path

import dagster as dg
import pytest

from usl_assets import cli
from usl_assets.responses import pools, user_pools
from usl_assets_tests.conftest import REPO_ROOT
from usl_assets_tests.taggers import TfidfScenarioTagger

EXAMPLE_PROMPTS = REPO_ROOT / "examples" / "helpdesk" / "prompts.jsonl"


def hostile_prompts(path: Path) -> Path:
    lines = [
        json.dumps({"id": 1, "prompt": "How do I reset my password?", "topic": "Accounts"}).encode(),
        json.dumps({"id": "2", "prompt": "My VPN drops every hour."}).encode(),
        b"{broken json",
        json.dumps({"id": 3, "prompt": "   "}).encode(),
        json.dumps({"id": 1, "prompt": "a second line with id 1"}).encode(),
        json.dumps({"id": 4, "prompt": "How do I reset my password?", "topic": "Accounts"}).encode(),
        json.dumps({"id": 5, "prompt": "x" * 1_000_000}).encode(),
        json.dumps(["not", "an", "object"]).encode(),
        json.dumps({"id": 6, "prompt": "And then?", "history": [
            {"role": "user", "content": "The printer jams."}, {"role": "assistant", "content": "Open tray 2."}]}).encode(),
        json.dumps({"id": 7, "prompt": "?", "history": [{"role": "assistant", "content": "hello"}]}).encode(),
        b'{"id": 8, "prompt": "caf\xe9"}',
        json.dumps({"prompt": "no id"}).encode(),
        b"",
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_a_hostile_prompts_file_is_quarantined_line_by_line_with_a_reason(tmp_path):
    accepted, quarantine = user_pools.read_prompt_file(hostile_prompts(tmp_path / "prompts.jsonl"))
    assert accepted["prompt_id"].tolist() == ["1", "2", "6"]
    assert json.loads(accepted.loc[2, "history"])[1] == {"role": "assistant", "content": "Open tray 2."}
    assert dict(zip(quarantine["line"], quarantine["rule"])) == {
        3: "bad_json", 4: "empty_prompt", 5: "duplicate_id", 6: "duplicate_prompt", 7: "prompt_too_long",
        8: "not_an_object", 10: "bad_history", 11: "not_utf8", 12: "bad_id"}
    assert quarantine["record"].str.len().max() <= 500  # the 1 MB line is not copied whole
    limited, over = user_pools.read_prompt_file(tmp_path / "prompts.jsonl", max_prompts=2)
    assert len(limited) == 2 and (over["rule"] == "over_prompt_limit").sum() == 1


def test_a_pool_is_registered_whole_or_not_at_all(tmp_path):
    home = tmp_path / "home"
    record = user_pools.register_pool("helpdesk", hostile_prompts(tmp_path / "p.jsonl"), home)
    assert record.prompts == 3 and sum(record.quarantined.values()) == 9 and record.reference_model is None
    assert set(user_pools.registered_pools(home)) == {"helpdesk"}
    assert pools.check_pool("helpdesk", home) == "helpdesk"
    for name, message in [("helpdesk", "exists already"), ("mt_bench", "a public pool"),
                          ("Help Desk", "not allowed"), ("../up", "not allowed")]:
        with pytest.raises(Exception, match=message):
            user_pools.register_pool(name, EXAMPLE_PROMPTS, home)
    (tmp_path / "bad.jsonl").write_bytes(b"{nope\n\xff\xfe\n")
    with pytest.raises(Exception, match=r"holds no usable prompt \(bad_json 1, not_utf8 1\); nothing was registered"):
        user_pools.register_pool("empty", tmp_path / "bad.jsonl", home)
    assert sorted(p.name for p in (home / "pools").iterdir()) == ["helpdesk"]  # no half-registered pool

    archived = user_pools.archive_pool(home, "helpdesk")
    assert (archived / "pool.json").is_file() and user_pools.registered_pools(home) == {}
    with pytest.raises(Exception, match="unknown pool 'helpdesk'"):
        pools.check_pool("helpdesk", home)


def generic_answers(path: Path, prompts: list[dict], answer, skip: int = 0) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for prompt in prompts[skip:]:
            handle.write(json.dumps({"prompt_id": prompt["id"], "output": answer(prompt)}) + "\n")
        handle.write(json.dumps({"prompt_id": prompts[0]["id"] if skip else "nope", "error": "HTTP 500 twice"})
                     + "\n")
    return path


@pytest.fixture
def cli_env(usl_env, shared_data_dir, tmp_path, monkeypatch) -> dict:
    tagger = TfidfScenarioTagger(shared_data_dir)
    monkeypatch.setattr(pools, "load_scenario_tagger", lambda usl_home_root: tagger)
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    return usl_env


def test_user_pool_through_the_cli_and_the_assets(cli_env, tmp_path, capsys):
    warehouse = cli_env["warehouse"]
    home = Path(cli_env["usl_home"].path)
    assert cli.main(["add-pool", "helpdesk", "--prompts", str(EXAMPLE_PROMPTS)]) == 0
    out = capsys.readouterr().out
    assert "registered pool helpdesk: 35 prompts, 0 quarantined" in out and "next: `usl generate" in out

    prompts = warehouse.query("SELECT * FROM responses.prompts WHERE pool = 'helpdesk' ORDER BY prompt_id")
    assert len(prompts) == 35
    topics = dict(zip(prompts["prompt_id"], prompts["scenario_group"]))
    assert topics["acc-01"] == "Accounts" and topics["hw-07"] == "Hardware"  # the user's topic, as given
    assert prompts.set_index("prompt_id").loc["gen-01", "topic"] is None  # no topic: the tagger's group
    pool_rows = warehouse.query("SELECT pool, kind, prompts FROM responses.pools ORDER BY pool")
    assert pool_rows.values.tolist() == [["alpaca_eval", "public", 805], ["helpdesk", "user", 35],
                                         ["mt_bench", "public", 80]]
    assert warehouse.query("SELECT count(*) AS n FROM responses.prompt_sample WHERE pool = 'helpdesk'")["n"][0] == 35

    # Bad input: one line, non-zero exit, nothing registered.
    for argv, message in [
        (["add-pool", "helpdesk", "--prompts", str(EXAMPLE_PROMPTS)], "pool 'helpdesk' exists already"),
        (["add-pool", "Bad Name!", "--prompts", str(EXAMPLE_PROMPTS)], "is not allowed"),
        (["add-pool", "other", "--prompts", str(tmp_path / "missing.jsonl")], "is not a file"),
    ]:
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert set(user_pools.registered_pools(home)) == {"helpdesk"}

    records = [json.loads(line) for line in EXAMPLE_PROMPTS.read_text().splitlines()]
    thorough = generic_answers(tmp_path / "thorough.jsonl", records,
                               lambda p: f"Here is what to do about: {p['prompt']}\n\n1. Check it.\n2. Retry.")
    brief = generic_answers(tmp_path / "brief.jsonl", records, lambda p: "Please call the help desk.", skip=1)
    for path in (thorough, brief):
        assert cli.main(["add-model", "--pool", "helpdesk", str(path), "--responses-only"]) == 0
    capsys.readouterr()
    assert user_pools.read_record(home, "helpdesk").reference_model == "thorough"  # the first model added
    loaded = warehouse.query("SELECT model, count(*) AS n FROM responses.responses WHERE pool = 'helpdesk' "
                             "GROUP BY model ORDER BY model")
    assert loaded.values.tolist() == [["brief", 34], ["thorough", 35]]
    quarantined = warehouse.query("SELECT model, prompt_id, rule, detail FROM quality.response_quarantine "
                                  "WHERE pool = 'helpdesk' ORDER BY model, rule")
    assert quarantined.values.tolist() == [["brief", "acc-01", "generation_failed", "HTTP 500 twice"],
                                           ["thorough", None, "unknown_prompt",
                                            "prompt_id 'nope' is not one of the pool's prompts"]]
    conversation = warehouse.query("SELECT conversation FROM responses.responses WHERE pool = 'helpdesk' AND "
                                   "model = 'thorough' AND prompt_id = 'hw-07'")["conversation"][0]
    assert [turn["role"] for turn in conversation] == ["user", "assistant", "user", "assistant"]

    assert cli.main(["set-reference", "helpdesk", "brief", "--no-leaderboards"]) == 0
    assert user_pools.read_record(home, "helpdesk").reference_model == "brief"
    assert cli.main(["set-reference", "helpdesk", "nobody", "--no-leaderboards"]) == 2

    assert cli.main(["remove-pool", "helpdesk", "--no-leaderboards"]) == 0
    out = capsys.readouterr().out
    assert "removed 2 model partitions" in out
    assert user_pools.registered_pools(home) == {}
    assert warehouse.query("SELECT count(*) AS n FROM responses.responses WHERE pool = 'helpdesk'")["n"][0] == 0
    assert warehouse.query("SELECT count(*) AS n FROM archive.responses WHERE pool = 'helpdesk'")["n"][0] == 69
    assert "helpdesk" not in set(warehouse.query("SELECT pool FROM responses.pools")["pool"])
    with dg.DagsterInstance.get() as instance:
        assert not [k for k in instance.get_dynamic_partitions("models") if k.startswith("helpdesk:")]
