"""The evaluators that were stray functions are suites by name (``factlab.eval.suites``):
K2V's answer accuracy, MCQ / general avg@k through lm-eval, KLCF's win rate. Each runs through
``suites.evaluate(name, ...)`` on fakes of the model, the harness and the judge."""

import pytest

from factlab.data.longform import LongformPrompt
from factlab.data.types import QAItem
from factlab.eval import mcq, suites
from factlab.models import Generation
from factlab.sections import GenerationConfig

GEN = GenerationConfig(max_new_tokens=8, batch_size=4)
THINK = "<think>" + "I recall the fact and check it against what I know. " * 2 + "</think>"


def _scripted(monkeypatch, said, seen=None):
    """``generate`` answers ``said`` in order; ``chat_prompt`` records the system turn."""
    def chat_prompt(tok, question, system=None):
        if seen is not None:
            seen.append(system)
        return question

    monkeypatch.setattr(suites, "generate", lambda model, tok, prompts, **k: [[Generation(t, [1], True)] for t in said])
    monkeypatch.setattr(suites, "chat_prompt", chat_prompt)


def test_every_stray_evaluator_is_a_suite_by_name():
    assert {"answer_accuracy", "avg_at_k", "win_rate"} <= set(suites.available())
    with pytest.raises(ValueError, match="unknown evaluation suite .avg@k.; known: .*avg_at_k"):
        suites.evaluate("avg@k", None, None, [], GEN)


def test_answer_accuracy_grades_exactly_strict_and_lenient(monkeypatch):
    said = [THINK + "<answer>TRPV4</answer>", THINK + "<answer>It is not TRPV4</answer>", "TRPV4", "<answer>TRPV5</answer>"]
    seen = []
    _scripted(monkeypatch, said, seen)
    qs = [QAItem(str(i), "{ } is a calcium channel.", ["TRPV4", "Transient receptor potential vanilloid 4"])
          for i in range(4)]
    res = suites.evaluate("answer_accuracy", None, None, {"heldout": qs}, GEN, system="SYS")
    m = res.metrics["heldout"]
    assert res.suite == "answer_accuracy" and res.records["heldout"] == said and seen == ["SYS"] * 4
    assert m["n"] == 4 and m["accuracy"] == pytest.approx(1 / 4)  # only the <answer> block, exact with aliases
    assert m["lenient_accuracy"] == pytest.approx(2 / 4)  # a bare final answer counts leniently
    assert m["format_rate"] == pytest.approx(2 / 4)  # <think> before the <answer>
    import math

    assert math.isnan(suites.evaluate("answer_accuracy", None, None, {"none": []}, GEN).metrics["none"]["accuracy"])


def test_avg_at_k_suite_runs_the_section_settings_through_lm_eval(monkeypatch):
    calls = []

    def fake_avg_at_k(model, tok, tasks, **kw):
        calls.append((tasks, kw))
        return {t: {"kind": "generative", "score": 0.5, f"avg@{kw['k']}": 0.5} for t in tasks}

    monkeypatch.setattr(mcq, "avg_at_k", fake_avg_at_k)
    section = mcq.MCQSection(k=3, temperature=0.7, limit=5, batch_size=2, seed=4)
    res = suites.evaluate("avg_at_k", "model", "tok", ["mini"], GEN, settings=section, include_path="/tasks")
    assert res.metrics == {"mini": {"kind": "generative", "score": 0.5, "avg@3": 0.5}}
    assert calls == [(["mini"], dict(k=3, temperature=0.7, include_path="/tasks", limit=5, batch_size=2, seed=4,
                                     max_gen_toks=None))]
    general = mcq.GeneralSection(tasks=["aime24"], max_gen_toks=4096, include_path="/general")
    suites.evaluate("avg_at_k", "model", "tok", general.tasks, GEN, settings=general)
    assert calls[-1][1]["max_gen_toks"] == 4096 and calls[-1][1]["include_path"] == "/general"
    assert suites.evaluate("avg_at_k", "model", "tok", [], GEN, settings=section).metrics == {}  # nothing runs
    assert len(calls) == 2


class FirstShownWins:
    """A judge that ranks whichever response it is shown first on top; records its prompts."""

    def __init__(self):
        self.prompts = []

    def judge(self, prompts, prefix=None):
        self.prompts += prompts
        return ["[{'model': 'model_1', 'rank': 1}, {'model': 'model_2', 'rank': 2}]"] * len(prompts)


def test_win_rate_suite_generates_or_takes_responses_and_hides_the_think_block(monkeypatch):
    prompts = [LongformPrompt("1", "Tell me about France."), LongformPrompt("2", "Tell me about Peru.")]
    trained = [THINK.replace("I recall", "SECRET") + "<answer>France is in Europe.</answer>", "Peru is in America."]
    _scripted(monkeypatch, trained)
    judge = FirstShownWins()
    res = suites.evaluate("win_rate", object(), None, prompts, GEN, judge=judge, baseline=["Base A.", "Base B."],
                          system="SYS", answer_parsing="lenient")
    wr = res.metrics["win_rate"]
    assert wr["n"] == 2 and wr["win_rate"] == 0.5 and wr["position_consistency"] == 0.0  # both orders, Eq. 19-20
    assert res.records["win_rate"]["responses"] == trained and len(res.records["win_rate"]["answers"]) == 4
    assert len(judge.prompts) == 4 and not any("SECRET" in p for p in judge.prompts)
    assert "France is in Europe." in judge.prompts[0]
    whole = suites.evaluate("win_rate", None, None, prompts[:1], GEN, judge=FirstShownWins(), baseline=["Base."],
                            responses=trained[:1])  # given responses: no model needed, the judge sees all of it
    assert whole.records["win_rate"]["responses"] == trained[:1]
    with pytest.raises(ValueError, match="2 prompts, 1 responses and 2 baseline"):
        suites.evaluate("win_rate", None, None, prompts, GEN, judge=judge, baseline=["a", "b"], responses=["x"])
