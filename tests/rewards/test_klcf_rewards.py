"""KLCF's rewards (004_4f2ca2d982459bb2.txt §2.3, Eq. 5-13): each equation on hand-computed
cases, the bad-input errors, the Prompt 7 answer parser on hostile text, the batched checklist
verifier, the registered rewards and their params errors, and the truthfulness scorer (Prompt 6)
on the embedded 135M model."""

import math

import pytest
from pydantic import ValidationError

from factlab import config
from factlab import prompts as P
from factlab import sections
from factlab.config import ParamError, describe_errors
from factlab.models import TINY_MODEL
from factlab.experiment import TrainingConfig
from factlab.rewards import Resources, RewardSpec, available, build_rewards
from factlab.rewards.klcf import (DEFAULT_WEIGHTS, TABLE2_WEIGHTS, ChecklistReward, ClaimTruth, FactReward,
                                  KLCFFactArgs, TruthReward, checklist_scores, verdict_scores, combined_reward,
                                  core_reward, fact_reward, format_reward, missing_truth_reward, truth_reward)
from factlab.rewards.klcf_truth import TruthfulnessScorer
from factlab.rewards.klcf_verify import LABELS, VERDICT_PREFILL, ChecklistVerifier, parse_verification
from factlab.rewards.length import LengthPenalty, LengthPenaltyArgs, length_penalty
from factlab.rewards.rar import ClaimVerifier
from factlab.rewards.registry import parse_args

THINK = "<think>Recalling what I know about France and its capital city.</think>"


# ---------------------------------------------------------------- Eq. 5-7


def test_checklist_scores_by_hand():
    # C, C, X, M: recall 2/4 (Eq. 5), precision 2/3 (Eq. 6), 1/3 * 1/2 + 2/3 * 2/3 = 11/18 (Eq. 7)
    s = checklist_scores(["Consistent", "consistent", "CONTRADICTORY", " Missing "])
    assert s == pytest.approx({"recall": 0.5, "precision": 2 / 3, "checklist": 11 / 18})
    # C, M, M, M: recall 1/4, precision 1/1, 1/12 + 2/3 = 3/4
    assert checklist_scores(["Consistent", "Missing", "Missing", "Missing"]) == pytest.approx(
        {"recall": 0.25, "precision": 1.0, "checklist": 0.75})
    assert checklist_scores(["Contradictory", "Contradictory"]) == {"recall": 0.0, "precision": 0.0, "checklist": 0.0}
    assert checklist_scores(["Consistent"]) == {"recall": 1.0, "precision": 1.0, "checklist": 1.0}


def test_precision_with_nothing_mentioned_is_zero_unless_asked():
    # Eq. 6 is 0 / 0 when every item is Missing: 0.0, so an empty reply earns nothing (not 2/3)
    assert checklist_scores(["Missing", "missing"]) == {"recall": 0.0, "precision": 0.0, "checklist": 0.0}
    assert checklist_scores(["Missing"], empty_precision=1.0)["checklist"] == pytest.approx(2 / 3)


def test_unreadable_verdicts_stay_in_recalls_denominator():
    """004 §2.3.1 Eq. 5: recall over the whole checklist. 6 consistent facts of 10, 4 verdicts
    unreadable: recall 0.6 (not 6 / 6 = 1.0); precision reads only the 6 readable labels."""
    labels = ["Consistent"] * 6 + [None] * 4
    s = verdict_scores(labels)
    assert s["recall"] == pytest.approx(0.6) and s["precision"] == 1.0
    assert s["checklist"] == pytest.approx(0.6 / 3 + 2 / 3)
    assert checklist_scores(["Consistent"] * 6, unreadable=4) == s
    mixed = verdict_scores(["Consistent", "Contradictory", None, "Missing"])
    assert mixed["recall"] == pytest.approx(0.25) and mixed["precision"] == pytest.approx(0.5)
    assert verdict_scores([None, None]) is None  # nothing readable: a judge failure, left out
    with pytest.raises(ValueError, match="unreadable"):
        checklist_scores(["Consistent"], unreadable=-1)


