"""Binary RAR end to end (001_f9c1f8134c3dd554.txt): params, datastores, the reward
comparison, GRPO with utility early stopping.

The pieces live where they belong (``factlab.judges``, ``factlab.corpus.retrieval``,
``factlab.rewards.rar``, ``factlab.eval``); this module wires them from a ``RARConfig`` for
``notebooks/02_binary_rar.ipynb``:

- ``rewards:`` is the training reward list (default ``binary_rar``; the §4.2 baselines are
  ``rating_rar``, ``veriscore`` and ``lm_judge``), ``compare.rewards`` the rewards scored side
  by side on the same responses (Figure 4's question).
- ``datastore_report``: the datastores (512-token chunks for RAR, 256 for VeriScore, §4.2-4.3)
  pre-cached per prompt from the prompt and its reference (§3.2), with top-1 retrieval
  accuracy.
- ``comparison_responses``: per heldout prompt a faithful and a perturbed response built
  from the mini-world's labelled claims, plus samples of the base policy.
- ``train_run``: GRPO with the KL term and ``UtilityEarlyStopping`` (§4.3).

Index (paper section -> function; ``../shared/papers/001_f9c1f8134c3dd554.txt``):

=======================================  ============================================================
§4.1-4.3 (params), §4.2 baselines        ``RARConfig``, ``RewardCompareSection``, ``max_steps_for``
§3.2 per-prompt datastore, §3.3 filter   ``prepare_prompts``, ``datastore_report``
§3.1 reward on constructed responses     ``controlled_responses``, ``comparison_responses``
§4.3 GRPO + utility early stopping       ``prompt_rows``, ``utility_fn``, ``train_run``,
                                         ``train_with_stopping`` (``run_dir/train/<rewards>``)
§4.1 evaluation (abstention, long-form)  ``evaluate_policy``
§6.2 selective abstention                ``evaluate_policy`` (``selectivity/*``), ``selectivity_table``
§5 headline (fewer wrong answers)        ``headline``
stages (notebook 02, factlab train)      ``start`` (warm start) -> ``prepare`` -> ``train``
=======================================  ============================================================
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import NamedTuple
from typing import Any, Callable, Sequence

import pandas as pd
from pydantic import Field, field_validator

from ..config import Section
from ..sections import GenerationConfig
from ..data.longform import LongformPrompt, LongformPromptsSection, load_prompts
from ..data.types import read_jsonl
from ..eval.abstention import abstention_selectivity
from ..eval.headline import before_after
from ..eval.suites import SuiteResult, evaluate
from ..eval.utility import UtilityUnavailable, forced_qa_utility, lm_eval_utility
from ..experiment import TrainingConfig
from ..models import chat_prompt, generate, load_tokenizer
from ..rewards import REWARDS, Resources, RewardSpec, build_rewards
from ..train.callbacks import EarlyStoppingSection, UtilityEarlyStopping
from ..data import load_eval_sets
from ..train.grpo import TrainResult, run
from .stages import Recipe, main_process_first, start
from ..prompts import chat_messages

log = logging.getLogger(__name__)

__all__ = ["RARConfig", "RewardCompareSection", "prompt_rows", "prepare_prompts", "datastore_report",
           "controlled_responses", "comparison_responses", "evaluate_policy", "headline", "selectivity_table",
           "max_steps_for", "utility_fn", "train_run", "RARPrompts", "start", "prepare", "train",
           "train_with_stopping", "RECIPE"]


class RewardCompareSection(Section):
    """Figure 4-style comparison of rewards on the same responses."""

    rewards: list[RewardSpec] = [RewardSpec(name=n) for n in ("binary_rar", "rating_rar", "veriscore", "lm_judge")]
    prompts: int = Field(8, ge=1)  # heldout prompts; each gets one true and one perturbed response
    policy_samples: int = Field(2, ge=0)  # plus this many base-policy samples per prompt


class RARConfig(TrainingConfig):
    """``notebooks/02_binary_rar.ipynb``: Binary RAR end to end (001_f9c1f8134c3dd554.txt)."""

    rewards: list[RewardSpec] = [RewardSpec(name="binary_rar")]
    prompts: LongformPromptsSection = LongformPromptsSection()
    compare: RewardCompareSection = RewardCompareSection()
    early_stopping: EarlyStoppingSection = EarlyStoppingSection()
    longform_generation: GenerationConfig = GenerationConfig()
    longform_recall_k: int = Field(10, ge=1)  # K of Recall@K / F1@K in the long-form evaluation
    # App. C: "for the VeriScore reward, we applied an early stopping constraint at 1,000 steps"
    max_steps_by_reward: dict[str, int] = {"veriscore": 1000}

    @field_validator("max_steps_by_reward")
    @classmethod
    def _registered_rewards(cls, caps: dict[str, int]) -> dict[str, int]:
        for name, steps in caps.items():
            REWARDS.get(name)
            if steps < 1:
                raise ValueError(f"{name}: a step cap must be >= 1, got {steps}")
        return caps


def prompt_rows(prompts: Sequence[LongformPrompt]) -> list[dict]:
    """GRPO rows: the chat prompt with ``prompt_id`` and ``reference`` (the rewards read them)."""
    return [{"prompt": chat_messages(p.prompt), "prompt_id": p.id, "reference": p.reference}
            for p in prompts]


def prepare_prompts(cfg: RARConfig, resources: Resources) -> tuple[list[LongformPrompt], list[LongformPrompt], dict]:
    """(train, heldout) prompts (``prompts:``), every datastore pre-cached for them (§3.2), and
    the prompts whose pre-cache found fewer than ``datastore.min_precache_docs`` documents
    discarded (§3.3); the report counts what was loaded and kept."""
    train, held = load_prompts(cfg.prompts, cfg.world)
    kept = {p.id for p in resources.precache(train + held)}
    report = {"train_loaded": len(train), "heldout_loaded": len(held),
              "min_precache_docs": cfg.datastore.min_precache_docs}
    train, held = [p for p in train if p.id in kept], [p for p in held if p.id in kept]
    report.update(train=len(train), heldout=len(held))
    if not train:
        raise ValueError(f"no training prompt kept {cfg.datastore.min_precache_docs} pre-cached documents "
                         f"(datastore.min_precache_docs); lower it or use a larger corpus")
    return train, held, report


def datastore_report(resources: Resources, heldout: Sequence[LongformPrompt]) -> list[dict[str, Any]]:
    """Per datastore: chunks, documents, prompts cached, cached chunks per prompt, and the share
    of heldout prompts whose top-1 hit (a whole-datastore search, no cache) is their own article."""
    rows = []
    own = [p for p in heldout if p.doc_id]
    for name, ds in resources.datastores().items():
        cached = [len(v) for v in ds.cache.values()]
        top = ds.retrieve_many([p.prompt for p in own], k=1)
        rows.append({"datastore": name, "chunks": len(ds), "documents": len(ds.doc_ids), "prompts cached": len(ds.cache),
                     "cached chunks / prompt": sum(cached) / max(len(cached), 1),
                     "top-1 hit is the prompt's own article (uncached)": sum(
                         bool(h) and h[0].chunk.doc_id == p.doc_id for p, h in zip(own, top)) / max(len(own), 1)})
    return rows


def controlled_responses(world: dict[str, Path], prompts: Sequence[LongformPrompt], n_true: int = 3,
                         seed: int = 0) -> list[dict[str, Any]]:
    """Per prompt (with a mini-world ``doc_id``), a faithful response of ``n_true`` true claims
    and a perturbed one where one claim is an entity swap (``label`` 1 / 0)."""
    by_doc: dict[str, dict[str, list[dict]]] = {}
    for c in read_jsonl(world["claims"]):
        kind = "true" if c["label"] == "attributable" else "false"
        by_doc.setdefault(c["doc_id"], {"true": [], "false": []})[kind].append(c)
    rng = random.Random(seed)
    rows = []
    for p in prompts:
        claims = by_doc.get(p.doc_id or "")
        if not claims or len(claims["true"]) < n_true or not claims["false"]:
            continue
        true = rng.sample(claims["true"], n_true)
        swap = rng.choice([c for c in claims["false"] if c["relation"] in {t["relation"] for t in true}]
                          or claims["false"])
        perturbed = [swap["claim"] if t["relation"] == swap["relation"] else t["claim"] for t in true]
        if swap["claim"] not in perturbed:
            perturbed[-1] = swap["claim"]
        base = {"prompt_id": p.id, "prompt": p.prompt, "reference": p.reference}
        rows.append({**base, "kind": "faithful", "label": 1, "response": " ".join(t["claim"] for t in true)})
        rows.append({**base, "kind": "perturbed", "label": 0, "response": " ".join(perturbed)})
    return rows


def comparison_responses(cfg: RARConfig, resources: Resources, prompts: Sequence[LongformPrompt],
                         model=None, tokenizer=None) -> list[dict[str, Any]]:
    """The responses every reward scores in the comparison: ``controlled_responses`` plus
    ``compare.policy_samples`` samples of ``model`` per prompt (temperature 1, ``kind`` policy,
    ``label`` None)."""
    rows = controlled_responses(resources.world(), prompts)
    n = cfg.compare.policy_samples
    if n and model is not None:
        lg = cfg.longform_generation
        gens = generate(model, tokenizer, [chat_prompt(tokenizer, p.prompt) for p in prompts],
                        max_new_tokens=lg.max_new_tokens, temperature=1.0, batch_size=lg.batch_size,
                        num_return_sequences=n, seed=lg.seed, desc="policy samples")
        for p, gs in zip(prompts, gens):
            rows += [{"prompt_id": p.id, "prompt": p.prompt, "reference": p.reference, "kind": "policy",
                      "label": None, "response": g.text} for g in gs]
    return rows


def evaluate_policy(cfg: RARConfig, resources: Resources, model, tokenizer, eval_sets, heldout: Sequence[LongformPrompt],
                    who: str) -> tuple[dict[str, dict], SuiteResult]:
    """001 §4.1 before / after training: the abstention breakdown of every short-form set in
    both modes (keys ``<who> · <set> · <mode>``) and long-form precision on ``heldout``. Each
    abstain-mode breakdown also holds §6.2's selectivity (``selectivity/<field>`` of
    ``eval.abstention.abstention_selectivity``: the forced-mode error rate on the questions
    abstained, beside the one over all)."""
    bd = evaluate("abstention", model, tokenizer, eval_sets, cfg.eval_generation, tag=who)
    lf = evaluate("longform", model, tokenizer, heldout, cfg.longform_generation, verifier=resources.claim_verifier(),
                  k=cfg.longform_recall_k, tag=who)
    return _with_selectivity(bd, who), lf


def headline(before: dict[str, dict], after: dict[str, dict], before_lf: SuiteResult, after_lf: SuiteResult,
             eval_set: str, steps: int) -> dict[str, str]:
    """001 §5's claim on the notebook's own run (section 4's single run of ``steps`` steps, base ->
    RAR): wrong answers and abstentions under the abstain prompt on ``eval_set``, and long-form
    precision by the judge's verifier. ``before`` / ``after``: ``evaluate_policy``'s breakdowns
    (``base`` and ``RAR``). An evidence cell's interval leads it."""
    b, a = before[f"base · {eval_set} · abstain"], after[f"RAR · {eval_set} · abstain"]
    run = f"section 4's single run, {steps} steps on long-form prompts: base → RAR"
    return {f"wrong answers, abstain prompt ({run})": before_after(b["incorrect"], a["incorrect"]),
            f"abstentions ({run})": before_after(b["abstained"], a["abstained"]),
            f"long-form precision, the judge's verifier ({run})": before_after(
                before_lf.metrics["longform"].get("precision"), after_lf.metrics["longform"].get("precision"))}


