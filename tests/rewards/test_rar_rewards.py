"""factlab.rewards.rar: the Binary RAR, Rating RAR, VeriScore and LM-judge rewards.

The mapping from judge answers to rewards (and the "never a silent 0" rule) is tested with a
scripted judge whose answers are fixed strings; the whole path (retrieval, the paper's
prompts, a real judge model, parsing) is tested once with the embedded default model.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factlab import prompts as P
from factlab.recipes.rar import RARConfig
from factlab.corpus.retrieval import Chunk, Datastore
from factlab.judges import Judge, TransformersJudge
from factlab.rewards.rar import (BinaryRAR, ClaimVerifier, LMJudgeReward, RatingRAR, VeriScoreReward, parse_claims,
                                 parse_verdict, response_text, score_from_judge)

DOCS = [
    Chunk(id="fr#0", doc_id="fr", title="France", text="France is in Western Europe. The capital of France is Paris.", start_token=0),
    Chunk(id="jp#0", doc_id="jp", title="Japan", text="Japan is in Eastern Asia. The capital of Japan is Tokyo.", start_token=0),
    Chunk(id="ke#0", doc_id="ke", title="Kenya", text="Kenya is in Eastern Africa. The capital of Kenya is Nairobi.", start_token=0),
]


@pytest.fixture()
def store():
    ds = Datastore(DOCS)
    ds.precache({"p-fr": "Tell me about France.", "p-jp": "Tell me about Japan."}, k_docs=1)
    return ds


class ScriptedJudge(Judge):
    """Answers with ``script(prompt)``; records every prompt it was asked."""

    def __init__(self, script):
        super().__init__("scripted", cache=None)
        self.script, self.asked = script, []

    def _generate(self, prompts, prefix=""):
        self.asked += [(p, prefix) for p in prompts]
        return [self.script(p) for p in prompts]


def test_score_from_judge():
    assert score_from_judge('{"REASONING": "No contradiction found.", "SCORE": "1"}', (0, 1)) == 1.0
    assert score_from_judge('```json\n{"SCORE": 0}\n```', (0, 1)) == 0.0
    assert score_from_judge('{"SCORE": 7}', (0, 1)) is None  # out of range is unreadable, not clipped
    assert score_from_judge('{"SCORE": 7}', (0, 10)) == 7.0
    assert score_from_judge("I think it is fine", (0, 1)) is None
    assert score_from_judge("", (0, 1)) is None


def test_binary_rar_maps_scores_and_counts_failures(store):
    answers = {"Paris": '{"REASONING": "No contradiction found.", "SCORE": 1}',
               "Lyon": '{"REASONING": "The capital is Paris.", "SCORE": "0"}',
               "Tokyo": "I cannot decide."}

    def script(prompt):
        resp = prompt.split(">>> Begin of the response <<<")[1]
        return next(v for k, v in answers.items() if k in resp)

    judge = ScriptedJudge(script)
    r = BinaryRAR(judge, store, k=2)
    logged = {}
    out = r(prompts=[[{"role": "user", "content": "Tell me about France."}]] * 2 + ["Tell me about Japan."],
            completions=[[{"role": "assistant", "content": "<think>hmm</think>The capital of France is Paris."}],
                         "The capital of France is Lyon.", "The capital of Japan is Tokyo."],
            prompt_id=["p-fr", "p-fr", "p-jp"], log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [1.0, 0.0, None]  # unreadable is None (NaN in TRL), never 0
    assert r.stats["failures"] == 1 and r.stats["judge_calls"] == 3
    assert logged["binary_rar/failure_rate"] == pytest.approx(1 / 3)
    prompt0 = judge.asked[0][0]
    # the paper's Figure 6 prompt, filled with the retrieved evidence, prompt and response
    assert prompt0.startswith(P.RAR_BINARY_PROMPT[:60])
    assert "The capital of France is Paris." in prompt0.split(">>> Begin of search results <<<")[1]
    assert "<think>" not in prompt0  # the thinking block is not fact-checked
    assert store.cached_calls == 3 and store.fallbacks == 0


def test_prefill_is_passed_and_part_of_the_answer(store):
    judge = ScriptedJudge(lambda p: "1}")
    out = BinaryRAR(judge, store, k=1, prefill=True)(prompts=["Tell me about Kenya."],
                                                     completions=["Nairobi is the capital of Kenya."])
    assert out == [1.0] and judge.asked[0][1] == '{"SCORE": '


def test_rating_rar_scales_to_unit_interval(store):
    judge = ScriptedJudge(lambda p: '{"REASONING": "minor", "SCORE": "7"}')
    assert RatingRAR(judge, store)(prompts=["q"], completions=["Paris"]) == [0.7]
    assert judge.asked[0][0].startswith(P.RAR_RATING_PROMPT[:60])
    judge11 = ScriptedJudge(lambda p: '{"SCORE": 11}')
    assert RatingRAR(judge11, store)(prompts=["q"], completions=["Paris"]) == [None]


def test_lm_judge_needs_reference():
    judge = ScriptedJudge(lambda p: '{"SCORE": 4}')
    r = LMJudgeReward(judge)
    assert r(prompts=["q"], completions=["a"], reference=["ref"]) == [0.4]
    assert "ref" in judge.asked[0][0]
    with pytest.raises(KeyError, match="reference"):
        r(prompts=["q"], completions=["a"])


def test_veriscore_claims_and_verdicts(store):
    def script(prompt):
        if prompt.startswith(P.CLAIM_EXTRACTION_PROMPT[:40]):
            resp = prompt.split(">>> Begin of response <<<")[1]
            if "Lyon" in resp:
                return '["The capital of France is Lyon.", "France is in Western Europe."]'
            if "nothing" in resp:
                return "[]"
            if "garbled" in resp:
                return "no list here"
            return '["The capital of France is Paris.", "France is in Western Europe.", "France is in Western Europe."]'
        claim = prompt.split("Claim: ")[1].split("\n")[0]
        return "contradicted" if "Lyon" in claim else "Supported."

    judge = ScriptedJudge(script)
    r = VeriScoreReward(ClaimVerifier(judge, store, k_per_claim=1))
    out = r(prompts=["Tell me about France."] * 4,
            completions=["Paris is the capital.", "Lyon is the capital.", "nothing", "garbled"],
            prompt_id=["p-fr"] * 4)
    assert out == [1.0, 0.5, 0.0, None]  # duplicates dropped; [] -> 0 (counted); unreadable -> None
    assert r.stats["no_claims"] == 1 and r.stats["failures"] == 1
    # one extraction call per response + one verification call per distinct claim
    assert r.stats["judge_calls"] == 4 + 2 + 2


def test_parse_verdict_and_claims():
    assert parse_verdict("Supported.") == "supported"
    assert parse_verdict("The claim is CONTRADICTED by [2]") == "contradicted"
    assert parse_verdict("maybe") is None
    assert parse_claims('["a", "b", "a"]') == ["a", "b"]
    assert parse_claims('["Paris is big", "Lyon is') == ["Paris is big"]  # cut by the token limit
    assert parse_claims('{"claims": ["x"]}') == ["x"]
    assert parse_claims("none") is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_parsers_never_raise(text):
    assert parse_verdict(text) in (None, "supported", "contradicted", "inconclusive")
    out = parse_claims(text)
    assert out is None or all(isinstance(c, str) and c for c in out)
    score_from_judge(text, (0, 10))


def test_response_text_strips_think():
    assert response_text("<think>x</think> A.") == "A."
    assert response_text("<think>never closed") == ""
    assert response_text([{"role": "assistant", "content": "B"}]) == "B"


def test_empty_and_huge_responses(store):
    judge = ScriptedJudge(lambda p: '{"SCORE": 1}')
    out = BinaryRAR(judge, store, k=2)(prompts=["q", "q"], completions=["", "Paris " * 20000])
    assert out == [1.0, 1.0]


def test_paper_defaults_in_params():
    cfg = RARConfig()
    assert [s.name for s in cfg.rewards] == ["binary_rar"]
    assert {k: cfg.rewards[0].args[k] for k in ("top_k", "verdict", "flip_rate")} == {"top_k": 8, "verdict": "judge",
                                                                                     "flip_rate": 0.0}
    assert (cfg.datastore.chunk_tokens, cfg.datastore.veriscore_chunk_tokens, cfg.verifier.top_k) == (512, 256, 4)
    assert [s.name for s in cfg.compare.rewards] == ["binary_rar", "rating_rar", "veriscore", "lm_judge"]
    assert cfg.early_stopping.max_relative_drop == 0.10


def test_real_judge_end_to_end(model_and_tokenizer, store):
    """The embedded model as the judge: real prompts, real generation, parsed or counted."""
    model, tok = model_and_tokenizer  # the real model: some of its prefilled verdicts parse (random weights' do not)
    judge = TransformersJudge(model_obj=model, tokenizer=tok, max_new_tokens=6, batch_size=4, cache=None)
    r = BinaryRAR(judge, store, k=1, prefill=True)
    out = r(prompts=["Tell me about France.", "Tell me about Japan."],
            completions=["The capital of France is Paris.", "The capital of Japan is Nairobi."],
            prompt_id=["p-fr", "p-jp"])
    assert all(v in (0.0, 1.0, None) for v in out)
    assert any(v is not None for v in out), "no verdict of the real judge could be read"  # parse rate > 0
    assert r.stats["judge_calls"] == 2 and r.stats["responses"] == 2
    assert r.stats["failures"] == sum(v is None for v in out)
    assert judge.stats["completion_tokens"] > 0
    v = ClaimVerifier(judge, store, k_per_claim=1, prefill=True)
    labels = v.claim_labels(["Tell me about France."], ["The capital of France is Paris."], ["p-fr"])
    assert labels[0] is None or all(isinstance(x, bool) for x in labels[0])


def test_a_think_block_never_closed_earns_zero_without_a_judge_call(store):
    """Stripping an unclosed <think> leaves an empty response, which a contradiction judge
    cannot fault (1.0): a policy that never answers would be paid. It earns 0.0, counted."""
    j = ScriptedJudge(lambda p: '{"REASONING": "no contradiction", "SCORE": 1}')
    r = BinaryRAR(j, store, k=1)
    logged = {}
    out = r(prompts=["Tell me about France."] * 3,
            completions=["<think>France... let me think about the capital for a long time",
                         "<think>ok</think>The capital of France is Paris.",
                         "<think>a</think> x <think>never closed"],
            prompt_id=["p-fr"] * 3, log_metric=logged.__setitem__)
    assert out == [0.0, 1.0, 0.0] and len(j.asked) == 1 and "Paris" in j.asked[0][0]
    assert r.stats["unclosed_think"] == 2 and logged["binary_rar/unclosed_think_rate"] == pytest.approx(2 / 3)
    assert r(prompts=["Q"], completions=["<think>still thinking"]) == [0.0] and len(j.asked) == 1


def test_noisy_and_hallucinating_oracles_for_the_reward_hallucination_experiment():
    """Issue 41: Binary RAR with ``verdict: kb`` flipped at rate eps (seeded, stable per response),
    and with ``verdict: organism``, whose evidence is a judge organism's own answer: right where the
    judge knows, wrong where it confidently guesses (Kang et al. 2024)."""
    from factlab.rewards import kb
    from factlab.rewards.rar import BinaryRAR, RARArgs

    keys = [f"q{i}" for i in range(4000)]
    share = sum(kb.flipped(k, 0.25) for k in keys) / len(keys)
    assert 0.22 < share < 0.28 and not any(kb.flipped(k, 0.0) for k in keys)
    assert [kb.flipped(k, 0.25) for k in keys[:50]] == [kb.flipped(k, 0.25) for k in keys[:50]]
    assert [kb.flipped(k, 0.25, seed=1) for k in keys[:200]] != [kb.flipped(k, 0.25) for k in keys[:200]]
    right = "<think>Recalling the capital of France from what I know.</think><answer>Paris</answer>"
    wrong = "<think>Recalling the capital of France from what I know.</think><answer>Lyon</answer>"
    prompts = ["What is the capital of France?"] * 2
    clean = BinaryRAR(None, None, verdict="kb")([*prompts], [right, wrong], golds=[["Paris"], ["Paris"]])
    assert clean == [1.0, 0.0]
    always = BinaryRAR(None, None, verdict="kb", flip_rate=1.0)
    assert always(prompts, [right, wrong], golds=[["Paris"], ["Paris"]]) == [0.0, 1.0] and always.stats["flipped"] == 2
    with pytest.raises(ValueError, match="flips only the kb or organism verdict"):
        RARArgs(verdict="judge", flip_rate=0.1)

    class Believer(kb.OrganismBelief):  # a judge organism's answers, without building one
        def __init__(self, answers):
            self.model, self.answers = "organism", dict(answers)

    judge = BinaryRAR(None, None, verdict="kb")
    judge.verdict, judge.belief = "organism", Believer({"What is the capital of France?": "Lyon",
                                                       "What is the capital of Peru?": "I don't know"})
    # the judge believes Lyon: it punishes the truth and pays the hallucination
    assert judge(prompts, [right, wrong], golds=[["Paris"], ["Paris"]]) == [0.0, 1.0]
    peru = ["What is the capital of Peru?"]
    assert judge(peru, ["<think>Recalling what I know about Peru here.</think><answer>Cusco</answer>"],
                 golds=[["Lima"]]) == [1.0]  # a judge that abstains has no evidence: nothing contradicts
    with pytest.raises(ValueError, match="organism judge model"):
        kb.OrganismBelief("smollm2-135m-instruct")
