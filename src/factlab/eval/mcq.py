"""Multiple-choice evaluation as K2V reports it (003_5e9813e66e6ba19a.txt §4.1, Appendix A):
zero-shot, temperature 0.6, every benchmark run k = 4 times, the mean accuracy (avg@k),
through lm-evaluation-harness.

Full params name lm-eval tasks. Two kinds behave differently, and the report says which is
which (``run_avg_at_k``):

- **generative** tasks (``output_type: generate_until``: the mini-world task below, MMLU's
  ``mmlu_<subject>_generative`` variants) sample an answer at the temperature; they run k
  times with different seeds and report ``exact_match`` averaged: avg@k, as the paper's
  OpenCompass runs do.
- **log-likelihood** tasks (``multiple_choice``: ``cmmlu_*``, the default ``mmlu_*``,
  ``medqa_4options``) score each option's likelihood; no token is sampled, so k runs at
  T = 0.6 would give k identical numbers. They run once and report ``acc`` (and
  ``acc_norm``); avg@k is not applicable (``None``), and the numbers are not the paper's
  sampled accuracy. The installed lm-eval ships no generative CMMLU or MedQA.

General capability (003 §4.1 "Evaluation", Tables 2-5: BBH, MATH-500, GSM8K, AIME2024,
GPQA-Diamond, "zero-shot ... temperature of 0.6 ... four times and the average accuracy"):
``GeneralSection`` names lm-eval tasks run the same way; ``GENERAL_TASKS`` are
the installed lm-eval's names for the five, all generative (sampled, avg@k), and ``unknown_tasks``
checks names against lm-eval's task registry.

Notebooks run both through the ``avg_at_k`` evaluation suite (``eval.suites``:
``evaluate("avg_at_k", model, tokenizer, tasks, generation, settings=cfg.mcq)``, or
``settings=cfg.general``), which calls ``avg_at_k`` below with the section's settings.

SeedBench and LawBench are not in lm-eval: write them as local task YAMLs (``write_task``
turns rows of ``question``, ``A``-``D``, ``answer`` into one) in a folder named by
``mcq.include_path``. Offline and on the CPU default, ``miniworld_mcq`` writes four-option
questions from the mini-world's held-out facts (the right answer plus three values of the
same relation from other countries, in a seeded order) and ``write_task`` registers them as
a local lm-eval task, so the same harness path runs with nothing downloaded.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml
from pydantic import Field

from ..config import Section
from ..data.types import QAItem, read_jsonl, write_jsonl

__all__ = ["MCQSection", "GeneralSection", "GENERAL_TASKS", "miniworld_mcq", "write_task", "task_manager", "avg_at_k", "run_avg_at_k",
           "task_score", "unknown_tasks", "LETTERS", "GENERATIVE"]

LETTERS = ("A", "B", "C", "D")
GENERATIVE = ("generate_until",)  # lm-eval output types that sample; the others score log-likelihoods
_RELATIONS = ("capital", "region", "subregion", "currency", "language")


class MCQSection(Section):
    """MCQ evaluation (003 §4.1): lm-eval ``tasks`` by name, or the mini-world's when empty."""

    tasks: list[str] = []  # e.g. [mmlu_college_medicine_generative, cmmlu_agronomy]; [] = the local mini-world task
    include_path: str | None = None  # a folder of local lm-eval task YAMLs (SeedBench, LawBench: not in lm-eval)
    questions: int = Field(40, ge=4)  # mini-world questions
    k: int = Field(4, ge=1)  # avg@k
    temperature: float = Field(0.6, ge=0.0)
    limit: int | None = Field(None, ge=1)  # per task, for quick runs
    batch_size: int = Field(16, ge=1)
    seed: int = 0


# 003 Tables 2-5's general benchmarks as lm-eval (0.4.x) task names: zero-shot chain-of-thought
# variants, each ``generate_until`` (sampled, so avg@k means what the paper's does). BBH: the
# 27-task group, aggregated (exact match, flexible extraction); MATH-500: HuggingFaceH4/MATH-500
# (Lightman et al.'s subset); GSM8K: "Let's think step by step", zero-shot; AIME2024:
# Maxwell-Jia/AIME_2024 (30 problems); GPQA-Diamond: Idavidrein/gpqa (a gated dataset: accept its
# terms on the hub and log in first).
GENERAL_TASKS = ("bbh_cot_zeroshot", "minerva_math500", "gsm8k_cot_zeroshot", "aime24", "gpqa_diamond_cot_zeroshot")


