"""The public reward protocol (``rewards.base.Reward``, issue 31.3): every registered reward
exposes its judges, datastores, models, stats, failures and seconds, and the cost accounting
reads them through it."""

import typing
from collections import Counter

import pytest

from factlab.rewards import REWARDS, available
from factlab.rewards.base import (JudgeBackedReward, Reward, RewardFunction, cost_of, datastores_of, failures_of,
                                  judge_totals, judges_of, models_of)
from factlab.rewards.klcf import ClaimTruth, FactReward, KLCFFactArgs, TruthReward
from factlab.rewards.klcf_claims import KLCFClaimExtractor, SentenceClaims
from factlab.rewards.klcf_truth import KBTruthScorer
from factlab.rewards.klcf_verify import ChecklistVerifier
from factlab.rewards.rar import BinaryRAR, ClaimVerifier, VeriScoreReward
from factlab.rewards.seva_claims import SevaClaimsReward


class Judge:
    def __init__(self):
        self.stats = Counter()


class Store:
    searches = 0


class RM:
    def load(self):
        pass


@pytest.mark.parametrize("name", [n for n in available() if REWARDS.get(n).kind == "reward"])
def test_every_registered_reward_implements_the_protocol(name):
    built = typing.get_type_hints(REWARDS.get(name).build)["return"]
    assert issubclass(built, RewardFunction), f"{name} builds a {built.__name__}, not a rewards.base.RewardFunction"


def test_plain_functions_expose_nothing():
    def fn(prompts=None, completions=(), **_):
        return [1.0] * len(completions)

    assert not isinstance(fn, Reward)
    assert judges_of(fn) == datastores_of(fn) == models_of(fn) == [] and failures_of(fn) == 0
    assert cost_of(fn) == {"calls": 0.0, "prompt_tokens": 0.0, "completion_tokens": 0.0, "searches": 0.0,
                           "seconds": 0.0, "failures": 0.0}


def test_judge_rewards_expose_their_judge_and_datastore():
    judge, store = Judge(), Store()
    rar = BinaryRAR(judge, store)
    assert isinstance(rar, Reward) and judges_of(rar) == [judge] and datastores_of(rar) == [store]
    assert judges_of(BinaryRAR(judge, store, verdict="kb")) == []  # the knowledge base asks no judge
    vs = VeriScoreReward(ClaimVerifier(judge, store))
    assert judges_of(vs) == [judge] and datastores_of(vs) == [store]
    seva = SevaClaimsReward(judge, store, extractor=ClaimVerifier(other := Judge(), None))
    assert judges_of(seva) == [judge, other] and datastores_of(seva) == [store]


def test_klcf_rewards_expose_every_judge_and_the_truthfulness_model():
    verifier_judge, extractor_judge, rm = Judge(), Judge(), RM()
    truth = ClaimTruth(KLCFClaimExtractor(extractor_judge), rm, ChecklistVerifier(verifier_judge))
    fact = FactReward(ChecklistVerifier(verifier_judge), truth, KLCFFactArgs())
    assert judges_of(fact) == [verifier_judge, extractor_judge] and models_of(fact) == [rm]
    kb_truth = TruthReward(ClaimTruth(SentenceClaims(8), KBTruthScorer()))
    assert judges_of(kb_truth) == [] and models_of(kb_truth) == []  # no judge, no model to load


def test_failures_and_costs_through_the_protocol():
    judge, store = Judge(), Store()
    r = JudgeBackedReward(judge)
    logged = {}
    r.record(logged.__setitem__, [1.0, None, None])
    assert r.failures == failures_of(r) == 2 and r.stats["responses"] == 3
    assert logged == {"judge_reward/failure_rate": pytest.approx(2 / 3)}
    before = cost_of(BinaryRAR(judge, store))
    judge.stats.update(calls=2, prompt_tokens=30, completion_tokens=4)
    store.searches = 5
    after = cost_of(BinaryRAR(judge, store))
    assert {k: after[k] - before[k] for k in ("calls", "prompt_tokens", "completion_tokens", "searches")} == {
        "calls": 2, "prompt_tokens": 30, "completion_tokens": 4, "searches": 5}
    assert judge_totals([judge, judge]) == {"calls": 2.0, "prompt_tokens": 30.0, "completion_tokens": 4.0}  # distinct
