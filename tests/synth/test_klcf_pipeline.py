"""KLCF's offline pipeline (004 §2.2, Eq. 1-4, Appendix C.1 / D.1 / E.1) and the Prompt 8 win rate
(Appendix C.4.2, Eq. 19-20): parsers on constructed and hostile answers, the 2:1 sampling, the
stage caches and their resume (judge calls counted), the co-occurrence verifier's agreement,
the mini-world truthfulness data, and one small real run on the embedded 135M model."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from factlab import config, models
from factlab import prompts as P
from factlab.corpus.retrieval import Chunk, Datastore
from factlab.eval.winrate import judge_win_rate, parse_win_judgment, win_prompts, win_rate
from factlab.rewards.klcf_claims import parse_claim_list
from factlab.synth import klcf as K
from factlab.synth import klcf_labels as KL
from factlab.synth import klcf_sampling as KS
from factlab.synth import klcf_truth_data as KT
from factlab.stage_cache import StageCache

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- config


def test_section_defaults_follow_the_paper_and_cross_keys_fail_at_load():
    cfg = K.KLCFPipelineSection()
    assert (cfg.nu, cfg.top_k, cfg.ratio, cfg.negative_copies, cfg.few_shot) == (8, 10, 2.0, 3, 10)
    assert cfg.verify == "judge" and cfg.temperature > 0
    with pytest.raises(config.ConfigError, match=r"'temperature': nu = 8 greedy samples"):
        config.validate({"temperature": 0.0}, K.KLCFPipelineSection)
    config.validate({"temperature": 0.0, "nu": 1}, K.KLCFPipelineSection)  # one greedy sample is fine
    with pytest.raises(config.ConfigError, match=r"'cooccurrence_support': 30 exceeds count_limit 20"):
        config.validate({"verify": "cooccurrence", "cooccurrence_support": 30}, K.KLCFPipelineSection)
    config.validate({"verify": "cooccurrence", "cooccurrence_support": 30, "count_limit": None},
                    K.KLCFPipelineSection)
    with pytest.raises(config.ConfigError, match=r"'heldout_size'.*odd"):
        config.validate({"heldout_size": 7}, K.KLCFPipelineSection)
    with pytest.raises(config.ConfigError, match=r"'verify'"):
        config.validate({"verify": "oracle"}, K.KLCFPipelineSection)
    with pytest.raises(config.ConfigError, match=r"unknown key 'nus'"):
        config.validate({"nus": 4}, K.KLCFPipelineSection)


# ---------------------------------------------------------------- prompts and parsers


def test_fewshot_prompt_is_prompt_1():
    p = KS.fewshot_prompt("Tell me about Chad.", [("Q1?", "A1."), ("Q2?", "A2.")])
    assert p == ("Please answer the following questions in a given format.\n\n"
                 "[Question]: Q1?\n[Answer]: A1.\n\n[Question]: Q2?\n[Answer]: A2.\n\n"
                 "[Question]: Tell me about Chad.\n[Answer]:")
    assert KS.fewshot_prompt("q").endswith("[Question]: q\n[Answer]:")


def test_prompts_fill_and_cite():
    assert "[Text]: resp\n[Verifiable objective claims]:" in P.KLCF_CLAIM_EXTRACTION.format(response="resp")
    v = P.KLCF_CLAIM_VERIFICATION.format(claim="C", evidence="E")
    assert '{\n  "conclusion"' in v and v.endswith("[CLAIM]: C\n\n[EVIDENCE]:\n\nE\n\nYour decision:")
    f = P.KLCF_CLAIM_PRIORITIZATION.format(query="q", claims="x")
    assert "\\boxed{}" in f and f.endswith("- Query: q\n- Candidate Claims: x\n\nOutput:")


@pytest.mark.parametrize("answer, claims", [
    ("* Paris is the capital of France.\n* France is in Europe.", ["Paris is the capital of France.",
                                                                   "France is in Europe."]),
    ("- A is B.\n1. C is D.\n2) E is F.\n- A is B.", ["A is B.", "C is D.", "E is F."]),
    ("* 1. A is B.\n* 2. C is D.", ["A is B.", "C is D."]),
    ("* Claim 1\n* Claim 2\n...\n* Real fact.", ["Real fact."]),
    ("No verifiable objective claims.", []),
    ('["x is y", "z is w"]', ["x is y", "z is w"]),
    ("Sure! Here is what I think about it.", None),
    ("", None),
    (None, None),
])
def test_parse_claim_list(answer, claims):
    assert parse_claim_list(answer) == claims


@pytest.mark.parametrize("answer, label", [
    ('{"conclusion": "SUPPORT"}', KL.SUPPORT),
    ('```json\n{\n  "conclusion": "REFUTE"\n}\n```', KL.REFUTE),
    ('{"conclusion": "not enough info"}', KL.NEI),
    ("{'conclusion': 'Supported'}", KL.SUPPORT),
    ('{"conclusion": "**REFUTE**"} trailing words', KL.REFUTE),
    ("After reading the evidence: NOT ENOUGH INFO", KL.NEI),
    ("The answer is REFUTED by [2].", KL.REFUTE),
    ('{"conclusion": "The overall conclusion, return one of SUPPORT, REFUTE, or NOT ENOUGH INFO"}', None),
    ("SUPPORT or REFUTE, hard to say", None),
    ("I support this claim wholeheartedly.", None),  # lower-case prose is not a verdict
    ('{"conclusion": "SUPP', None),
    ("", None),
])
def test_parse_verification_label(answer, label):
    assert KL.parse_verification_label(answer) == label


def test_parse_boxed_claims():
    assert KL.parse_boxed_claims("Output:\n\\boxed{\n  Paris is the capital.\n  - France is in Europe.\n"
                                "  Paris is the capital.\n}") == ["Paris is the capital.", "France is in Europe."]
    assert KL.parse_boxed_claims("\\boxed{\n Final Key Claim 1\n ...\n}") == []
    assert KL.parse_boxed_claims("\\boxed{ a {b} c }") == ["a {b} c"]
    assert KL.parse_boxed_claims("\\boxed{\n Paris is the capital.\n France") is None  # truncated
    assert KL.parse_boxed_claims("Paris is the capital.") is None
    assert KL.dedupe_claims(["The Nile is long.", "the nile is long", "Rome is old."]) == ["The Nile is long.",
                                                                                         "Rome is old."]


def test_cooccurrence_label_and_agreement():
    assert ([KL.cooccurrence_label(c, 5) for c in (None, 0, 3, 5, 99)]
            == [KL.NEI, KL.REFUTE, KL.NEI, KL.SUPPORT, KL.SUPPORT])
    a = {"x": KL.SUPPORT, "y": KL.REFUTE, "z": KL.NEI, "w": None}
    b = {"x": KL.SUPPORT, "y": KL.SUPPORT, "z": KL.NEI, "w": KL.SUPPORT}
    ag = KL.label_agreement(a, b)
    assert ag["n"] == 3 and ag["agreement"] == pytest.approx(2 / 3)
    assert ag["n_decided"] == 2 and ag["agreement_decided"] == 0.5
    assert ag["confusion"] == {"NOT ENOUGH INFO -> NOT ENOUGH INFO": 1, "REFUTE -> SUPPORT": 1,
                               "SUPPORT -> SUPPORT": 1}


# ---------------------------------------------------------------- Eq. 4


def test_truth_dataset_two_to_one_with_tripled_negatives():
    sup = [f"s{i}" for i in range(100)]
    ref = ["r0", "r1", "r2"]
    pos, neg = KT.truth_dataset(sup, ref, seed=1)
    assert len(neg) == 9 and Counter(neg) == {"r0": 3, "r1": 3, "r2": 3}  # Appendix D.1: every negative x3
    assert len(pos) == 18 == 2 * len(neg) and len(set(pos)) == 18 and set(pos) <= set(sup)
    assert KT.truth_dataset(sup, ref, seed=1) == (pos, neg)  # seeded


def test_truth_dataset_with_few_positives_cuts_distinct_negatives_first():
    pos, neg = KT.truth_dataset(["a", "b", "c", "d", "e"], [f"r{i}" for i in range(10)], seed=0)
    assert (len(pos), len(neg)) == (4, 2) and len(set(neg)) == 2
    for n_sup in range(0, 40, 3):
        for n_ref in range(0, 12):
            p, n = KT.truth_dataset(list(range(n_sup)), [f"r{i}" for i in range(n_ref)], seed=n_sup)
            assert len(p) == 2 * len(n) and len(p) <= n_sup and len(n) <= 3 * n_ref
    assert KT.truth_dataset(["a"], [], seed=0) == ([], [])
    p, n = KT.truth_dataset(list(range(30)), ["x", "y"], ratio=1.0, negative_copies=1)
    assert (len(p), len(n)) == (2, 2)


def test_truth_rows_are_prompt_6():
    row = KT.truth_row("Paris is in France.", True)
    assert row["prompt"].endswith("Claim: Paris is in France.\nFactual correctness:")
    assert row["completion"] == " True" and KT.truth_row("x", False)["completion"] == " False"


def test_miniworld_truth_data_heldout_one_to_one_and_disjoint():
    train, held, rep = KT.miniworld_truth_data(heldout_size=40, seed=0, pipeline_claims={
        "The capital of Germany is Berlin.": KL.SUPPORT, "Berlin is in Spain.": KL.REFUTE,
        "Something vague.": KL.NEI})
    assert len(held) == 40 and sum(r["label"] for r in held) == 20  # 1:1 (Table 13)
    assert sum(r["label"] for r in train) == 2 * sum(not r["label"] for r in train)  # Eq. 4, 2:1
    assert rep["train_true"] == 2 * rep["train_false"] and rep["heldout_true"] == 20
    held_claims = {r["claim"] for r in held}
    assert not held_claims & {r["claim"] for r in train}
    assert all(r["prompt"].endswith("Factual correctness:") for r in train + held)
    assert rep["pipeline_support"] + rep["pipeline_refute"] + rep["pipeline_dropped_heldout"] == 2
    _, full_held, full = KT.miniworld_truth_data(seed=0)
    assert full["heldout"] == len(full_held) > 100 and 2 * full["heldout_true"] == full["heldout"]


def test_miniworld_truth_data_drops_pipeline_claims_about_heldout_countries():
    from factlab.data.miniworld import ensure_world
    from factlab.data.types import read_jsonl

    paths = ensure_world()
    held_doc = next(iter(read_jsonl(paths["qa_heldout"])))["meta"]["doc_id"]
    name = next(d["title"] for d in read_jsonl(paths["corpus"]) if d["id"] == held_doc)
    _, _, rep = KT.miniworld_truth_data(pipeline_claims={f"{name} is a country.": KL.SUPPORT}, seed=0)
    assert rep["pipeline_dropped_heldout"] == 1 and rep["pipeline_support"] == 0


# ---------------------------------------------------------------- the pipeline with constructed parts

FACTS = {  # the fake base model's "knowledge": per query, sample j says facts[j % len]
    "Tell me about Atlantis.": ["Atlantis has a capital called Poseidonia.", "Atlantis borders the Sea.",
                                "Atlantis uses the Orichalcum."],
    "Tell me about Lemuria.": ["Lemuria is in the Indian Ocean.", "Lemuria has ten million people."],
}
TRUE = {"Atlantis has a capital called Poseidonia.", "Lemuria is in the Indian Ocean.", "Atlantis borders the Sea."}
FALSE = {"Atlantis uses the Orichalcum."}


class FakeSampler:
    def __init__(self):
        self.calls = 0
        self.stats = Counter()
        self.seconds = 0.0

    def identity(self):
        return {"model": "fake"}

    def sample(self, prompts, seed):
        self.calls += len(prompts)
        self.stats["calls"] += len(prompts)
        out = []
        for p in prompts:
            query = p.rsplit("[Question]: ", 1)[1].split("\n")[0]
            facts = FACTS[query]
            j = (seed + self.calls + len(out)) % len(facts)
            out.append({"text": " ".join(facts[:j + 1]) + "\n[Question]: leaked next example", "n_tokens": 9,
                        "finished": True})
        return out


class FakeJudge:
    """Answers Prompts 2-4 by rule; counts prompts per stage."""

    backend = "fake"
    model_name = "rule"

    def __init__(self):
        self.stats = Counter()
        self.seconds = 0.0
        self.asked = Counter()

    def judge(self, prompts, prefix=None):
        out = []
        for p in prompts:
            self.stats["calls"] += 1
            self.stats["prompt_tokens"] += len(p.split())
            if p.startswith("Below you will receive a piece of text"):
                self.asked["extract"] += 1
                text = p.split("[Text]: ", 1)[1].rsplit("\n[Verifiable objective claims]:", 1)[0]
                sents = re.findall(r"[^.]+\.", text)
                out.append("\n".join(f"* {s.strip()}" for s in sents) or "no verifiable objective claims")
            elif p.startswith("You will be provided with a [CLAIM]"):
                self.asked["verify"] += 1
                claim = p.split("[CLAIM]: ", 1)[1].split("\n")[0]
                lab = "SUPPORT" if claim in TRUE else "REFUTE" if claim in FALSE else "NOT ENOUGH INFO"
                out.append(json.dumps({"conclusion": lab}))
            elif p.startswith("You are given a user query"):
                self.asked["prioritize"] += 1
                claims = re.findall(r"^\* (.+)$", p.split("Candidate Claims:", 1)[1], re.M)
                out.append("\\boxed{\n" + "\n".join(claims[:2]) + "\n}")
            else:
                out.append("?")
        self.stats["completion_tokens"] += len(out)
        return out


class FakeScorer:
    """CorVerScorer's surface: triplets(sentences) and score(triplets) -> .count/.words."""

    def __init__(self, counts):
        self.counts, self.lookups = counts, 0

    def triplets(self, sentences):
        return [[s] for s in sentences]

    def score(self, triplets):
        from factlab.rewards.corver import SentenceScore

        self.lookups += 1
        return SentenceScore(None, ["w"], self.counts.get(triplets[0]), 0.0)


