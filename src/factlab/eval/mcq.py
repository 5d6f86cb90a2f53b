"""Multiple-choice evaluation as K2V reports it (003_5e9813e66e6ba19a.txt §4.1, Appendix A):
zero-shot, temperature 0.6, every benchmark run k = 4 times, the mean accuracy (avg@k),
through lm-evaluation-harness.

Full params name lm-eval tasks (CMMLU / MMLU domain subsets, SeedBench, LawBench, MedQA-MCMLE
wherever the installed harness has them). Offline and on the CPU default, ``miniworld_mcq``
writes four-option questions from the mini-world's held-out facts (the right answer plus
three values of the same relation from other countries, in a seeded order) and
``write_task`` registers them as a local lm-eval task (a JSONL file and a YAML config), so the
same harness path runs with nothing downloaded. avg@k is k sampled runs with different seeds,
the accuracy of each (the letter the model writes first) averaged.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml
from pydantic import Field

from ..config import Section
from ..data.types import QAItem, read_jsonl, write_jsonl

__all__ = ["MCQSection", "miniworld_mcq", "write_task", "avg_at_k", "LETTERS"]

LETTERS = ("A", "B", "C", "D")
_RELATIONS = ("capital", "region", "subregion", "currency", "language")


class MCQSection(Section):
    """MCQ evaluation (003 §4.1): lm-eval ``tasks`` by name, or the mini-world's when empty."""

    tasks: list[str] = []  # e.g. [mmlu_college_medicine, cmmlu_agronomy]; [] = the local mini-world task
    questions: int = Field(40, ge=4)  # mini-world questions
    k: int = Field(4, ge=1)  # avg@k
    temperature: float = Field(0.6, ge=0.0)
    limit: int | None = Field(None, ge=1)  # per task, for quick runs
    batch_size: int = Field(16, ge=1)
    seed: int = 0


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


def avg_at_k(model, tokenizer, tasks: Sequence[str], *, k: int = 4, temperature: float = 0.6,
             include_path: str | Path | None = None, limit: int | None = None, batch_size: int = 16,
             seed: int = 0) -> dict[str, dict[str, Any]]:
    """avg@k per task: k lm-eval runs of an in-memory HF model with different seeds; returns
    ``{task: {"avg@k": mean accuracy, "runs": [accuracy of each run], "n": samples}}``."""
    import lm_eval  # heavy (datasets, evaluate, sacrebleu): imported where used
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size)
    manager = TaskManager(include_path=str(include_path) if include_path else None)
    runs: dict[str, list[float]] = {t: [] for t in tasks}
    sizes: dict[str, int] = {}
    for i in range(k):
        res = lm_eval.simple_evaluate(model=lm, tasks=list(tasks), task_manager=manager, limit=limit,
                                      gen_kwargs={"do_sample": temperature > 0, "temperature": temperature},
                                      random_seed=seed + i, numpy_random_seed=seed + i, torch_random_seed=seed + i,
                                      fewshot_random_seed=seed + i, apply_chat_template=bool(tokenizer.chat_template),
                                      log_samples=False, verbosity="ERROR")
        for t in tasks:
            metrics = res["results"][t]
            score = next(v for key, v in metrics.items() if key.startswith("exact_match") and "stderr" not in key)
            runs[t].append(float(score))
            sizes[t] = int(res.get("n-samples", {}).get(t, {}).get("effective", 0))
    return {t: {f"avg@{k}": sum(v) / len(v), "runs": v, "n": sizes.get(t, 0)} for t, v in runs.items()}
