"""factlab.eval.abstention: Figure 2 breakdown, hallucination rate, abstain vs forced prompts
(Binary RAR, 001_f9c1f8134c3dd554.txt §4.1, §6.2)."""

import matplotlib

matplotlib.use("Agg")

import math  # noqa: E402

import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from factlab import text  # noqa: E402
from factlab.data.miniworld import ensure_world  # noqa: E402
from factlab.data.types import QAItem, read_jsonl  # noqa: E402
from factlab.eval import abstention as A  # noqa: E402
from factlab.eval.shortform import grade_completion  # noqa: E402
from factlab.models import Generation  # noqa: E402

ITEM = QAItem(id="q", question="What is the capital of France?", golds=["Paris"])


def record(label_text: str, qid: str = "q"):
    item = QAItem(id=qid, question="What is the capital of France?", golds=["Paris"])
    return grade_completion(item, Generation(label_text, [1, 2, 3], True))


def test_breakdown_hand_computed():
    labels = ["GOOD"] * 3 + ["BAD"] * 2 + ["NA"] * 5
    b = A.abstention_breakdown(labels)
    assert (b["n"], b["n_correct"], b["n_incorrect"], b["n_abstained"], b["n_attempted"]) == (10, 3, 2, 5, 5)
    assert b["correct"] == b["accuracy"] == 0.3
    assert b["incorrect"] == b["hallucination_rate"] == 0.2
    assert b["abstained"] == b["abstention_rate"] == 0.5
    assert b["attempted_accuracy"] == pytest.approx(0.6)


def test_breakdown_from_graded_records():
    recs = [record("<think>x</think><answer>Paris</answer>"),
            record("<think>x</think><answer>Lyon</answer>"),
            record("<think>unknown</think><answer>I don\u2019t know</answer>"),  # the prompt's IDK
            record("I do not know")]
    assert [r.label for r in recs] == [text.GOOD, text.BAD, text.NA, text.NA]
    b = A.abstention_breakdown(recs)
    assert (b["correct"], b["incorrect"], b["abstained"]) == (0.25, 0.25, 0.5)
    assert b["attempted_accuracy"] == 0.5


def test_breakdown_edge_cases():
    b = A.abstention_breakdown(["NA", "NA"])
    assert b["n_attempted"] == 0 and b["attempted_accuracy"] == 0.0 and b["abstained"] == 1.0
    with pytest.raises(ValueError, match="empty"):
        A.abstention_breakdown([])
    with pytest.raises(ValueError, match="unknown label 'MAYBE'"):
        A.abstention_breakdown(["GOOD", "MAYBE"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["GOOD", "BAD", "NA"]), min_size=1, max_size=60))
def test_breakdown_properties(labels):
    b = A.abstention_breakdown(labels)
    assert b["correct"] + b["incorrect"] + b["abstained"] == pytest.approx(1.0)
    for key in ("correct", "incorrect", "abstained", "hallucination_rate", "attempted_accuracy"):
        assert 0.0 <= b[key] <= 1.0
    # attempted accuracy is never below overall accuracy: abstaining only removes questions
    assert b["attempted_accuracy"] >= b["accuracy"] - 1e-12
    # turning a wrong answer into an abstention lowers the hallucination rate, keeps accuracy
    if "BAD" in labels:
        swapped = list(labels)
        swapped[swapped.index("BAD")] = "NA"
        s = A.abstention_breakdown(swapped)
        assert s["hallucination_rate"] < b["hallucination_rate"] and s["accuracy"] == b["accuracy"]
        assert s["attempted_accuracy"] >= b["attempted_accuracy"]


def test_selectivity():
    abstain = [record("<answer>Paris</answer>", "1"), record("I don't know", "2"),
               record("I don't know", "3"), record("<answer>Lyon</answer>", "4")]
    forced = [record("<answer>Paris</answer>", "1"), record("<answer>Nice</answer>", "2"),
              record("<answer>Paris</answer>", "3"), record("<answer>Lyon</answer>", "4"),
              record("<answer>Paris</answer>", "5")]
    s = A.abstention_selectivity(abstain, forced)
    assert s == {"n_paired": 4, "n_abstained": 2, "forced_incorrect_rate": 0.5,
                 "forced_incorrect_when_abstained": 0.5, "abstained_would_be_correct": 0.5}
    with pytest.raises(ValueError, match="both"):
        A.abstention_selectivity(abstain, [record("x", "other")])
    none = A.abstention_selectivity(forced[:4], forced)  # nothing abstained: no selectivity, not a silent 0
    assert none["n_abstained"] == 0 and math.isnan(none["forced_incorrect_when_abstained"])
    assert math.isnan(none["abstained_would_be_correct"]) and none["forced_incorrect_rate"] == 0.5


def test_system_prompts():
    assert A.system_prompt("abstain") == A.ABSTAIN_SYSTEM
    assert A.system_prompt("forced") == A.FORCED_SYSTEM
    for p in (A.ABSTAIN_SYSTEM, A.FORCED_SYSTEM):
        assert "<answer>" in p and "<think>" in p
    # the abstain prompt's exact refusal is graded NA by the strict rule
    idk = A.ABSTAIN_SYSTEM.split("reply exactly: ")[1]
    assert record(idk).label == text.NA
    assert "best guess" in A.FORCED_SYSTEM and "I don" not in A.FORCED_SYSTEM
    with pytest.raises(ValueError, match="unknown mode 'maybe'"):
        A.system_prompt("maybe")


def test_evaluate_abstention_on_a_model(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    items = [QAItem.from_dict(d) for d in list(read_jsonl(ensure_world()["qa_heldout"]))[:3]]
    items.append(ITEM)
    out = {}
    for mode in A.MODES:
        recs, m = A.evaluate_abstention(model, tok, items, mode, max_new_tokens=24, batch_size=4,
                                        progress=False)
        assert [r.id for r in recs] == [it.id for it in items]
        assert m["mode"] == mode and m["n"] == len(items)
        assert m["correct"] + m["incorrect"] + m["abstained"] == pytest.approx(1.0)
        assert m["hallucination_rate"] == m["incorrect"]
        assert {"format_rate", "na_rate", "mean_length_tokens"} <= set(m)
        assert m["na_rate"] == m["abstained"]
        assert all(r.label in (text.GOOD, text.BAD, text.NA) for r in recs)
        out[mode] = recs
    # a custom system prompt is used as given
    recs, m = A.evaluate_abstention(model, tok, items[:1], "abstain", system="Reply with one word.",
                                    max_new_tokens=4, progress=False)
    assert len(recs) == 1 and m["mode"] == "abstain"
    with pytest.raises(ValueError, match="unknown mode"):
        A.evaluate_abstention(model, tok, items, "sometimes")
    with pytest.raises(ValueError, match="no items"):
        A.evaluate_abstention(model, tok, [], "forced")
    assert A.abstention_selectivity(out["abstain"], out["forced"])["n_paired"] == len(items)