def _datastore():
    docs = [("atlantis", "Atlantis", "The capital of Atlantis is Poseidonia. Atlantis borders the Sea."),
            ("lemuria", "Lemuria", "Lemuria lies in the Indian Ocean.")]
    return Datastore([Chunk(f"{d}#0", d, t, x, 0) for d, t, x in docs])


QUERIES = [{"id": "atl", "prompt": "Tell me about Atlantis."}, {"id": "lem", "prompt": "Tell me about Lemuria."}]


def _pipeline(tmp_path, **kw):
    cfg = K.KLCFPipelineSection(**{"nu": 3, "batch_size": 2, "prioritize": "llm", **kw})
    return K.KLCFPipeline(cfg, tmp_path, sampler=FakeSampler(), judge=FakeJudge(), datastore=_datastore(),
                          scorer=FakeScorer({}), examples=[("Tell me about Mu.", "Mu is sunk.")])


def test_pipeline_end_to_end_with_constructed_parts(tmp_path):
    pipe = _pipeline(tmp_path)
    report = pipe.run(QUERIES)
    samples = [json.loads(x) for x in (tmp_path / "stage1_samples.jsonl").read_text().splitlines()]
    assert len(samples) == 6 and all("[Question]" not in s["text"] for s in samples)  # cut at the next block
    assert report["stages"]["sampling"]["computed"] == 6 and pipe.sampler.calls == 6
    by_q = pipe.claims_by_query()
    assert set(by_q["atl"]) <= set(FACTS["Tell me about Atlantis."]) and by_q["atl"]
    assert len(by_q["atl"]) == len(set(by_q["atl"]))  # Eq. 1 union
    labels = pipe.labels()
    assert all(labels[c] == (KL.SUPPORT if c in TRUE else KL.REFUTE if c in FALSE else KL.NEI) for c in labels)
    assert report["labels"][KL.SUPPORT] == sum(v == KL.SUPPORT for v in labels.values())  # Table 12 analogue
    assert sum(report["labels"].values()) == len(labels)
    assert pipe.judge.asked["verify"] == len(labels)  # one verification per distinct claim
    rows = [json.loads(x) for x in (tmp_path / "stage4_checklists.jsonl").read_text().splitlines()]
    for r in rows:
        support = [c for c in by_q[r["query_id"]] if labels[c] == KL.SUPPORT]
        assert r["n_support"] == len(support)
        assert r["checklist"] == (support[:2] if support else [])
    assert pipe.judge.asked["prioritize"] == sum(1 for r in rows if r["n_support"])
    ev = [json.loads(x) for x in (tmp_path / "stage3_judge.jsonl").read_text().splitlines()]
    assert all(len(r["evidence"]) <= 10 for r in ev)
    truth = [json.loads(x) for x in (tmp_path / "truth.jsonl").read_text().splitlines()]
    n_true = sum(r["label"] for r in truth)
    assert n_true == 2 * (len(truth) - n_true)
    for key in ("calls", "prompt_tokens", "completion_tokens", "seconds", "cached", "computed"):
        assert key in report["stages"]["extraction"]
    assert report["stages"]["extraction"]["calls"] == 6
    assert json.loads((tmp_path / "report.json").read_text())["labels"] == report["labels"]
    assert pipe.checklist_rows() and all(r["checklist"] for r in pipe.checklist_rows())


