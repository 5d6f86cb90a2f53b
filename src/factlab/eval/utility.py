"""Utility (general-capability) evaluation for the hallucination-utility trade-off.

001_f9c1f8134c3dd554.txt §4.1 and Appendix B evaluate utility on AlpacaEval, IFEval,
GSM8K, Minerva, HumanEval and MBPP, and §4.3 early-stops training on a >10% drop.
``lm_eval_utility`` runs lm-evaluation-harness tasks on an in-memory HF model when the
``lm_eval`` package is installed (``pip install lm-eval``); ``forced_qa_utility`` is the
offline stand-in used by the smoke notebooks: forced-answer short-form accuracy.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from .abstention import evaluate_abstention


class UtilityUnavailable(ImportError):
    pass


def lm_eval_utility(tasks: Sequence[str], tokenizer, *, limit: int | None = None, batch_size: int = 8,
                    metric_preference: Sequence[str] = ("exact_match", "acc_norm", "acc", "prompt_level_strict_acc",
                                                        "pass@1")) -> Callable[[object], Mapping[str, float]]:
    """A ``utility_fn(model)`` that scores ``tasks`` with lm-evaluation-harness (one number
    per task: the first metric of ``metric_preference`` it reports)."""
    try:
        import lm_eval
        from lm_eval.models.huggingface import HFLM
    except ImportError as e:  # pragma: no cover - exercised only where lm_eval is installed
        raise UtilityUnavailable("lm-evaluation-harness is not installed: `pip install lm-eval` to score utility "
                                 f"tasks {list(tasks)}, or use factlab.eval.utility.forced_qa_utility") from e

    def utility(model) -> dict[str, float]:  # pragma: no cover
        lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
        res = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), limit=limit)["results"]
        out = {}
        for task, metrics in res.items():
            for pref in metric_preference:
                key = next((k for k in metrics if k.split(",")[0] == pref), None)
                if key is not None:
                    out[task] = float(metrics[key])
                    break
        return out

    return utility


def forced_qa_utility(tokenizer, items, *, max_new_tokens: int = 32, batch_size: int = 16,
                      name: str = "forced_qa") -> Callable[[object], Mapping[str, float]]:
    """A ``utility_fn(model)``: greedy forced-answer accuracy on ``items`` (no abstention)."""
    def utility(model) -> dict[str, float]:
        _, summary = evaluate_abstention(model, tokenizer, items, mode="forced", max_new_tokens=max_new_tokens,
                                         batch_size=batch_size, progress=False)
        return {name: summary["accuracy"]}

    return utility
