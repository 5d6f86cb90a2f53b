"""Reward cost (000_ac66a963fabf3916.txt §5.3, §C.4).

Three measurements: per-sentence latency of the co-occurrence reward split into
extraction (the triplet extractor's forward pass) and lookup (the index query); the
reward-call budget of Eq. (5), N_steps * B * G * m_sent, from a run's logged sentence
counts; and the reward's share of training step time from the trainer's timing logs.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence


def reward_call_budget(n_steps: int, prompts_per_step: int, num_generations: int,
                       sentences_per_completion: float) -> float:
    """Eq. (5): sentence-level reward calls in one training run (100*24*16*3 ~ 1.2e5)."""
    return float(n_steps * prompts_per_step * num_generations * sentences_per_completion)


def time_sentence_rewards(sentences: Sequence[str], extractor, score: Callable[[Any], Any],
                          batch_size: int = 32):
    """Per-sentence latency of the sentence reward, split into extraction and lookup.

    ``extractor.extract(list[str])`` runs in batches (as in training); each sentence is
    charged its batch's time divided by the batch size. ``score(triplets)`` is the lookup
    (for CorVer, ``corver.sentence_count`` bound to an index) and is timed per sentence.
    Returns a DataFrame: sentence, n_triplets, extract_ms, lookup_ms, total_ms.
    """
    import pandas as pd

    rows = []
    for b in range(0, len(sentences), batch_size):
        batch = list(sentences[b:b + batch_size])
        t0 = time.perf_counter()
        triplets = extractor.extract(batch)
        per_sentence = (time.perf_counter() - t0) / len(batch)
        for sent, trips in zip(batch, triplets):
            t1 = time.perf_counter()
            score(trips)
            lookup = time.perf_counter() - t1
            rows.append({"sentence": sent, "n_triplets": len(trips or []),
                         "extract_ms": 1e3 * per_sentence, "lookup_ms": 1e3 * lookup,
                         "total_ms": 1e3 * (per_sentence + lookup)})
    return pd.DataFrame(rows)


def latency_summary(per_sentence) -> dict[str, float]:
    """Mean and p50/p95 per-sentence latency (ms) and the extraction share."""
    if len(per_sentence) == 0:
        return {"n_sentences": 0}
    total = per_sentence["total_ms"]
    return {"n_sentences": int(len(per_sentence)),
            "extract_ms_mean": float(per_sentence["extract_ms"].mean()),
            "lookup_ms_mean": float(per_sentence["lookup_ms"].mean()),
            "total_ms_mean": float(total.mean()),
            "total_ms_p50": float(total.quantile(0.5)),
            "total_ms_p95": float(total.quantile(0.95)),
            "extract_share": float(per_sentence["extract_ms"].sum() / max(total.sum(), 1e-12))}


def training_cost(log_history: Sequence[Mapping[str, Any]], completions_per_step: int) -> dict[str, float]:
    """Reward cost of a finished run from ``trainer.state.log_history``.

    Uses the stepwise trainer's ``timing/*`` logs (seconds per generation batch),
    ``stepwise/n_sentences`` (mean sentences per completion) and TRL's ``step_time``.
    ``reward_share`` = (reward functions + token shaping seconds) / step seconds.
    """
    steps = [h for h in log_history if "loss" in h]
    if not steps:
        return {"steps": 0}
    step_s = sum(h.get("step_time", 0.0) for h in steps)
    reward_s = sum(h.get("timing/reward_funcs_s", 0.0) for h in steps)
    shaping_s = sum(h.get("timing/token_shaping_s", 0.0) for h in steps)
    sents = [h["stepwise/n_sentences"] for h in steps if "stepwise/n_sentences" in h]
    m_sent = sum(sents) / len(sents) if sents else 0.0
    calls = m_sent * completions_per_step
    return {"steps": len(steps), "step_s_mean": step_s / len(steps),
            "reward_funcs_s_per_step": reward_s / len(steps),
            "token_shaping_s_per_step": shaping_s / len(steps),
            "reward_share": (reward_s + shaping_s) / step_s if step_s else float("nan"),
            "sentences_per_completion": m_sent, "reward_calls_per_step": calls,
            "ms_per_reward_call": 1e3 * shaping_s / len(steps) / calls if calls else float("nan")}
