"""KLCF's general reward R_g (004 §2.3.3 Eq. 12): a sequence-classification reward model's
logit on (query, answer); a causal LM only as the labelled stand-in."""

import pytest
import torch

from factlab.models import TINY_MODEL
from factlab.rewards import RewardSpec, build_rewards
from factlab.rewards.general_rm import GeneralRewardModel, GeneralRMArgs

STAND_IN = GeneralRMArgs(model=TINY_MODEL, stand_in=True, batch_size=2)  # the scoring path, not a preference
Q = "Tell me about France."
ANSWERS = ["France is a country in Western Europe. Its capital is Paris.",
           "no",
           "France borders Belgium, Germany, Italy, Luxembourg, Monaco, Spain and Switzerland."]


@pytest.fixture(scope="module")
def stand_in():
    return GeneralRewardModel(STAND_IN)


def test_scores_are_the_head_logit_of_the_templated_conversation(stand_in):
    model, tok = stand_in.load()
    got = stand_in.scores([Q] * 3, ANSWERS)  # batches of 2: right padding must not move a score
    for answer, score in zip(ANSWERS, got):
        ids = tok(stand_in.conversation(Q, answer), return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            alone = model(**ids).logits[0, 0].item()
        assert score == pytest.approx(alone, abs=1e-4)
    assert len(set(round(s, 4) for s in got)) == 3  # the answer changes the score


def test_reward_reads_the_answer_part_and_the_question_column(stand_in):
    wrapped = [f"<think>thinking</think><answer>{a}</answer>" for a in ANSWERS[:2]]
    logged = {}
    out = stand_in(prompts=None, completions=wrapped, question=[Q, Q], log_metric=logged.__setitem__)
    assert out == pytest.approx(stand_in.scores([Q, Q], ANSWERS[:2]), abs=1e-5)
    assert logged["general_rm/mean"] == pytest.approx(sum(out) / 2)
    assert stand_in(prompts=None, completions=[]) == []


def test_a_causal_lm_is_refused_unless_it_is_the_stand_in():
    with pytest.raises(ValueError, match=r"not a sequence-classification reward model.*stand_in"):
        GeneralRewardModel(GeneralRMArgs(model=TINY_MODEL)).load()


def test_a_saved_sequence_classifier_loads_and_registers_with_weight_0_1(stand_in, tmp_path):
    model, tok = stand_in.load()
    model.save_pretrained(tmp_path / "rm")
    tok.save_pretrained(tmp_path / "rm")
    rs = build_rewards([RewardSpec(name="general_rm", weight=0.1, args={"model": str(tmp_path / "rm")})],
                       resources=None)
    assert rs.weights == [0.1] and "0.1 general_rm" in rs.describe()
    real = rs.funcs[0]
    assert real(prompts=[Q], completions=[ANSWERS[0]]) == pytest.approx(stand_in.scores([Q], ANSWERS[:1]), abs=1e-4)
