"""Reward families side by side under one budget (``notebooks/06_compare.ipynb``).

No paper compares these rewards on one policy, one prompt set and one budget; factlab can,
because every reward is a registry name (``factlab.rewards``). ``CompareConfig.runs`` names the
runs (a reward list each; defaults: the quickstart judge + format, CorVer, Binary RAR, SEVA-verified
claims, K2V and KLCF), ``seeds`` repeats each. Every run trains from the same start with the
same ``grpo`` budget (steps, G, tokens) and is evaluated by the same suites (short-form
accuracy / NA / hallucination rate, the abstention breakdown; with a ``longform:`` block also
long-form Precision / Recall@K / F1@K / FActScore through the claim verifier, 001 §4.1). Each
run folder gets a ``compare.json`` (rewards, seed, steps, reward cost per step, reward curve,
evaluation; a one-record ``stage_cache.StageCache``, written atomically), so ``collect`` rebuilds
the comparison from earlier runs without retraining, and ``evaluate`` skips (never
retrains, never re-evaluates) a run whose ``compare.json`` holds its record: delete the file to
redo a run.

The prompt set is the mini-world's short-form questions, with every column any registered
reward reads: ``golds`` (``qa_judge``, ``corver``, ``k2v``), ``prompt_id`` and ``reference``
(``binary_rar``, ``veriscore``, ``seva_claims``: a per-prompt pre-cached datastore, 001 §3.2),
``question`` and ``checklist`` (``k2v``: a question-specific checklist from the item's fact,
§3.2).

SEVA (002) trains a verifier, not a policy; its verifier enters the comparison as a policy
reward through ``seva_claims`` (``rewards.seva_claims.SevaClaimsReward``: the answer's claims, each
given SEVA's K.1-K.2 structured verdict against its retrieved passages, r = Attributable
share), the issue's "SEVA-verified claims as reward". Its verifier is the run's judge unless
``args.model`` names a trained one (a merged 03_seva checkpoint).

Alarms: ``check_alarms`` runs the reward-hacking detectors on every run's training log, with
the held-out metric before (the base model, step 0) and after training (the run's evaluation,
its last step) as ``reward_vs_heldout``'s series.

Index (which paper each default run reproduces, and the functions):

=========================================  ==========================================================
runs and budget (params)                   ``CompareConfig``, ``CompareRun``, ``CompareLongformSection``
rows every reward reads (000 §A.3, 001      ``compare_rows``, ``training_rows``, ``longform_prompts``
  §3.2, 003 §3.2)
one compared run                           ``run_folders``, ``train_compared``
evaluation (000 §4, 001 §4.1)              ``evaluate``, ``collect``, ``reward_curves``,
                                           ``summarize``, ``heldout_series``
alarms                                     ``check_alarms``, ``training_folders``
stages (notebook 06, factlab train)        ``start`` (warm start) -> ``prepare`` -> ``train`` (each
                                           compared run in turn) -> ``evaluate`` (the notebook)
=========================================  ==========================================================
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
from pydantic import Field, field_validator

from ..config import Section
from ..sections import GenerationConfig
from ..data import TrainDataConfig
from ..data.longform import LongformPrompt, LongformPromptsSection, load_prompts
from ..data.types import QAItem
from ..eval.bootstrap import paired_bootstrap
from ..eval.suites import evaluate as evaluate_suite
from ..eval.truth import completion_truth
from ..experiment import TrainingConfig
from ..models import adapter_adds_nothing, load_model, release_memory
from ..plots import BASE_RUN, RAW_RUN
from ..prompts import CORVER_TRAIN_SYSTEM, chat_messages
from ..eval.alarms import AlarmsSection, nonzero_advantage_share
from ..rewards import REWARDS, Resources, RewardSpec, build_rewards
from ..rewards.base import judge_totals
from ..train.alarms import check_folders
from ..data import load_eval_set, load_eval_sets
from ..train.grpo import TrainResult, run
from .stages import Recipe, is_main_process, launched, main_process_first, start
from ..stage_cache import StageCache

log = logging.getLogger(__name__)

__all__ = ["CompareRun", "CompareLongformSection", "CompareConfig", "compare_rows", "longform_prompts",
           "evaluate", "collect", "reward_curves", "summarize", "heldout_series", "check_alarms",
           "training_rows", "BASE", "RAW", "DATASTORE_REWARDS", "question_truth", "question_rows", "family_effects",
           "headline", "TRUTH_METRICS", "CompareInputs", "run_folders", "train_compared", "runs_dir", "start",
           "prepare", "train", "RECIPE"]

RUNS_DIR = "runs"  # run_dir / RUNS_DIR / <run> / seed<k>
RESULT_FILE = "compare.json"  # in each run folder: its record, once trained and evaluated
COST_FILE = "train_cost.json"  # in each run folder: what training it cost, counted where it trained

BASE = BASE_RUN  # the untrained start, evaluated once (its figures: plots.plot_pareto, plots.plot_reward_curves)
RAW = RAW_RUN  # the raw model under a warm start (recipes.warmstart), evaluated once beside the base; never trained
# rewards that read a per-prompt pre-cached datastore (001 §3.2): the rows are pre-cached for them
DATASTORE_REWARDS = ("binary_rar", "rating_rar", "veriscore", "factscore", "seva_claims")


class CompareRun(Section):
    """One compared run: a name and its reward list (any registered rewards)."""

    name: str
    rewards: list[RewardSpec]


class CompareLongformSection(Section):
    """Long-form evaluation of every run's policy (001 §4.1): responses to held-out long-form
    prompts (the mini-world's "Tell me about <country>." by default), their claims extracted and
    verified by the run's claim verifier (``verifier:``, ``datastore:``), scored as Precision,
    Recall@K, F1@K and FActScore."""

    prompts: LongformPromptsSection = LongformPromptsSection(eval_limit=16)  # the held-out prompts are used
    generation: GenerationConfig = GenerationConfig(max_new_tokens=512)
    recall_k: int = Field(10, ge=1)  # K of Recall@K / F1@K


def _default_runs() -> list[CompareRun]:
    return [CompareRun(name="qa_judge+format", rewards=[RewardSpec(name="qa_judge"), RewardSpec(name="format")]),
            CompareRun(name="CorVer", rewards=[RewardSpec(name="qa_judge"), RewardSpec(name="format"),
                                               RewardSpec(name="corver")]),
            CompareRun(name="Binary RAR", rewards=[RewardSpec(name="binary_rar")]),
            CompareRun(name="SEVA claims", rewards=[RewardSpec(name="seva_claims"), RewardSpec(name="format")]),
            CompareRun(name="K2V", rewards=[RewardSpec(name="k2v")]),
            CompareRun(name="KLCF", rewards=[RewardSpec(name="klcf_fact"), RewardSpec(name="length_penalty"),
                                             RewardSpec(name="format", args={"positive": 0.0, "negative": -1.0})])]


class CompareConfig(TrainingConfig):
    """``notebooks/06_compare.ipynb``: every reward family under one budget."""

    runs: list[CompareRun] = Field(default_factory=_default_runs)
    seeds: list[int] = [0]
    train_data: TrainDataConfig = TrainDataConfig(limit=64)
    longform: CompareLongformSection | None = None  # null: short-form suites only
    system_prompt: str = CORVER_TRAIN_SYSTEM

    @field_validator("runs")
    @classmethod
    def _unique_registered(cls, runs: list[CompareRun]) -> list[CompareRun]:
        names = [r.name for r in runs]
        dup = sorted({n for n in names if names.count(n) > 1} | ({BASE, RAW} & set(names)))
        if dup:
            raise ValueError(f"run names must be unique and not '{BASE}' or '{RAW}': {dup}")
        for r in runs:
            for s in r.rewards:
                REWARDS.get(s.name)
        return runs

    @field_validator("seeds")
    @classmethod
    def _some_seeds(cls, seeds: list[int]) -> list[int]:
        if not seeds or len(set(seeds)) < len(seeds):
            raise ValueError(f"seeds must be a non-empty list of distinct integers, got {seeds}")
        return seeds


def _checklist(item: QAItem) -> list[str]:
    """A question-specific checklist for a short-form item (K2V §3.2's criteria, instantiated)."""
    return [f"Identifies {item.golds[0]} as the answer to the question: {item.question}",
            "Supports the answer with a relevant, correct fact.",
            "Avoids unsupported claims and self-contradictions."]


def compare_rows(items: Sequence[QAItem], system: str) -> list[dict[str, Any]]:
    """GRPO rows carrying every column the registered rewards read (module docstring)."""
    return [{"prompt": chat_messages(it.question, system),
             "golds": list(it.golds), "id": it.id, "prompt_id": it.id, "question": it.question,
             "reference": f"The answer is {it.golds[0]}.", "checklist": _checklist(it),
             **({"bucket": str(it.meta["bucket"])} if it.meta.get("bucket") else {})} for it in items]


def training_rows(items: Sequence[QAItem], system: str, resources: Resources,
                  specs: Sequence[RewardSpec]) -> list[dict[str, Any]]:
    """``compare_rows`` of ``items``, pre-cached in the datastore when a reward of ``specs``
    reads it (001 §3.2; a prompt whose documents cannot be cached is dropped)."""
    rows = compare_rows(items, system)
    if any(s.name in DATASTORE_REWARDS for s in specs):
        kept = {p.id for p in resources.precache(_longform_prompts(items))}
        rows = [r for r in rows if r["prompt_id"] in kept]
    return rows


def _longform_prompts(items: Sequence[QAItem]) -> list[LongformPrompt]:
    return [LongformPrompt(id=it.id, prompt=it.question, reference=f"The answer is {it.golds[0]}.") for it in items]


def _judge_totals(resources: Resources) -> dict[str, float]:
    return judge_totals(resources.built_judges())


LONGFORM_KEYS = ("precision", "micro_precision", "factscore", "respond_ratio", "n_claims")


def longform_prompts(cfg: CompareConfig, resources: Resources) -> list[LongformPrompt]:
    """The held-out long-form prompts of ``cfg.longform`` ([] when it is off), the claim
    verifier's datastore pre-cached for them (001 §3.2; prompts left with too few documents
    are dropped, §3.3)."""
    if cfg.longform is None:
        return []
    _, held = load_prompts(cfg.longform.prompts, cfg.world)
    if not held:
        raise ValueError("longform: no held-out long-form prompts (set longform.prompts.heldout_path)")
    return resources.precache(held)


def _evaluate(cfg: CompareConfig, model_dir: str | None, eval_sets, resources: Resources | None = None,
              lf_prompts: Sequence[LongformPrompt] = (), name: str | None = None) -> dict[str, Any]:
    """The same suites and the same prompt for every model, the base included (CorVer's
    anti-loop line for adapters, 000 §A.3, is left out so the prompt is not a difference);
    with ``lf_prompts``, also the long-form suite (keys ``longform/<metric>``). ``name``: another
    model than ``cfg.model`` (the raw model beside a warm start)."""
    model, tok = load_model(name or cfg.model.name, dtype=cfg.model.dtype, device=cfg.model.device,
                            adapter=None if name else model_dir or cfg.model.adapter)
    short = evaluate_suite("shortform", model, tok, eval_sets, cfg.eval_generation, trained=False, progress=False)
    abst = evaluate_suite("abstention", model, tok, eval_sets, cfg.eval_generation, progress=False)
    lf = None
    if lf_prompts and cfg.longform is not None and resources is not None:
        k = cfg.longform.recall_k
        lf = evaluate_suite("longform", model, tok, list(lf_prompts), cfg.longform.generation,
                            verifier=resources.claim_verifier(), k=k, progress=False).metrics["longform"]
    del model
    release_memory()
    keep = ("accuracy", "strict_accuracy", "na_rate", "format_rate")
    out: dict[str, Any] = {QUESTIONS_KEY: question_truth(short.records, eval_sets)}
    for label, m in short.metrics.items():
        out.update({f"{label}/{k}": m[k] for k in keep if k in m})
    for key, m in abst.metrics.items():
        out.update({f"{key}/{k}": m[k] for k in ("hallucination_rate", "abstained", "correct") if k in m})
    if lf is not None:
        out.update({f"longform/{m}": lf[m] for m in (*LONGFORM_KEYS, f"recall@{k}", f"f1@{k}") if m in lf})
    return out


QUESTIONS_KEY = "questions"  # an evaluation's per-question exact truth (``question_truth``), kept out of the columns
TRUTH_METRICS = ("truth", "correct", "wrong", "abstain")


def question_truth(records: dict[str, Sequence[Any]], eval_sets: dict[str, Sequence[QAItem]]) -> list[dict[str, Any]]:
    """Per held-out question of every set, the exact truth of the model's short answer
    (``eval.truth.completion_truth``, the mini-world's facts, no judge): ``truth`` +1 correct /
    0 abstain / -1 wrong (001 §3's trade: abstaining beats a wrong answer), and ``correct``,
    ``wrong``, ``abstain`` as 0 / 1; ``set``, ``question`` (the item id) and, for the organism's
    questions, the exposure ``bucket``. ``records``: the short-form suite's records by set."""
    buckets = {label: {it.id: it.meta.get("bucket") for it in items} for label, items in eval_sets.items()}
    out = []
    for label, recs in records.items():
        for r in recs:
            t = completion_truth({"golds": list(r.golds), "question": r.question}, r.completion)
            row = {"set": label, "question": r.id, "truth": t["score"], "correct": float(t["label"] == "correct"),
                   "wrong": float(t["label"] == "wrong"), "abstain": float(t["label"] == "abstain")}
            if buckets.get(label, {}).get(r.id):
                row["bucket"] = str(buckets[label][r.id])
            out.append(row)
    return out


def question_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-question truth rows of ``compare.json`` records (``evaluate``'s, or read
    from run folders), each with its ``run`` and ``seed`` (None for the base)."""
    return [{"run": rec["run"], "seed": rec.get("seed"), **q}
            for rec in records for q in (rec.get("eval") or {}).get(QUESTIONS_KEY, [])]


def family_effects(rows: Sequence[dict[str, Any]], metric: str = "truth", eval_set: str | None = None,
                   subset: str | None = None, replicates: int = 2000) -> pd.DataFrame:
    """Per compared run (a reward family): ``metric``'s mean for the base and for the run over
    the same (seed, question) pairs, and the effect run - base with its paired bootstrap 95%
    interval over seeds and questions (``eval.bootstrap.paired_bootstrap``; the base, evaluated
    once, pairs with every seed). ``rows``: ``question_rows``; ``eval_set``: one set's questions
    (default: every set, ``question`` keys qualified by set); ``subset``: an exposure bucket
    (``known``, ``unknown``, ``rare`` = every ``rare-<dose>``, or one ``rare-<dose>``)."""
    def keep(r: dict[str, Any]) -> bool:
        bucket = str(r.get("bucket") or "")
        return ((eval_set is None or r["set"] == eval_set) and r.get(metric) is not None
                and (subset is None or bucket == subset or (subset == "rare" and bucket.startswith("rare-"))))

    rows = [r for r in rows if keep(r)]
    base = {(r["set"], r["question"]): float(r[metric]) for r in rows if r["run"] == BASE}
    out = []
    for run in dict.fromkeys(r["run"] for r in rows if r["run"] not in (BASE, RAW)):
        treated = {(r["seed"], (r["set"], r["question"])): float(r[metric]) for r in rows if r["run"] == run}
        pairs = [(v, base[q]) for (_, q), v in treated.items() if q in base]
        if not pairs:
            continue
        effect = paired_bootstrap(treated, base, replicates=replicates)
        out.append({"run": run, "metric": metric, "subset": subset, "base": sum(b for _, b in pairs) / len(pairs),
                    "after": sum(a for a, _ in pairs) / len(pairs), "effect": effect.mean, "lo": effect.lo,
                    "hi": effect.hi, "seeds": effect.seeds, "questions": effect.questions})
    return pd.DataFrame(out, columns=["run", "metric", "subset", "base", "after", "effect", "lo", "hi", "seeds",
                                      "questions"])


def headline(effects: pd.DataFrame, what: str = "held-out truth score (+1 correct, 0 abstain, -1 wrong)"
             ) -> dict[str, str]:
    """The notebook's headline (``family_effects``' rows): a first line naming ``what`` once, with
    the seeds and questions (a range where families differ), then one line per family, keyed by
    its name: base → after and the effect with its 95% interval."""
    def signed(x: float) -> str:
        return f"{x:+.3f}"

    def span(values: pd.Series) -> str:
        lo, hi = int(values.min()), int(values.max())
        return str(lo) if lo == hi else f"{lo}-{hi}"

    if effects.empty:
        return {}
    lines = {f"{what}, base → each family": f"{span(effects['seeds'])} seeds, {span(effects['questions'])} questions, "
                                            "effect = family - base, paired bootstrap 95% interval"}
    lines.update({str(r.run): f"{r.base:.3f} → {r.after:.3f}; effect {signed(r.effect)} [{signed(r.lo)}, {signed(r.hi)}]"
                  for r in effects.itertuples(index=False)})
    return lines


def run_folders(cfg: CompareConfig, out_dir: str | Path) -> dict[tuple[str, int], Path]:
    """Each compared (run, seed)'s folder: ``out_dir/<run>/seed<seed>`` (training in ``train/``,
    its record in ``compare.json``)."""
    out = Path(out_dir)
    return {(spec.name, seed): out / spec.name.replace("/", "_").replace(" ", "_") / f"seed{seed}"
            for spec in cfg.runs for seed in cfg.seeds}


def train_compared(cfg: CompareConfig, spec: CompareRun, seed: int, rows: Sequence[dict[str, Any]],
                   resources: Resources, folder: str | Path) -> TrainResult:
    """One compared run: GRPO with the run's rewards and seed into ``folder/train`` (resumable; a
    finished run is loaded, not retrained, and nothing is built for it), and what training it cost
    (``folder/train_cost.json``, a one-record ``StageCache``: seconds, judge calls and tokens per
    step, counted in this process while it trained; NaN for a run trained by several processes,
    whose judge use this one does not see)."""
    train_dir = Path(folder) / "train"
    finished = TrainResult.load(train_dir)
    if finished is not None:
        return finished
    rewards = build_rewards(spec.rewards, resources)
    grpo = cfg.grpo.model_copy(update={"seed": seed})
    before, t0 = _judge_totals(resources), time.perf_counter()
    result = run(cfg, rows, rewards, train_dir, name=f"compare-{spec.name}", grpo=grpo)
    seconds, after = time.perf_counter() - t0, _judge_totals(resources)
    if not is_main_process():
        return result
    steps, counted = max(result.steps, 1), not launched()
    nan = float("nan")
    _cost(folder).save_record({
        "train_seconds": seconds,
        "judge_calls_per_step": (after["calls"] - before["calls"]) / steps if counted else nan,
        "judge_tokens_per_step": (after["prompt_tokens"] + after["completion_tokens"] - before["prompt_tokens"]
                                  - before["completion_tokens"]) / steps if counted else nan})
    return result


def _cost(folder: str | Path) -> StageCache:
    return StageCache(Path(folder) / COST_FILE, where="a compared run's train_cost.json")


def _result(folder: Path) -> StageCache:
    """A (run, seed)'s finished result: ``folder/compare.json``, a one-record ``StageCache``."""
    return StageCache(folder / RESULT_FILE, where="a compared run's compare.json")