class GeneralSection(Section):
    """General-capability evaluation (003 §4.1, Tables 2-5): lm-eval ``tasks`` (none: skipped;
    the full params: ``GENERAL_TASKS``), zero-shot, sampled at ``temperature``, each run ``k``
    times, avg@k; ``max_gen_toks``: the answer budget (None: each task's own; a chain of thought
    needs more than lm-eval's default 256)."""

    tasks: list[str] = []
    include_path: str | None = None
    k: int = Field(4, ge=1)
    temperature: float = Field(0.6, ge=0.0)
    max_gen_toks: int | None = Field(None, ge=1)
    limit: int | None = Field(None, ge=1)
    batch_size: int = Field(16, ge=1)
    seed: int = 0


@functools.lru_cache(maxsize=1)
def _installed_task_manager():
    from lm_eval.tasks import TaskManager

    return TaskManager()


def task_manager(include_path: str | Path | None = None):
    """lm-eval's ``TaskManager``. The installed registry's is indexed once per process (the index
    reads every task YAML lm-eval ships: about 10 s on 2 cores); one with ``include_path`` is
    built each call, since that folder's tasks may have been rewritten in between."""
    if not include_path:
        return _installed_task_manager()
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(include_path))


def unknown_tasks(tasks: Sequence[str], include_path: str | Path | None = None) -> list[str]:
    """The names in ``tasks`` that the installed lm-eval's task registry (plus ``include_path``)
    does not know (``task_manager(include_path).all_tasks``: tasks, groups and tags)."""
    known = set(task_manager(include_path).all_tasks)
    return [t for t in tasks if t not in known]