def test_checklist_scores_reject_empty_and_unknown_labels():
    with pytest.raises(ValueError, match="empty checklist"):
        checklist_scores([])
    with pytest.raises(ValueError, match="'Supported'"):
        checklist_scores(["Consistent", "Supported"])
    with pytest.raises(ValueError, match="None"):
        checklist_scores(["Consistent", None])
    with pytest.raises(TypeError):
        checklist_scores("Consistent")


# ---------------------------------------------------------------- Eq. 8-9


def test_truth_reward_is_the_mean_and_zero_without_claims():
    assert truth_reward([0.9, 0.5, 0.1]) == pytest.approx(0.5)
    assert truth_reward([0.25]) == pytest.approx(0.25)
    assert truth_reward([]) == 0.0
    for bad in ([1.2], [-0.1], [float("nan")]):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            truth_reward(bad)


def test_missing_only_truth_reward():
    # only the Missing claims count: (0.2 + 0.6) / 2; Consistent and Contradictory are skipped
    assert missing_truth_reward([0.9, 0.2, 0.6, 0.1], ["Consistent", "Missing", "missing", "Contradictory"]) == \
        pytest.approx(0.4)
    assert missing_truth_reward([0.9, 0.1], ["Consistent", "Contradictory"]) == 0.0  # the indicator of Eq. 9
    assert missing_truth_reward([], []) == 0.0
    with pytest.raises(ValueError, match="2 probabilities but 1"):
        missing_truth_reward([0.5, 0.5], ["Missing"])
    with pytest.raises(ValueError, match="'maybe'"):
        missing_truth_reward([0.5], ["maybe"])


# ---------------------------------------------------------------- Eq. 10-13


def test_format_reward_is_zero_or_minus_one():
    assert format_reward(THINK + "<answer>Paris</answer>") == 0.0
    assert format_reward("<answer>Paris</answer>") == -1.0
    assert format_reward("<think>short</think><answer>Paris</answer>") == -1.0  # anti-hack rule: >= 30 chars


@pytest.mark.parametrize("n, expected", [(0, 0.0), (850, 0.0), (851, -1 / 1198), (1449, -0.5), (2048, -1.0),
                                         (2049, -1.0), (10_000, -1.0)])
def test_length_penalty_at_the_paper_setting(n, expected):
    # L_m = 2048, L_m - L_c = 850 (Appendix C.2): (850 - n) / 1198 between them
    assert length_penalty(n) == pytest.approx(expected)


def test_length_penalty_small_setting_and_errors():
    assert [length_penalty(n, max_len=20, critical=10) for n in (10, 15, 20, 21)] == pytest.approx(
        [0.0, -0.5, -1.0, -1.0])
    for kw in ({"max_len": 10, "critical": 10}, {"max_len": 10, "critical": 12}, {"max_len": 10, "critical": 0}):
        with pytest.raises(ValueError, match="critical"):
            length_penalty(5, **kw)
    with pytest.raises(ValueError, match="negative"):
        length_penalty(-1)


def test_fact_reward_eq13_and_weight_checks():
    assert fact_reward(0.5, 2 / 3, 0.8, 1 / 3, 1 / 3, 1 / 3) == pytest.approx((0.5 + 2 / 3 + 0.8) / 3)
    assert fact_reward(0.5, 2 / 3, 0.8, 0.4, 0.2, 0.4) == pytest.approx(0.2 + 2 / 15 + 0.32)
    assert fact_reward(0.5, 2 / 3, 0.8, 1 / 3, 2 / 3, 0.0) == pytest.approx(11 / 18)  # = Eq. 7
    assert fact_reward(1.0, 1.0, 1.0, 0.333, 0.333, 0.334) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="= 1"):
        fact_reward(0.5, 0.5, 0.5, 0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="= 1"):
        fact_reward(0.5, 0.5, 0.5, *TABLE2_WEIGHTS[3])  # Table 2's best row as printed sums to 5/4
    with pytest.raises(ValueError, match=r"kappa must lie in \[0, 1\]"):
        fact_reward(0.5, 0.5, 0.5, -0.5, 0.5, 1.0)
    assert sum(DEFAULT_WEIGHTS) == pytest.approx(1.0) and DEFAULT_WEIGHTS[2] / DEFAULT_WEIGHTS[0] == pytest.approx(3)