def _results(out_dir: str | Path) -> list[tuple[Path, dict[str, Any]]]:
    """``(file, record)`` of every finished ``compare.json`` under ``out_dir`` (an unfinished or
    torn one is skipped, logged)."""
    found = [(f, _result(f.parent).record()) for f in sorted(Path(out_dir).rglob(RESULT_FILE))]
    return [(f, rec) for f, rec in found if rec is not None]


# ---------------------------------------------------------------- the stages (notebook 06 and factlab train)



@dataclass
class CompareInputs:
    """The training questions, the held-out sets, and the training rows every run shares."""

    items: list[QAItem]
    eval_sets: dict[str, list[QAItem]]
    rows: list[dict[str, Any]]

    @property
    def size(self) -> int:
        return len(self.rows)


def runs_dir(run_dir: str | Path) -> Path:
    """Where the compared runs live: ``run_dir/runs``."""
    return Path(run_dir) / RUNS_DIR


def prepare(cfg: CompareConfig, resources: Resources, run_dir: str | Path) -> CompareInputs:
    """The questions, the held-out sets and ``training_rows`` (the datastore pre-cached when a
    compared reward reads it; the main process of a launch first)."""
    items = load_eval_set(cfg.train_data, cfg.world)
    eval_sets = load_eval_sets(cfg.eval, cfg.world)
    with main_process_first():
        rows = training_rows(items, cfg.system_prompt, resources, [s for r in cfg.runs for s in r.rewards])
    return CompareInputs(list(items), eval_sets, rows)



