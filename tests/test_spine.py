"""The workbench spine (issue 12): one run's resources are built once and shared by every
reward that needs them, and evaluation suites are looked up by name."""

import pytest

from factlab.data.types import QAItem
from factlab.eval import suites
from factlab.experiment import TrainingConfig
from factlab.rewards import Resources, build_rewards
from factlab.sections import GenerationConfig


def test_rewards_of_two_papers_share_one_judge():
    cfg = TrainingConfig.model_validate({"rewards": [{"name": "k2v"}, {"name": "lm_judge"},
                                                     {"name": "k2v_checklist"}]})
    res = Resources(cfg)
    built = build_rewards(cfg.rewards, res)
    judges = [built.by_name(n).judge for n in ("k2v", "lm_judge", "k2v_checklist")]
    assert judges[0] is judges[1] is judges[2] is res.judge()
    # a different token budget is a different judge; asking again gives the memoized one
    assert res.judge(max_new_tokens=7) is res.judge(max_new_tokens=7) is not res.judge()
    # an uncached view rebuilds judges only
    assert res.uncached_judges().judge() is not res.judge()


def test_suites_by_name_and_unknown_name_lists_known():
    assert set(suites.available()) >= {"shortform", "abstention", "longform", "verification"}
    with pytest.raises(Exception) as e:
        suites.evaluate("shortfrom", None, None, {}, GenerationConfig())
    assert "shortfrom" in str(e.value) and "shortform" in str(e.value)


def test_shortform_suite_grades_a_real_generation(model_and_tokenizer):
    model, tok = model_and_tokenizer  # the real model: a GOOD grade needs an answer that is right
    items = [QAItem(id="q1", question="What is the capital of France?", golds=["Paris"]),
             QAItem(id="q2", question="What is the capital of Japan?", golds=["Tokyo"])]
    out = suites.evaluate("shortform", model, tok, {"capitals": items},
                          GenerationConfig(max_new_tokens=24, batch_size=2), progress=False)
    (records,) = out.records.values()
    assert len(records) == 2 and all(r.completion for r in records)
    m = out.metrics["capitals"]
    # accuracy is what the records' grades say, not a constant
    graded = sum(r.label == "GOOD" for r in records) / len(records)
    assert m["accuracy"] == pytest.approx(graded) and m["n"] == 2
    assert any(r.label == "GOOD" for r in records)  # the 135M model knows these two capitals