def _with_selectivity(bd: SuiteResult, who: str) -> dict[str, dict]:
    """The abstention suite's metrics keyed ``<who> · <set> · <mode>``, each abstain mode with a
    forced mode beside it holding ``selectivity/<field>`` (§6.2)."""
    metrics = {f"{who} · {k}": dict(m) for k, m in bd.metrics.items()}
    for key, abstained in bd.records.items():
        forced = bd.records.get(key.removesuffix(" · abstain") + " · forced")
        if key.endswith(" · abstain") and abstained and forced:
            metrics[f"{who} · {key}"].update(
                {f"selectivity/{k}": v for k, v in abstention_selectivity(abstained, forced).items()})
    return metrics


def selectivity_table(breakdowns: dict[str, dict]) -> pd.DataFrame:
    """001 §6.2, "the model primarily abstains on questions it would otherwise answer incorrectly":
    per abstain-mode breakdown that holds it (``evaluate_policy``), the forced-mode error rate over
    all questions and on those abstained. Selective abstention: the second above the first."""
    rows = {key: {k.removeprefix("selectivity/"): v for k, v in m.items() if k.startswith("selectivity/")}
            for key, m in breakdowns.items()}
    return pd.DataFrame({k: r for k, r in rows.items() if r}).T


def max_steps_for(cfg: RARConfig, reward_names: Sequence[str]) -> int:
    """``grpo.max_steps``, capped by ``max_steps_by_reward`` for every reward of the run
    (App. C: VeriScore stopped at 1,000 steps)."""
    caps = [cfg.max_steps_by_reward[n] for n in reward_names if n in cfg.max_steps_by_reward]
    steps = [cfg.grpo.max_steps] if cfg.grpo.max_steps > 0 else []  # -1: epochs, capped only by caps
    return min([*steps, *caps]) if steps or caps else -1


