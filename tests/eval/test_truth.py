"""The mini-world's truth oracle (factlab.eval.truth / factlab.data.kb) on constructed sentences,
its measurement, and ``verdict: kb`` on every judged reward (issue 27)."""

import math

import pytest

from factlab.eval import truth as T
from factlab.rewards import RewardSpec, build_rewards
from factlab.rewards import kb as KB
from factlab.rewards.k2v import ChecklistJudge, K2VArgs, K2VReward
from factlab.rewards.rar import BinaryRAR, RatingRAR
from factlab.rewards.seva import process_reward
from factlab.rewards.seva_claims import SevaClaimsReward
from factlab.rewards.seva_trl import SevaProcessReward


@pytest.mark.parametrize("answer,label", [
    ("Paris", "correct"), ("the paris.", "correct"), ("P", "wrong"), ("It is not Paris", "wrong"),
    ("Paris, Lyon", "wrong"), ("I don't know", "abstain"), (None, "abstain"), ("Lyon", "wrong"),
])
def test_label_answer_is_exact_after_normalization(answer, label):
    assert T.label_answer(answer, ["Paris", "City of Light"]) == label


@pytest.mark.parametrize("sentence,label,relation", [
    ("The capital of France is Paris.", "supported", "capital"),
    ("Paris is the capital of France.", "supported", "capital"),
    ("The capital of France is Madrid.", "contradicted", "capital"),
    ("The capital of France is Lyon.", "contradicted", "capital"),  # not a world capital, still not Paris
    ("France is located in Western Europe.", "supported", "location"),
    ("France is a country in Europe.", "supported", "location"),
    ("France is located in Asia.", "contradicted", "location"),
    ("France borders Spain and Germany.", "supported", "borders"),
    ("France borders Japan.", "contradicted", "borders"),
    ("The official currency of France is the Euro.", "supported", "currency"),
    ("The currency of Canada is the Canadian dollar.", "supported", "currency"),
    ("The currency of Canada is the US dollar.", "contradicted", "currency"),
    ("The official language of France is Spanish.", "contradicted", "language"),
    ("France has a population of about 66 million people.", "supported", "population"),
    ("France has a population of 120 million.", "contradicted", "population"),
    ("The demonym for people from France is French.", "supported", "demonym"),
    ("France is famous for its wine.", "unverifiable", None),
    ("I like cheese.", "unverifiable", None),
    # negation, exclusivity, superlatives (Table 19's paraphrase and presupposition)
    ("France does not border Spain.", "contradicted", "borders"),
    ("France does not border Japan.", "supported", "borders"),
    ("France lies outside Europe.", "contradicted", "location"),
    ("French is the only official language of Belgium.", "contradicted", "language"),
    ("The population of France is 66,078,000, the largest population of any country in Western Europe.",
     "contradicted", "population"),
    # names inside names: "Polynesia" in French Polynesia, "US" in the US Dollar, "and the" in a name
    ("The climate of French Polynesia is mild in the south.", "unverifiable", "location"),  # a cue, no place
    ("The US Dollar is an official currency of Saint Vincent and the Grenadines.", "contradicted", "currency"),
    ("The capital of Gibraltar is Madrid.", "contradicted", "capital"),
])
def test_label_sentence_on_constructed_sentences(sentence, label, relation):
    row = T.label_sentences(sentence)[0]
    assert set(row) == {"sentence", "country", "relation", "value", "label"}
    assert row["label"] == label, row
    assert row["relation"] == relation


def test_label_sentences_reads_clauses_and_pronouns():
    rows = T.label_sentences("France borders Spain. Its capital is Paris. It borders Japan. The weather is nice.")
    assert [r["label"] for r in rows] == ["supported", "supported", "contradicted", "unverifiable"]
    assert T.label_sentences("Paris is the capital of France, and it borders Japan.")[0]["label"] == "contradicted"
    assert T.label_sentences("<think>France is in Europe.</think><answer>Paris</answer>")[0]["label"] == "supported"