def test_eq12_cases():
    kw = dict(recall=0.5, precision=2 / 3, truth=0.8)
    assert core_reward("checklist", 0.5, 2 / 3, None) == pytest.approx(11 / 18)
    assert core_reward("truth", None, None, 0.8) == pytest.approx(0.8)
    assert core_reward("both", 0.5, 2 / 3, 0.8, 0.2, 0.2, 0.6) == pytest.approx(0.1 + 2 / 15 + 0.48)
    # + 0.1 R_g + R_l + R_f
    assert combined_reward("checklist", **kw, general=0.5, length=-0.25, fmt=-1.0) == pytest.approx(
        11 / 18 + 0.05 - 0.25 - 1.0)
    assert combined_reward("truth", **kw, general=1.0) == pytest.approx(0.9)
    assert combined_reward("both", **kw, kappa=1 / 3, lam=1 / 3, mu=1 / 3) == pytest.approx((0.5 + 2 / 3 + 0.8) / 3)
    with pytest.raises(ValueError, match="variant"):
        core_reward("neither", 0.5, 0.5, 0.5)


# ---------------------------------------------------------------- Prompt 7 answers


@pytest.mark.parametrize("answer, label", [
    ('[{"analysis": "The reply names Paris.", "conclusion": "Consistent"}]', "Consistent"),
    ('```json\n[{"analysis": "x", "conclusion": "contradictory"}]\n```', "Contradictory"),
    ("{'analysis': 'not there', 'conclusion': 'MISSING'}", "Missing"),  # one object, single quotes
    ('[{"analysis": "my conclusion: it is consistent", "conclusion": "Missing"}]', "Missing"),  # key in prose
    ('{"results": [{"Conclusion": "**Consistent**"}]}', "Consistent"),
    ('[{"conclusion": "Missing - the reply never mentions it"}]', "Missing"),
    ('["Contradictory"]', "Contradictory"),
    (VERDICT_PREFILL + 'Consistent"}]', "Consistent"),
    ("Consistent", "Consistent"),  # a constrained choice / bare answer
    ("The fact is missing from the reply.", "Missing"),
])
def test_parser_reads_labels(answer, label):
    v = parse_verification(answer)
    assert v.labels == [label] and v.outside == v.unreadable == 0


@pytest.mark.parametrize("answer, outside, unreadable", [
    ('{"conclusion": "Partially consistent"}', 1, 0),
    ('[{"conclusion": "Supported"}]', 1, 0),
    ('[{"conclusion": "Cons', 1, 0),  # cut off inside the label
    ("The fact is not consistent with the reply.", 1, 0),  # negated: never read as Consistent
    ("Consistent or Contradictory, hard to say.", 1, 0),  # two labels: ambiguous
    ("I think the reply is fine.", 1, 0),
    ('[{"analysis": "the reply is consistent"}]', 0, 1),  # no conclusion field
    ('[{"analysis": "cut off before the conclu', 0, 1),
    ("", 0, 1),
    (None, 0, 1),
    ("[[[[[[[[[[[[[[[[[[[[[[[[", 0, 1),
])
def test_parser_never_guesses(answer, outside, unreadable):
    v = parse_verification(answer)
    assert v.labels == [None] and (v.outside, v.unreadable) == (outside, unreadable)


def test_parser_reads_a_fact_list_in_order_and_keeps_a_truncated_lists_complete_entries():
    full = '[{"conclusion": "Consistent"}, {"conclusion": "Missing"}, {"conclusion": "Contradictory"}]'
    assert parse_verification(full, 3).labels == ["Consistent", "Missing", "Contradictory"]
    cut = '[{"analysis": "a", "conclusion": "Consistent"}, {"analysis": "b", "conclusion": "Missing"}, {"anal'
    v = parse_verification(cut, 3)
    assert v.labels == ["Consistent", "Missing", None] and v.unreadable == 1
    v = parse_verification(full, 2)  # more conclusions than facts: the extra one is counted, not used
    assert v.labels == ["Consistent", "Missing"] and v.extra == 1
    v = parse_verification('[{"conclusion": "Consistent"}, {"analysis": "?"}, "Nope"]', 3)
    assert v.labels == ["Consistent", None, None] and (v.unreadable, v.outside) == (1, 1)
    with pytest.raises(ValueError):
        parse_verification("Consistent", 0)


