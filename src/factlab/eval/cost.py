"""Reward cost (000_ac66a963fabf3916.txt §5.3, §C.4).

Three measurements: per-sentence latency of the co-occurrence reward split into
extraction (the triplet extractor's forward pass) and lookup (the index query); the
reward-call budget of Eq. (5), N_steps * B * G * m_sent, from a run's logged sentence
counts; and the reward's share of training step time from the trainer's timing logs.

Judge-based rewards (001_f9c1f8134c3dd554.txt §3.2 "Practical efficiency", §4.2):
``compare_rewards`` runs several reward functions on the same responses and measures each
one's cost per response (wall time, judge calls, prompt / completion tokens);
``reward_discrimination`` summarizes how well each separates faithful from perturbed
responses (Figure 4's question, asked with labelled responses).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from .. import text
from ..rewards.base import cost_of, judges_of, models_of


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


PAPER_SCALE = (100, 24, 16)  # 000 §5.3 Eq. (5): 100 steps x 24 prompts x G = 16


def corver_cost_report(completions: Sequence[str], scorer, log_histories: Mapping[str, Sequence[Mapping]],
                       completions_per_step: int, batch_size: int = 32, max_sentences: int = 256) -> dict[str, Any]:
    """CorVer's cost section (000 §5.3, §C.4) in one call.

    ``scorer``: a fresh ``CorVerScorer`` (empty caches, so every lookup is timed);
    ``log_histories``: ``{run: trainer log history}``. Returns ``latency`` (per-sentence
    summary) and ``latency_table``, ``training`` (``training_cost`` per run),
    ``full_over_A1`` (mean step-time ratio when both ran; Table 20: 2.0x on Llama-3.1-8B),
    ``sentences_per_completion`` and ``eq5_budget`` (Eq. 5 at the paper's scale with the
    sentence count measured here)."""
    sentences = [c[a:b] for c in completions for a, b in text.split_sentences(c)][:max_sentences]
    table = time_sentence_rewards(sentences, scorer.extractor, scorer.score, batch_size=batch_size)
    summary = latency_summary(table)
    train = {run: training_cost(h, completions_per_step) for run, h in log_histories.items()}
    ratio = None
    if train.get("full", {}).get("step_s_mean") and train.get("A1", {}).get("step_s_mean"):
        ratio = train["full"]["step_s_mean"] / train["A1"]["step_s_mean"]
    m_sent = (train.get("full", {}).get("sentences_per_completion")
              or summary.get("n_sentences", 0) / max(len(completions), 1))
    return {"latency": summary, "latency_table": table, "training": train, "full_over_A1": ratio,
            "sentences_per_completion": m_sent, "eq5_budget": reward_call_budget(*PAPER_SCALE, m_sent)}


def warm_up(rewards) -> int:
    """Load every in-process model the reward functions expose (``Reward.judges()`` that load
    locally, ``Reward.models()``: KLCF's truthfulness RM, a general RM) before anything is
    timed; returns how many were loaded. Costs compare deployed models (004 App. D.3: served by
    vLLM), so a lazy first load must not land on whichever reward happens to be measured first
    (a judge is often shared). A judge served over HTTP has no ``load``: nothing to load."""
    parts: dict[int, Any] = {}
    for fn in rewards:
        for part in judges_of(fn) + models_of(fn):
            if callable(getattr(part, "load", None)):
                parts.setdefault(id(part), part)
    for part in parts.values():
        part.load()
    return len(parts)


def compare_rewards(rewards: Mapping[str, Callable], responses: Sequence[Mapping[str, Any]]
                    ) -> tuple[dict[str, list[float | None]], dict[str, dict[str, float]]]:
    """Score ``responses`` (dicts with ``prompt``, ``response``, optional ``prompt_id`` and
    ``reference``, ``question``, ``checklist``) with every TRL reward function in ``rewards``,
    one batched call each.

    Returns ``(scores, costs)``: ``scores[name]`` one value per response (None = could not
    be computed); ``costs[name]`` per response: ``seconds``, ``judge_calls``, ``searches``
    (datastore queries, 004 Table 14's "# Searches"), ``prompt_tokens``,
    ``completion_tokens``, and the ``unreadable`` fraction. Judges and datastores are read
    through the reward protocol (``rewards.base.cost_of``: ``Reward.judges()`` /
    ``datastores()``; a plain function exposes none); run with uncached judges for honest
    costs. Every in-process model is loaded before the first reward is timed
    (``warm_up``).
    """
    n = len(responses)
    if n == 0:
        raise ValueError("no responses to score")
    cols: dict[str, Any] = {"prompts": [r["prompt"] for r in responses],
                            "completions": [r["response"] for r in responses]}
    if all(r.get("prompt_id") is not None for r in responses):
        cols["prompt_id"] = [r["prompt_id"] for r in responses]
    for key in ("reference", "question", "checklist"):
        if all(r.get(key) for r in responses):
            cols[key] = [r[key] for r in responses]
    scores, costs = {}, {}
    warm_up(rewards.values())
    for name, fn in rewards.items():
        before = cost_of(fn)
        t0 = time.perf_counter()
        scores[name] = list(fn(**cols))
        seconds = time.perf_counter() - t0
        after = cost_of(fn)
        delta = {k: after[k] - before[k] for k in ("calls", "searches", "prompt_tokens", "completion_tokens")}
        costs[name] = {"seconds": seconds / n, "judge_calls": delta["calls"] / n,
                       "searches": delta["searches"] / n,
                       "prompt_tokens": delta["prompt_tokens"] / n,
                       "completion_tokens": delta["completion_tokens"] / n,
                       "unreadable": sum(s is None for s in scores[name]) / n}
    return scores, costs


def reward_discrimination(table, names: Sequence[str], label: str = "label", group: str = "prompt_id"):
    """Per reward: mean score on faithful (label 1) and perturbed (label 0) responses, their
    gap, and the pairwise accuracy (fraction of ``group``s whose faithful response scores
    above its perturbed one; ties count half; pairs with a None are skipped)."""
    import pandas as pd

    rows = {}
    lab = table[table[label].notna()]
    for name in names:
        good = lab[lab[label] == 1].groupby(group)[name].mean()
        bad = lab[lab[label] == 0].groupby(group)[name].mean()
        pairs = pd.concat([good.rename("good"), bad.rename("bad")], axis=1).dropna()
        wins = ((pairs["good"] > pairs["bad"]) + 0.5 * (pairs["good"] == pairs["bad"])).sum()
        rows[name] = {"faithful_mean": lab.loc[lab[label] == 1, name].mean(),
                      "perturbed_mean": lab.loc[lab[label] == 0, name].mean(),
                      "gap": lab.loc[lab[label] == 1, name].mean() - lab.loc[lab[label] == 0, name].mean(),
                      "pairwise_acc": wins / len(pairs) if len(pairs) else float("nan"),
                      "pairs": len(pairs)}
    return pd.DataFrame(rows).T
