"""factlab.eval.longform: the metric formulas (hand-computed and property-tested) and the
claim pipeline's bookkeeping."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factlab.eval import longform as L


def test_hand_computed_values():
    assert L.precision(3, 1) == 0.75
    assert L.precision(0, 0) == 0.0
    assert L.recall_at_k(3, 10) == 0.3 and L.recall_at_k(12, 10) == 1.0
    p, r = 0.75, 0.3
    assert L.f1_at_k(3, 1, 10) == pytest.approx(2 * p * r / (p + r))
    assert L.f1_at_k(0, 5, 10) == 0.0
    # FActScore: 4 claims with 3 supported, gamma 10: 0.75 * exp(1 - 10/4)
    assert L.factscore([[True, True, True, False]]) == pytest.approx(0.75 * math.exp(-1.5))
    assert L.factscore([[True] * 10]) == 1.0
    assert L.factscore([[True] * 4], gamma=0) == 1.0
    assert L.factscore([[True, False], None, []]) == pytest.approx((0.5 * math.exp(1 - 5)) / 2)
    assert L.factscore([None, None]) == 0.0
    assert L.respond_ratio([[True], None]) == 0.5


@pytest.mark.parametrize("bad", [(-1, 0), (1.5, 0), (True, 1)])
def test_bad_counts_raise(bad):
    with pytest.raises(ValueError, match="non-negative integer"):
        L.precision(*bad)


def test_bad_k_raises():
    with pytest.raises(ValueError, match="k must be a positive integer"):
        L.recall_at_k(1, 0)


@given(st.integers(0, 200), st.integers(0, 200), st.integers(1, 200))
def test_metric_ranges_and_relations(S, N, k):
    p, r, f = L.precision(S, N), L.recall_at_k(S, k), L.f1_at_k(S, N, k)
    assert 0 <= p <= 1 and 0 <= r <= 1 and 0 <= f <= 1
    assert min(p, r) - 1e-12 <= f <= max(p, r) + 1e-12 or S == 0


@given(st.lists(st.lists(st.booleans(), max_size=25), min_size=1, max_size=8), st.integers(0, 30))
def test_factscore_bounded_by_mean_precision(labels, gamma):
    fs = L.factscore(labels, gamma)
    mean_p = sum(L.precision(sum(x), len(x) - sum(x)) for x in labels) / len(labels)
    assert 0 <= fs <= mean_p + 1e-12
    if gamma == 0:
        assert fs == pytest.approx(mean_p)


def test_aggregate():
    m = L.aggregate([[True, True, False], [], [True]], k=2)
    assert m["n_responses"] == 3
    assert m["precision"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert m["micro_precision"] == pytest.approx(3 / 4)
    assert m["recall@2"] == pytest.approx((1 + 0 + 0.5) / 3)
    assert m["S"] == 1.0 and m["n_claims"] == pytest.approx(4 / 3)
    with pytest.raises(ValueError):
        L.aggregate([])


class TableVerifier:
    """A claim verifier over a fixed table of claims (the pipeline's bookkeeping, not a model)."""

    def __init__(self, table):
        self.table = table

    def claim_labels(self, prompts, responses, prompt_ids=None):
        self.claims = [None if self.table[r] is None else [c for c, _ in self.table[r]] for r in responses]
        return [None if self.table[r] is None else [ok for _, ok in self.table[r]] for r in responses]


def test_longform_precision_pipeline():
    v = TableVerifier({"a": [("x", True), ("y", False)], "b": [], "c": None})
    out = L.longform_precision(v, ["p"] * 3, ["a", "b", "c"], k=2)
    assert [r["S"] for r in out["per_response"]] == [1, 0, None]
    assert out["per_response"][0]["claims"] == ["x", "y"]
    assert out["metrics"]["unreadable"] == 1 and out["metrics"]["n_responses"] == 3
    assert out["metrics"]["precision"] == pytest.approx(0.25)  # the unreadable response is left out of precision
    assert out["metrics"]["recall@2"] == pytest.approx((0.5 + 0 + 0) / 3)  # ... but scores 0 in recall (App. C.4.2)
    with pytest.raises(ValueError, match="prompts"):
        L.longform_precision(v, ["p"], ["a", "b"])
    allbad = L.longform_precision(v, ["p"], ["c"], k=2)["metrics"]
    assert (allbad["n_responses"], allbad["unreadable"], allbad["abstained"], allbad["recall@2"]) == (1, 1, 0, 0.0)
    assert allbad["precision"] != allbad["precision"]  # undefined (NaN), not a silent 0
    assert L.longform_precision(v, [], [])["metrics"]["n_responses"] == 0


def test_abstentions_are_left_out_and_the_respond_ratio_reported():
    """001 §4.1 / FActScore: abstaining is not a factual error; a model taught to abstain must not
    read as less precise. Abstentions are never sent to the verifier."""
    table = {"a": [("x", True), ("y", False)], "d": [("z", True)]}
    v = TableVerifier(table)
    responses = ["a", "I don't know much about Chad.", "d", "I'm sorry, but I cannot provide information about it."]
    out = L.longform_precision(v, ["p"] * 4, responses, k=2)
    m = out["metrics"]
    assert [r["abstained"] for r in out["per_response"]] == [False, True, False, True]
    assert m["abstained"] == 2 and m["respond_ratio"] == 0.5 and m["n_answered"] == 2 and m["n_responses"] == 4
    assert m["precision"] == pytest.approx((0.5 + 1.0) / 2)  # not (0.5 + 0 + 1 + 0) / 4
    assert m["factscore"] == pytest.approx(L.factscore([[True, False], [True]]))
    only = L.longform_precision(v, ["p"], ["I do not know."])
    assert only["metrics"]["respond_ratio"] == 0.0 and only["metrics"]["precision"] != only["metrics"]["precision"]


def test_aggregate_takes_none_for_abstained():
    m = L.aggregate([[True, False], None, [True, True]], k=2)
    assert (m["n_responses"], m["n_answered"], m["respond_ratio"]) == (3, 2, pytest.approx(2 / 3))
    assert m["precision"] == pytest.approx(0.75)
    assert m["recall@2"] == pytest.approx((0.5 + 0 + 1.0) / 3)  # every response counts; the abstention as S = 0
    assert L.factscore([[True], None]) == L.factscore([[True]])


def test_recall_and_f1_at_k_average_over_every_response_as_klcf_c42_does():
    """Issue 26: an abstention beside a response with 64 supported claims gives recall@64 = 0.5
    (App. C.4.2 averages over every response in the test set), not 1.0."""
    m = L.aggregate([None, [True] * 64], k=64)
    assert m["recall@64"] == pytest.approx(0.5) and m["f1@64"] == pytest.approx(0.5)
    assert m["respond_ratio"] == 0.5 and m["precision"] == 1.0  # precision still over the answered one
    nobody = L.aggregate([None, None], k=4)
    assert nobody["recall@4"] == 0.0 and nobody["f1@4"] == 0.0 and nobody["precision"] != nobody["precision"]