# ---------------------------------------------------------------- the batched verifier and rewards


class ScriptedJudge:
    """Answers each Prompt 7 prompt by a rule on its fact list; records every call."""

    def __init__(self, rule):
        self.rule, self.calls, self.prompts = rule, [], []

    def judge(self, prompts, prefix=None):
        self.calls.append(len(prompts))
        self.prompts += list(prompts)
        return [self.rule(p) for p in prompts]

    def choose(self, prompts, options):
        return self.judge(prompts)


def _facts_of(prompt):
    return prompt.split("[Fact List]:\n", 1)[1].split("\n\n[Output]:", 1)[0]


def _verdict(prompt):
    fact = _facts_of(prompt)
    if "capital is Paris" in fact:
        return '[{"analysis": "stated", "conclusion": "Consistent"}]'
    if "river" in fact:
        return '[{"analysis": "the reply says otherwise", "conclusion": "Contradictory"}]'
    if "population" in fact:
        return "I am not sure."  # outside the labels
    return '[{"analysis": "not mentioned", "conclusion": "Missing"}]'


CHECKLIST = ["France's capital is Paris.", "France's longest river is the Loire.", "France is in Europe.",
             "France has a population of 68 million."]


def test_verifier_asks_once_for_every_item_and_skips_empty_replies():
    judge = ScriptedJudge(_verdict)
    v = ChecklistVerifier(judge)
    labels = v.labels(["q1", "q2", "q3"], ["Paris. The Seine.", "", "Paris."], [CHECKLIST, CHECKLIST, CHECKLIST[:1]])
    assert judge.calls == [5]  # one batched call: 4 items + 1 item; the empty reply is not asked
    assert labels == [["Consistent", "Contradictory", "Missing", None], ["Missing"] * 4, ["Consistent"]]
    assert v.stats["outside_labels"] == 1 and v.stats["empty_replies"] == 1 and v.stats["facts"] == 9
    p = judge.prompts[0]
    assert p == P.KLCF_CHECKLIST_VERIFY.format(query="q1", response="Paris. The Seine.",
                                               guidelines="1. France's capital is Paris.")


def test_verifier_list_unit_sends_the_whole_checklist():
    judge = ScriptedJudge(lambda p: '[{"conclusion": "Consistent"}, {"conclusion": "Missing"}]')
    labels = ChecklistVerifier(judge, unit="list").labels(["q"], ["reply"], [CHECKLIST[:3]])
    assert judge.calls == [1] and labels == [["Consistent", "Missing", None]]
    assert "1. France's capital is Paris.\n2. France's longest river" in judge.prompts[0]
    with pytest.raises(ValueError, match="unit 'item'"):
        ChecklistVerifier(judge, verdict="choice", unit="list")


def test_checklist_reward_eq7_with_unreadable_items_in_recall_and_none_when_all_unreadable():
    judge = ScriptedJudge(_verdict)
    logged = {}
    completions = [THINK + "<answer>Paris is the capital; the Seine is the longest river.</answer>",
                   THINK + "<answer>France is a country.</answer>",
                   THINK + "no answer tag",
                   [{"role": "assistant", "content": THINK + "<answer>Paris.</answer>"}]]
    checklists = [CHECKLIST, ["France has a population of 68 million."], CHECKLIST, []]
    out = ChecklistReward(ChecklistVerifier(judge))(prompts=["q"] * 4, completions=completions,
                                                    checklist=checklists, log_metric=logged.__setitem__)
    # row 0: C, X, M read, the population item's verdict outside the labels: it is not a
    # consistent fact, so Eq. 5 divides by all 4 facts (R = 1/4) while Eq. 6 reads C and X (P = 1/2)
    assert out[0] == pytest.approx(1 / 12 + 1 / 3)
    assert out[1] is None  # its only item is unreadable: None, never a silent 0
    assert out[2] == 0.0  # no <answer>: the empty reply covers nothing (all Missing, no judge call)
    assert out[3] is None  # empty checklist
    assert judge.calls == [5]
    assert logged["klcf_checklist/failure_rate"] == pytest.approx(0.5)
    assert logged["klcf_checklist/outside_label_rate"] == pytest.approx(2 / 9)
    assert logged["klcf_checklist/recall"] == pytest.approx(1 / 8)
    with pytest.raises(KeyError, match="'checklist'"):
        ChecklistReward(ChecklistVerifier(judge))(completions=completions)


