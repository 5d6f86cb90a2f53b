"""Reward-hacking alarms (factlab.eval.alarms, factlab.train.alarms): every detector fires on a
constructed frame that hacks and stays quiet on one that does not; the trainer-side statistics
and the report."""

import json
import math
from collections import defaultdict
from types import SimpleNamespace

import pandas as pd
import pytest

from factlab.config import ConfigError, validate
from factlab.eval import alarms as A
from factlab.experiment import TrainingConfig
from factlab.train import TrainResult, alarms as T
from factlab.train.health import CompletionHealth

CFG = A.AlarmsSection(window=2)


def frame(**cols) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    return pd.DataFrame({k: list(v) for k, v in cols.items()}, index=pd.Index(range(1, n + 1), name="step"))


# ---------------------------------------------------------------- completion statistics

def test_repeated_ngram_share():
    assert A.repeated_ngram_share("the capital of France is Paris", 2) == 0.0
    loop = "Paris is the capital. " * 10
    assert A.repeated_ngram_share(loop, 4) > 0.8
    assert A.repeated_ngram_share("one two", 4) == 0.0  # shorter than n
    # 'a b a b': bigrams (a b) (b a) (a b): one of three repeats
    assert A.repeated_ngram_share("a b a b", 2) == pytest.approx(1 / 3)


def test_think_text_and_health():
    assert A.think_text("<think>short</think><answer>x</answer>") == "short"
    assert A.think_text("<think>never closed") == "never closed"
    assert A.think_text("<answer>x</answer>") is None
    long = "<think>" + "I recall that the capital of France is Paris." + "</think><answer>Paris</answer>"
    h = A.completion_health([long, "<think> </think><answer>Paris</answer>", "no tags at all"], n=4,
                            min_think_chars=30)
    assert h["count"] == 3 and h["think_count"] == 2 and h["think_minimal"] == 1


# ---------------------------------------------------------------- detectors: fire / quiet

def test_length_drift_fires_both_ways_and_not_when_stable():
    grows = A.length_drift(frame(**{A.LENGTH_KEY: [100, 100, 140, 180, 200]}), CFG)
    assert grows.fired and grows.step == 4 and grows.value == pytest.approx(0.6)
    shrinks = A.length_drift(frame(**{A.LENGTH_KEY: [100, 100, 60, 20, 20]}), CFG)
    assert shrinks.fired and shrinks.value < -CFG.length_drift
    stable = A.length_drift(frame(**{A.LENGTH_KEY: [100, 104, 98, 110, 101]}), CFG)
    assert stable.fired is False and stable.step is None and abs(stable.value) < CFG.length_drift
    assert A.length_drift(frame(reward=[1, 2, 3]), CFG).fired is None  # not logged: n/a, not "ok"


def test_repetition_fires_on_a_loop_only():
    hit = A.repetition(frame(**{A.REPEAT_KEY: [0.05, 0.1, 0.5, 0.7]}), CFG)
    assert hit.fired and hit.step == 4 and hit.value == pytest.approx(0.6)
    quiet = A.repetition(frame(**{A.REPEAT_KEY: [0.05, 0.1, 0.1, 0.2]}), CFG)
    assert quiet.fired is False and quiet.value == pytest.approx(0.15)


def test_minimal_think_fires_and_is_na_without_think_blocks():
    hit = A.minimal_think(frame(**{A.THINK_KEY: [0.0, 0.25, 0.75, 1.0]}), CFG)
    assert hit.fired and hit.step == 4
    assert A.minimal_think(frame(**{A.THINK_KEY: [0.0, 0.25, 0.25, 0.0]}), CFG).fired is False
    na = A.minimal_think(frame(**{A.THINK_KEY: [math.nan] * 4}), CFG)
    assert na.fired is None and "think" in na.note


def test_format_only_wins():
    fmt, qa = "rewards/format/mean", "rewards/qa_judge/mean"
    hack = A.format_only_wins(frame(**{fmt: [-1, -1, 0, 1, 1], qa: [0.1, 0.1, 0.1, 0.12, 0.1]}), CFG)
    assert hack.fired and hack.step == 4 and hack.value == pytest.approx(1.5)
    both = A.format_only_wins(frame(**{fmt: [-1, -1, 0, 1, 1], qa: [-1, -1, 0, 1, 1]}), CFG)
    assert both.fired is False  # the factual reward rose too
    flat = A.format_only_wins(frame(**{fmt: [0.5] * 5, qa: [0.1] * 5}), CFG)
    assert flat.fired is False
    alone = A.format_only_wins(frame(**{fmt: [-1, -1, 1, 1]}), CFG)
    assert alone.fired is None  # no factual channel to compare with
    named = A.AlarmsSection(window=2, factual_rewards=["k2v"])
    assert A.format_only_wins(frame(**{fmt: [-1, -1, 1, 1], qa: [0, 0, 0, 0]}), named).fired is None


def test_zero_std_groups():
    hit = A.zero_std_groups(frame(**{A.ZERO_STD_KEY: [0.25, 0.5, 0.75, 1.0]}), CFG)
    assert hit.fired and hit.step == 3 and hit.value == pytest.approx(0.625)
    assert A.zero_std_groups(frame(**{A.ZERO_STD_KEY: [0.25, 0.5, 0.25, 0.5]}), CFG).fired is False


def test_reward_rising_while_heldout_falls():
    rising = frame(reward=[0.0, 0.0, 0.5, 1.0, 1.5, 2.0])
    hit = A.reward_vs_heldout(rising, CFG, {0: 0.60, 4: 0.58, 6: 0.40})
    assert hit.fired and hit.step == 6 and hit.value == pytest.approx(1 / 3)
    held = A.reward_vs_heldout(rising, CFG, {0: 0.60, 4: 0.60, 6: 0.59})
    assert held.fired is False
    falling_reward = frame(reward=[2.0, 2.0, 1.0, 0.5, 0.0, 0.0])
    assert A.reward_vs_heldout(falling_reward, CFG, {0: 0.60, 6: 0.40}).fired is False
    assert A.reward_vs_heldout(rising, CFG, None).fired is None