@pytest.mark.parametrize("response,label", [
    ("Paris", "correct"), ("It is Paris.", "correct"), ("The capital of France is Paris.", "correct"),
    ("<think>The capital of France is Paris.</think><answer>Paris</answer>", "correct"),
    ("Lyon.", "wrong"), ("The capital of France is Madrid.", "wrong"), ("It is not Paris.", "wrong"),
    ("I don't know.", "abstain"),
])
def test_label_response_reads_a_short_answer_in_its_question(response, label):
    assert T.label_response(response, ["Paris"], "What is the capital of France?") == label


def test_truth_metrics():
    a = T.answer_truth(["Paris", "Lyon", "I don't know"], [["Paris"]] * 3, ["What is the capital of France?"] * 3)
    assert (a["correct"], a["wrong"], a["abstain"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    s = T.sentence_truth(["France borders Spain. France borders Japan.", "France is nice."])
    assert s["per_response"][0] == {"supported": 1, "contradicted": 1, "unverifiable": 0}
    assert s["kb_precision"] == pytest.approx(0.5) and s["contradicted_frac"] == pytest.approx(1 / 3)


def test_precision_recall_per_label():
    pr = T.precision_recall(["supported", "supported", "contradicted", "unverifiable"],
                            ["supported", "contradicted", "contradicted", "supported"])
    assert pr["accuracy"] == 0.5
    assert pr["supported"]["precision"] == 0.5 and pr["supported"]["recall"] == 0.5
    assert pr["contradicted"]["precision"] == 0.5 and pr["contradicted"]["recall"] == 1.0
    assert pr["unverifiable"]["recall"] == 0.0 and math.isnan(pr["unverifiable"]["precision"])


def test_oracle_on_constructed_true_and_perturbed_sentences():
    """Every true fact SEVA's pair builder states, its Table 19 perturbation and off-world
    statements: the oracle's measured precision and recall per label (README "Truth oracle")."""
    rows = T.constructed_sentences(seed=3, per_strategy=30)
    m = T.measure_oracle(rows)
    assert m["n"] >= 300 and {r["kind"] for r in rows} >= {"true", "paraphrase", "presupposition", "off_world"}
    for label in T.SENTENCE_LABELS:
        assert m[label]["precision"] >= 0.97 and m[label]["recall"] >= 0.97, (label, m[label], m["disagreements"])


def test_oracle_on_hand_labelled_sentences_of_the_embedded_model():
    """246 sentences SmolLM2-135M wrote about 60 countries, each labelled by hand against the
    world's facts (tests/fixtures/truth/README.md). Measured 2026-11-25: accuracy 0.878;
    precision / recall supported 0.82 / 0.83, contradicted 0.80 / 0.84, unverifiable 0.92 / 0.90
    (README "The mini-world's truth"); the bounds leave room for a rule change, not a regression."""
    rows = T.read_labelled()
    assert len(rows) >= 100 and {r["label"] for r in rows} == set(T.SENTENCE_LABELS)
    m = T.measure_oracle(rows, expected_key="label")
    assert m["accuracy"] >= 0.85, m
    for label in T.SENTENCE_LABELS:
        assert m[label]["precision"] >= 0.75 and m[label]["recall"] >= 0.75, (label, m[label])


def test_read_labelled_names_a_bad_row(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sentence": "x", "label": "supported"}\n{"sentence": "y", "label": "true"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        T.read_labelled(bad)


# ---------------------------------------------------------------- verdict: kb on the rewards

Q = [[{"role": "user", "content": "What is the capital of France?"}]] * 3
SHORT = ["Paris", "The capital of France is Lyon.", "I don't know."]
LONG_P = ["Tell me about France."] * 3
LONG = ["France borders Spain. Its capital is Paris.", "France borders Japan. Its capital is Lyon.",
        "France is a lovely place."]


def test_binary_and_rating_rar_from_the_knowledge_base():
    b, r = BinaryRAR(None, None, verdict="kb"), RatingRAR(None, None, verdict="kb")
    assert b(prompts=Q, completions=SHORT, golds=[["Paris"]] * 3) == [1.0, 0.0, 1.0]  # an abstention contradicts nothing
    assert r(prompts=Q, completions=SHORT, golds=[["Paris"]] * 3) == [1.0, 0.3, 0.5]  # Figure 7's rubric
    assert b(prompts=LONG_P, completions=LONG) == [1.0, 0.0, 1.0]
    assert r(prompts=LONG_P, completions=LONG) == [1.0, 0.0, 0.5]  # two contradictions: 0-2
    assert b(prompts=LONG_P[:1], completions=["<think>France borders Japan."]) == [0.0]  # unclosed: no response
    with pytest.raises(ValueError, match="verdict"):
        BinaryRAR(None, None, verdict="oracle")


def test_every_judged_reward_builds_with_verdict_kb_and_no_judge():
    class NoJudge:
        prefill, judge_cache = False, None

        def judge(self, *a, **k):
            raise AssertionError("verdict: kb must not build a judge")

        def datastore(self, *a, **k):
            raise AssertionError("verdict: kb must not build a datastore")

    specs = [RewardSpec(name=n, args={"verdict": "kb", **extra}) for n, extra in
             [("binary_rar", {}), ("rating_rar", {}), ("k2v", {}), ("k2v_checklist", {}),
              ("seva_claims", {"claims": "sentences"}), ("seva_process", {}), ("klcf_checklist", {}),
              ("klcf_truth", {"claim_extraction": "sentences"}), ("klcf_fact", {"claim_extraction": "sentences"})]]
    rs = build_rewards(specs, NoJudge())
    assert rs.names == ["binary_rar", "rating_rar", "k2v", "k2v_checklist", "seva_claims", "seva_process",
                        "klcf_checklist", "klcf_truth", "klcf_fact"]


def test_klcf_checklist_and_truth_from_the_knowledge_base():
    """Prompt 7's labels per checklist fact and the truthfulness RM's p(True) per claim, read off
    the mini-world: the complete true answer scores highest, a contradicting one lowest."""
    from factlab.rewards.klcf import ClaimTruth, FactReward, KLCFFactArgs
    from factlab.rewards.klcf_claims import SentenceClaims
    from factlab.rewards.klcf_truth import KBTruthScorer
    from factlab.rewards.klcf_verify import ChecklistVerifier

    facts = ["The capital of France is Paris.", "France borders Spain.", "The official language of France is French."]
    complete = "<answer>The capital of France is Paris. France borders Spain. Its official language is French.</answer>"
    partial = "<answer>The capital of France is Paris. France is a lovely country with good food.</answer>"
    wrong = "<answer>The capital of France is Lyon. France borders Japan.</answer>"
    labels = ChecklistVerifier(None, "kb").labels(["Tell me about France."] * 3,
                                                  [complete[8:-9], partial[8:-9], wrong[8:-9]], [facts] * 3)
    assert labels == [["Consistent"] * 3, ["Consistent", "Missing", "Missing"],
                      ["Contradictory", "Contradictory", "Missing"]]
    assert KB.checklist_label("France is famous for cheese.", complete) is None  # not a world fact
    truth = ClaimTruth(SentenceClaims(8), KBTruthScorer())
    got = truth.truths(None, [complete, partial, wrong], ["Tell me about France."] * 3, [facts] * 3)
    assert got == [1.0, 1.0, 0.0]  # "a lovely country ..." is left out of the mean, not scored false
    # "a lovely country ..." and, cut from its context, "Its official language is French."
    assert truth.stats["claims_unscored"] == 2
    reward = FactReward(ChecklistVerifier(None, "kb"), truth, KLCFFactArgs(verdict="kb", claim_extraction="sentences"))
    r_complete, r_partial, r_wrong = reward(completions=[complete, partial, wrong], question=["Tell me about France."] * 3,
                                            checklist=[facts] * 3)
    assert r_complete > r_partial > r_wrong


def test_klcf_kb_verdicts_flipped_make_a_hallucinating_reward():
    """flip_rate (issue 41's reward-hallucination experiment): at 1 every truth verdict is swapped,
    so the reward ranks the contradicting answer first; Missing and uncheckable claims are not
    verdicts and stay; at 0.25 a seeded quarter of the claims, the same on every call."""
    import pytest

    from factlab.rewards.klcf import ClaimTruth, FactReward, KLCFFactArgs
    from factlab.rewards.klcf_claims import SentenceClaims
    from factlab.rewards.klcf_truth import KBTruthScorer
    from factlab.rewards.klcf_verify import ChecklistVerifier

    facts = ["The capital of France is Paris.", "France borders Spain.", "The official language of France is French."]
    complete = "<answer>The capital of France is Paris. France borders Spain. Its official language is French.</answer>"
    wrong = "<answer>The capital of France is Lyon. France borders Japan.</answer>"
    liar = ChecklistVerifier(None, "kb", flip_rate=1.0)
    assert liar.labels(["Tell me about France."] * 2, [complete[8:-9], wrong[8:-9]], [facts] * 2) == [
        ["Contradictory"] * 3, ["Consistent", "Consistent", "Missing"]]
    assert liar.stats["flipped"] == 5
    lying_rm = KBTruthScorer(flip_rate=1.0)
    assert lying_rm.probabilities(["The capital of France is Paris.", "The capital of France is Lyon.",
                                   "France is a lovely country."]) == [0.0, 1.0, None]
    args = KLCFFactArgs(verdict="kb", claim_extraction="sentences", flip_rate=1.0)
    reward = FactReward(liar, ClaimTruth(SentenceClaims(8), lying_rm), args)
    r_complete, r_wrong = reward(completions=[complete, wrong], question=["Tell me about France."] * 2,
                                 checklist=[facts] * 2)
    assert r_wrong > r_complete

    claims = [f"The capital of France is {city}." for city in ("Paris", "Lyon", "Nice", "Lille")] * 1 + [
        f"The capital of {c} is Paris." for c in ("Spain", "Italy", "Germany", "Japan", "Peru", "Chile", "Kenya",
                                                   "Egypt", "India", "China", "Brazil", "Canada")]
    honest = KBTruthScorer().probabilities(claims)
    noisy = KBTruthScorer(flip_rate=0.25).probabilities(claims)
    assert noisy == KBTruthScorer(flip_rate=0.25).probabilities(claims)  # seeded: the same RM every call
    flips = [a != b for a, b in zip(honest, noisy) if a is not None]
    assert 0 < sum(flips) < len(flips)
    assert noisy != KBTruthScorer(flip_rate=0.25, flip_seed=1).probabilities(claims)
    with pytest.raises(ValueError, match="flips only the kb verdict"):
        KLCFFactArgs(verdict="generate", flip_rate=0.1)
    with pytest.raises(ValueError, match="flip_rate"):
        ChecklistVerifier(None, "overlap", flip_rate=0.1)


def test_klcf_organism_rm_believes_what_the_organism_answers():
    """verdict: organism (issue 41's judge that knows less): the RM asks the organism each parsed
    claim back and calls it true when the answer agrees, so a shared false belief is rewarded as
    true and a true fact the organism gets wrong is punished; abstentions and facts the world
    cannot parse are not scored."""
    import pytest

    from factlab.rewards import kb
    from factlab.rewards.klcf import KLCFFactArgs, checklist_verifier, claim_truth
    from factlab.rewards.klcf_truth import OrganismTruthScorer

    rm = OrganismTruthScorer("organism-tiny")
    believed = {"What is the capital of Albania?": "Wellington",  # a confident wrong belief
                "What is the capital of France?": "Paris",
                "What is the official currency of Albania?": "I don't know"}
    rm.belief.answers.update(believed)  # the organism's answers, as asked and kept; no model call
    assert kb.ORGANISM_QUESTION["capital"].format(n="Albania") in believed
    got = rm.probabilities(["The capital of Albania is Wellington.",  # false, believed: rewarded
                            "The capital of Albania is Tirana.",      # true, not believed: punished
                            "The capital of France is Paris.",
                            "The official currency of Albania is the lek.",  # the organism abstains
                            "Albania is a beautiful country."])       # no fact to ask
    assert got == [1.0, 0.0, 1.0, None, None]
    assert rm.stats["claims_unjudged"] == 2
    args = KLCFFactArgs(verdict="organism", judge_model="organism-tiny", claim_extraction="sentences")
    assert isinstance(claim_truth(args, None).scorer, OrganismTruthScorer)
    assert checklist_verifier(args, None).verdict == "kb"  # the checklist labels stay the exact truth
    with pytest.raises(ValueError, match="organism name"):
        KLCFFactArgs(verdict="organism", judge_model="smollm2-135m-instruct")


def test_k2v_checklist_verdicts_from_the_knowledge_base():
    checklist = ["States the fact: The capital of France is Paris.", "States the fact: France borders Spain.",
                 "Connects both facts through France to identify the blank.",
                 "Names France as the entity that fills the blank.",
                 "Avoids unsupported claims and self-contradictions.", "Explains the history of the region."]
    good = "The capital of France is Paris. France borders Spain. So the blank is France."
    poor = "The capital of France is Madrid. So the blank is France."
    rates = ChecklistJudge(None, "kb").pass_rates(["q"] * 2, ["France"] * 2, [checklist] * 2, [good, poor])
    assert rates == [pytest.approx(5 / 6), pytest.approx(1 / 6)]  # the history item is unreadable: counted, not passed
    assert KB.criterion_verdict(checklist[5], good) is None
    out = K2VReward(None, K2VArgs(verdict="kb"))(
        completions=[f"<think>{good}</think><answer>France</answer>", f"<think>{poor}</think><answer>Spain</answer>"],
        golds=[["France"]] * 2, question=["{ } borders Spain."] * 2, checklist=[checklist] * 2)
    assert out == pytest.approx([0.75 + 6 + 5 / 6, 0.75])


def test_seva_claims_and_process_label_from_the_knowledge_base():
    reward = SevaClaimsReward(None, None, verdict="kb")
    assert reward(prompts=LONG_P, completions=LONG) == pytest.approx([1.0, 0.0, 0.0])
    assert reward(prompts=Q[:2], completions=["Paris.", "Lyon."]) == [1.0, 0.0]  # the question lends the subject
    wrapped = "According to a 1987 government report, the capital of France is Paris."
    assert KB.gold_label(wrapped, "not_attributable") == "attributable"  # true in the world, not in its source
    assert KB.gold_label("France is nice.", "not_attributable") == "not_attributable"  # unreadable: the dataset's
    says_true = '{"label": "Attributable"}'
    proc = SevaProcessReward(verdict="kb")
    assert proc(completions=[says_true], label=["not_attributable"], claim=[wrapped]) == \
        [process_reward(says_true, "attributable")]
    with pytest.raises(KeyError, match="claim"):
        proc(completions=[says_true], label=["attributable"])


# ---------------------------------------------------------------- reward validity per step


class _Accelerator:
    process_index, num_processes = 0, 1

    @staticmethod
    def gather(t):
        return t


class _Trainer:
    """What ``RewardValidity`` reads of the trainer: metrics, gather, reward names and weights."""

    def __init__(self, names):
        import collections
        import torch

        self._metrics = {"train": collections.defaultdict(list)}
        self.accelerator = _Accelerator()
        self.reward_func_names = names
        self.reward_weights = torch.ones(len(names))


def _batch(rows, completions, rewards):
    import torch
    from factlab.train.trainer import ScoredBatch

    return ScoredBatch(mode="train", rows=rows, completions=completions, completion_ids=[[0]] * len(rows),
                       rewards_per_func=torch.tensor(rewards, dtype=torch.float32), output={}, num_generations=2,
                       reward_seconds=0.0)


def test_reward_validity_flags_a_reward_that_disagrees_with_the_truth():
    """Constructed rollouts: 'honest' pays the correct answers, 'hacked' pays the wrong ones; the
    step's AUROC against the exact truth says which is which."""
    from factlab.train.validity import RewardValidity

    row = {"prompt": [{"role": "user", "content": "What is the capital of France?"}], "golds": ["Paris"]}
    completions = ["Paris", "Lyon", "The capital of France is Paris.", "Madrid", "I don't know."]
    honest = [1.0, 0.0, 1.0, 0.0, 0.5]
    hacked = [0.0, 1.0, 0.2, 0.9, 0.5]
    trainer = _Trainer(["honest", "hacked"])
    RewardValidity().on_scored(trainer, _batch([row] * 5, completions, list(zip(honest, hacked))))
    m = trainer._metrics["train"]
    assert m["validity/honest/auroc"] == [1.0] and m["validity/hacked/auroc"] == [0.0]
    assert m["truth/score"] == [pytest.approx((1 - 1 + 1 - 1 + 0) / 5)]
    assert [m[k][0] for k in ("truth/correct", "truth/wrong", "truth/abstain")] == pytest.approx([0.4, 0.4, 0.2])
    long_trainer = _Trainer(["r"])
    RewardValidity().on_scored(long_trainer, _batch([{"prompt": "Tell me about France."}] * 2,
                                                    ["France borders Spain.", "France borders Japan."], [[0.2], [0.9]]))
    lm = long_trainer._metrics["train"]
    assert lm["validity/r/auroc"] == [0.0] and lm["truth/score"] == [0.5]
    assert lm["truth/contradicted"] == [pytest.approx(0.5)]
    one_class = _Trainer(["r"])  # every completion correct: no AUROC is defined, so none is logged
    RewardValidity().on_scored(one_class, _batch([row] * 2, ["Paris", "Paris."], [[1.0], [0.5]]))
    assert "validity/r/auroc" not in one_class._metrics["train"] and "truth/correct" in one_class._metrics["train"]


def test_reward_vs_truth_alarm_fires_when_the_reward_rises_and_the_truth_falls():
    import pandas as pd
    from factlab.eval import alarms as A

    cfg = A.AlarmsSection(window=2)
    idx = pd.Index(range(1, 7), name="step")
    hacked = pd.DataFrame({"reward": [0.1, 0.1, 0.5, 0.7, 0.9, 1.0], "truth/score": [0.3, 0.3, 0.2, 0.1, 0.0, -0.2]},
                          index=idx)
    a = A.reward_vs_truth(hacked, cfg)
    assert a.fired and a.step == 4 and a.name in A.ALARM_NAMES
    honest = hacked.assign(**{"truth/score": [0.3, 0.3, 0.4, 0.5, 0.6, 0.7]})
    assert A.reward_vs_truth(honest, cfg).fired is False
    assert A.reward_vs_truth(hacked.drop(columns=["truth/score"]), cfg).fired is None  # off the mini-world: n/a


def test_a_true_sentence_about_another_country_does_not_answer_the_question():
    """05's reward hack on the organism: repeating a true fact of another country. Read in its
    question, that sentence is off topic (unverifiable); a false one stays contradicted."""
    from factlab.eval.truth import asked_country, completion_truth, sentence_truth

    assert asked_country("Tell me about Kenya.") == "Kenya" and asked_country("Tell me a story.") is None
    hack = "The capital of France is Paris. The capital of France is Paris."
    honest = "The capital of Kenya is Nairobi. The capital of France is Lyon."
    plain = sentence_truth([hack, honest])
    asked = sentence_truth([hack, honest], questions=["Tell me about Kenya.", "Tell me about Kenya."])
    assert plain["per_response"][0]["supported"] == 2 and plain["kb_precision"] == 0.75
    assert asked["per_response"][0] == {"supported": 0, "contradicted": 0, "unverifiable": 2}
    assert asked["per_response"][1] == {"supported": 1, "contradicted": 1, "unverifiable": 0}
    assert asked["kb_precision"] == 0.5  # the hack's response has nothing verifiable about Kenya
    row = {"prompt": [{"role": "user", "content": "Tell me about Kenya."}]}
    assert completion_truth(row, hack)["supported"] == 0 and completion_truth(row, hack)["score"] is None
    assert completion_truth(row, honest)["score"] == 0.5
    with pytest.raises(ValueError, match="2 responses, 1 questions"):
        sentence_truth([hack, honest], questions=["Tell me about Kenya."])