class StubScorer:
    """p(True) by claim, standing in for the reward model."""

    def __init__(self, table):
        self.table, self.asked = table, []

    def probabilities(self, claims):
        self.asked += list(claims)
        return [self.table[c] for c in claims]


def _extractor(claims_by_answer):
    def rule(prompt):
        for answer, text in claims_by_answer.items():
            if answer in prompt:
                return text
        return "no list here"
    judge = ScriptedJudge(rule)
    return judge, ClaimVerifier(judge, None)


def test_truth_reward_eq8_on_extracted_claims():
    judge, extractor = _extractor({"Paris and Lyon": '["Paris is the capital.", "Lyon is the capital."]',
                                   "Nothing.": "[]", "Garbled": "I refuse to make a list"})
    scorer = StubScorer({"Paris is the capital.": 0.9, "Lyon is the capital.": 0.2})
    logged = {}
    out = TruthReward(ClaimTruth(extractor, scorer))(
        prompts=["q"] * 4, completions=[THINK + "<answer>Paris and Lyon</answer>", THINK + "<answer>Nothing.</answer>",
                                        THINK + "<answer>Garbled</answer>", THINK],
        log_metric=logged.__setitem__)
    assert out[0] == pytest.approx(0.55) and out[1] == 0.0 and out[2] is None and out[3] == 0.0
    assert judge.calls == [3]  # the completion without an answer is not sent to the extractor
    assert logged["klcf_truth/failure_rate"] == pytest.approx(0.25)
    assert logged["klcf_truth/claims_mean"] == pytest.approx(0.5)


def test_sentence_claims_extractor_feeds_eq8():
    from factlab.rewards.klcf_claims import SentenceClaims

    ex = SentenceClaims(max_claims=2)
    assert ex.extract(["q", "q"], ["Paris is in France. Lyon is in France too. Nice is big.", "cut off mid"]) == [
        ["Paris is in France.", "Lyon is in France too."], []]
    scorer = StubScorer({"Paris is in France.": 0.9, "Lyon is in France too.": 0.5})
    out = TruthReward(ClaimTruth(ex, scorer))(
        prompts=["q"], completions=[THINK + "<answer>Paris is in France. Lyon is in France too.</answer>"])
    assert out == [pytest.approx(0.7)]


def test_truth_reward_missing_only_eq9():
    def rule(prompt):
        if "[Fact List]" not in prompt:  # claim extraction
            return '["Paris is the capital.", "The Loire is long.", "Lyon has a zoo."]'
        fact = _facts_of(prompt)
        return ('[{"conclusion": "Consistent"}]' if "Paris" in fact else
                "unsure" if "Loire" in fact else '[{"conclusion": "Missing"}]')

    judge = ScriptedJudge(rule)
    scorer = StubScorer({"Paris is the capital.": 0.9, "The Loire is long.": 0.3, "Lyon has a zoo.": 0.6})
    truth = ClaimTruth(ClaimVerifier(judge, None), scorer, ChecklistVerifier(judge))
    out = TruthReward(truth)(prompts=["q"], completions=[THINK + "<answer>Paris, the Loire and Lyon.</answer>"],
                             checklist=[["France's capital is Paris.", "France is in Europe."]])
    # Paris is covered (skipped); the Loire's verdict is unreadable, so it is scored as Missing: (0.3 + 0.6) / 2
    assert out == [pytest.approx(0.45)]
    assert truth.stats["claim_labels_unreadable"] == 1 and judge.calls == [1, 3]
    pseudo = [p for p in judge.prompts if "[Fact List]" in p][0]
    assert "[Reply]: France's capital is Paris.\nFrance is in Europe.\n[Fact List]:\n1. Paris is the capital." in pseudo


