"""The response-level QA rewards of 000 §3.3 / §A.2: the string-match judge and the format."""

import pytest

from factlab.rewards import RewardSpec, build_rewards
from factlab.rewards.qa import FormatReward, JudgeReward, QAJudgeArgs

GOOD_FORMAT = "<think>Paris has been the capital of France for centuries.</think> <answer>Paris</answer>"
UNTAGGED = "<think>The capital of France is a famous city.</think> Paris"


def test_training_judge_grades_the_answer_block_by_default():
    """§A.2: the training judge reads the text after <answer>; lenient parsing (§4) is the
    evaluation rule and, as a reward, would pay a correct answer that skips the format."""
    assert QAJudgeArgs().answer_parsing == "strict"
    strict, lenient = JudgeReward(), JudgeReward(answer_parsing="lenient")
    golds = [["Paris"], ["Paris"], ["Paris"], ["Paris"]]
    comps = [GOOD_FORMAT, UNTAGGED, "<answer>Lyon</answer>", "<answer>I don't know</answer>"]
    assert strict.labels(comps, golds) == ["GOOD", "NA", "BAD", "NA"]  # no <answer>: nothing answered
    assert lenient.labels(comps, golds) == ["GOOD", "GOOD", "BAD", "NA"]
    assert strict(completions=comps, golds=golds) == [2.0, -1.0, -1.0, -1.0]
    with pytest.raises(KeyError, match="golds"):
        strict(completions=comps)
    with pytest.raises(ValueError, match="GOOD, BAD and NA"):
        JudgeReward({"GOOD": 1.0})


def test_rewards_log_their_rates_and_read_chat_completions():
    logged = {}
    out = JudgeReward()(completions=[[{"role": "assistant", "content": GOOD_FORMAT}], ""], golds=[["Paris"], ["x"]],
                        log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [2.0, -1.0] and logged == {"qa_judge/good_rate": 0.5, "qa_judge/bad_rate": 0.0,
                                             "qa_judge/na_rate": 0.5,
                                             "qa_judge/suspicious_substring_rate": 0.0}
    fmt = FormatReward(0.5, -2.0)
    assert fmt(completions=[GOOD_FORMAT, UNTAGGED], log_metric=lambda k, v: logged.__setitem__(k, v)) == [0.5, -2.0]
    assert logged["format/success_rate"] == 0.5


def test_registry_builds_them_with_their_args():
    rs = build_rewards([RewardSpec(name="qa_judge", args={"answer_parsing": "lenient",
                                                          "rewards": {"GOOD": 1, "BAD": 0, "NA": -0.5}}),
                        RewardSpec(name="format", weight=0.25, args={"positive": 2.0})], resources=None)
    judge, fmt = rs.funcs
    assert (judge.__name__, fmt.__name__) == ("qa_judge", "format") and rs.weights == [1.0, 0.25]
    assert judge(completions=[UNTAGGED], golds=[["Paris"]]) == [1.0] and fmt(completions=[GOOD_FORMAT]) == [2.0]