def _drop_lines(path, keep):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:keep]) + "\n")
    return len(lines) - keep


def test_stages_resume_from_their_caches_counting_judge_calls(tmp_path):
    pipe = _pipeline(tmp_path)
    pipe.stage1(QUERIES)
    pipe.stage2()
    pipe.stage3()
    pipe.stage4()
    first = dict(pipe.judge.asked)
    assert first["extract"] == 6

    # a fresh process: every stage from disk, no call at all
    again = _pipeline(tmp_path)
    again.run(QUERIES)
    assert again.sampler.calls == 0 and sum(again.judge.asked.values()) == 0
    assert again.report["stages"]["extraction"]["cached"] == 6

    # an interruption: part of Stage 1 and Stage 2 lost, and a torn last line
    lost1 = _drop_lines(tmp_path / "stage1_samples.jsonl", 4)
    lost2 = _drop_lines(tmp_path / "stage2_claims.jsonl", 3)
    with (tmp_path / "stage2_claims.jsonl").open("a") as fh:
        fh.write('{"key": "atl#0", "fp": ')
    resumed = _pipeline(tmp_path)
    resumed.stage1(QUERIES)
    assert resumed.sampler.calls == lost1 == 2
    resumed.stage2()
    # lost Stage-2 rows plus the rows whose sample text changed (resampled) are asked again
    assert lost2 <= resumed.judge.asked["extract"] <= lost2 + lost1
    assert resumed.report["stages"]["extraction"]["computed"] == resumed.judge.asked["extract"]
    resumed.stage3()
    new_claims = resumed.report["stages"]["verification_judge"]["computed"]
    assert resumed.judge.asked["verify"] == new_claims

    # Stage 3 alone: delete two verdicts, exactly two verification calls
    k = len((tmp_path / "stage3_judge.jsonl").read_text().splitlines())
    _drop_lines(tmp_path / "stage3_judge.jsonl", k - 2)
    s3 = _pipeline(tmp_path)
    s3.stage3()
    assert s3.judge.asked == Counter({"verify": 2})
    s3.stage4()
    assert s3.judge.asked["prioritize"] == 0  # same SUPPORT claims: checklists from the cache

    # a setting that changes every verdict's input (k) re-verifies every claim, nothing else
    s4 = _pipeline(tmp_path, top_k=3)
    s4.stage2()
    s4.stage3()
    assert s4.judge.asked == Counter({"verify": k})