def utility_fn(cfg: RARConfig, tokenizer, qa_items) -> Callable:
    """The early-stopping utility: lm-evaluation-harness tasks when configured and installed,
    else forced-answer short-form accuracy on ``qa_items`` (see ``factlab.eval.utility``)."""
    es = cfg.early_stopping
    if es.lm_eval_tasks:
        try:
            return lm_eval_utility(es.lm_eval_tasks, tokenizer)
        except UtilityUnavailable as e:
            log.warning("%s; using forced-answer QA accuracy instead", e)
    return forced_qa_utility(tokenizer, list(qa_items)[:es.qa_limit], max_new_tokens=cfg.eval_generation.max_new_tokens,
                             batch_size=cfg.eval_generation.batch_size)


def train_run(cfg: RARConfig, prompts: Sequence[LongformPrompt], resources: Resources, out_dir: str | Path,
              utility_items=None) -> tuple[TrainResult, UtilityEarlyStopping | None]:
    """GRPO on the long-form prompts with ``cfg.rewards`` (§4.3) into ``out_dir/<rewards>``;
    returns ``(TrainResult, early-stopping callback or None)``.

    The callback (when enabled) measures utility before training and every
    ``early_stopping.eval_every`` steps and stops on a drop over ``max_relative_drop``."""
    rewards = build_rewards(cfg.rewards, resources)
    name = "+".join(rewards.names)
    out = Path(out_dir) / name
    stopper = None
    if cfg.early_stopping.enabled and utility_items:
        es = cfg.early_stopping
        stopper = UtilityEarlyStopping(utility_fn(cfg, load_tokenizer(cfg.model.name), utility_items),
                                       es.eval_every, es.max_relative_drop, keep_dir=out / "last_passed")
    steps = max_steps_for(cfg, rewards.names)
    grpo = cfg.grpo if steps == cfg.grpo.max_steps else cfg.grpo.model_copy(update={"max_steps": steps})
    result = run(cfg, prompt_rows(prompts), rewards, out, name=f"rar-{name}", grpo=grpo,
                 callbacks=[stopper] if stopper else [])
    if stopper is not None and stopper.stopped_at is not None and not result.resumed:
        # §4.3: evaluate the last checkpoint that passed the utility check, not the degraded one
        result.model_dir = str(stopper.keep_dir)
        result.metrics.update(stopped_at=stopper.stopped_at, evaluated_step=stopper.kept_step)
        result.save()
    return result, stopper


