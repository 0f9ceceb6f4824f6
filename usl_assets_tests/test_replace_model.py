"""Replacing a model (issue 10, case 2): `usl add-model` of a model that exists needs --replace, keeps the old
version (archive/ file, archive.* rows), and never shrinks a pool's reference model. The inbox never replaces:
usl_assets_tests/test_responses_inbox.py."""

import gzip
import json
from pathlib import Path

from usl_assets import cli
from usl_assets.responses import pools, tables as response_tables
from usl_assets_tests.release_support import cli_env, model_counts, table_counts  # noqa: F401


def alpaca(data_root: Path, model: str) -> list[dict]:
    return json.loads(gzip.open(pools.public_model_files(data_root, "alpaca_eval")[model]).read())


def add(path: Path, *extra: str) -> int:
    return cli.main(["add-model", "--pool", "alpaca_eval", str(path), "--responses-only", *extra])


def test_replacing_needs_replace_keeps_the_old_version_and_never_shrinks_the_reference(
        cli_env, shared_data_dir, tmp_path, capsys):
    database = Path(cli_env["warehouse"].path)
    home = Path(cli_env["usl_home"].path)
    reference = alpaca(shared_data_dir, "gpt4_1106_preview")
    assert add(tmp_path / "gpt4_1106_preview.json", "--replace") == 2  # not a file
    full = tmp_path / "gpt4_1106_preview.json"
    full.write_text(json.dumps(reference))
    mine = tmp_path / "my-model.json"
    mine.write_text(json.dumps(alpaca(shared_data_dir, "vicuna-13b")[:40]))
    assert add(mine) == 0
    capsys.readouterr()
    before = table_counts(database)

    twenty = tmp_path / "twenty_rows.json"
    twenty.write_text(json.dumps(reference[:20]))
    assert add(twenty, "--model", "gpt4_1106_preview") == 2  # the public reference exists: --replace needed
    assert add(twenty, "--model", "gpt4_1106_preview", "--replace") == 2  # and it would shrink: refused
    shorter = tmp_path / "my-model-v2.json"
    shorter.write_text(json.dumps(alpaca(shared_data_dir, "gemma-7b-it")[:30]))
    assert add(shorter, "--model", "my-model") == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3
    assert "exists already" in errors[0] and "--replace" in errors[0]
    assert "reference model of pool alpaca_eval" in errors[1] and "from 805 to 20 usable answers" in errors[1]
    assert "model alpaca_eval:my-model exists already" in errors[2]
    assert table_counts(database) == before  # nothing written by the refused ones

    assert add(shorter, "--model", "my-model", "--replace") == 0
    assert "replacing alpaca_eval:my-model" in capsys.readouterr().out
    after = table_counts(database)
    assert model_counts(database, "my-model") == {response_tables.RESPONSES_TABLE: 30, response_tables.QUARANTINE_TABLE: 775}
    assert after["archive.responses"] == 40 and after["archive.response_quarantine"] == 765
    assert {t: n for t, n in after.items() if not t.startswith("archive.")} == {
        **before, response_tables.RESPONSES_TABLE: before[response_tables.RESPONSES_TABLE] - 10,
        response_tables.QUARANTINE_TABLE: before[response_tables.QUARANTINE_TABLE] + 10}
    archived = list((home / "archive" / "alpaca_eval").iterdir())
    assert [p.name.split(".")[0] for p in archived] == ["my-model"]
    assert json.loads(archived[0].read_text()) == json.loads(mine.read_text())  # the old version, restorable
    assert add(full, "--replace") == 0  # the reference with as many answers: allowed
    assert model_counts(database, "gpt4_1106_preview")[response_tables.RESPONSES_TABLE] == 805
    assert table_counts(database)["archive.responses"] == 40  # it had no rows yet: nothing to archive
