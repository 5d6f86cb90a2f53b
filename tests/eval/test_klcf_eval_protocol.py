"""KLCF's evaluation protocol against 004_4f2ca2d982459bb2.txt (issue 39, items 2-3), on
constructed parts:

- the long-form evaluation retrieves each claim's evidence from the whole datastore (App. C.4.1,
  Table 9: "Wiki Retrieval top_k=10 chunk_size=300" per claim), not only from the documents
  pre-cached for the prompt (001 §3.2's training shortcut, still available as
  ``longform_retrieval: prompt_cache`` and the suite's default);
- the truthfulness reward model never sees a claim stated by an evaluation query (§2.2, Table 12:
  D_truth from the training sets only), and the report counts the claims left out."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from factlab import config
from factlab import prompts as P
from factlab.corpus.retrieval import Chunk, Datastore
from factlab.data.longform import LongformPrompt
from factlab.eval import suites
from factlab.models import Generation
from factlab.recipes import klcf
from factlab.rewards.rar import ClaimVerifier
from factlab.sections import GenerationConfig
from factlab.synth import klcf as K
from factlab.synth import klcf_labels as KL
from factlab.synth import klcf_truth_data as KT

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke():
    return config.load_config(ROOT / "params/05_klcf_lm.yaml", klcf.KLCFConfig)


# ---------------------------------------------------------------- item 2: per-claim retrieval

SUPPORTING = "The Zorblax river flows through Quenton."
# the prompt names Alpha; the chunk that supports the answer's second claim is in Quenton's article,
# which shares no word with the prompt, so pre-caching the prompt's documents never reaches it
EVAL_DOCS = [Chunk("alpha#0", "alpha", "Alpha", "Alpha is a small town with a market.", 0),
             Chunk("alpha#1", "alpha", "Alpha", "Alpha hosts a fair every spring.", 8),
             Chunk("quenton#0", "quenton", "Quenton", SUPPORTING + " Quenton is a port.", 0),
             Chunk("beta#0", "beta", "Beta", "Beta is a village in the hills.", 0)]
ANSWER = "<think>I recall the town.</think> <answer>Alpha is a small town with a market. " + SUPPORTING + "</answer>"


class EvidenceJudge:
    """Figure 8: one claim per sentence of the response; Figure 9: "supported" exactly when the
    claim's sentence is among the passages shown, else "inconclusive"."""

    def __init__(self):
        self.verifications: list[str] = []

    def judge(self, prompts, prefix=None):
        out = []
        for p in prompts:
            if p.startswith(P.CLAIM_EXTRACTION_PROMPT[:40]):
                resp = p.split(">>> Begin of response <<<")[1].split("<<< End of response >>>")[0]
                out.append(json.dumps([s.strip() for s in re.findall(r"[^.]+\.", resp) if s.strip()]))
            elif p.startswith(P.CLAIM_VERIFICATION_PROMPT[:40]):
                self.verifications.append(p)
                claim = p.split("\nClaim: ")[1].split("\n")[0]
                passages = p.split(">>> Begin of search results <<<")[1].split("<<< End of search results >>>")[0]
                out.append("supported" if claim in passages else "inconclusive")
            else:
                out.append("?")
        return out


class EvalResources:
    def __init__(self, verifier):
        self.verifier = verifier

    def claim_verifier(self):
        return self.verifier


def _evaluate(cfg, monkeypatch):
    """``klcf.longform_eval`` of a policy that answers ``ANSWER``, on one held-out query whose
    datastore was pre-cached (one document) as ``queries`` used to do for every run."""
    monkeypatch.setattr(suites, "generate", lambda model, tok, prompts, **k: [[Generation(ANSWER, [1], True)]
                                                                              for _ in prompts])
    monkeypatch.setattr(suites, "chat_prompt", lambda tok, question, system=None: question)
    store = Datastore(EVAL_DOCS)
    held = [LongformPrompt("h-alpha", "Tell me about Alpha.")]
    store.precache({held[0].id: held[0].prompt}, k_docs=1)
    assert store.cache[held[0].id] == ["alpha#0", "alpha#1"]  # the supporting chunk is not pre-cached
    judge = EvidenceJudge()
    verifier = ClaimVerifier(judge, store, k_per_claim=cfg.verifier.top_k, max_claims=cfg.verifier.max_claims)
    result = klcf.longform_eval(cfg, EvalResources(verifier), None, None, held, "KLCF")
    return result.metrics["longform"], result.records["longform"]["per_response"][0], store, judge


def test_klcf_evaluation_finds_evidence_outside_the_prompts_precached_documents(smoke, monkeypatch):
    """Table 9: each claim searches the whole index; the Quenton claim is supported by a chunk of a
    document the prompt's pre-cache never retrieved."""
    assert smoke.longform_retrieval == "datastore"
    metrics, row, store, judge = _evaluate(smoke, monkeypatch)
    assert row["claims"] == ["Alpha is a small town with a market.", SUPPORTING]
    assert row["supported"] == [True, True] and metrics["precision"] == 1.0 and metrics["S"] == 2
    assert store.cached_calls == 0 and store.searches == 2  # one search of the whole index per claim
    assert any("Quenton is a port." in p for p in judge.verifications)


