"""factlab.eval.verification: metrics by hand, Table 15 layout, structure scores, Table 17."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factlab.eval import verification as V

A, NA = "attributable", "not_attributable"


def test_classification_metrics_by_hand():
    golds = [A, A, A, NA, NA, NA]
    preds = [A, A, None, NA, A, NA]
    m = V.classification_metrics(golds, preds)
    # A: tp 2, fp 1, fn 1 -> P 2/3, R 2/3, F1 2/3; NA: tp 2, fp 0, fn 1 -> P 1, R 2/3, F1 0.8
    assert m[f"{A}/f1"] == pytest.approx(2 / 3) and m[f"{NA}/f1"] == pytest.approx(0.8)
    assert m["macro_f1"] == pytest.approx((2 / 3 + 0.8) / 2)
    assert m["accuracy"] == pytest.approx(4 / 6) and m["format_error_rate"] == pytest.approx(1 / 6)
    with pytest.raises(ValueError):
        V.classification_metrics([A], [])


@given(st.lists(st.tuples(st.sampled_from([A, NA]), st.sampled_from([A, NA, None])), min_size=1, max_size=50))
def test_metric_ranges(pairs):
    golds, preds = zip(*pairs)
    m = V.classification_metrics(list(golds), list(preds))
    assert 0 <= m["macro_f1"] <= 1 and 0 <= m["accuracy"] <= 1
    if all(p is None for p in preds):
        assert m["macro_f1"] == 0 and m["accuracy"] == 0  # garbage cannot score


def test_confusion_table_layout():
    t = V.confusion_table([A, A, A, NA, NA], [A, NA, None, NA, NA])
    assert list(t.index) == ["Gold Attr.", "Gold Not Attr.", "Format errors"]
    assert t.loc["Gold Attr.", "Pred A"] == 0.5 and t.loc["Gold Attr.", "Pred NA"] == 0.5  # over parsed only
    assert t.loc["Gold Not Attr.", "Pred NA"] == 1.0
    assert t.loc["Format errors", "Pred A"] == pytest.approx(1 / 5)


def _response(label, error_type=None, steps=3):
    return json.dumps({
        "evidence_alignment": [{"claim_span": "capital is Paris", "source_span": "capital of France is Paris",
                                "status": "match"}],
        "reasoning_chain": [{"claim_part": "capital", "source_evidence": "capital of France is Paris",
                             "judgment": "supported", "explanation": "The source states it directly."}] * steps,
        "label": label, "confidence": 0.9, "error_type": error_type,
        "fix_suggestion": "Replace Lyon with Paris." if error_type else None})


def test_grading_structure_and_error_types():
    recs = [V.grade_response(_response("Attributable"), "Attributable", "a"),
            V.grade_response(_response("Not Attributable", "entity_substitution"), "Not Attributable", "b"),
            V.grade_response(_response("not supported", "fabrication"), "Attributable", "c"),
            V.grade_response("no json at all", "Attributable", "d")]
    assert [r.predicted for r in recs] == [A, NA, NA, None]
    assert recs[0].R_f == 1.0 and recs[0].R_a > 0.5 and recs[0].R_c > 0.5
    assert recs[3].R_f == 0.0 and recs[3].R_a == 0.0
    q = V.structural_quality(recs)
    assert q["parse_rate"] == 0.75 and q["format_compliance"] == 0.75
    dist = V.error_type_distribution(recs)
    assert dict(zip(dist.error_type, dist["count"])) == {"entity_substitution": 1, "fabrication": 1}
    s = V.summarize(recs)
    assert s["accuracy"] == 0.5 and s["format_error_rate"] == 0.25


def test_a_bare_label_is_a_format_error_per_appendix_j():
    """App. J: {"label": "Attributable", "confidence": 0.7} without the reasoning structure is
    "Counted as format error"; the lenient metrics read its label anyway, and are named apart."""
    bare = json.dumps({"label": "Attributable", "confidence": 0.7})
    recs = [V.grade_response(bare, "Attributable", "a"),
            V.grade_response(_response("Not Attributable", "fabrication"), "Not Attributable", "b"),
            V.grade_response(json.dumps({"label": "Not Attributable"}), "Attributable", "c"),
            V.grade_response("{not json", "Attributable", "d")]
    assert [r.predicted for r in recs] == [None, NA, None, None]
    assert [r.lenient_predicted for r in recs] == [A, NA, NA, None]
    assert recs[0].R_f == pytest.approx(0.2)
    s = V.summarize(recs)
    assert s["format_error_rate"] == 0.75 and s["accuracy"] == 0.25
    assert s["lenient_accuracy"] == 0.5 and s["lenient_macro_f1"] > s["macro_f1"]
    assert V.confusion_table([r.gold for r in recs], [r.predicted for r in recs]).loc["Format errors", "Pred A"] == 0.75


def test_evaluate_verifier_on_a_model(tiny_model_and_tokenizer):
    from factlab.data.pairs import ClaimPair

    model, tok = tiny_model_and_tokenizer
    pairs = [ClaimPair("p1", "The capital of France is Paris.", "France's capital is Paris.", "attributable"),
             ClaimPair("p2", "The capital of France is Lyon.", "France's capital is Paris.", "not_attributable")]
    recs, m = V.evaluate_verifier(model, tok, pairs, max_new_tokens=24, batch_size=2, progress=False)
    assert [r.id for r in recs] == ["p1", "p2"] and all(r.response for r in recs)
    assert m["n"] == 2 and 0 <= m["macro_f1"] <= 1 and 0 <= m["parse_rate"] <= 1
    # the numbers are the records' numbers, not placeholders
    assert m["accuracy"] == pytest.approx(sum(r.predicted == r.gold for r in recs) / 2)
    assert m["format_error_rate"] == pytest.approx(sum(r.predicted is None for r in recs) / 2)
    assert m["macro_f1"] == pytest.approx(V.classification_metrics([r.gold for r in recs],
                                                                   [r.predicted for r in recs])["macro_f1"])


def test_verdicts_stopped_by_the_token_limit_are_counted(monkeypatch):
    """A verdict cut off at max_new_tokens is marked and counted (``cut_off_rate``), so a table of
    format errors says when the limit, not the verifier, made them."""
    from factlab.data.pairs import ClaimPair
    from factlab.models import Generation

    verdict = '{"label": "Attributable"'  # unclosed: the limit stopped it
    monkeypatch.setattr(V, "generate", lambda model, tok, prompts, **kw: [
        [Generation(verdict, [1, 2], finished=False)], [Generation(verdict, [1, 2], finished=True)],
        [Generation(verdict, [1, 2], finished=False)]][:len(prompts)])

    class Tok:
        def apply_chat_template(self, messages, **kw):
            return str(messages)

    pairs = [ClaimPair(f"p{i}", "c", "s", "attributable") for i in range(3)]
    recs, m = V.evaluate_verifier(None, Tok(), pairs, max_new_tokens=2, progress=False)
    assert [r.cut_off for r in recs] == [True, False, True]
    assert m["cut_off_rate"] == pytest.approx(2 / 3) and m["format_error_rate"] == 1.0