def miniworld_mcq(world: Mapping[str, Path], n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` four-option questions from the held-out QA items of the relations that have
    enough distinct values (capital, region, subregion, currency, language)."""
    items = [QAItem.from_dict(d) for d in read_jsonl(world["qa_heldout"])]
    pool: dict[str, list[str]] = {}
    for d in read_jsonl(world["qa_train"]):
        rel = d["meta"]["relation"]
        if rel in _RELATIONS:
            pool.setdefault(rel, []).append(d["golds"][0])
    rng = random.Random(seed)
    usable = [it for it in items if it.meta.get("relation") in _RELATIONS]
    rng.shuffle(usable)
    rows = []
    for it in usable:
        golds = {g.lower() for g in it.golds}
        others = sorted({v for v in pool.get(it.meta["relation"], []) if v.lower() not in golds})
        if len(others) < 3:
            continue
        options = rng.sample(others, 3) + [it.golds[0]]
        rng.shuffle(options)
        rows.append({"id": it.id, "question": it.question, **dict(zip(LETTERS, options)),
                     "answer": LETTERS[options.index(it.golds[0])]})
        if len(rows) == n:
            break
    return rows


def write_task(rows: Sequence[Mapping[str, Any]], out_dir: str | Path, name: str = "factlab_miniworld_mcq",
               temperature: float = 0.6) -> str:
    """Register ``rows`` as an lm-eval task in ``out_dir`` (JSONL + YAML); returns its name.
    Generation until the end of the line, sampled at ``temperature``; the first option letter
    of the answer is compared with the gold letter."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{name}.jsonl"
    write_jsonl(data, rows)
    cfg = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data.resolve())}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{question}}\nA. {{A}}\nB. {{B}}\nC. {{C}}\nD. {{D}}\n"
                       "Answer with the letter of the correct option.\nAnswer:",
        "doc_to_target": "{{answer}}",
        "generation_kwargs": {"until": ["\n\n"], "do_sample": temperature > 0, "temperature": temperature,
                              "max_gen_toks": 16},
        "filter_list": [{"name": "letter", "filter": [
            {"function": "regex", "regex_pattern": r"\b([ABCD])\b"}, {"function": "take_first"}]}],
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    }
    (out / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return name


def task_score(metrics: Mapping[str, Any], output_type: str) -> tuple[str, float]:
    """The accuracy lm-eval reports for one task (its ``results[task]`` dict): the first
    ``exact_match`` (any filter) of a generative task, ``acc`` of a log-likelihood one; returns
    ``(metric key, value)``. A task without that metric is a ``KeyError`` naming what it has."""
    want = "exact_match" if output_type in GENERATIVE else "acc"
    for key, value in metrics.items():
        if key.split(",")[0] == want and isinstance(value, (int, float)):
            return key, float(value)
    raise KeyError(f"lm-eval reported no {want!r} for a {output_type} task; it has "
                   f"{sorted(k for k in metrics if k != 'alias')}")


def _output_type(results: Mapping[str, Any], task: str) -> str:
    """The task's lm-eval ``output_type``; a group (no config of its own) by the metrics it reports."""
    cfg = results.get("configs", {}).get(task)
    if cfg and cfg.get("output_type"):
        return str(cfg["output_type"])
    if task not in results.get("results", {}):
        raise KeyError(f"lm-eval returned no results for task {task!r}")
    names = {key.split(",")[0] for key in results["results"][task]}
    return "generate_until" if "exact_match" in names else "multiple_choice"


def run_avg_at_k(evaluate: Callable[[list[str], int], Mapping[str, Any]], tasks: Sequence[str], k: int = 4,
                 seed: int = 0) -> dict[str, dict[str, Any]]:
    """avg@k (§4.1) over ``evaluate(tasks, seed) -> lm-eval results``: every task runs with seed
    ``seed``; the generative ones run again with seeds ``seed + 1 .. seed + k - 1``. Returns per
    task ``{"kind", "metric", "score", "avg@k", "runs", "n"}``: for a generative task
    ``score`` = ``avg@k`` = the mean ``exact_match`` of its k runs; for a log-likelihood task
    ``score`` = ``acc`` of its one run (plus ``acc_norm``), ``avg@k`` None (not applicable:
    nothing is sampled) and a ``note`` saying so."""
    tasks = list(tasks)
    first = evaluate(tasks, seed)
    kinds = {t: _output_type(first, t) for t in tasks}
    runs: list[Mapping[str, Any]] = [first]
    generative = [t for t in tasks if kinds[t] in GENERATIVE]
    for i in range(1, k if generative else 1):
        runs.append(evaluate(generative, seed + i))
    out: dict[str, dict[str, Any]] = {}
    for t in tasks:
        scores, key = [], ""
        for i, res in enumerate(runs if kinds[t] in GENERATIVE else runs[:1]):
            if t not in res.get("results", {}):
                raise KeyError(f"lm-eval run {i + 1} (seed {seed + i}) returned no results for task {t!r}")
            key, value = task_score(res["results"][t], kinds[t])
            scores.append(value)
        n = int((first.get("n-samples", {}).get(t) or {}).get("effective", 0))
        mean = sum(scores) / len(scores)
        if kinds[t] in GENERATIVE:
            out[t] = {"kind": "generative", "metric": key, "score": mean, f"avg@{k}": mean, "runs": scores, "n": n}
        else:
            norm = next((float(v) for m, v in first["results"][t].items() if m.split(",")[0] == "acc_norm"), None)
            out[t] = {"kind": "loglikelihood", "metric": key, "score": mean, f"avg@{k}": None, "runs": scores,
                      "acc_norm": norm, "n": n,
                      "note": f"{kinds[t]}: options scored by log-likelihood, nothing sampled; run once, avg@{k} "
                              f"not applicable"}
    return out


def avg_at_k(model, tokenizer, tasks: Sequence[str], *, k: int = 4, temperature: float = 0.6,
             include_path: str | Path | None = None, limit: int | None = None, batch_size: int = 16,
             seed: int = 0, max_gen_toks: int | None = None) -> dict[str, dict[str, Any]]:
    """``run_avg_at_k`` with lm-eval runs of an in-memory HF model (zero-shot, sampling at
    ``temperature`` for generative tasks; ``include_path``: a folder of local task YAMLs;
    ``max_gen_toks``: the generation budget of every generative task, None: each task's own)."""
    import lm_eval  # heavy (datasets, evaluate, sacrebleu): imported where used
    from lm_eval.models.huggingface import HFLM
    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
    manager = task_manager(include_path)
    gen_kwargs: dict[str, Any] = {"do_sample": temperature > 0, "temperature": temperature}
    if max_gen_toks is not None:
        gen_kwargs["max_gen_toks"] = max_gen_toks

    def evaluate(names: list[str], run_seed: int) -> Mapping[str, Any]:
        return lm_eval.simple_evaluate(model=lm, tasks=names, task_manager=manager, limit=limit, num_fewshot=0,
                                       gen_kwargs=gen_kwargs,
                                       random_seed=run_seed, numpy_random_seed=run_seed, torch_random_seed=run_seed,
                                       fewshot_random_seed=run_seed, apply_chat_template=bool(tokenizer.chat_template),
                                       log_samples=False, verbosity="ERROR")

    return run_avg_at_k(evaluate, tasks, k, seed)