def test_the_prompt_cache_shortcut_stays_available(smoke, monkeypatch):
    """``longform_retrieval: prompt_cache`` ranks only the pre-cached chunks (001 §3.2's shortcut,
    the old behaviour): the same answer loses its supported Quenton claim."""
    cached = smoke.model_copy(update={"longform_retrieval": "prompt_cache"})
    metrics, row, store, _ = _evaluate(cached, monkeypatch)
    assert row["supported"] == [True, False] and metrics["precision"] == 0.5
    assert store.cached_calls == 2 and store.fallbacks == 0
    with pytest.raises(config.ConfigError, match="longform_retrieval"):
        config.validate({"longform_retrieval": "prompt"}, klcf.KLCFConfig)


def test_longform_suite_retrieval_modes(monkeypatch):
    """The suite's default stays the per-prompt cache (Binary RAR's and the comparison's long-form
    evaluation, whose prompts are pre-cached); ``datastore`` passes no prompt ids; a wrong name fails."""
    monkeypatch.setattr(suites, "generate", lambda model, tok, prompts, **k: [[Generation(ANSWER, [1], True)]
                                                                              for _ in prompts])
    monkeypatch.setattr(suites, "chat_prompt", lambda tok, question, system=None: question)
    seen = []

    class Verifier:
        def claim_labels(self, prompts, responses, prompt_ids=None):
            seen.append(prompt_ids)
            return [[True] for _ in responses]

    held = [LongformPrompt("h1", "Tell me about Alpha.")]
    gen = GenerationConfig(max_new_tokens=8)
    suites.evaluate("longform", None, None, held, gen, verifier=Verifier())
    suites.evaluate("longform", None, None, held, gen, verifier=Verifier(), retrieval="datastore")
    assert seen == [["h1"], None]
    with pytest.raises(ValueError, match="retrieval 'wiki': one of prompt_cache, datastore"):
        suites.evaluate("longform", None, None, held, gen, verifier=Verifier(), retrieval="wiki")


def test_klcf_queries_precache_only_for_the_shortcut(smoke):
    calls = []

    class Res:
        def precache(self, prompts):
            calls.append(len(prompts))
            return prompts

    train, held, _ = klcf.queries(smoke, Res())
    assert train and held and calls == []  # Table 9 retrieval: nothing restricts a claim's search
    klcf.queries(smoke.model_copy(update={"longform_retrieval": "prompt_cache"}), Res())
    assert calls == [len(train) + len(held)]


# ---------------------------------------------------------------- item 3: D_truth from the training queries only

SAID = {  # what the fake base model says per query (every sample the same)
    "Tell me about Atlantis.": ["Atlantis has a capital called Poseidonia.", "Atlantis uses the Orichalcum.",
                                "The Sea is salty."],
    "Tell me about Lemuria.": ["Lemuria is in the Indian Ocean.", "Lemuria has ten moons.",
                               "Lemuria has many hills."],
    "Tell me about Mu.": ["Mu sank long ago.", "Mu has a king called Ra.", "The Sea is salty.", "Mu is the subject of many old legends."],
}
COUNTS = {  # the co-occurrence counts of Stage 3: 0 -> REFUTE, >= support -> SUPPORT, None -> NEI
    "Atlantis has a capital called Poseidonia.": 9, "Atlantis uses the Orichalcum.": 0, "The Sea is salty.": 9,
    "Lemuria is in the Indian Ocean.": 9, "Lemuria has ten moons.": 0, "Lemuria has many hills.": 9,
    "Mu sank long ago.": 9, "Mu has a king called Ra.": 0, "Mu is the subject of many old legends.": None,
}
# the held-out query's SUPPORT / REFUTE claims; "The Sea is salty." too, though a training query said it
EVAL_LABELLED = {"Mu sank long ago.", "Mu has a king called Ra.", "The Sea is salty."}
TRAIN_Q = [LongformPrompt("atl", "Tell me about Atlantis.", doc_id="atl"),
           LongformPrompt("lem", "Tell me about Lemuria.", doc_id="lem")]
HELD_Q = [LongformPrompt("mu", "Tell me about Mu.", doc_id="mu")]


class SaySampler:
    stats: Counter = Counter()
    seconds = 0.0

    def identity(self):
        return {"model": "says"}

    def sample(self, prompts, seed):
        return [{"text": " ".join(SAID[p.rsplit("[Question]: ", 1)[1].split("\n")[0]]), "n_tokens": 9,
                 "finished": True} for p in prompts]