# ---------------------------------------------------------------- the stages (notebook 02 and factlab train)



class RARPrompts(NamedTuple):
    """``prepare_prompts``: the training and held-out prompts and what was kept."""

    train: list[LongformPrompt]
    heldout: list[LongformPrompt]
    report: dict[str, Any]

    @property
    def size(self) -> int:
        return len(self.train)


def prepare(cfg: RARConfig, resources: Resources, run_dir: str | Path) -> RARPrompts:
    """§3.2: the prompts, every datastore pre-cached for them. Every process of a launch needs
    its own pre-cache (the rewards read it), the main process first (it fills the disk caches)."""
    with main_process_first():
        return RARPrompts(*prepare_prompts(cfg, resources))



def train_with_stopping(cfg: RARConfig, prompts: RARPrompts, resources: Resources, run_dir: str | Path
                        ) -> tuple[TrainResult, UtilityEarlyStopping | None]:
    """§4.3: ``train_run`` into ``run_dir/train``, utility measured on the first eval set; returns
    the early-stopping callback too (its history is the notebook's utility table)."""
    eval_sets = load_eval_sets(cfg.eval, cfg.world)
    return train_run(cfg, prompts.train, resources, Path(run_dir) / RECIPE.train_dir,
                     utility_items=next(iter(eval_sets.values()), None))


def train(cfg: RARConfig, prompts: RARPrompts, resources: Resources, run_dir: str | Path
          ) -> dict[str, TrainResult]:
    """``train_with_stopping``; the one run by name."""
    result, _ = train_with_stopping(cfg, prompts, resources, run_dir)
    return {result.name: result}


RECIPE = Recipe(notebook="02_binary_rar", config=RARConfig, prepare=prepare, train=train,
                headline=headline,
                what="long-form prompts with pre-cached datastores; one GRPO run")