def test_sentences_mode_makes_each_complete_sentence_a_claim_without_a_judge(tmp_path):
    """``extract: sentences`` (the CPU smoke's Stage 2, which the notebook test's tiny model cannot
    exercise: random text has no complete sentences): each complete sentence of a sample is a
    claim, no extraction prompt is asked, and Stage 3 labels every distinct claim."""
    from factlab.text import sentence_claims

    pipe = _pipeline(tmp_path, extract="sentences", verify="cooccurrence", max_claims=2, cooccurrence_support=2)
    pipe.stage1(QUERIES)
    rows = pipe.stage2()
    texts = {json.loads(x)["key"]: json.loads(x)["text"] for x in (tmp_path / "stage1_samples.jsonl").read_text().splitlines()}
    assert all(r["claims"] == sentence_claims(texts[r["key"]])[:2] for r in rows)
    assert sum(len(r["claims"]) for r in rows) > len(rows) and pipe.judge.asked["extract"] == 0
    pipe.scorer = FakeScorer({c: 5 for c in TRUE})
    labels = pipe.stage3()["cooccurrence"]
    assert set(labels) == {c for r in rows for c in r["claims"]} and sum(pipe.report["labels"].values()) == len(labels)
    assert {labels[c] for c in labels if c in TRUE} == {KL.SUPPORT}


