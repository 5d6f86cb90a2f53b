"""Long-form factuality metrics: precision, Recall@K, F1@K, FActScore, and a claim pipeline.

Definitions:

* ``precision``, ``recall_at_k``, ``f1_at_k``: KLCF (``004_4f2ca2d982459bb2.txt`` §4.1
  "Evaluation and Metrics", Appendix C.4), following VeriScore / SAFE: with ``S`` supported
  and ``N`` not-supported claims of a response, Precision = S / (S + N),
  Recall@K = min(S / K, 1), F1@K = 2 P R / (P + R).
* ``factscore``: FActScore (Min et al., 2023), used by Binary RAR for long-form factual
  precision (``001_f9c1f8134c3dd554.txt`` §4.1 "Hallucination Evaluation", §6.3): per
  response, the fraction of its atomic claims that are supported, times the length penalty
  of the FActScore code, exp(1 - gamma / |A|) when |A| < gamma (else 1; gamma = 10), then
  the mean over responses. Abstained responses (``None``) are left out of the mean, as in
  FActScore (its "respond ratio"); a response with zero claims scores 0.
* ``longform_precision``: the VeriScore-style pipeline of 001 §4.2 run by a claim verifier
  (``factlab.rewards.rar.ClaimVerifier``: extract claims, retrieve the top 4 256-token
  chunks per claim, verify each), then the metrics above. Abstentions (``text.is_abstention``)
  are detected first, never verified, and left out of precision and FActScore; the respond
  ratio is reported beside them.

The metric functions are pure.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..text import is_abstention

DEFAULT_GAMMA = 10  # FActScore's default penalty threshold; 000 §A.1 (KnowRL baseline) uses gamma = 10


def _check_counts(**kw: int) -> None:
    for name, v in kw.items():
        if isinstance(v, bool) or int(v) != v or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")


def precision(S: int, N: int) -> float:
    """Factual precision S / (S + N) of one response (004 §4.1).

    ``S``: supported claims, ``N``: not-supported claims. A response with no claims
    (S + N = 0) has precision 0.0 (it states nothing verifiable). Raises ``ValueError`` for
    negative or non-integer counts.
    """
    _check_counts(S=S, N=N)
    return S / (S + N) if S + N else 0.0


def recall_at_k(S: int, k: int) -> float:
    """Recall@K = min(S / K, 1) (004 §4.1): enough supported facts, K of them, scores 1.

    Raises ``ValueError`` unless ``k >= 1``.
    """
    _check_counts(S=S)
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return min(S / k, 1.0)


def f1_at_k(S: int, N: int, k: int) -> float:
    """F1@K: harmonic mean of ``precision(S, N)`` and ``recall_at_k(S, k)`` (004 §4.1); 0 when S = 0."""
    p, r = precision(S, N), recall_at_k(S, k)
    return 2 * p * r / (p + r) if S > 0 else 0.0


def length_penalty(n_claims: int, gamma: int = DEFAULT_GAMMA) -> float:
    """FActScore's penalty exp(1 - gamma / n) for n < gamma claims, else 1 (gamma = 0: none).

    ``n_claims = 0`` gives 0.0 (the limit of the formula).
    """
    _check_counts(n_claims=n_claims, gamma=gamma)
    if not gamma or n_claims >= gamma:
        return 1.0
    if n_claims == 0:
        return 0.0
    return math.exp(1 - gamma / n_claims)


def factscore(labels_per_response: Sequence[Sequence[bool] | None], gamma: int = DEFAULT_GAMMA) -> float:
    """FActScore: mean over responses of (supported fraction x ``length_penalty``).

    ``labels_per_response``: one list of per-claim supported flags per response; ``None``
    marks an abstained response, excluded from the mean (FActScore reports it as the
    respond ratio). An empty list (a response with no claims) scores 0. ``gamma=0``
    disables the penalty (FActScore's ``init_score``). Returns 0.0 when no response
    counts.
    """
    scores = []
    for labels in labels_per_response:
        if labels is None:
            continue
        labels = list(labels)
        if not labels:
            scores.append(0.0)
            continue
        frac = sum(bool(x) for x in labels) / len(labels)
        scores.append(frac * length_penalty(len(labels), gamma))
    return sum(scores) / len(scores) if scores else 0.0


def respond_ratio(labels_per_response: Sequence[Sequence[bool] | None]) -> float:
    """Fraction of responses that were not abstentions (``None``); 0.0 for no responses."""
    n = len(labels_per_response)
    return sum(x is not None for x in labels_per_response) / n if n else 0.0


def aggregate(supported_per_response: Sequence[Sequence[bool] | None], k: int | None = None,
              gamma: int = DEFAULT_GAMMA, unscored: int = 0) -> dict[str, float]:
    """Corpus-level metrics from per-claim verdicts of each response (``None``: abstained).

    Precision-type means leave abstained responses out, as FActScore does, and report
    ``respond_ratio`` (answered / all) beside them, so teaching a model to abstain (Binary RAR)
    does not read as lower precision. Means over answered responses: ``precision`` (macro; an
    answered response without claims counts 0), ``S``, ``N``, ``n_claims``;
    ``micro_precision`` = sum S / sum (S + N); ``factscore`` with ``gamma``. With no answered
    response those are NaN (undefined), not 0.

    ``recall@k`` and ``f1@k`` (with ``k``) average over *every* response, as KLCF App. C.4.2
    defines them ("the average of each metric calculated for every individual response in the
    test set"): an abstention has S = 0 and scores 0, and so do the ``unscored`` responses
    (answered, but their claims could not be read; counted in ``n_responses``).
    """
    if unscored < 0:
        raise ValueError(f"unscored must be >= 0, got {unscored}")
    n = len(supported_per_response) + unscored
    if n == 0:
        raise ValueError("no responses to aggregate")
    answered = [list(v) for v in supported_per_response if v is not None]
    out: dict[str, float] = {"n_responses": n, "n_answered": len(answered) + unscored,
                             "respond_ratio": (len(answered) + unscored) / n}
    keys = ["precision", "micro_precision", "S", "N", "n_claims", "factscore"]
    S = [sum(bool(x) for x in v) for v in answered]
    N = [len(v) - s for v, s in zip(answered, S)]
    if k is not None:  # every response: abstained and unscored ones add 0 to the sum
        out[f"recall@{k}"] = sum(recall_at_k(s, k) for s in S) / n
        out[f"f1@{k}"] = sum(f1_at_k(s, q, k) for s, q in zip(S, N)) / n
    if not answered:
        return {**out, **{key: float("nan") for key in keys}}
    m = len(answered)
    out.update({
        "precision": sum(precision(s, q) for s, q in zip(S, N)) / m,
        "micro_precision": precision(sum(S), sum(N)),
        "S": sum(S) / m,
        "N": sum(N) / m,
        "n_claims": sum(s + q for s, q in zip(S, N)) / m,
        "factscore": factscore(answered, gamma),
    })
    return out


def longform_precision(verifier, prompts: Sequence[str], responses: Sequence[str], *,
                       prompt_ids: Sequence[str | None] | None = None, k: int | None = None,
                       gamma: int = DEFAULT_GAMMA) -> dict:
    """Claim-level factual precision of long-form responses (001 §4.1, §4.2 VeriScore).

    Responses that abstain (``text.is_abstention``) are not sent to the verifier: they count
    in ``respond_ratio`` and are left out of precision and FActScore. The others go through
    ``verifier.claim_labels(prompts, responses, prompt_ids)``, which extracts the atomic claims
    of each response, retrieves evidence per claim (the prompt's pre-cached chunks when
    ``prompt_ids`` is given) and verifies them, returning one supported flag per claim, or
    ``None`` for a response whose claims could not be read (``factlab.rewards.rar.
    ClaimVerifier``). Unreadable responses are left out too and counted in
    ``metrics["unreadable"]``.

    Returns ``{"per_response": [{"abstained", "claims", "supported", "S", "N", "precision"}],
    "metrics": aggregate(...) + {"unreadable", "abstained"}}``.
    """
    prompts, responses = list(prompts), list(responses)
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts for {len(responses)} responses")
    if prompt_ids is not None and len(prompt_ids) != len(responses):
        raise ValueError(f"{len(prompt_ids)} prompt ids for {len(responses)} responses")
    abstained = [is_abstention(r) for r in responses]
    todo = [i for i, a in enumerate(abstained) if not a]
    labels: list[list[bool] | None] = [None] * len(responses)
    claims: list[list[str] | None] = [None] * len(responses)
    if todo:
        got = verifier.claim_labels([prompts[i] for i in todo], [responses[i] for i in todo],
                                    [prompt_ids[i] for i in todo] if prompt_ids is not None else None)
        extracted = getattr(verifier, "claims", [None] * len(todo))
        for i, lab, cs in zip(todo, got, extracted):
            labels[i], claims[i] = lab, cs
    per = []
    for a, cs, sup in zip(abstained, claims, labels):
        s = sum(sup) if sup is not None else None
        per.append({"abstained": a, "claims": cs, "supported": sup, "S": s,
                    "N": None if sup is None else len(sup) - s,
                    "precision": None if sup is None else precision(s, len(sup) - s)})
    unreadable = [i for i in todo if labels[i] is None]
    counted = [None if abstained[i] else labels[i] for i in range(len(responses)) if i not in set(unreadable)]
    metrics = (aggregate(counted, k=k, gamma=gamma, unscored=len(unreadable)) if responses
               else {"n_responses": 0})
    metrics.update(unreadable=len(unreadable), abstained=sum(abstained))
    return {"per_response": per, "metrics": metrics}