class CountScorer:
    lookups = 0

    def triplets(self, sentences):
        return [[s] for s in sentences]

    def score(self, triplets):
        from factlab.rewards.corver import SentenceScore

        return SentenceScore(None, ["w"], COUNTS[triplets[0]], 0.0)


class UnusedJudge:  # Stage 2 in sentences mode asks no judge
    stats: Counter = Counter()
    seconds = 0.0

    def judge(self, prompts, prefix=None):
        raise AssertionError("no judge call expected")


def _run_pipeline(cfg, tmp_path, monkeypatch):
    """``klcf.offline_pipeline`` on two training and one held-out query with constructed parts."""
    def fake_from_resources(section, resources, run_dir, **kw):
        return K.KLCFPipeline(section, run_dir, sampler=SaySampler(), judge=UnusedJudge(), scorer=CountScorer())

    monkeypatch.setattr(klcf.synth, "from_resources", fake_from_resources)
    section = cfg.pipeline.model_copy(update={"nu": 2, "extract": "sentences", "verify": "cooccurrence",
                                              "compare_verifiers": False, "prioritize": "dedupe",
                                              "cooccurrence_support": 1, "heldout_size": None})
    cfg = cfg.model_copy(update={"pipeline": section, "checklist_fallback": "none"})
    checklists, report = klcf.offline_pipeline(cfg, None, TRAIN_Q, HELD_Q, tmp_path)
    return cfg, checklists, report


def test_pipeline_truth_data_has_no_claim_of_an_evaluation_query(smoke, tmp_path, monkeypatch):
    """§2.2, Table 12: the held-out query keeps its checklist (the constructed-response tables use it)
    but none of its claims reaches D_truth (``truth.jsonl``) or the reward model's data; the
    excluded SUPPORT / REFUTE claims are counted (the NOT ENOUGH INFO one was never usable)."""
    cfg, checklists, report = _run_pipeline(smoke, tmp_path, monkeypatch)
    labels = report["labels_by_claim"]
    assert labels["Mu sank long ago."] == KL.SUPPORT and labels["Mu has a king called Ra."] == KL.REFUTE
    assert checklists["mu"] == ["Mu sank long ago.", "The Sea is salty."]  # still built for the eval query
    pipe = K.KLCFPipeline(cfg.pipeline, tmp_path / "pipeline")
    assert pipe.eval_claims() == EVAL_LABELLED | {"Mu is the subject of many old legends."}
    truth_file = [json.loads(x) for x in (tmp_path / "pipeline" / "truth.jsonl").read_text().splitlines()]
    assert truth_file and not {r["claim"] for r in truth_file} & EVAL_LABELLED
    assert report["truth"]["eval_claims_excluded"] == 3 and report["truth"]["refute_claims"] == 2

    full = cfg.model_copy(update={"truth_rm": cfg.truth_rm.model_copy(update={"data": "pipeline"})})
    train, held, data = klcf.run_truth_data(full, None, tmp_path, labels)
    used = {r["claim"] for r in train + held}
    assert used and not used & EVAL_LABELLED and data["eval_claims_excluded"] == 3
    assert data["pipeline_support"] == 3 and data["pipeline_refute"] == 2  # the training queries' claims only
    assert data["queries"] == 2  # groups: the training queries

    # the smoke's mix: the mini-world's facts plus the pipeline's training-query claims
    from factlab.data.miniworld import ensure_world

    class World:
        def world(self):
            return ensure_world()

    train, held, data = klcf.run_truth_data(cfg, World(), tmp_path, labels)
    pipeline_rows = {r["claim"] for r in train + held if r["source"] == "pipeline"}
    assert pipeline_rows and not pipeline_rows & EVAL_LABELLED
    assert data["eval_claims_excluded"] == 3 and (data["pipeline_support"], data["pipeline_refute"]) == (3, 2)


def test_eval_claims_and_explicit_exclusion(tmp_path):
    by_query = {"a": ["x", "y"], "b": ["y", "z"], "c": []}
    assert KT.eval_claims(by_query, ["b", "c", "unknown"]) == {"y", "z"}
    assert KT.eval_claims(by_query, []) == set()
    labels = {"x": KL.SUPPORT, "y": KL.REFUTE, "z": KL.NEI, "w": KL.SUPPORT}
    train, held, rep = KT.pipeline_truth_data(labels, {"x": "a", "y": "a", "z": "b", "w": "d"},
                                             exclude={"y", "z"}, heldout_share=0.0)
    assert rep["eval_claims_excluded"] == 1 and rep["pipeline_refute"] == 0  # z was NOT ENOUGH INFO
    assert "y" not in {r["claim"] for r in train + held}
    with pytest.raises(ValueError, match="split 'test'"):
        K.KLCFPipeline(K.KLCFPipelineSection(), tmp_path, sampler=SaySampler()).stage1(
            [{"id": "q", "prompt": "Tell me about Mu.", "split": "test"}])