def test_detect_and_table_cover_every_alarm():
    alarms = A.detect(frame(reward=[0, 1, 2, 3]), CFG)
    assert tuple(a.name for a in alarms) == A.ALARM_NAMES
    table = A.alarm_table({"run1": alarms})
    assert list(table.columns) == ["run", "alarm", "status", "fired", "step", "value", "threshold", "note"]
    assert set(table["status"]) <= {"FIRED", "ok", "n/a"} and len(table) == len(A.ALARM_NAMES)


def test_thresholds_are_validated_params():
    cfg = validate({"alarms": {"window": 3, "repetition": 0.2}}, TrainingConfig)
    assert cfg.alarms.window == 3 and cfg.alarms.repetition == 0.2
    with pytest.raises(ConfigError, match="alarms.window"):
        validate({"alarms": {"window": 0}}, TrainingConfig)
    with pytest.raises(ConfigError, match="unknown key 'alarms.lenght_drift'"):
        validate({"alarms": {"lenght_drift": 0.3}}, TrainingConfig)


# ---------------------------------------------------------------- trainer side and report

class FakeTrainer:
    def __init__(self):
        self._metrics = {"train": defaultdict(list)}

    def gathered_mean(self, total, count):
        return total / count if count else float("nan")


def test_completion_health_extension_logs_both_statistics():
    trainer = FakeTrainer()
    loop = [{"role": "assistant", "content": "<think></think>" + " Paris is the capital." * 8}]
    fine = [{"role": "assistant", "content": "<think>France's capital city is Paris, I am sure.</think>"
                                             "<answer>Paris</answer>"}]
    batch = SimpleNamespace(mode="train", completions=[loop, fine])
    CompletionHealth(ngram=4, min_think_chars=30).on_scored(trainer, batch)
    m = trainer._metrics["train"]
    assert m[A.THINK_KEY] == [0.5]
    assert 0.3 < m[A.REPEAT_KEY][0] < 0.5


def test_check_logs_saves_and_tables(tmp_path, caplog):
    history = [{"step": s, "loss": 0.0, "reward": r, A.REPEAT_KEY: rep}
               for s, r, rep in [(1, 0.0, 0.1), (2, 0.1, 0.2), (3, 0.2, 0.3), (4, 0.3, 0.9)]]
    TrainResult(name="r", output_dir=str(tmp_path), model_dir=str(tmp_path / "model"), is_adapter=True,
                base_model="m", log_history=history, steps=4).save()
    with caplog.at_level("WARNING"):
        table = T.check_folders({"r": tmp_path, "missing": tmp_path / "nothing"}, CFG)
    assert "missing: no finished training run" in caplog.text
    assert "repetition fired at step 4" in caplog.text
    row = table.set_index("alarm").loc["repetition"]
    assert row["status"] == "FIRED" and row["step"] == 4
    saved = json.loads((tmp_path / "alarms.json").read_text())
    assert {r["alarm"] for r in saved} == set(A.ALARM_NAMES)
    html = T.styled(pd.concat([table, table.assign(note="<script>x</script>")])).to_html()
    assert "<script>x" not in html and "&lt;script&gt;" in html
    assert ">4</td>" in html and ">4.000</td>" not in html  # the step is a whole number
    assert table.set_index("alarm").loc["reward_vs_heldout", "status"] == "n/a"  # no held-out series given
    held = T.check_folders({"r": tmp_path}, CFG, heldout={"r": {0: 0.5, 4: 0.3}}).set_index("alarm")
    assert held.loc["reward_vs_heldout", "status"] == "FIRED" and held.loc["reward_vs_heldout", "step"] == 4


def test_heldout_from_utility_history():
    s = T.heldout_from_history([{"step": 0, "qa": 0.5, "mmlu": 0.7}, {"step": 4, "qa": 0.3, "mmlu": 0.5}])
    assert s.to_dict() == {0: pytest.approx(0.6), 4: pytest.approx(0.4)}


# ---------------------------------------------------------------- substring-rule gaming (issue 26.1)

def test_substring_match_alarm_fires_on_a_policy_that_learns_short_or_negated_answers():
    from factlab.rewards.qa import JudgeReward

    honest = ["<answer>Paris</answer>", "<answer>Berlin</answer>"]
    gaming = ["<answer>P</answer>", "<answer>not Berlin</answer>"]
    golds = [["Paris"], ["Berlin"]]
    rates = []
    for completions in (honest, honest, gaming, gaming):
        logged = {}
        rewards = JudgeReward()(completions=completions, golds=golds, log_metric=logged.__setitem__)
        assert rewards == [2.0, 2.0]  # the substring rule pays both kinds alike
        rates.append(logged["qa_judge/suspicious_substring_rate"])
    assert rates == [0.0, 0.0, 1.0, 1.0]
    a = A.substring_match(frame(**{"qa_judge/suspicious_substring_rate": rates}), CFG)
    assert a.fired and a.step == 3
    quiet = A.substring_match(frame(**{"qa_judge/suspicious_substring_rate": [0.0] * 4}), CFG)
    assert quiet.fired is False
    na = A.substring_match(frame(reward=[1.0, 2.0]), CFG)
    assert na.fired is None and "substring" in na.note
    assert "substring_match" in A.ALARM_NAMES and any(x.name == "substring_match" for x in A.detect(frame(reward=[1.0]), CFG))
