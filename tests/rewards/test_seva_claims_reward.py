"""``seva_claims``: SEVA-verified claims as a policy reward (06_compare), with a scripted verifier
judge and a fake datastore: the verdict reader, the share of Attributable claims, the unreadable
and empty cases, the cheap label-choice mode and the registry build."""

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from factlab import prompts as P
from factlab.rewards import RewardSpec, build_rewards
from factlab.rewards import seva_claims as S
from factlab.rewards.seva import EXAMPLE_1_OUTPUT, EXAMPLE_2_OUTPUT
from factlab.rewards.seva_claims import SevaClaimsReward
from factlab.rewards.seva_output import LABEL_PREFILL, claim_verdict
from factlab.sections import JudgeSection


class Judge:
    """Answers every user prompt with ``answer(prompt)``; records what it was asked."""

    def __init__(self, answer):
        self.answer, self.asked, self.chosen = answer, [], []
        self.stats = Counter()

    def judge(self, prompts, prefix=None):
        self.asked += list(prompts)
        return [self.answer(p) for p in prompts]

    def choose(self, prompts, options, prefix=None):
        self.chosen.append((tuple(options), prefix))
        return [prefix + self.answer(p) for p in prompts]


class Datastore:
    """Every claim retrieves one passage: the fact sheet of its prompt id."""

    FACTS = {"peru": "Lima is the capital of Peru.", None: "Quito is the capital of Ecuador."}

    def __init__(self):
        self.calls = []

    def retrieve_many(self, queries, k, prompt_ids=None):
        self.calls.append((list(queries), k, prompt_ids))
        ids = prompt_ids or [None] * len(queries)
        return [[SimpleNamespace(chunk=SimpleNamespace(title="", text=self.FACTS[i]), score=1.0)] for i in ids]


def seva_verdict(prompt: str) -> str:
    """A structured K.1 answer: Attributable iff the claim's answer is named in the source."""
    claim = prompt.split("Claim: ", 1)[1].split("\nSource: ", 1)
    answer = claim[0].rsplit("Answer: ", 1)[-1].split(" ")[0].strip(".")
    out = EXAMPLE_1_OUTPUT if answer in claim[1] else EXAMPLE_2_OUTPUT
    return out.to_json()


def test_claim_verdict_reads_the_label_of_whole_or_cut_off_answers():
    assert claim_verdict(EXAMPLE_1_OUTPUT.to_json()) == "attributable"
    assert claim_verdict(EXAMPLE_2_OUTPUT.to_json()) == "not_attributable"
    assert claim_verdict('```json\n{"label": "supported", "confidence": 0.8}\n```') == "attributable"  # Table 13
    assert claim_verdict('{"evidence_alignment": [], "label": "Not Attributable", "confid') == "not_attributable"
    assert claim_verdict(LABEL_PREFILL + "Attributable") == "attributable"  # a choice answer
    assert claim_verdict("The claim is fine.") is None and claim_verdict('{"label": "maybe"}') is None


def test_sentence_claims_are_checkable_after_the_question():
    assert S.sentence_claims("Capital of Peru?", "Lima. Lima. It is large!") == [
        "Question: Capital of Peru?\nAnswer: Lima.", "Question: Capital of Peru?\nAnswer: It is large!"]
    assert S.sentence_claims("", "Lima.") == ["Lima."] and S.sentence_claims("Q?", "  ") == []


def test_reward_is_the_attributable_share_of_sentence_claims():
    judge, ds = Judge(seva_verdict), Datastore()
    reward = SevaClaimsReward(judge, ds, top_k=3, verdict="generate")
    prompts = [[{"role": "user", "content": "What is the capital of Peru?"}]] * 4
    completions = ["Lima. Quito is its twin.", "<think>hm</think>Lima.", "", "<think>never closed"]
    logged = {}
    scores = reward(prompts, completions, prompt_id=["peru"] * 4, log_metric=logged.__setitem__)
    assert scores == [0.5, 1.0, 0.0, 0.0]  # no claim (empty, unclosed think): 0.0, no call
    assert len(judge.asked) == 3 and all(a.startswith("Claim: Question: What is the capital of Peru?")
                                         for a in judge.asked)
    assert "Source: [1] Lima is the capital of Peru." in judge.asked[0]  # K.2 prompt, retrieved passage
    assert ds.calls == [([a.split("Claim: ", 1)[1].split("\nSource:")[0] for a in judge.asked], 3, ["peru"] * 3)]
    assert reward.stats["judge_calls"] == 3 and reward.stats["no_claims"] == 2 and reward.stats["failures"] == 0
    assert logged["seva_claims/claims_mean"] == pytest.approx(3 / 4)


def test_unreadable_verdicts_count_against_and_unreadable_claim_lists_are_none():
    class Extractor:
        def extract(self, prompts, responses):
            return [["Lima is the capital of Peru.", "Peru borders Chile.", "c3"], None]

    answers = iter([EXAMPLE_1_OUTPUT.to_json(), "I am not sure.", json.dumps({"label": "Attributable"})])
    judge = Judge(lambda p: next(answers))
    reward = SevaClaimsReward(judge, Datastore(), extractor=Extractor(), max_claims=2)
    assert reward(["q1", "q2"], ["a", "b"]) == [0.5, None]  # third claim over max_claims; None: no claim list
    assert reward.stats["verdict_failures"] == 1 and reward.stats["failures"] == 1
    assert reward.stats["judge_calls"] == 2 + 2  # two extractions, two verdicts


def test_choice_mode_asks_for_the_label_only():
    judge = Judge(lambda p: "Attributable" if "Lima" in p.split("Source:")[0] else "Not Attributable")
    reward = SevaClaimsReward(judge, Datastore(), verdict="choice")
    assert reward(["Capital of Peru?"] * 2, ["Lima.", "Cusco."], prompt_id=["peru", "peru"]) == [1.0, 0.0]
    assert judge.chosen == [(("Attributable", "Not Attributable"), LABEL_PREFILL)] and not judge.asked
    with pytest.raises(ValueError, match="verdict"):
        SevaClaimsReward(judge, Datastore(), verdict="vote")


def test_registered_with_a_seva_judge_shared_through_resources():
    class Resources:
        judge_cache, _built = False, {}
        cfg = SimpleNamespace(judge=JudgeSection(backend="transformers", model="smollm2-135m-instruct"))

        def memo(self, key, build):
            if key not in self._built:
                self._built[key] = build()
            return self._built[key]

        def datastore(self, kind):
            return Datastore()

        def claim_verifier(self):
            raise AssertionError("sentences mode needs no claim extractor")

    res = Resources()
    spec = RewardSpec(name="seva_claims", args={"claims": "sentences", "verdict": "choice", "model": "my/seva"})
    (fn,) = build_rewards([spec], res).funcs
    assert fn.__name__ == "seva_claims" and fn.extractor is None and fn.verdict == "choice"
    assert fn.judge.system == P.SEVA_SYSTEM_PROMPT.format() and fn.judge.model_name == "my/seva"
    assert fn.judge.max_new_tokens == 512 and fn.judge.cache is None  # uncached: honest cost measurement
    (key,) = res._built
    assert key[0] == "judge"  # counted with the run's judges (06's judge calls per step)
    with pytest.raises(Exception, match="'generate', 'choice' or 'kb'"):
        RewardSpec(name="seva_claims", args={"verdict": "vote"})
