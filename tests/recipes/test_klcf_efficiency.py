"""KLCF's efficiency comparison (004 §3.7, Table 14, App. D.3) with a scripted judge: the
datastore's search count ("# Searches"), ``eval.cost.compare_rewards``'s per-response costs,
the FActScore-style baseline (``factscore``: 5 passages per atomic fact, Min et al., 2023) beside
VeriScore (4, 001 §4.2), and ``recipes.klcf.efficiency_table`` on the smoke params, whose KLCF reward
asks no judge and searches nothing. Every count is checked against what the scripted judge was
asked, so a reward that silently skipped a claim or a search would fail here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from factlab import config
from factlab import prompts as P
from factlab.corpus.retrieval import Chunk, Datastore
from factlab.eval.cost import compare_rewards, warm_up
from factlab.judges import Judge
from factlab.rewards import Resources, RewardSpec, available, build_rewards
from factlab.rewards.rar import FACTSCORE_TOP_K, ClaimVerifier, FActScoreReward, VeriScoreReward
from factlab.recipes import klcf

ROOT = Path(__file__).resolve().parent.parent.parent
FACTS = ["The capital of France is Paris.", "France is located in Europe.", "The currency of France is the Euro.",
         "France borders Spain.", "The demonym of France is French.", "France has many regions."]
# six chunks of one French article, all matching every claim: top-5 and top-4 both fill up
DOCS = [Chunk(id=f"fr#{i}", doc_id="fr", title="France", text=f"France part {i}. {FACTS[i]}", start_token=0)
        for i in range(6)] + [Chunk(id="jp#0", doc_id="jp", title="Japan", text="Japan is in Asia.", start_token=0)]


class ScriptedJudge(Judge):
    """Extraction: one claim per sentence of the response; verification: "supported" unless
    the claim says Lyon. Counts prompt tokens (words) and records every prompt."""

    def __init__(self):
        super().__init__("scripted", cache=None)
        self.asked: list[str] = []

    def _generate(self, prompts, prefix=""):
        out = []
        for p in prompts:
            self.asked.append(p)
            self.stats["prompt_tokens"] += len(p.split())
            if p.startswith(P.CLAIM_EXTRACTION_PROMPT[:40]):
                resp = p.split(">>> Begin of response <<<")[1].split("<<< End of response >>>")[0]
                resp = re.sub(r"</?answer>", " ", resp)
                out.append(json.dumps([s.strip() for s in re.findall(r"[^.]+\.", resp) if s.strip()]))
            elif p.startswith(P.CLAIM_VERIFICATION_PROMPT[:40]):
                claim = p.split("\nClaim: ")[1].split("\n")[0]
                out.append("contradicted" if "Lyon" in claim else "supported")
            else:
                out.append("?")
            self.stats["completion_tokens"] += 1
        return out


def passages_in(prompt: str) -> int:
    block = prompt.split(">>> Begin of search results <<<")[1].split("<<< End of search results >>>")[0]
    return len(re.findall(r"^\[\d+\]", block, re.M))


@pytest.fixture()
def store():
    ds = Datastore(DOCS)
    ds.precache({"p-fr": "Tell me about France.", "p-jp": "Tell me about Japan."}, k_docs=1)
    return ds


# ---------------------------------------------------------------- Datastore.searches


def test_datastore_counts_every_query_answered(store):
    assert store.searches == 0  # pre-caching is not a search of a response's claim
    store.retrieve("capital of France", k=2, prompt_id="p-fr")  # restricted to the cached set
    store.retrieve("capital of France", k=2)  # the whole datastore
    store.retrieve("capital of France", k=2, prompt_id="unknown")  # falls back to the whole datastore
    assert store.searches == 3 and store.cached_calls == 1 and store.fallbacks == 1
    hits = store.retrieve_many(["Paris", "Euro", "Asia", "Spain"], k=3, prompt_ids=["p-fr", None, "p-jp", "nope"])
    assert len(hits) == 4 and all(hits)
    # two cached (through retrieve), two searched in one bm25s batch: four queries answered
    assert store.searches == 7 and store.cached_calls == 3 and store.fallbacks == 2
    assert store.retrieve_many([], k=3) == [] and store.searches == 7


# ---------------------------------------------------------------- the factscore reward


def test_factscore_is_registered_with_five_passages_per_fact(store):
    assert "factscore" in available()

    class Res:  # what _build_factscore reads: the run's shared claim verifier
        cfg = None

        def __init__(self):
            self.shared = ClaimVerifier(ScriptedJudge(), store, k_per_claim=4, max_claims=3, prefill=True)

        def claim_verifier(self):
            return self.shared

    res = Res()
    (fs,) = build_rewards([RewardSpec(name="factscore")], res).funcs
    (vs,) = build_rewards([RewardSpec(name="factscore", args={"top_k": 7})], res).funcs
    assert isinstance(fs, FActScoreReward) and fs.__name__ == "factscore"
    assert fs.verifier.k_per_claim == FACTSCORE_TOP_K == 5 and vs.verifier.k_per_claim == 7
    v = fs.verifier  # a new verifier sharing the judge, datastore, claim budget and prefill of VeriScore's
    assert v is not res.shared and (v.judge, v.datastore, v.max_claims, v.prefill) == (
        res.shared.judge, store, 3, True)
    with pytest.raises(ValueError, match="greater than or equal to 1"):  # refused when the params load
        RewardSpec(name="factscore", args={"top_k": 0})


def test_factscore_and_veriscore_costs_per_response(store):
    """compare_rewards on two responses: searches = claims verified (one per claim, whatever its
    k), judge calls = one extraction per response + one verification per distinct claim, and
    FActScore reads 5 passages per claim where VeriScore reads 4 (more prompt tokens)."""
    judge = ScriptedJudge()
    fs = FActScoreReward(ClaimVerifier(judge, store, k_per_claim=FACTSCORE_TOP_K))
    vs = VeriScoreReward(ClaimVerifier(judge, store, k_per_claim=4))
    responses = [{"prompt": "Tell me about France.", "prompt_id": "p-fr",
                  "response": "<think>x</think>The capital of France is Paris. France is located in Europe."},
                 {"prompt": "Tell me about France.", "prompt_id": "p-fr",
                  "response": "The capital of France is Lyon. France borders Spain. France has many regions."}]
    asked: dict[str, list[str]] = {}
    costs_in_order = {}
    for name, fn in (("factscore", fs), ("veriscore", vs)):
        before = len(judge.asked)
        scores, costs = compare_rewards({name: fn}, responses)
        asked[name] = judge.asked[before:]
        costs_in_order[name] = costs[name]
        assert scores[name] == [1.0, pytest.approx(2 / 3)]  # the Lyon claim is contradicted
    for name, k in (("factscore", 5), ("veriscore", 4)):
        c = costs_in_order[name]
        verifications = [p for p in asked[name] if p.startswith(P.CLAIM_VERIFICATION_PROMPT[:40])]
        assert len(verifications) == 5 and len(asked[name]) == 2 + 5
        assert c["searches"] == 5 / 2 and c["judge_calls"] == 7 / 2 and c["unreadable"] == 0.0
        assert c["prompt_tokens"] == sum(len(p.split()) for p in asked[name]) / 2
        assert c["completion_tokens"] == 7 / 2 and c["seconds"] >= 0.0
        assert {passages_in(p) for p in verifications} == {k}  # six cached chunks: every claim gets k
    assert costs_in_order["factscore"]["prompt_tokens"] > costs_in_order["veriscore"]["prompt_tokens"]
    assert store.searches == 10 and store.cached_calls == 10  # every claim searched the prompt's cached set


def test_compare_rewards_reports_no_searches_for_a_reward_without_datastore(store):
    judge = ScriptedJudge()

    def judge_free(prompts, completions, **_):
        return [1.0 for _ in completions]

    fs = FActScoreReward(ClaimVerifier(judge, store))
    _, costs = compare_rewards({"free": judge_free, "factscore": fs},
                               [{"prompt": "Tell me about France.", "response": "France borders Spain."}])
    assert costs["free"]["searches"] == 0 and costs["free"]["judge_calls"] == 0
    assert costs["factscore"]["searches"] == 1 and costs["factscore"]["judge_calls"] == 2
    assert store.cached_calls == 0  # no prompt_id column: the claim searched the whole datastore


# ---------------------------------------------------------------- efficiency_table (Table 14)


class ScriptedResources(Resources):
    """The smoke run's resources with the judge scripted (datastores, mini-world and tokenizer real)."""

    def __init__(self, cfg, judge):
        super().__init__(cfg, progress=False)
        self.scripted = judge

    def judge(self, max_new_tokens=None):
        return self.scripted


