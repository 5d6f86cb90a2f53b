"""Reward functions of every paper, registered by name (``available()``), composed from a
params ``rewards:`` list (``build_rewards``) on one run's shared ``Resources``.

=================  ==========  ========================================================
name               kind        module (paper section)
=================  ==========  ========================================================
qa_judge           reward      ``rewards.qa`` (000 §3.3, Table 8)
format             reward      ``rewards.qa`` (000 §A.2)
corver             shaping     ``rewards.corver`` (000 §3.2-3.4, Eq. 2-4)
corver_scalar      reward      ``rewards.corver`` (000 §6.2, ablation A3)
binary_rar         reward      ``rewards.rar`` (001 §3.2, Eq. 3, Figure 6)
rating_rar         reward      ``rewards.rar`` (001 §5, Figure 7)
veriscore          reward      ``rewards.rar`` (001 §4.2, Figures 8-9)
factscore          reward      ``rewards.rar`` (004 Table 14, App. D.3; FActScore, top-5)
lm_judge           reward      ``rewards.rar`` (001 §4.2)
seva_process       reward      ``rewards.seva_trl`` (002 §2.3, Algorithm 1)
seva_binary        reward      ``rewards.seva_trl`` (002 §2.3)
seva_claims        reward      ``rewards.seva_claims`` (002 §2.2, K.1-K.2; ours, 06_compare)
k2v                reward      ``rewards.k2v`` (003 §3.3, Eq. 8, answer-gated)
k2v_checklist      reward      ``rewards.k2v`` (003 §3.2, Eq. 4-5, pass rate)
overlong           reward      ``rewards.length`` (DAPO's overlong buffer; 003 Table 7)
klcf_checklist     reward      ``rewards.klcf`` (004 §2.3.1, Eq. 5-7, Prompt 7)
klcf_truth         reward      ``rewards.klcf`` (004 §2.3.1, Eq. 8-9, Prompt 6)
klcf_fact          reward      ``rewards.klcf`` (004 §2.3.3, Eq. 12-13)
length_penalty     reward      ``rewards.length`` (004 §2.3.2, Eq. 11)
general_rm         reward      ``rewards.general_rm`` (004 §2.3.3, Eq. 12's 0.1 R_g)
=================  ==========  ========================================================

A ``reward`` is a TRL reward function ``f(prompts, completions, **columns) -> list[float |
None]`` whose ``__name__`` is its registry name, and which exposes its judges, datastores,
models, stats, failures and seconds through the ``Reward`` protocol (``rewards.base``); a ``shaping`` reward adds a per-token term
to the weighted sum of the rewards (``factlab.train.stepwise_grpo``).
"""

from __future__ import annotations

# importing a family registers its rewards
from . import corver, general_rm, k2v, klcf, length, qa, rar, seva, seva_claims, seva_trl  # noqa: F401
from .base import (JudgeBackedReward, Reward, RewardFunction, TokenShaping, TokenShapingFn, completion_text, cost_of,
                   datastores_of, failures_of, judge_totals, judges_of, models_of, prompt_text, response_text)
from .registry import REWARDS, RewardEntry, RewardSet, RewardSpec, available, build_rewards, register
from .resources import Resources

__all__ = ["REWARDS", "RewardEntry", "RewardSet", "RewardSpec", "Resources", "TokenShaping", "TokenShapingFn",
           "available", "build_rewards", "completion_text", "prompt_text", "register", "response_text",
           "Reward", "RewardFunction", "JudgeBackedReward", "judges_of", "datastores_of", "models_of", "failures_of",
           "cost_of", "judge_totals"]