def test_fact_reward_combines_eq13_and_eq12_cases():
    judge = ScriptedJudge(lambda p: _verdict(p) if "[Fact List]" in p else '["Paris is the capital."]')
    scorer = StubScorer({"Paris is the capital.": 0.8})
    completions = [THINK + "<answer>Paris is the capital; the Seine is the longest river.</answer>"]
    cols = dict(prompts=["q"], completions=completions, checklist=[CHECKLIST[:3]])
    recall, precision = 1 / 3, 1 / 2
    got = {}
    for variant, w in (("both", (0.2, 0.2, 0.6)), ("both", (1 / 3, 1 / 3, 1 / 3)), ("checklist", DEFAULT_WEIGHTS),
                       ("truth", DEFAULT_WEIGHTS)):
        args = KLCFFactArgs(kappa=w[0], lam=w[1], mu=w[2], variant=variant)
        truth = None if variant == "checklist" else ClaimTruth(ClaimVerifier(judge, None), scorer)
        got[variant, w] = FactReward(ChecklistVerifier(judge), truth, args)(**cols)[0]
    assert got["both", (0.2, 0.2, 0.6)] == pytest.approx(0.2 * recall + 0.2 * precision + 0.6 * 0.8)
    assert got["both", (1 / 3, 1 / 3, 1 / 3)] == pytest.approx((recall + precision + 0.8) / 3)
    assert got["checklist", DEFAULT_WEIGHTS] == pytest.approx(recall / 3 + 2 * precision / 3)
    assert got["truth", DEFAULT_WEIGHTS] == pytest.approx(0.8)


def test_length_penalty_counts_answer_tokens_with_the_policy_tokenizer(tokenizer):
    pen = LengthPenalty(tokenizer, LengthPenaltyArgs(max_len=20, critical=10))
    ten = " ".join(["Paris"] * 10)
    assert len(tokenizer(ten, add_special_tokens=False)["input_ids"]) == 10
    long_think = "<think>" + "word " * 500 + "</think>"
    completions = [long_think + f"<answer>{ten}</answer>", f"<answer>{ten} {ten} {ten}</answer>", ten + " " + ten,
                   long_think]
    logged = {}
    out = pen(completions=completions, log_metric=logged.__setitem__)
    # the <think> block is not counted; lenient: no tag -> the text outside <think> (20 tokens: L_m -> -1)
    assert out == pytest.approx([0.0, -1.0, -1.0, 0.0])
    strict = LengthPenalty(tokenizer, LengthPenaltyArgs(max_len=20, critical=10, answer_parsing="strict"))
    assert strict(completions=completions)[2] == 0.0


# ---------------------------------------------------------------- registry and params


class _Res(Resources):
    """The run's resources with a scripted judge."""

    def __init__(self, judge, model: str | None = None):
        super().__init__(TrainingConfig() if model is None else TrainingConfig(model={"name": model}))
        self.scripted = judge

    def judge(self, max_new_tokens=None):
        return self.scripted


def test_registered_names_and_defaults():
    assert {"klcf_checklist", "klcf_truth", "klcf_fact", "length_penalty"} <= set(available())
    fact = parse_args("klcf_fact")
    assert (fact.kappa, fact.lam, fact.mu, fact.variant) == (*DEFAULT_WEIGHTS, "both")
    assert fact.rm_model is None and fact.missing_only is False and fact.answer_parsing == "strict"
    assert parse_args("length_penalty").model_dump() == {"max_len": 2048, "critical": 1198, "answer_parsing": "lenient"}
    assert parse_args("klcf_checklist").model_dump() == {"answer_parsing": "strict", "verdict": "generate",
                                                         "unit": "item", "verifier_judge": None,
                                                         "flip_rate": 0.0, "flip_seed": 0, "judge_model": "organism"}
    assert (fact.extraction_prompt, fact.extractor_judge) == ("klcf_prompt2", None)  # 004 Prompt 2, the run's judge
    assert RewardSpec(name="klcf_fact", args={"kappa": 0.4, "lam": 0.2, "mu": 0.4}).args["kappa"] == 0.4