def test_cooccurrence_verifier_and_agreement_with_the_judge(tmp_path):
    counts = {"Atlantis has a capital called Poseidonia.": 4, "Atlantis borders the Sea.": 0,
              "Atlantis uses the Orichalcum.": 0, "Lemuria is in the Indian Ocean.": 7}
    pipe = _pipeline(tmp_path, verify="cooccurrence", compare_verifiers=True, cooccurrence_support=2)
    pipe.stage1(QUERIES)
    pipe.stage2()
    pipe.scorer = FakeScorer(counts)
    out = pipe.stage3()
    cooc, judge = out["cooccurrence"], out["judge"]
    for c, lab in cooc.items():
        assert lab == KL.cooccurrence_label(counts.get(c), 2)
    ag = pipe.report["agreement"]
    assert ag["n"] == len(cooc) and ag["agreement"] == pytest.approx(
        sum(cooc[c] == judge[c] for c in cooc) / len(cooc))
    assert pipe.report["labels"][KL.REFUTE] == sum(v == KL.REFUTE for v in cooc.values())  # primary: cooccurrence
    assert "verification_cooccurrence" in pipe.report["stages"]
    rows, truth = pipe.stage4()
    assert all(r["checklist"] is not None for r in rows)


def test_choice_verdicts_use_the_judges_constrained_choice(tmp_path):
    pipe = _pipeline(tmp_path, verdict="choice")
    chosen = []

    def choose(prompts, options):
        assert tuple(options) == KL.LABELS
        chosen.extend(prompts)
        return [KL.REFUTE] * len(prompts)

    pipe.judge.choose = choose
    pipe.stage1(QUERIES)
    pipe.stage2()
    labels = pipe.stage3()["judge"]
    assert len(chosen) == len(labels) and set(labels.values()) == {KL.REFUTE}
    assert pipe.judge.asked["verify"] == 0


def test_dedupe_prioritization_asks_no_judge_and_needs_the_parts_it_uses(tmp_path):
    pipe = _pipeline(tmp_path, prioritize="dedupe", checklist_max=1)
    pipe.run(QUERIES)
    assert pipe.judge.asked["prioritize"] == 0
    assert all(len(r["checklist"]) <= 1 for r in pipe.checklist_rows())
    bare = K.KLCFPipeline(K.KLCFPipelineSection(), tmp_path / "x")
    with pytest.raises(ValueError, match="needs a sampler"):
        bare.stage1(QUERIES)
    with pytest.raises(FileNotFoundError, match="stage1"):
        bare.queries()


# ---------------------------------------------------------------- win rate (Prompt 8, Eq. 19-20)


@pytest.mark.parametrize("answer, first", [
    ("[{'model': 'model_1', 'rank': 1}, {'model': 'model_2', 'rank': 2}]", "model_1"),
    ('[{"model": "model_2", "rank": 1}, {"model": "model_1", "rank": 2}]', "model_2"),
    ("[{'model': 'model_1', 'rank': 2}, {'model': 'model_2', 'rank': 1}]", "model_2"),
    ("```python\n[{'model': 'model_1', 'rank': '1'}, {'model': 'model_2', 'rank': '2'}]\n```", "model_1"),
    ("Here is my ranking:\n[{'model': 'model_2', 'rank': 1}, {'model': 'model_1', 'rank': 2}]\nThanks", "model_2"),
    ('{"ranking": [{"model": "model_1", "rank": 1}, {"model": "model_2", "rank": 2}]}', "model_1"),
    ("[\u2018model\u2019]", None),
])
def test_parse_win_judgment_reads_rankings(answer, first):
    assert parse_win_judgment(answer) == first


HOSTILE = [
    "__import__('os').system('touch PWNED')",
    "[{'model': __import__('pathlib').Path('PWNED').touch(), 'rank': 1}, {'model': 'model_2', 'rank': 2}]",
    "[{'model': 'model_1', 'rank': (lambda: 1)()}, {'model': 'model_2', 'rank': 2}]",
    "exec(\"open('PWNED', 'w').write('x')\")",
    "[{'model': 'model_1', 'rank': 1}, {'model':",  # truncated
    '[{"model": "model_1", "rank": 1}, {"model": "model_2", "rank": 1}]',  # a tie
    "[{'model': 'model_1', 'rank': 1}, {'model': 'model_1', 'rank': 2}]",  # one model twice
    "[{'model': 'model_1', 'rank': 1}, {'model': 'model_2', 'rank': 2}, {'model': 'model_3', 'rank': 3}]",
    "[{'model': 'model_1', 'rank': True}, {'model': 'model_2', 'rank': 2}]",
    "I think model_1 is better, rank 1.",
    "[" * 5000 + "]" * 5000,
    "x" * 10000,
    "",
    None,
    42,
]