def train(cfg: CompareConfig, inputs: CompareInputs, resources: Resources, run_dir: str | Path
          ) -> dict[str, TrainResult]:
    """Each compared (run, seed) in turn (``train_compared``) into ``run_dir/runs/<run>/seed<k>``;
    the results by ``<run>/seed<k>``. ``evaluate`` (the notebook) then evaluates them."""
    return {f"{spec.name}/seed{seed}": train_compared(cfg, spec, seed, inputs.rows, resources, folder)
            for (name, seed), folder in run_folders(cfg, runs_dir(run_dir)).items()
            for spec in [next(r for r in cfg.runs if r.name == name)]}


def evaluate(cfg: CompareConfig, inputs: CompareInputs, resources: Resources, run_dir: str | Path,
             raw: str | None = None) -> list[dict[str, Any]]:
    """The base model, then every (run, seed) ``train`` trained under ``run_dir/runs``, on the
    held-out sets: evaluated, with its training cost and reward curve, into ``compare.json``
    beside it; returns the records, one per (run, seed). A run whose ``compare.json`` holds its
    record is read back, never evaluated again. A run whose LoRA adapter adds nothing (no step had reward spread:
    ``models.adapter_adds_nothing``) is the base model and takes the base evaluation, marked
    ``evaluated: as base``, instead of generating it again. ``raw``: the raw model of a warm
    start (``recipes.warmstart``; ``cfg.model`` is then the warm start, the base), evaluated once
    as the run ``raw`` beside the base and never trained."""
    out, eval_sets = runs_dir(run_dir), inputs.eval_sets
    folders = run_folders(cfg, out)
    base_done, raw_done = _result(out / BASE), _result(out / RAW)
    done = {key: _result(folder) for key, folder in folders.items()}
    finished = [c.record() for c in ([raw_done, base_done] if raw else [base_done])] + [
        d.record() for d in done.values()]
    if all(r is not None for r in finished):
        # every run finished: the comparison is read back, nothing is loaded, trained or judged
        return finished
    untrained = [f"{name} seed {seed} ({folder / 'train'})" for (name, seed), folder in folders.items()
                 if done[(name, seed)].record() is None and TrainResult.load(folder / "train") is None]
    if untrained:
        raise FileNotFoundError(f"not trained yet: {', '.join(untrained)}; run compare.train (or factlab train "
                                "06_compare) first")
    lf_prompts = longform_prompts(cfg, resources)
    records = []
    if raw:
        records.append(raw_done.record() or raw_done.save_record(
            {"run": RAW, "seed": None, "rewards": [], "steps": 0, "evaluated": "own", "model": raw,
             "eval": _evaluate(cfg, None, eval_sets, resources, lf_prompts, name=raw)}))
    base = base_done.record() or base_done.save_record(
        {"run": BASE, "seed": None, "rewards": [], "steps": 0, "evaluated": "own",
         "eval": _evaluate(cfg, None, eval_sets, resources, lf_prompts)})
    records.append(base)
    for spec in cfg.runs:
        for seed in cfg.seeds:
            folder, result_file = folders[(spec.name, seed)], done[(spec.name, seed)]
            if (rec := result_file.record()) is not None:
                records.append(rec)
                continue
            result = TrainResult.load(folder / "train")
            frame = result.steps_frame()
            nan = float("nan")  # trained before its cost was recorded: its seconds, no judge count
            cost = _cost(folder).record() or {"train_seconds": result.runtime_s, "judge_calls_per_step": nan,
                                              "judge_tokens_per_step": nan}
            rec = {"run": spec.name, "seed": seed, "rewards": [s.model_dump() for s in spec.rewards],
                   "steps": result.steps, "train_seconds": cost["train_seconds"],
                   # reward functions plus token shaping (CorVer's sentence rewards are a shaping hook)
                   "reward_seconds_per_step": float(sum(frame[c].fillna(0.0).mean() for c in
                                                        ("timing/reward_funcs_s", "timing/token_shaping_s")
                                                        if c in frame)),
                   "judge_calls_per_step": cost["judge_calls_per_step"],
                   "judge_tokens_per_step": cost["judge_tokens_per_step"],
                   "reward_curve": frame["reward"].tolist() if "reward" in frame else [],
                   "zero_std_share": nan if nonzero_advantage_share(frame) is None
                   else 1.0 - nonzero_advantage_share(frame),
                   "mean_length": float(frame["completions/mean_length"].mean())
                   if "completions/mean_length" in frame else nan,
                   "model_dir": result.model_dir}
            if result.is_adapter and adapter_adds_nothing(result.model_dir):
                # every B is still zero: the policy is the base model exactly, so is its evaluation
                rec.update(evaluated="as base (adapter unchanged)", eval=base["eval"])
            else:
                rec.update(evaluated="own", eval=_evaluate(cfg, result.model_dir, eval_sets, resources, lf_prompts))
            records.append(result_file.save_record(rec))
    return records