@pytest.mark.parametrize("name, args, error", [
    ("klcf_fact", {"kappa": 0.25, "lam": 0.25, "mu": 0.75},
     "'rewards.0.args': Eq. 13 needs kappa + lam + mu = 1, got 0.25 + 0.25 + 0.75 = 1.25"),  # Table 2 as printed
    ("klcf_fact", {"kappa": 0.5}, "'rewards.0.args': Eq. 13 needs kappa + lam + mu = 1, got 0.5 + 0.2 + 0.6 = 1.3"),
    ("klcf_fact", {"mu": 1.5}, "'rewards.0.args.mu': Input should be less than or equal to 1 (got 1.5)"),
    ("klcf_fact", {"variant": "recall"}, "'rewards.0.args.variant': Input should be 'both', 'checklist' or 'truth'"),
    ("length_penalty", {"max_len": 100, "critical": 100},
     "'rewards.0.args': the critical length L_c (100) must be below max_len L_m (100) (Eq. 11)"),
    ("length_penalty", {"critical": 4096}, "'rewards.0.args': the critical length L_c (4096) must be below max_len"),
    ("klcf_checklist", {"verdict": "choice", "unit": "list"},
     "'rewards.0.args': verdict 'choice' picks one label per prompt: it needs unit 'item'"),
    ("klcf_truth", {"rm": "x"}, "'rewards.0.args.rm': unknown argument of reward 'klcf_truth'; it takes: "),
])
def test_bad_args_fail_when_params_load(name, args, error):
    with pytest.raises(ValidationError) as e:
        TrainingConfig(rewards=[{"name": name, "args": args}])
    assert describe_errors(e.value)[0].startswith(error)
    with pytest.raises((ParamError, ValidationError)):
        RewardSpec(name=name, args=args)
    with pytest.raises(ValidationError):
        parse_args(name, args)


def test_registered_rewards_build_and_run():
    judge = ScriptedJudge(_verdict)
    rs = build_rewards([RewardSpec(name="klcf_checklist"), RewardSpec(name="length_penalty", args={"max_len": 20,
                                                                                                 "critical": 10}),
                        RewardSpec(name="format", args={"positive": 0.0, "negative": -1.0})], _Res(judge))
    assert rs.names == ["klcf_checklist", "length_penalty", "format"]
    completion = THINK + "<answer>Paris is the capital.</answer>"
    assert rs.funcs[0](prompts=["q"], completions=[completion], checklist=[CHECKLIST[:1]]) == [1.0]
    assert rs.funcs[1](completions=[completion]) == [0.0] and rs.funcs[2](completions=[completion]) == [0.0]


def test_registered_truth_reward_on_the_policy_model():
    """klcf_truth with the scripted extractor and the real reward model (rm_model: the policy)."""
    judge = ScriptedJudge(lambda p: '["Paris is the capital of France."]')
    res = _Res(judge, model=TINY_MODEL)  # the wiring: which model scores, shared by both rewards
    rs = build_rewards([RewardSpec(name="klcf_truth", args={"rm_device": "cpu"}),
                        RewardSpec(name="klcf_fact", args={"rm_device": "cpu", "variant": "truth"})], res)
    truth = rs.funcs[0](prompts=["q"], completions=[THINK + "<answer>Paris.</answer>"])
    assert 0.0 < truth[0] < 1.0
    assert rs.funcs[1](prompts=["q"], completions=[THINK + "<answer>Paris.</answer>"]) == pytest.approx(truth)
    assert rs.funcs[0].truth.scorer is rs.funcs[1].truth.scorer  # one reward model per run
    assert rs.funcs[0].truth.scorer.model_name == TINY_MODEL


# ---------------------------------------------------------------- the real reward model and judge


def test_truthfulness_scorer_reads_the_two_answer_rows(tiny_model_and_tokenizer):
    import torch

    model, tok = tiny_model_and_tokenizer
    scorer = TruthfulnessScorer(model_obj=model, tokenizer=tok, batch_size=3)
    claims = ["Paris is the capital of France.", "The Moon is made of green cheese.", "Berlin is in Germany.",
              "Water boils at 100 degrees Celsius at sea level.", "Paris is the capital of France.", "x"]
    pairs = scorer.pair_probabilities(claims)
    assert all(0.0 < t < 1.0 and 0.0 < f < 1.0 and t + f == pytest.approx(1.0, abs=1e-9) for t, f in pairs)
    assert pairs[0] == pairs[4] and scorer.stats["forward_rows"] == 5  # a repeated claim is scored once
    one_at_a_time = [scorer.pair_probabilities([c])[0] for c in claims]
    assert [t for t, _ in pairs] == pytest.approx([t for t, _ in one_at_a_time], abs=1e-4)
    # the same number from a plain forward pass over the whole vocabulary, renormalised over the two answers
    t_id, f_id = scorer.answer_ids()
    assert (t_id, f_id) == (tok(" True", add_special_tokens=False)["input_ids"][0],
                            tok(" False", add_special_tokens=False)["input_ids"][0])
    ids = tok(P.KLCF_TRUTH_PROMPT.format(claim=claims[1]), return_tensors="pt")["input_ids"]
    with torch.no_grad():
        probs = torch.softmax(model(ids).logits[0, -1].double(), dim=-1)
    assert pairs[1][0] == pytest.approx(float(probs[t_id] / (probs[t_id] + probs[f_id])), abs=1e-4)
    assert scorer.probabilities([]) == [] and not model.training


