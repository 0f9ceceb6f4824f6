import pytest

from usl_assets.preferences.criteria import criteria_texts, load_scenarios
from usl_assets.scoring import profiles
from usl_assets.settings import UslConfigError


def test_criteria_hash_follows_order_and_ignores_spacing():
    assert profiles.criteria_hash(["Be brief.", "Be kind."]) == profiles.criteria_hash(["Be  brief. ", "Be kind."])
    assert profiles.criteria_hash(["Be brief.", "Be kind."]) != profiles.criteria_hash(["Be kind.", "Be brief."])
    assert len(profiles.criteria_hash(["x"])) == 16


def test_every_scenario_gets_its_auto_j_criteria_as_default_profile(shared_data_dir):
    defaults = profiles.scenario_default_profiles(shared_data_dir)
    scenarios = load_scenarios(shared_data_dir).descriptions
    assert sorted(defaults["scenario"]) == sorted(scenarios) and len(defaults) == len(scenarios) == 60
    row = defaults.set_index("scenario").loc["code_generation"]
    assert row["profile"] == "default:code_generation"
    assert row["criteria"] == criteria_texts(shared_data_dir, "code_generation") and row["criteria"]


def test_packaged_named_profiles_load_without_rejections():
    named, rejected = profiles.named_profiles(profiles.read_profiles_file(profiles.DEFAULT_PROFILES_FILE))
    assert not rejected
    assert {"concise business answers", "vivid literary style"} <= set(named["profile"])
    assert len(named) >= 5 and named["criteria_hash"].is_unique


def test_bad_profile_entries_are_rejected_with_reasons_and_good_ones_kept(tmp_path, shared_data_dir):
    path = tmp_path / "profiles.yaml"
    path.write_text(
        "profiles:\n"
        "  - name: good one\n    criteria: [Be brief.]\n"
        "  - criteria: [No name here.]\n"
        "  - name: empty\n    criteria: []\n"
        "  - name: good one\n    criteria: [Duplicate name.]\n"
        "  - name: not text\n    criteria: [42]\n"
        "  - name: 'default:sneaky'\n    criteria: [Reserved.]\n"
        "  - just a string\n",
        encoding="utf-8",
    )
    built, rejected = profiles.build_profiles(shared_data_dir, path)
    assert list(built.loc[built["kind"] == "named", "profile"]) == ["good one"]
    reasons = {r.profile: r.reason for r in rejected}
    assert reasons == {
        "entry 2": "missing `name`",
        "empty": "criteria must be a non-empty list of text lines",
        "good one": "duplicate name",
        "not text": "criterion 42 is not a non-empty text line",
        "default:sneaky": "names starting with default: or adhoc: are reserved",
        "entry 7": "not a mapping with `name` and `criteria`",
    }


def test_ad_hoc_profiles_from_earlier_runs_are_kept(shared_data_dir):
    earlier = profiles.named_profiles([{"name": "x", "criteria": ["Cite sources."]}])[0]
    earlier["kind"] = "adhoc"
    built, _ = profiles.build_profiles(shared_data_dir, profiles.DEFAULT_PROFILES_FILE, earlier)
    assert (built["kind"] == "adhoc").sum() == 1


@pytest.mark.parametrize("content, message", [
    (None, "does not exist"),
    ("profiles: [unclosed", "is not valid YAML"),
    ("other: 1\n", "needs a top-level `profiles:` list"),
])
def test_unusable_profiles_file_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "profiles.yaml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(UslConfigError, match=message):
        profiles.read_profiles_file(path)