class StubScorer:
    """p(True) 0.9 for every claim, standing in for the truthfulness reward model."""

    def __init__(self):
        self.asked: list[str] = []
        self.loaded = 0

    def load(self):
        self.loaded += 1

    def probabilities(self, claims):
        self.asked += list(claims)
        return [0.9] * len(claims)


def test_efficiency_table_on_the_smoke_params():
    cfg = config.load_config(ROOT / "params" / "05_klcf_lm.yaml", klcf.KLCFConfig,
                             {"verifier": {"top_k": 4}, "queries": {"train_limit": 1, "eval_limit": 2}})
    judge = ScriptedJudge()
    res = ScriptedResources(cfg, judge)
    fact = next(s for s in cfg.rewards if s.name == "klcf_fact")
    assert fact.args["verdict"] == "overlap" and fact.args["claim_extraction"] == "sentences"
    scorer = StubScorer()
    res.memo(("klcf_truth_scorer", "rm-folder", "float32", "auto", 16), lambda: scorer)
    _, held, _ = klcf.queries(cfg, res)
    facts = klcf._miniworld_facts(res)
    checklists = {q.id: facts[q.doc_id][:3] for q in held}
    table, scores = klcf.efficiency_table(cfg, res, held, checklists, "rm-folder", max_queries=1)

    assert list(table.index) == ["KLCF (klcf_fact)", "FActScore", "VeriScore"]
    assert scorer.loaded == 1  # the RM was loaded before the clock started (warm_up)
    assert {k: len(v) for k, v in scores.items()} == {"klcf_fact": 2, "factscore": 2, "veriscore": 2}
    k = table.loc["KLCF (klcf_fact)"]
    # the smoke's KLCF: overlap verdicts and sentence claims, no judge, no search; the RM read each sentence
    assert k["judge_calls"] == 0 and k["searches"] == 0 and k["prompt_tokens"] == 0
    assert len(scorer.asked) == 3 + 4  # "complete and true": 3 facts; "one false claim": 3 facts + 1
    q = next(q for q in held if q.id in checklists)
    false = klcf._false_facts(res)[q.doc_id][0]
    assert false in scorer.asked
    # FActScore and VeriScore: the scripted extractor returns each response's sentences, so
    # 3 and 4 claims, 4 distinct (the shared facts are asked once per batch), one search each
    for name, passages in (("FActScore", 5), ("VeriScore", 4)):
        row = table.loc[name]
        assert row["searches"] == (3 + 4) / 2 and row["judge_calls"] == (2 + 4) / 2, name
        assert row["searches"] > k["searches"]
    verifications = [p for p in judge.asked if p.startswith(P.CLAIM_VERIFICATION_PROMPT[:40])]
    assert len(verifications) == 8 and {passages_in(p) for p in verifications[:4]} == {5}
    assert {passages_in(p) for p in verifications[4:]} == {4}
    assert table.loc["FActScore", "prompt_tokens"] > table.loc["VeriScore", "prompt_tokens"]
    # Table 14's speed-up columns: baseline seconds / this row's seconds
    assert table.loc["FActScore", "speed-up vs FActScore"] == pytest.approx(1.0)
    assert table.loc["VeriScore", "speed-up vs VeriScore"] == pytest.approx(1.0)
    for name in table.index:
        for base in ("FActScore", "VeriScore"):
            assert table.loc[name, f"speed-up vs {base}"] == pytest.approx(
                table.loc[base, "seconds"] / table.loc[name, "seconds"])
    # every score computed: true facts supported, the false claim not (scripted: no "Lyon" here, so 1.0)
    assert all(v is not None for vs in scores.values() for v in vs)


def test_warm_up_loads_each_shared_model_once_before_timing():
    from types import SimpleNamespace

    from factlab.rewards.base import RewardFunction

    class Model:
        def __init__(self):
            self.loads = 0

        def load(self):
            self.loads += 1

    class Exposes(RewardFunction):  # a reward read through the protocol only
        def __init__(self, judges=(), models=()):
            super().__init__()
            self._judges, self._models = list(judges), list(models)

        def judges(self):
            return self._judges

        def models(self):
            return self._models

    judge, rm, other = Model(), Model(), Model()
    klcf_fact = Exposes([judge, judge], [rm])
    factscore = Exposes([judge])
    binary = Exposes([other])
    hidden = SimpleNamespace(judge=Model())  # outside the protocol: its attributes are not walked
    assert warm_up([klcf_fact, factscore, binary, hidden, lambda **_: []]) == 3
    assert (judge.loads, rm.loads, other.loads) == (1, 1, 1)
    assert hidden.judge.loads == 0
    assert warm_up([Exposes([SimpleNamespace()])]) == 0  # an HTTP judge: nothing to load