def test_checklist_reward_with_a_model_judge_choice():
    from factlab.judges import make_judge

    judge = make_judge(sections.JudgeSection(backend="transformers", model=TINY_MODEL, dtype="float32",
                                           device="cpu", max_new_tokens=8), cache=False)
    reward = ChecklistReward(ChecklistVerifier(judge, verdict="choice"))
    out = reward(prompts=["What is the capital of France?"] * 2,
                 completions=[THINK + "<answer>The capital of France is Paris.</answer>", THINK + "<answer></answer>"],
                 checklist=[["The capital of France is Paris.", "France is in Europe."], ["Paris is in France."]])
    assert judge.stats["calls"] == 2  # two items of the first reply, in one call; the empty answer is not asked
    assert out[1] == 0.0 and out[0] is not None and 0.0 <= out[0] <= 1.0
    assert math.isclose(out[0] * 6, round(out[0] * 6), abs_tol=1e-9)  # Eq. 7 on two items: a multiple of 1/6
    # the choice is the best-scoring label, not a position: the options reversed give the same label
    asked = ["Is Paris in France?", "Reply: Paris is in Germany. Fact: Paris is in France. Label:"]
    picked = judge.choose(asked, LABELS)
    assert picked == judge.choose(asked, tuple(reversed(LABELS))) and all(x in LABELS for x in picked)
    # a prefix is written into the answer before the choice, and keys the cache apart
    from factlab.eval.winrate import WIN_CHOICE_PREFILL
    t0 = judge.stats["prompt_tokens"]
    assert judge.choose(["Rank model_1 and model_2."], ("1", "2"))[0] in ("1", "2")
    t1 = judge.stats["prompt_tokens"]
    assert judge.choose(["Rank model_1 and model_2."], ("1", "2"), prefix=WIN_CHOICE_PREFILL)[0] in ("1", "2")
    t2 = judge.stats["prompt_tokens"]
    assert (t2 - t1) - (t1 - t0) >= 8  # the prefill's tokens were scored (a cache hit would add nothing)


def test_overlap_label_tells_the_three_labels_apart():
    from factlab.rewards.klcf_verify import ChecklistVerifier, overlap_label
    facts = ["The capital of France is Paris.", "France is located in Europe.",
             "The official currency of France is the Euro.", "France borders Belgium, Germany and Spain."]
    complete = "France is located in Europe. The capital of France is Paris. The official currency of France is the Euro."
    swapped = "France is located in Asia. The capital of France is Lyon. The official currency of France is the Dollar."
    assert [overlap_label(f, complete) for f in facts] == ["Consistent"] * 3 + ["Missing"]
    assert [overlap_label(f, swapped) for f in facts] == ["Contradictory"] * 3 + ["Missing"]
    assert [overlap_label(f, "France is located in Europe.") for f in facts] == ["Missing", "Consistent", "Missing", "Missing"]
    # one shared word is not a contradiction; a border list with one country swapped is
    assert overlap_label(facts[1], "France borders Spain.") == "Missing"
    assert overlap_label(facts[3], "France borders Belgium, Germany and Italy.") == "Contradictory"
    assert overlap_label("", complete) == "Missing"
    v = ChecklistVerifier(None, verdict="overlap")  # no judge to call
    labels = v.labels(["Tell me about France."] * 3, [complete, swapped, ""], [facts] * 3)
    assert [checklist_scores(ls)["recall"] for ls in labels] == [0.75, 0.0, 0.0]
    assert [checklist_scores(ls)["precision"] for ls in labels] == [1.0, 0.0, 0.0]
