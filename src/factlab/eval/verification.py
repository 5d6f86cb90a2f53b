"""Evaluation of structured fact-attribution verifiers (SEVA, 002_56f1a732f42030d3.txt).

§3.1: macro F1 and accuracy per benchmark, plus structural quality (mean R_a alignment
score, mean R_c reasoning score, format compliance); Table 15: confusion matrix with a
format-error row; Table 17: the distribution of predicted error types among "Not
Attributable" predictions; Appendix B "Evaluation": greedy decoding.

Format errors follow Appendix J: a response is a *format error* when its JSON cannot be read,
when it lacks any of the §B.1 required fields (evidence_alignment, reasoning_chain, label,
confidence; App. J's bare ``{"label": ..., "confidence": ...}`` "Counted as format error"), or
when its label is no Table 13 alias. Its predicted label is None: wrong for ``accuracy`` and a
miss for both classes' F1 (macro F1 cannot be raised by emitting garbage), and reported in the
confusion table's format-error row as a share of all samples, as in Table 15, whose gold rows
are normalised over the parsed predictions of that gold class. ``format_error_rate`` is the
number to hold against the paper's 28% (SFT) / <1% (GRPO). ``lenient_accuracy`` /
``lenient_macro_f1`` read the label of any parseable JSON, bare ones included: what the
verifier said, whatever the structure; never compare them with the paper's numbers.

``probability_metrics``: a verifier that scores p(True) instead of writing a label (KLCF's
truthfulness reward model, 004 Table 13), read at a threshold and by its ROC AUC.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

from ..models import generate
from ..rewards import seva, seva_output

CLASSES = ("attributable", "not_attributable")


@dataclass
class VerificationRecord:
    """One verified pair: gold and predicted labels, structure scores, the raw response."""

    id: str
    gold: str
    predicted: str | None  # None = format error (Appendix J)
    R_f: float
    R_a: float
    R_c: float
    error_type: str | None
    response: str
    lenient_predicted: str | None = None  # the label of any parseable JSON, structure or not
    cut_off: bool = False  # the generation reached max_new_tokens before a stop token

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def grade_response(response: str, gold_label: str, id: str = "") -> VerificationRecord:
    """Parse one verifier response and score its structure (``seva.process_reward_parts``)."""
    parts = seva.process_reward_parts(response, gold_label)
    obj, _ = seva_output.parse_verifier_output(response)
    lenient = seva.normalize_label(obj.get("label")) if obj else None
    complete = obj is not None and all(k in obj for k in seva_output.REQUIRED_FIELDS)
    predicted = lenient if complete else None
    error_type = seva.normalize_error_type(obj.get("error_type")) if obj and lenient == "not_attributable" else None
    return VerificationRecord(id=id, gold=seva.normalize_label(gold_label) or gold_label, predicted=predicted,
                              R_f=parts["R_f"], R_a=parts["R_a"], R_c=parts["R_c"], error_type=error_type,
                              response=response, lenient_predicted=lenient)


def classification_metrics(golds: Sequence[str], preds: Sequence[str | None]) -> dict[str, float]:
    """Accuracy, macro F1 over the two classes, per-class precision / recall / F1, and the
    format-error rate. Format errors (None) are wrong and count against recall."""
    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold labels for {len(preds)} predictions")
    if not golds:
        raise ValueError("no predictions to score")
    out: dict[str, float] = {"n": len(golds)}
    f1s = []
    for c in CLASSES:
        tp = sum(g == c and p == c for g, p in zip(golds, preds))
        fp = sum(g != c and p == c for g, p in zip(golds, preds))
        fn = sum(g == c and p != c for g, p in zip(golds, preds))
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        out.update({f"{c}/precision": prec, f"{c}/recall": rec, f"{c}/f1": f1})
        f1s.append(f1)
    out["accuracy"] = sum(g == p for g, p in zip(golds, preds)) / len(golds)
    out["macro_f1"] = sum(f1s) / len(f1s)
    out["format_error_rate"] = sum(p is None for p in preds) / len(preds)
    out["predicted_not_attributable"] = sum(p == "not_attributable" for p in preds) / len(preds)
    return out


def confusion_table(golds: Sequence[str], preds: Sequence[str | None]):
    """Table 15 layout: rows Gold Attr. / Gold Not Attr. as shares of that row's parsed
    predictions (Pred A, Pred NA), and a Format errors row (share of all samples)."""
    import pandas as pd

    rows = {}
    for c, name in zip(CLASSES, ("Gold Attr.", "Gold Not Attr.")):
        parsed = [p for g, p in zip(golds, preds) if g == c and p is not None]
        n = len(parsed)
        rows[name] = {"Pred A": parsed.count("attributable") / n if n else float("nan"),
                      "Pred NA": parsed.count("not_attributable") / n if n else float("nan"),
                      "n": n}
    rows["Format errors"] = {"Pred A": sum(p is None for p in preds) / len(preds) if preds else float("nan"),
                             "Pred NA": float("nan"), "n": sum(p is None for p in preds)}
    return pd.DataFrame(rows).T


def structural_quality(records: Sequence[VerificationRecord]) -> dict[str, float]:
    """§3.1 structural quality: mean R_a, mean R_c, format compliance (share with R_f = 1),
    and the parse rate (share whose JSON was read at all); ``cut_off_rate``: the share of
    verdicts stopped by the token limit, which explains format errors a longer limit would not make."""
    n = len(records)
    if not n:
        raise ValueError("no records")
    return {"mean_R_a": sum(r.R_a for r in records) / n, "mean_R_c": sum(r.R_c for r in records) / n,
            "format_compliance": sum(r.R_f == 1.0 for r in records) / n,
            "parse_rate": sum(r.R_f > 0 for r in records) / n,
            "cut_off_rate": sum(r.cut_off for r in records) / n}


def error_type_distribution(records: Sequence[VerificationRecord]):
    """Table 17: predicted error types among "Not Attributable" predictions (count, share);
    predictions without a taxonomy error type are counted as ``(none)``."""
    import pandas as pd

    na = [r for r in records if r.predicted == "not_attributable"]
    counts = Counter(r.error_type or "(none)" for r in na)
    rows = [{"error_type": k, "count": v, "share": v / len(na)} for k, v in counts.most_common()]
    return pd.DataFrame(rows, columns=["error_type", "count", "share"])


def summarize(records: Sequence[VerificationRecord]) -> dict[str, float]:
    """``classification_metrics`` plus ``structural_quality`` for one benchmark."""
    golds = [r.gold for r in records]
    lenient = classification_metrics(golds, [r.lenient_predicted for r in records])
    return {**classification_metrics(golds, [r.predicted for r in records]),
            "lenient_accuracy": lenient["accuracy"], "lenient_macro_f1": lenient["macro_f1"],
            **structural_quality(records)}


def evaluate_verifier(model, tokenizer, pairs: Sequence[Any], *, max_new_tokens: int = 1024, batch_size: int = 8,
                      temperature: float = 0.0, seed: int = 0, progress: bool = True, desc: str = "verify"
                      ) -> tuple[list[VerificationRecord], dict[str, float]]:
    """Generate a structured verdict for each claim/source pair with the K.1-K.2 prompts
    (greedy by default, Appendix B) and grade it. ``pairs`` need ``id``, ``claim``,
    ``source`` and ``label`` attributes (``factlab.data.pairs.ClaimPair``)."""
    pairs = list(pairs)
    if not pairs:
        raise ValueError("no pairs to verify")
    prompts = [tokenizer.apply_chat_template(seva_output.verifier_messages(p.claim, p.source), tokenize=False,
                                             add_generation_prompt=True) for p in pairs]
    gens = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                    batch_size=batch_size, seed=seed, progress=progress, desc=desc)
    records = [replace(grade_response(g[0].text, p.label, id=p.id), cut_off=not g[0].finished)
               for p, g in zip(pairs, gens)]
    return records, summarize(records)


def probability_metrics(probs: Sequence[float], labels: Sequence[bool], threshold: float = 0.5) -> dict[str, float]:
    """A truthfulness reward model read through its p(True) (KLCF 004 Table 13,
    ``recipes.klcf.readout_rm``): accuracy and F1 (positive class True) of ``p(True) >
    threshold``, the mean p(True) of true and of false claims, and the ROC AUC (the share of
    (true, false) claim pairs in which the true one scores higher, ties half; threshold-free,
    ours: a reward model is read through its p(True), not its threshold)."""
    if len(probs) != len(labels) or not probs:
        raise ValueError(f"{len(probs)} probabilities for {len(labels)} labels")
    pred = [p > threshold for p in probs]
    tp = sum(p and y for p, y in zip(pred, labels))
    fp = sum(p and not y for p, y in zip(pred, labels))
    fn = sum((not p) and y for p, y in zip(pred, labels))
    acc = sum(p == bool(y) for p, y in zip(pred, labels)) / len(labels)
    f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    true_p = [p for p, y in zip(probs, labels) if y]
    false_p = [p for p, y in zip(probs, labels) if not y]
    pairs = [(t > f) + 0.5 * (t == f) for t in true_p for f in false_p]
    return {"n": len(labels), "accuracy": acc, "f1": f1, "predicted_true": sum(pred) / len(pred),
            "mean_p_true|true": sum(true_p) / len(true_p) if true_p else math.nan,
            "mean_p_true|false": sum(false_p) / len(false_p) if false_p else math.nan,
            "auc": sum(pairs) / len(pairs) if pairs else math.nan}