def collect(out_dir: str | Path) -> pd.DataFrame:
    """Every ``compare.json`` under ``out_dir`` as one row per (run, seed), evaluation metrics
    flattened into columns: the comparison rebuilt from run folders, no retraining."""
    rows = []
    for f, rec in _results(out_dir):
        rows.append({k: v for k, v in rec.items() if k not in ("eval", "rewards", "reward_curve")}
                    | {k: v for k, v in rec.get("eval", {}).items() if k != QUESTIONS_KEY} | {"folder": str(f.parent)})
    if not rows:
        raise FileNotFoundError(f"no compare.json under {out_dir}: run compare.evaluate first")
    return pd.DataFrame(rows)


def reward_curves(out_dir: str | Path) -> pd.DataFrame:
    """The training reward of every (run, seed) by step, one row each (``run``, ``seed``,
    ``step``, ``reward``), read from the ``compare.json`` files under ``out_dir``."""
    rows = []
    for _, rec in _results(out_dir):
        rows += [{"run": rec["run"], "seed": rec["seed"], "step": i, "reward": r}
                 for i, r in enumerate(rec.get("reward_curve") or [], start=1)]
    return pd.DataFrame(rows, columns=["run", "seed", "step", "reward"])


def summarize(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per run: mean and spread (std over seeds, 0 for one seed) of ``metric``, its gain over
    the base model, and the mean reward cost per step."""
    if metric not in frame:
        raise KeyError(f"metric {metric!r} not in the comparison; have: {sorted(c for c in frame if '/' in c)}")
    base = float(frame.loc[frame["run"] == BASE, metric].mean())
    cost = [c for c in ("reward_seconds_per_step", "judge_calls_per_step", "judge_tokens_per_step") if c in frame]
    g = frame[~frame["run"].isin([BASE, RAW])].groupby("run", sort=False)
    out = pd.DataFrame({"seeds": g.size(), metric: g[metric].mean(), "spread": g[metric].std(ddof=0).fillna(0.0),
                        "gain": g[metric].mean() - base, **{c: g[c].mean() for c in cost}})
    return out


def run_label(run: str, seed: Any) -> str:
    """How a (run, seed) is named in the alarm table (seed 0, not 0.0)."""
    if isinstance(seed, float) and seed.is_integer():
        seed = int(seed)
    return f"{run} · seed {seed}"


def heldout_series(frame: pd.DataFrame, metric: str) -> dict[str, dict[int, float]]:
    """Per trained (run, seed): the held-out ``metric`` at step 0 (the base model every run
    starts from) and at its last step (its own evaluation), ``reward_vs_heldout``'s input."""
    if metric not in frame:
        raise KeyError(f"metric {metric!r} not in the comparison; have: {sorted(c for c in frame if '/' in c)}")
    base = frame.loc[frame["run"] == BASE, metric].dropna()
    if base.empty:
        return {}
    out = {}
    for _, r in frame[~frame["run"].isin([BASE, RAW])].iterrows():
        value, steps = r[metric], int(r["steps"] or 0)
        if steps > 0 and value == value:  # not NaN
            out[run_label(r["run"], r["seed"])] = {0: float(base.iloc[0]), steps: float(value)}
    return out


def training_folders(frame: pd.DataFrame) -> dict[str, Path]:
    """The training folder of every trained (run, seed), by ``run_label``."""
    trained = frame[~frame["run"].isin([BASE, RAW])]
    return {run_label(r.run, r.seed): Path(r.folder) / "train" for r in trained.itertuples(index=False)}


def check_alarms(frame: pd.DataFrame, metric: str, cfg: AlarmsSection) -> pd.DataFrame:
    """The reward-hacking alarms of every trained (run, seed) (``train.alarms.check``), read
    from its training folder, with ``heldout_series(frame, metric)`` as the held-out metric."""
    return check_folders(training_folders(frame), cfg, heldout_series(frame, metric))


RECIPE = Recipe(notebook="06_compare", config=CompareConfig, prepare=prepare, train=train,
                headline=headline,
                what="mini-world questions with every reward's columns; each compared run (x seed) in turn")