@pytest.mark.parametrize("answer", HOSTILE)
def test_parse_win_judgment_on_hostile_output_is_none_and_runs_nothing(answer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_win_judgment(answer) is None
    assert not (tmp_path / "PWNED").exists()


def test_a_ranking_followed_by_code_is_read_as_the_ranking_and_the_code_never_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    answer = "[{'model': 'model_2', 'rank': 1}, {'model': 'model_1', 'rank': 2}] ; import os; os.system('touch PWNED')"
    assert parse_win_judgment(answer) == "model_2"  # trailing text, as after any prose answer
    assert not (tmp_path / "PWNED").exists()


def test_win_rate_eq19_20_with_order_swap():
    m1 = "[{'model': 'model_1', 'rank': 1}, {'model': 'model_2', 'rank': 2}]"
    m2 = "[{'model': 'model_2', 'rank': 1}, {'model': 'model_1', 'rank': 2}]"
    # instance 0: B wins both orders (1.0); 1: position bias, model_1 both times (0.5);
    # 2: A wins both (0.0); 3: one unreadable trial -> dropped
    out = win_rate([m2, m1, m1, m2], [m1, m1, m2, "__import__('os')"])
    assert out["per_instance"] == [1.0, 0.5, 0.0, None]
    assert out["win_rate"] == pytest.approx(0.5) and out["n_valid"] == 3 and out["n"] == 4
    assert (out["wins"], out["ties"], out["losses"], out["unreadable"], out["dropped"]) == (1, 1, 1, 1, 1)
    assert out["position_consistency"] == pytest.approx(2 / 3)
    assert win_rate(["model_2"], ["model_1"])["win_rate"] == 1.0  # parsed labels are accepted too
    nan = win_rate(["junk"], ["junk"])
    assert nan["win_rate"] != nan["win_rate"] and nan["unreadable"] == 2
    with pytest.raises(ValueError):
        win_rate([m1], [])


def test_win_prompts_swap_and_escape_and_judge_win_rate():
    a, b = win_prompts("Say hi", 'A says "hi"\n', "B")
    assert '"answer": "A says \\"hi\\"\\n"' in a and a.index("A says") < a.index('"answer": "B"')
    assert b.index('"answer": "B"') < b.index("A says")

    class Biased:  # always prefers whatever is shown first
        def __init__(self):
            self.n = 0

        def judge(self, prompts, prefix=None):
            self.n += len(prompts)
            return ["[{'model': 'model_1', 'rank': 1}, {'model': 'model_2', 'rank': 2}]"] * len(prompts)

    j = Biased()
    out = judge_win_rate(j, ["q1", "q2"], ["a1", "a2"], ["b1", "b2"])
    assert j.n == 4 and out["win_rate"] == 0.5 and out["position_consistency"] == 0.0


def test_judge_win_rate_choice_mode_reads_the_chosen_first_rank():
    from factlab.eval.winrate import WIN_CHOICE_PREFILL

    class PrefersCats:  # ranks first the model whose answer mentions cats; unreadable on q3
        def __init__(self):
            self.calls = []

        def choose(self, prompts, options, prefix=None):
            self.calls.append((tuple(options), prefix))
            out = []
            for p in prompts:
                if "q3" in p:
                    out.append("I cannot rank these")  # a free answer from a backend that cannot score tokens
                    continue
                first = p.index('"model": "model_1"')
                second = p.index('"model": "model_2"')
                cat = p.index("cats")
                out.append("1" if first < cat < second else "2")
            return out

    j = PrefersCats()
    out = judge_win_rate(j, ["q1", "q2", "q3"], ["dogs", "cats", "dogs"], ["cats", "dogs", "cats"], answer="choice")
    assert j.calls == [(("1", "2"), WIN_CHOICE_PREFILL)]
    assert out["per_instance"] == [1.0, 0.0, None] and out["win_rate"] == 0.5
    assert out["unreadable"] == 2 and out["dropped"] == 1 and out["position_consistency"] == 1.0
    with pytest.raises(ValueError, match="answer must be"):
        judge_win_rate(j, ["q"], ["a"], ["b"], answer="vote")


# ---------------------------------------------------------------- a real run on the embedded model


def test_small_real_run_on_the_default_model(tmp_path, model_and_tokenizer):
    from factlab.judges import TransformersJudge
    from factlab.data.miniworld import ensure_world
    from factlab.data.types import read_jsonl

    model, tok = model_and_tokenizer  # the real model: its extracted claims feed the verification and RM stages
    docs = [d for d in read_jsonl(ensure_world()["corpus"])][:12]
    ds = Datastore.from_documents(docs, tok, chunk_tokens=128)
    cfg = K.KLCFPipelineSection(nu=2, max_new_tokens=12, few_shot=2, few_shot_chars=120, batch_size=4,
                                prioritize="dedupe", prefill=True, seed=3)
    sampler = KS.ModelSampler(model, tok, name="smollm2-135m-instruct", max_new_tokens=cfg.max_new_tokens,
                             temperature=cfg.temperature, batch_size=cfg.batch_size)
    judge = TransformersJudge("smollm2-135m-instruct", model_obj=model, tokenizer=tok, max_new_tokens=16,
                              cache=None)
    examples = KS.miniworld_fewshot(n=2, exclude=[d["id"] for d in docs[:2]], max_chars=120)
    queries = [{"id": d["id"], "prompt": f"Tell me about {d['title']}."} for d in docs[:2]]
    pipe = K.KLCFPipeline(cfg, tmp_path, sampler=sampler, judge=judge, datastore=ds, examples=examples)
    report = pipe.run(queries)
    st = report["stages"]
    assert st["sampling"]["items"] == 4 and st["sampling"]["computed"] == 4
    assert st["sampling"]["completion_tokens"] <= 4 * 12 and st["sampling"]["prompt_tokens"] > 0
    assert st["extraction"]["calls"] + st["extraction"]["empty_samples"] == 4
    n_claims = len({c for cs in pipe.claims_by_query().values() for c in cs})
    assert st["verification_judge"]["items"] == n_claims == sum(report["labels"].values())
    assert report["checklist"]["queries"] == 2
    # the RM's rows come from the judge's labels, sampled 2 : 1 with negatives x 3 (Eq. 4, App. D.1)
    tr = report["truth"]
    assert tr["support_claims"] == report["labels"][KL.SUPPORT] and tr["refute_claims"] == report["labels"][KL.REFUTE]
    assert tr["negatives"] == min(3 * tr["refute_claims"], tr["support_claims"] // 2)
    assert tr["positives"] == 2 * tr["negatives"]
    # the model and the judge really ran: their stages spent backend time; a resumed run spends none
    assert st["sampling"]["backend_seconds"] > 0 and st["extraction"]["backend_seconds"] > 0
    rerun = K.KLCFPipeline(cfg, tmp_path, sampler=sampler, judge=judge, datastore=ds, examples=examples)
    calls = judge.stats["calls"]
    rerun.run(queries)
    assert judge.stats["calls"] == calls and rerun.report["stages"]["sampling"]["computed"] == 0
    assert all(v["calls"] == 0 and v["backend_seconds"] == 0 for v in rerun.report["stages"].values())


def test_from_resources_builds_only_the_parts_the_stages_need(tmp_path):
    from types import SimpleNamespace

    from factlab.data.miniworld import ensure_world

    class Res:
        def __init__(self):
            self.cfg = SimpleNamespace(model=SimpleNamespace(name="smollm2-135m-instruct"))
            self.asked = []

        def world(self):
            return ensure_world()

        def judge(self):
            self.asked.append("judge")
            return FakeJudge()

        def datastore(self, kind):
            self.asked.append(f"datastore:{kind}")
            return _datastore()

        def scorer(self, count_limit=None):
            self.asked.append(f"scorer:{count_limit}")
            return FakeScorer({})

    res = Res()
    pipe = K.from_resources(K.KLCFPipelineSection(few_shot=3), res, tmp_path, model=object(), tokenizer=None,
                            queries=[{"id": "q", "prompt": "Tell me about Chad.", "doc_id": "country/chad"}])
    assert res.asked == ["judge", "datastore:veriscore"] and pipe.scorer is None
    assert len(pipe.examples) == 3 and all(q != "Tell me about Chad." for q, _ in pipe.examples)
    assert pipe.sampler.identity()["temperature"] == 1.0
    res2 = Res()
    K.from_resources(K.KLCFPipelineSection(verify="cooccurrence", compare_verifiers=True), res2, tmp_path / "b",
                     model=object(), examples=[])
    assert sorted(res2.asked) == ["datastore:veriscore", "judge", "scorer:20"]


def test_truth_rm_probability_metrics_by_hand():
    from factlab.eval.verification import probability_metrics
    m = probability_metrics([0.9, 0.6, 0.4, 0.6], [True, True, False, False])
    assert m["accuracy"] == 0.75 and m["f1"] == pytest.approx(0.8) and m["predicted_true"] == 0.75
    assert m["auc"] == pytest.approx(3.5 / 4)  # ties count half
    assert m["mean_p_true|true"] == pytest.approx(0.75) and m["mean_p_true|false"] == pytest.approx(0.5)
    flat = probability_metrics([0.7] * 4, [True, True, False, False])  # all True: chance, whatever the threshold
    assert flat["accuracy"] == 0.5 and flat["auc"] == 0.5
    with pytest.raises(ValueError):
        probability_metrics([0.5], [True, False])


# ---------------------------------------------------------------- truth_rm.method: readout


def test_fit_answer_readout_learns_a_constructed_direction_and_l2_holds_it_back():
    import torch
    from factlab.eval.verification import probability_metrics
    from factlab.train.truth_rm import fit_answer_readout

    g = torch.Generator().manual_seed(0)
    u = torch.randn(16, generator=g)
    h = torch.randn(300, 16, generator=g)
    labels = (h @ u > 0).tolist()
    zero = torch.zeros(16)
    w_t, w_f = fit_answer_readout(h[:200], labels[:200], zero, zero, l2=1e-4)
    p_true = torch.sigmoid(h[200:] @ (w_t - w_f)).tolist()  # what TruthfulnessScorer reads from the two rows
    assert probability_metrics(p_true, labels[200:])["accuracy"] > 0.9
    flipped = fit_answer_readout(h[:200], [not y for y in labels[:200]], zero, zero, l2=1e-4)
    assert probability_metrics(torch.sigmoid(h[200:] @ (flipped[0] - flipped[1])).tolist(),
                                  labels[200:])["accuracy"] < 0.1
    held = fit_answer_readout(h[:200], labels[:200], zero, zero, l2=1e6)  # pulled onto the base rows
    assert float((held[0] - held[1]).abs().max()) < 1e-3
    with pytest.raises(ValueError, match="states for"):
        fit_answer_readout(h[:3], labels[:2], zero, zero)


def test_readout_model_is_read_by_the_scorer_through_its_new_rows(tiny_model_and_tokenizer, tmp_path):
    import torch
    from factlab.rewards.klcf_truth import TruthfulnessScorer
    from factlab.train.truth_rm import save_readout_model

    model, tok = tiny_model_and_tokenizer
    base = TruthfulnessScorer(model_obj=model, tokenizer=tok, batch_size=2)
    claims = ["The capital of Kenya is Nairobi.", "The capital of Kenya is Lima.", "Chad borders Niger."]
    states = base.answer_states(claims)
    t_id, f_id = base.answer_ids()
    head = model.get_output_embeddings().weight.detach()
    # the states times the two rows are the logits pair_probabilities normalises
    expect = torch.softmax((states @ head[[t_id, f_id]].T).double(), -1)[:, 0].tolist()
    assert base.probabilities(claims) == pytest.approx(expect, abs=1e-4)
    w_t, w_f = head[t_id] + 0.3 * states[0], head[f_id] - 0.3 * states[1]
    folder = save_readout_model(model, tok, (t_id, f_id), (w_t, w_f), tmp_path / "rm")
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert torch.equal(model.get_output_embeddings().weight[t_id], head[t_id])  # the shared model is untouched
    trained = TruthfulnessScorer(folder, device="cpu")
    want = torch.sigmoid(states @ (w_t - w_f)).tolist()
    got = trained.probabilities(claims)
    assert got == pytest.approx(want, abs=1e-4) and got != pytest.approx(base.probabilities(claims), abs=1e-3)
    saved = trained.load()[0]
    assert torch.equal(saved.get_input_embeddings().weight, model.get_input_embeddings().weight)
    assert torch.equal(saved.get_output_embeddings().weight[100], head[100])


def test_readout_rm_resumes_from_its_folder_without_a_model(tmp_path):
    from factlab.recipes import klcf

    cfg = config.load_config(ROOT / "params/05_klcf_lm.yaml", klcf.KLCFConfig)
    folder = tmp_path / "readout"
    folder.mkdir()
    StageCache(folder / "readout.json").save_record({"examples": 7, "steps": 1, "seconds": 1.0})

    class Untouchable:
        def __getattr__(self, name):
            pytest.fail(f"a finished readout is not refitted (scorer.{name} used)")

    got = klcf.readout_rm(Untouchable(), cfg.truth_rm, [], folder)
    assert got["resumed"] is True and got["examples"] == 7


def test_readout_method_rejects_an_sft_adapter_key_at_load():
    from factlab.recipes.klcf import KLCFConfig

    with pytest.raises(config.ConfigError, match="truth_rm.lora_from_layer"):
        config.validate({"model": {"name": "smollm2-135m-instruct"},
                         "truth_rm": {"method": "readout", "lora_from_layer": 12}}, KLCFConfig)
    with pytest.raises(config.ConfigError, match="method"):
        config.validate({"truth_rm": {"method": "probe"}}, KLCFConfig)


def test_truth_rm_sft_method_trains_with_trl_and_scores_the_merged_model(tmp_path):
    """``method: sft`` (the paper's, the full params'): one TRL SFT step on Prompt 6 rows, the
    adapter merged, the held-out set scored by the merged model (p(True) moved)."""
    from factlab.rewards import Resources
    from factlab.recipes import klcf

    cfg = config.load_config(ROOT / "params/05_klcf_lm.yaml", klcf.KLCFConfig, {
        "truth_rm": {"method": "sft", "sft": {"max_steps": 1, "save_steps": 1}},
        "pipeline": {"heldout_size": 20}, "model": {"name": models.TINY_MODEL}})  # the SFT path, not its gain
    folder, rm = klcf.truth_rm(cfg, Resources(cfg), tmp_path)
    assert rm["sft"]["method"] == "sft" and rm["sft"]["steps"] == 1 and rm["sft"]["resumed"] is False
    assert (Path(folder) / "config.json").exists() and rm["sft"]["model"] == folder
    assert rm["SFT"]["n"] == rm["base zero-shot"]["n"] == 20
    # moved (relative: the tiny random model's p(True) is about 0.004)
    assert rm["SFT"]["mean_p_true|true"] != pytest.approx(rm["base zero-shot"]["mean_p_true|true"], rel=1e-3)
