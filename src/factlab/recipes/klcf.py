"""KLCF end to end (004_4f2ca2d982459bb2.txt), for ``notebooks/05_klcf.ipynb``.

The pieces live where they belong (``synth.klcf``: the offline pipeline of §2.2, Stages 1-4, and
``synth.klcf_truth_data`` the truthfulness data of Eq. 4; ``rewards.klcf``: Eq. 5-13, with
Prompt 7 in ``rewards.klcf_verify`` and Prompt 6 in ``rewards.klcf_truth``; ``eval.longform``:
Precision, Recall@K, F1@K, FActScore, Eq. 16-18; ``eval.winrate``: Prompt 8, Eq. 19-20); this
module wires them from a ``KLCFConfig``:

- ``queries``: the long-form queries (train / held-out); the datastores are pre-cached for them
  only with ``longform_retrieval: prompt_cache`` (Table 9 retrieves per claim over the whole index).
- ``offline_pipeline``: Stages 1-4 on every query (cached, resumable) and the GRPO rows, each
  with its checklist Lambda(q); ``checklist_fallback: miniworld`` gives a query whose pipeline
  checklist is empty its article's true mini-world facts instead (counted, labelled
  ``checklist_source``), since a 135M sampler + judge leaves most checklists empty.
- ``truth_rm``: Table 13: the truthfulness reward model (Prompt 6) is the policy's own base
  model (App. D.1: one RM per size; ``truth_rm.model`` overrides) trained on Eq. 4 data
  (``truth_rm.data``: the pipeline's SUPPORT / REFUTE claims only, the paper's; or, on the CPU
  smoke, those plus the mini-world's true facts and their entity swaps): TRL SFT (``method:
  sft``, the paper's) or its True / False output rows fitted on frozen states (``readout``,
  ours, the CPU smoke's), scored by accuracy and F1 of p(True | c) > 0.5 on a held-out 1 : 1 set
  against the same base model zero-shot and few-shot.
- ``reward_table``: the rewards on constructed responses (complete and true, short and true,
  long with one false claim, padded): recall, precision, truth, Eq. 13 under Table 2's weight
  rows, the length penalty (Eq. 11) and the format reward (Eq. 10).
- ``efficiency_table``: §3.7 / Table 14 on this run's judge: per response, the seconds, judge
  calls, searches and tokens of the run's KLCF reward vs the FActScore-style and VeriScore
  rewards on the same constructed responses (``bench/bench_klcf_efficiency.py`` adds the
  judge's concurrency).
- ``train_run``: GRPO with ``cfg.rewards`` (Table 8: no KL, from the base model), the
  truthfulness rewards pointed at the trained reward model.
- ``longform_eval`` / ``win_rate``: §4.1 before / after training: the base model 10-shot (App.
  C.3, Prompt 1), the trained policy under Prompt 5; the win-rate judge reads answer parts only.

Index (paper section -> function; ``../shared/papers/004_4f2ca2d982459bb2.txt``):

=======================================  ============================================================
§3.1, Table 8 (params)                   ``KLCFConfig``, ``TruthRMSection``, ``WinRateSection``
§2.2 Stages 1-4 offline checklist        ``queries``, ``offline_pipeline``, ``pipeline_stage``
                                         (``run_dir/pipeline``)
§2.3.2 Eq. 4, App. D.1, Table 13         ``truth_data``, ``run_truth_data``, ``truth_rm``,
  truthfulness reward model              ``truth_rm_model``, ``readout_rm``, ``reward_model_stage``
                                         (``run_dir/truth_rm``); the fit and the saved model in
                                         ``train.truth_rm``
§2.3 Eq. 5-13 on constructed answers     ``constructed_responses``, ``reward_table``
§3.7, Table 14 efficiency                ``efficiency_table``
§2.3.3 Prompt 5, Table 8 GRPO            ``policy_prompt``, ``klcf_rows``, ``with_truth_model``, ``train_run``
                                         (``run_dir/train/<rewards>``)
§4.1 Eq. 16-20 evaluation                ``longform_eval``, ``base_fewshot_examples``, ``win_rate``
§4 headline (KB precision, base -> KLCF) ``headline``
stages (notebook 05, factlab train)      ``start`` (warm start) -> ``prepare`` (= ``pipeline_stage``
                                         -> ``reward_model_stage``) -> ``train``
=======================================  ============================================================
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import pandas as pd
from datasets import Dataset
from pydantic import Field, model_validator

from .. import prompts as P
from ..config import MAX_TOKENS, ParamError, Section
from ..sections import GenerationConfig, GRPOSection, JudgeSection, LoraSection, SFTSection
from ..data.longform import LongformPrompt, LongformPromptsSection, load_prompts
from ..data.types import read_jsonl
from ..eval.cost import compare_rewards
from ..eval.headline import before_after
from ..eval.suites import SuiteResult, evaluate
from ..eval.truth import sentence_truth
from ..eval.verification import probability_metrics
from ..experiment import TrainingConfig
from ..judges import make_judge
from ..models import chat_prompt, generate, load_model, release_memory
from ..rewards import Resources, RewardSpec, build_rewards
from ..rewards.klcf import TABLE2_WEIGHTS, KLCFTruthArgs, checklist_verifier, claim_truth, format_reward, verdict_scores
from ..rewards.klcf_truth import TruthfulnessScorer
from ..rewards.length import LengthPenalty, LengthPenaltyArgs, length_penalty
from ..synth import klcf as synth
from ..synth.klcf_sampling import cut_at_next_question, fewshot_prompt
from ..synth.klcf_truth_data import miniworld_truth_data, pipeline_truth_data
from ..train.grpo import TrainResult, merge_adapter, run
from ..train.sft import run_sft
from ..train.truth_rm import fit_answer_readout, layer_modules, save_readout_model
from ..stage_cache import StageCache
from .stages import Recipe, main_process_first, start, warm_start_trains
from ..prompts import chat_messages

log = logging.getLogger(__name__)

__all__ = ["KLCFConfig", "TruthRMSection", "WinRateSection", "queries", "offline_pipeline", "klcf_rows",
           "policy_prompt", "policy_response", "truth_rm", "truth_rm_model", "truth_data",
           "run_truth_data", "constructed_responses", "reward_table", "with_truth_model", "efficiency_table",
           "train_run", "longform_eval", "base_fewshot_examples", "win_rate", "headline", "KLCFInputs",
           "pipeline_stage", "reward_model_stage", "start", "prepare", "prepare_alone", "train", "RECIPE"]

TRUTH_REWARDS = ("klcf_truth", "klcf_fact")  # the registered rewards that read the truthfulness RM
TRUTH_REPORT = "truth_rm/report.json"  # reward_model_stage's result, read back by a second call


class TruthRMSection(Section):
    """The truthfulness reward model (004 §2.3.1, Appendix D.1, Table 13): SFT of ``model``
    (None: ``model.name``; the paper trains one RM per policy size on "pre-trained models of
    these three sizes", D.1, Table 13: Qwen2.5-7B for the 7B policy) on Prompt 6 rows; Table 8's
    "Truthfulness Reward Model" row: lr 1e-5, 3 epochs, cosine with 10% warm-up, wd 0.01, betas
    (0.9, 0.95), gradient clip 1.0 (the last two through ``sft.extra`` in the full params).

    ``data``: the Eq. 4 training and held-out rows. ``pipeline`` (the paper's, the full params'):
    the offline pipeline's SUPPORT / REFUTE claims only (``synth.klcf_truth_data.pipeline_truth_data``; the
    held-out 1 : 1 set on queries no training row comes from). ``miniworld+pipeline`` (ours, the CPU
    smoke's): the mini-world's true facts and their entity swaps plus the pipeline's claims
    (``synth.klcf_truth_data.miniworld_truth_data``), because a 135M sampler's pipeline yields too few
    labelled claims to train or test on; it needs the mini-world queries (checked when params load).

    ``ratio`` / ``negative_copies``: Eq. 4's sampling of the RM's training rows (None: the
    pipeline's, App. D.1's 2 : 1 with negatives x 3). ``lora``: ``policy`` trains with the run's
    ``lora:`` section, ``none`` every parameter (the paper), or an adapter of its own;
    ``lora_from_layer`` puts that adapter on decoder layers from this index up only (ours, for
    CPU: the claim's truth is linearly readable from the frozen mid-layer states, so the upper
    layers suffice and the backward pass stops halfway).

    ``method``: ``sft`` is the paper's (TRL SFT with ``sft``); ``readout`` (ours, the CPU
    default) trains only the " True" and " False" rows of the output layer, with the same
    Prompt 6 rows and the same cross-entropy over the two answers, fitted to convergence on the
    frozen model's answer-position states (``readout_examples`` rows at most, an L2 pull of
    ``readout_l2`` toward the base rows): a 135M model on 2 cores needs an epoch of SFT
    (~20 min) to move p(True) beyond the label prior, this fit takes under a minute."""

    enabled: bool = True
    model: str | None = None
    data: Literal["pipeline", "miniworld+pipeline"] = "pipeline"
    sft: SFTSection = SFTSection(learning_rate=1.0e-5, num_train_epochs=3.0, warmup_ratio=0.1, max_length=4096,
                                 per_device_train_batch_size=8, gradient_accumulation_steps=8)
    ratio: float | None = Field(None, gt=0.0)
    negative_copies: int | None = Field(None, ge=1)
    lora: LoraSection | Literal["policy", "none"] = "policy"
    lora_from_layer: int | None = Field(None, ge=0)
    method: Literal["sft", "readout"] = "sft"
    readout_l2: float = Field(1.0e-3, ge=0.0)
    readout_examples: int | None = Field(None, ge=2)
    few_shot: int = Field(4, ge=1)  # Table 13's "base few-shot" baseline: examples from the train set
    eval_batch_size: int = Field(16, ge=1)
    use_in_rewards: bool = True  # klcf_truth / klcf_fact without an rm_model read the trained RM


class WinRateSection(Section):
    """Win rate of the trained policy over the base (Appendix C.4.2, Prompt 8, Eq. 19-20); the
    judge is ``judge`` (the paper's is GPT-4.1) or, unset, the run's ``judge:``, with Prompt 8's
    system turn. ``response``: what the judge reads
    of each response, ``answer`` (the answer part A_i: the ``<answer>`` block, else the text
    outside ``<think>``, ``rewards.qa.answer_of`` lenient; App. C.4.2 ranks the responses on
    "factuality and comprehensiveness", which the reasoning block is not part of, and the base
    model's 10-shot responses have none) or ``full`` (the raw completion, ``<think>`` included)."""

    enabled: bool = True
    max_new_tokens: int = Field(64, ge=8, le=MAX_TOKENS)
    answer: Literal["generate", "choice"] = "generate"  # choice: eval.winrate's constrained first rank
    response: Literal["answer", "full"] = "answer"
    judge: JudgeSection | None = None


class KLCFConfig(TrainingConfig):
    """``notebooks/05_klcf.ipynb``: KLCF end to end (004_4f2ca2d982459bb2.txt)."""

    rewards: list[RewardSpec] = [RewardSpec(name="klcf_fact"), RewardSpec(name="length_penalty"),
                                 RewardSpec(name="format", args={"positive": 0.0, "negative": -1.0})]  # Eq. 10-13
    # Table 8's response length (4,096), above Eq. 11's L_m = 2,048 so that the length penalty can reach its value
    grpo: GRPOSection = GRPOSection(max_completion_length=4096)
    queries: LongformPromptsSection = LongformPromptsSection()
    pipeline: synth.KLCFPipelineSection = synth.KLCFPipelineSection()
    checklist_fallback: Literal["none", "miniworld"] = "none"
    truth_rm: TruthRMSection = TruthRMSection()
    system_prompt: str = P.KLCF_SYSTEM  # Prompt 5
    # Prompt 5's form: ``raw``, as printed (one string ending "Assistant: <think>", no chat
    # template; the paper's RL-zero from a base model, the full params); ``chat``, the same text as
    # a system turn of the model's chat template with no ``<think>`` prefill (chat models, the smoke)
    prompt_form: Literal["raw", "chat"] = "raw"
    constructed_queries: int = Field(4, ge=1)  # held-out queries in the constructed-response table
    # held-out queries whose two constructed answers the efficiency table scores (§3.7, Table 14:
    # 50 responses; 0 = no table)
    efficiency_queries: int = Field(2, ge=0)
    longform_generation: GenerationConfig = GenerationConfig(max_new_tokens=1024)
    longform_recall_k: int = Field(10, ge=1)  # K of Recall@K / F1@K (004 App. C.4 leaves K to the benchmark)
    # where the evaluation's claims find their evidence (``eval.suites.longform_suite``): ``datastore``, each
    # claim's top ``verifier.top_k`` chunks of the whole datastore (004 App. C.4.1, Table 9: "Wiki Retrieval
    # top_k=10 chunk_size=300" per claim); ``prompt_cache``: only the chunks of the documents pre-cached for
    # the query (001 §3.2's training shortcut, not KLCF's protocol)
    longform_retrieval: Literal["datastore", "prompt_cache"] = "datastore"
    # the base model's evaluation: Prompt 1 with this many examples (004 App. C.3, Tables 1-2:
    # "Base (10-shot)"); 0 = zero-shot under the policy's Prompt 5 template instead
    base_few_shot: int = Field(P.KLCF_FEWSHOT_EXAMPLES, ge=0)
    winrate: WinRateSection = WinRateSection()

    @model_validator(mode="after")
    def _truth_rm_adapter(self) -> "KLCFConfig":
        rm = self.truth_rm
        if rm.lora_from_layer is not None and (rm.lora == "none" or (rm.lora == "policy" and self.lora is None)):
            raise ParamError("truth_rm.lora_from_layer", "restricts an adapter to the upper layers, but the reward "
                                                         "model trains every parameter (truth_rm.lora / lora: none)")
        if rm.method == "readout" and rm.lora_from_layer is not None:
            raise ParamError("truth_rm.lora_from_layer", "places an SFT adapter, but truth_rm.method 'readout' trains "
                                                         "only the output layer's True / False rows")
        return self

    @model_validator(mode="after")
    def _klcf_rewards_have_checklists(self) -> "KLCFConfig":
        if self.checklist_fallback == "miniworld" and self.queries.external:
            raise ParamError("checklist_fallback", "'miniworld' fills checklists from the mini-world's facts; "
                                                   "it needs the mini-world queries (queries.path / hf / "
                                                   "heldout_path / heldout_hf unset)")
        return self

    @model_validator(mode="after")
    def _truth_data_matches_queries(self) -> "KLCFConfig":
        if self.truth_rm.data == "miniworld+pipeline" and self.queries.external:
            raise ParamError("truth_rm.data", "'miniworld+pipeline' mixes the mini-world's country facts into the "
                                              "reward model's data; with your own queries (queries.path / hf / "
                                              "heldout_path / heldout_hf) use 'pipeline', the paper's (004 App. D.1)")
        return self


# ---------------------------------------------------------------- queries and the offline pipeline


def queries(cfg: KLCFConfig, resources: Resources) -> tuple[list[LongformPrompt], list[LongformPrompt], dict]:
    """(train, held-out) long-form queries and a report. Stage 3's D(c) and the evaluation
    (``longform_retrieval: datastore``, Table 9) search the whole datastore per claim; only
    ``longform_retrieval: prompt_cache`` pre-caches the datastores for the queries (001 §3.2),
    so its evaluation ranks each claim among its query's cached chunks."""
    train, held = load_prompts(cfg.queries, cfg.world)
    if not train:
        raise ValueError("queries: no training queries (queries.path / train_limit)")
    if cfg.longform_retrieval == "prompt_cache" and held:
        resources.precache(train + held)
    return train, held, {"train": len(train), "heldout": len(held)}


def _miniworld_facts(resources: Resources) -> dict[str, list[str]]:
    facts: dict[str, list[str]] = {}
    for c in read_jsonl(resources.world()["claims"]):
        if c["label"] == "attributable":
            facts.setdefault(c["doc_id"], []).append(c["claim"])
    return facts


def offline_pipeline(cfg: KLCFConfig, resources: Resources, train: Sequence[LongformPrompt],
                     held: Sequence[LongformPrompt], run_dir: str | Path, *, model=None, tokenizer=None
                     ) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """Stages 1-4 (§2.2) on every query into ``run_dir/pipeline`` (cached, resumable); returns
    (query id -> checklist, report). The held-out queries are marked ``split: eval``: their
    checklists serve the constructed-response tables, but their claims never enter D_truth
    (``truth.jsonl``) or the reward model's data (``truth_data``). The report adds
    ``checklists`` counts by source."""
    qs = list(train) + list(held)
    rows = ([{"id": q.id, "prompt": q.prompt, "doc_id": q.doc_id, "split": synth.TRAIN_SPLIT} for q in train]
            + [{"id": q.id, "prompt": q.prompt, "doc_id": q.doc_id, "split": synth.EVAL_SPLIT} for q in held])
    pipe = synth.from_resources(cfg.pipeline, resources, Path(run_dir) / "pipeline", model=model,
                                tokenizer=tokenizer, queries=rows)
    report = pipe.run(rows)
    checklists = {r["id"]: list(r["checklist"]) for r in pipe.checklist_rows()}
    facts = _miniworld_facts(resources) if cfg.checklist_fallback == "miniworld" else {}
    sources = {"pipeline": 0, "miniworld": 0, "none": 0}
    for q in qs:
        if checklists.get(q.id):
            sources["pipeline"] += 1
        elif facts.get(q.doc_id or ""):
            checklists[q.id] = facts[q.doc_id or ""][:cfg.pipeline.checklist_max]
            sources["miniworld"] += 1
        else:
            sources["none"] += 1
    report["checklist_sources"] = sources
    report["labels_by_claim"] = pipe.labels()
    return checklists, report


def policy_prompt(query: str, system: str = P.KLCF_SYSTEM, form: str = "raw", tokenizer=None) -> str | list[dict]:
    """The policy's input for one query under Prompt 5 (004 App. E.2). ``raw``: the printed
    string, ``"<system> User: <query> Assistant: <think>"`` (text; ``tokenizer`` unused);
    ``chat``: a system and a user turn, as messages, or rendered by ``tokenizer``'s chat
    template when one is given."""
    if form == "raw":
        return P.KLCF_RL_ZERO_PROMPT.format(system=system, prompt=query)
    if form != "chat":
        raise ValueError(f"prompt form must be 'raw' or 'chat', got {form!r}")
    if tokenizer is not None:
        return chat_prompt(tokenizer, query, system=system)
    return chat_messages(query, system)


def policy_response(text: str, form: str = "raw") -> str:
    """The whole response to a Prompt 5 input: under the raw form the prompt already opened
    ``<think>``, which is put back in front of the generated text."""
    return P.KLCF_RL_ZERO_PREFILL + text if form == "raw" else text


def klcf_rows(prompts: Sequence[LongformPrompt], checklists: dict[str, list[str]], system: str = P.KLCF_SYSTEM,
              form: str = "chat") -> list[dict[str, Any]]:
    """GRPO rows (queries with a non-empty checklist): the prompt under Prompt 5 (``policy_prompt``;
    under the raw form a ``completion_prefix`` column, ``<think>``, which the trainer puts back in
    front of each completion before the rewards score it), the ``question`` and ``checklist``
    columns the KLCF rewards read, and the long-form columns."""
    rows = []
    for p in prompts:
        if not checklists.get(p.id):
            continue
        row = {"prompt": policy_prompt(p.prompt, system, form), "question": p.prompt, "checklist": checklists[p.id],
               "id": p.id, "prompt_id": p.id, "reference": p.reference}
        if p.meta.get("bucket"):  # the organism's exposure bucket (queries.countries); evidence rows copy it
            row["bucket"] = p.meta["bucket"]
        if form == "raw":
            row["completion_prefix"] = P.KLCF_RL_ZERO_PREFILL
        rows.append(row)
    return rows


# ---------------------------------------------------------------- the truthfulness reward model


def few_shot_template(examples: Sequence[dict[str, Any]], template: str = P.KLCF_TRUTH_PROMPT) -> str:
    """Prompt 6 with labelled examples before the claim (Table 13's "base few-shot")."""
    shots = "".join(f"Claim: {r['claim']}\nFactual correctness: {'True' if r['label'] else 'False'}\n\n"
                    for r in examples)
    return template.replace("Claim: {claim}", shots.replace("{", "{{").replace("}", "}}") + "Claim: {claim}")


def _score(scorer: TruthfulnessScorer, rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    probs = scorer.probabilities([r["claim"] for r in rows])
    return probability_metrics(probs, [bool(r["label"]) for r in rows])


def readout_rm(scorer: TruthfulnessScorer, rm: TruthRMSection, train: Sequence[dict[str, Any]], folder: Path,
               seed: int = 0) -> dict[str, Any]:
    """``truth_rm.method: readout``: ``scorer``'s model (the base, Prompt 6) with new True / False
    output rows fitted on ``train`` (``train.truth_rm.fit_answer_readout``), saved as a full model in
    ``folder``; resumable (a folder whose ``readout.json`` holds its record is kept, the model is not
touched). Returns the fit's
    report."""
    done = StageCache(folder / "readout.json", where="the reward model's readout")
    if (saved := done.record()) is not None:
        return {**saved, "resumed": True}
    rows = list(train)
    if rm.readout_examples is not None and len(rows) > rm.readout_examples:
        rows = random.Random(seed).sample(rows, rm.readout_examples)
    t0 = time.perf_counter()
    states = scorer.answer_states([r["claim"] for r in rows])
    t_id, f_id = scorer.answer_ids()
    model, tok = scorer.load()
    head = model.get_output_embeddings().weight.detach()
    w_true, w_false = fit_answer_readout(states, [bool(r["label"]) for r in rows], head[t_id].float(),
                                         head[f_id].float(), l2=rm.readout_l2)
    seconds = time.perf_counter() - t0
    save_readout_model(model, tok, (t_id, f_id), (w_true, w_false), folder)
    report = {"examples": len(rows), "steps": 1, "seconds": seconds, "l2": rm.readout_l2,
              "row_shift": float((w_true - head[t_id].float()).norm() + (w_false - head[f_id].float()).norm())}
    done.save_record(report)  # last: a folder without it is refitted
    return {**report, "resumed": False}


def truth_rm_model(cfg: KLCFConfig) -> str:
    """The model the truthfulness RM is trained from: ``truth_rm.model``, else the policy's own
    base model ``model.name`` (004 App. D.1, Table 13: one RM per policy size, SFT of the
    pre-trained model of that size)."""
    return cfg.truth_rm.model or cfg.model.name


def truth_data(cfg: KLCFConfig, resources: Resources, pipeline_labels: Mapping[str, str | None] | None = None,
               query_of: Mapping[str, str] | None = None, exclude: Iterable[str] = ()
               ) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train, held-out, report) Eq. 4 rows as ``truth_rm.data`` says: the pipeline's SUPPORT /
    REFUTE claims only (``pipeline``, the paper's; held out by query, ``query_of``: claim -> query
    id) or those plus the mini-world's facts and entity swaps (``miniworld+pipeline``, the smoke's).
    ``exclude``: the evaluation queries' claims (``synth.klcf_truth_data.eval_claims``), in neither set
    (§2.2, Table 12: D_truth from the training sets only), counted as ``eval_claims_excluded``."""
    p, rm = cfg.pipeline, cfg.truth_rm
    ratio, copies = rm.ratio or p.ratio, rm.negative_copies or p.negative_copies
    if rm.data == "pipeline":
        return pipeline_truth_data(pipeline_labels or {}, query_of, ratio=ratio, negative_copies=copies,
                                   heldout_size=p.heldout_size, seed=p.data_seed, exclude=exclude)
    train, heldout, report = miniworld_truth_data(resources.world(), pipeline_claims=pipeline_labels,
                                                  ratio=ratio, negative_copies=copies, heldout_size=p.heldout_size,
                                                  seed=p.data_seed, exclude=exclude)
    return train, heldout, {"source": "miniworld+pipeline", **report}


def run_truth_data(cfg: KLCFConfig, resources: Resources, run_dir: str | Path,
                   pipeline_labels: Mapping[str, str | None] | None = None, query_of: Mapping[str, str] | None = None,
                   exclude: Iterable[str] | None = None) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """``truth_data`` for the run in ``run_dir``: ``query_of`` / ``exclude`` None are read from
    ``run_dir/pipeline`` when the offline pipeline ran there (claim -> query; the claims of its
    ``split: eval`` queries, ``KLCFPipeline.eval_claims``, which never train or test the RM)."""
    if (Path(run_dir) / "pipeline" / synth.STAGE_FILES["extraction"]).exists():
        ran = synth.KLCFPipeline(cfg.pipeline, Path(run_dir) / "pipeline")
        query_of = ran.query_of() if query_of is None else query_of
        exclude = ran.eval_claims() if exclude is None else exclude
    return truth_data(cfg, resources, pipeline_labels, query_of, exclude or ())


def truth_rm(cfg: KLCFConfig, resources: Resources, run_dir: str | Path,
             pipeline_labels: dict[str, str | None] | None = None,
             query_of: Mapping[str, str] | None = None,
             exclude: Iterable[str] | None = None) -> tuple[str | None, dict[str, Any]]:
    """Table 13 on this run: (trained reward model folder or None, report with the data counts
    (``data.eval_claims_excluded``: the held-out queries' claims left out) and accuracy / F1 of
    the base model zero-shot, few-shot and after SFT on the held-out 1 : 1 set). Data:
    ``run_truth_data``. Resumable: a finished SFT is loaded, not retrained."""
    p, rm = cfg.pipeline, cfg.truth_rm
    train, heldout, data = run_truth_data(cfg, resources, run_dir, pipeline_labels, query_of, exclude)
    if not heldout or not train:
        raise ValueError(f"truthfulness data ({rm.data}): {len(train)} train and {len(heldout)} held-out rows "
                         f"(the pipeline needs SUPPORT and REFUTE claims: more queries or a larger nu)")
    report: dict[str, Any] = {"data": data}
    name = truth_rm_model(cfg)
    base, tok = load_model(name, dtype=cfg.model.dtype, device=cfg.model.device)
    zero = TruthfulnessScorer(name, model_obj=base, tokenizer=tok, batch_size=rm.eval_batch_size)
    shots = random.Random(p.data_seed).sample(train, min(rm.few_shot, len(train)))
    few = TruthfulnessScorer(name, model_obj=base, tokenizer=tok, batch_size=rm.eval_batch_size,
                             template=few_shot_template(shots))
    report["base zero-shot"] = _score(zero, heldout)
    report["base few-shot"] = _score(few, heldout)
    fit = None
    if rm.enabled and rm.method == "readout":  # fitted on the base model already loaded here
        folder = str(Path(run_dir) / "truth_rm" / "readout")
        fit = {**readout_rm(zero, rm, train, Path(folder), seed=p.data_seed),
               "method": "readout (the True / False output rows only)"}
    del base, zero, few
    release_memory()
    if not rm.enabled:
        return None, report
    if fit is None:
        rows = [{"prompt": P.KLCF_TRUTH_PROMPT.format(claim=r["claim"]),
                 "completion": " True" if r["label"] else " False"} for r in train]
        lora = cfg.lora if rm.lora == "policy" else None if rm.lora == "none" else rm.lora
        if lora is not None and rm.lora_from_layer is not None:
            lora = lora.model_copy(update={"target_modules": layer_modules(name, lora.target_modules,
                                                                           rm.lora_from_layer)})
        t0 = time.perf_counter()
        result = run_sft(cfg.model_copy(update={"lora": lora}), Dataset.from_list(rows), Path(run_dir) / "truth_rm",
                         model=name, sft=rm.sft, name="klcf-truth-rm")
        folder = merge_adapter(result)
        fit = {"examples": len(rows), "steps": result.steps, "seconds": time.perf_counter() - t0,
               "resumed": result.resumed, "method": "sft",
               "adapter": "none" if lora is None else f"r={lora.r}, {len(lora.target_modules)} modules"}
    trained = TruthfulnessScorer(folder, dtype=cfg.model.dtype, device=cfg.model.device, batch_size=rm.eval_batch_size)
    report["SFT"] = _score(trained, heldout)
    report["sft"] = {**fit, "model": folder}
    del trained
    release_memory()
    return folder, report


def with_truth_model(specs: Sequence[RewardSpec], folder: str | None) -> list[RewardSpec]:
    """``specs`` with every truthfulness reward that names no ``rm_model`` pointed at ``folder``."""
    if folder is None:
        return list(specs)
    out = []
    for s in specs:
        if s.name in TRUTH_REWARDS and not (s.args or {}).get("rm_model"):
            s = s.model_copy(update={"args": {**(s.args or {}), "rm_model": folder}})
        out.append(s)
    return out


# ---------------------------------------------------------------- rewards on constructed responses


def _false_facts(resources: Resources) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in read_jsonl(resources.world()["claims"]):
        if c["label"] != "attributable":
            out.setdefault(c["doc_id"], []).append(c["claim"])
    return out


def constructed_responses(prompt: LongformPrompt, checklist: Sequence[str], false_claims: Sequence[str],
                          pad_sentence: str, pad_copies: int) -> dict[str, str]:
    """Four responses to one query, each in Prompt 5's format (§2.3's trade-offs): every checklist
    fact (complete and true), the first fact only (short and true), every fact plus one false
    claim (long with one false claim), every fact padded with ``pad_copies`` repeats of a
    filler sentence (padded: the length penalty's case)."""
    facts = list(checklist)

    def wrap(answer: str) -> str:
        return f"<think>I recall what I know about the subject.</think> <answer>{answer}</answer>"

    false = false_claims[0] if false_claims else f"{prompt.prompt.split()[-1].rstrip('.')} has no capital."
    return {"complete and true": wrap(" ".join(facts)),
            "short and true": wrap(facts[0]),
            "one false claim": wrap(" ".join(facts + [false])),
            "padded": wrap(" ".join(facts + [pad_sentence] * pad_copies))}


def reward_table(cfg: KLCFConfig, resources: Resources, prompts: Sequence[LongformPrompt],
                 checklists: dict[str, list[str]], truth_folder: str | None) -> tuple[list[dict], dict[str, Any]]:
    """The KLCF rewards on ``constructed_responses`` for up to ``constructed_queries`` queries:
    per response kind, mean recall (Eq. 5), precision (Eq. 6), truth (Eq. 8), R_fact (Eq. 13)
    under each Table 2 weight row, the length penalty (Eq. 11, the run's ``length_penalty`` args)
    and the format reward (Eq. 10). Returns (long rows, stats)."""
    fact_spec = next((s for s in with_truth_model(cfg.rewards, truth_folder) if s.name in TRUTH_REWARDS), None)
    args = KLCFTruthArgs.model_validate({k: v for k, v in ((fact_spec.args or {}) if fact_spec else {}).items()
                                         if k in KLCFTruthArgs.model_fields})
    if truth_folder and not args.rm_model:
        args = args.model_copy(update={"rm_model": truth_folder})
    lp_spec = next((s for s in cfg.rewards if s.name == "length_penalty"), None)
    lp_args = LengthPenaltyArgs.model_validate(lp_spec.args or {}) if lp_spec else LengthPenaltyArgs()
    verifier = checklist_verifier(args, resources)
    truth = claim_truth(args, resources)
    length = LengthPenalty(resources.policy_tokenizer(), lp_args)
    false = _false_facts(resources)
    chosen = [p for p in prompts if checklists.get(p.id)][:cfg.constructed_queries]
    if not chosen:
        raise ValueError("no held-out query has a checklist: nothing to construct responses from")
    pad = "This is a widely discussed subject with a long and varied history."
    pad_copies = max(1, (lp_args.max_len - lp_args.critical) // 12 + lp_args.critical // 12)
    per_kind: dict[str, list[dict[str, float]]] = {}
    t0 = time.perf_counter()
    for p in chosen:
        responses = constructed_responses(p, checklists[p.id], false.get(p.doc_id or "", []), pad, pad_copies)
        kinds = list(responses)
        texts = [responses[k] for k in kinds]
        answers = [r.split("<answer>", 1)[1].rsplit("</answer>", 1)[0] for r in texts]
        labels = verifier.labels([p.prompt] * len(kinds), answers, [checklists[p.id]] * len(kinds))
        truths = truth.truths([p.prompt] * len(kinds), texts, [p.prompt] * len(kinds), [checklists[p.id]] * len(kinds))
        lens = length.lengths(texts)
        for kind, text, lab, t, n in zip(kinds, texts, labels, truths, lens):
            s = verdict_scores(lab)
            row = {"recall": s["recall"] if s else math.nan, "precision": s["precision"] if s else math.nan,
                   "truth": t if t is not None else math.nan,
                   "length penalty": length_penalty(n, lp_args.max_len, lp_args.critical),
                   "format": format_reward(text), "answer tokens": n}
            for kappa, lam, mu in TABLE2_WEIGHTS:
                if kappa + lam + mu == 0:
                    continue  # Table 2's base-model reference row
                # Eq. 13's weighted sum with Table 2's row as printed (one row sums to 5/4)
                row[f"R_fact {kappa:.2g}/{lam:.2g}/{mu:.2g}"] = (
                    kappa * row["recall"] + lam * row["precision"] + mu * row["truth"]
                    if s is not None and t is not None else math.nan)
            per_kind.setdefault(kind, []).append(row)
    rows = []
    for kind, rs in per_kind.items():
        for key in rs[0]:
            vals = [r[key] for r in rs if not (isinstance(r[key], float) and math.isnan(r[key]))]
            rows.append({"response": kind, "reward": key, "mean": sum(vals) / len(vals) if vals else math.nan})
    stats = {"queries": len(chosen), "seconds": time.perf_counter() - t0,
             "judge_calls": verifier.stats["judge_calls"], "unreadable_verdicts": verifier.stats["unreadable"],
             "outside_labels": verifier.stats["outside_labels"],
             "truth_model": args.rm_model or cfg.model.name}
    return rows, stats


EFFICIENCY_KINDS = ("complete and true", "one false claim")  # the constructed responses Table 14 is run on
EFFICIENCY_BASELINES = ("factscore", "veriscore")


def efficiency_table(cfg: KLCFConfig, resources: Resources, prompts: Sequence[LongformPrompt],
                     checklists: dict[str, list[str]], truth_folder: str | None, max_queries: int | None = None):
    """004 §3.7 / Table 14 (App. D.3) on this run: per response, the seconds, judge calls,
    searches and input / output tokens of the run's ``klcf_fact`` (as configured, truthfulness RM
    = ``truth_folder``) and of the FActScore-style and VeriScore rewards, all on the same
    ``EFFICIENCY_KINDS`` responses of up to ``max_queries`` held-out queries (default
    ``constructed_queries``). Judges skip the answer cache so every call counts, and every
    in-process model is loaded before the clock starts (``eval.cost.warm_up``); "serial" is the run's
    judge as configured (its own batching). Returns (costs table with speed-up columns like
    Table 14's, scores per reward)."""
    fact = next((s for s in with_truth_model(cfg.rewards, truth_folder) if s.name == "klcf_fact"), None)
    specs = [fact or RewardSpec(name="klcf_fact")] + [RewardSpec(name=n) for n in EFFICIENCY_BASELINES]
    built = build_rewards(specs, resources.uncached_judges())
    false = _false_facts(resources)
    chosen = [p for p in prompts if checklists.get(p.id)][:max_queries or cfg.constructed_queries]
    if not chosen:
        raise ValueError("no held-out query has a checklist: nothing to construct responses from")
    responses = []
    for p in chosen:
        built_responses = constructed_responses(p, checklists[p.id], false.get(p.doc_id or "", []), "", 1)
        responses += [{"prompt": p.prompt, "response": built_responses[k], "prompt_id": p.id,
                       "question": p.prompt, "checklist": checklists[p.id]} for k in EFFICIENCY_KINDS]
    scores, costs = compare_rewards(dict(zip(built.names, built.funcs)), responses)
    table = pd.DataFrame(costs).T.rename(index={"klcf_fact": "KLCF (klcf_fact)", "factscore": "FActScore",
                                               "veriscore": "VeriScore"})
    for base in ("FActScore", "VeriScore"):
        table[f"speed-up vs {base}"] = table.loc[base, "seconds"] / table["seconds"]
    return table, scores


# ---------------------------------------------------------------- training and evaluation


def train_run(cfg: KLCFConfig, rows: Sequence[dict[str, Any]], resources: Resources, out_dir: str | Path,
              truth_folder: str | None = None) -> TrainResult:
    """GRPO with ``cfg.rewards`` (Table 8: from the base model, no KL) into ``out_dir/<rewards>``;
    the truthfulness rewards read ``truth_folder`` when ``truth_rm.use_in_rewards``; resumable."""
    if not rows:
        raise ValueError("no training query has a checklist (offline pipeline); set checklist_fallback or "
                         "raise pipeline.nu / the query count")
    specs = with_truth_model(cfg.rewards, truth_folder if cfg.truth_rm.use_in_rewards else None)
    rewards = build_rewards(specs, resources)
    name = "+".join(rewards.names)
    return run(cfg, list(rows), rewards, Path(out_dir) / name, name=f"klcf-{name}")


def base_fewshot_examples(cfg: KLCFConfig, resources: Resources, prompts: Sequence[LongformPrompt]
                          ) -> list[tuple[str, str]]:
    """The base model's ``base_few_shot`` Prompt 1 examples (004 App. C.3 "Base (10-shot)"): from
    the pipeline's few-shot source (``pipeline.few_shot_source``: the run's corpus or your file),
    none about an evaluated prompt."""
    return synth.fewshot_examples(cfg.pipeline, synth.corpus_path(resources), list(prompts), n=cfg.base_few_shot,
                                  text_field=cfg.datastore.text_field)


def longform_eval(cfg: KLCFConfig, resources: Resources, model, tokenizer, prompts: Sequence[LongformPrompt],
                  who: str, *, base: bool = False):
    """§4.1: Precision, Recall@K, F1@K and FActScore of the answer part (claims extracted,
    retrieved, verified by the run's claim verifier) on the held-out queries; each claim's
    evidence is its top ``verifier.top_k`` chunks of the whole datastore (App. C.4.1, Table 9;
    ``longform_retrieval: prompt_cache``: of its query's pre-cached chunks). A trained policy
    answers under Prompt 5; the base model (``base``) 10-shot, as Tables 1-2's "Base (10-shot)"
    row (App. C.3): Prompt 1 with ``base_few_shot`` examples (``base_fewshot_examples``), the raw
    text (no chat template, as Stage 1 samples it), each response cut where it starts the next
    ``[Question]:``. ``base_few_shot: 0`` evaluates the base zero-shot under Prompt 5."""
    kwargs: dict[str, Any] = {"system": cfg.system_prompt}
    if cfg.prompt_form == "raw":
        kwargs = {"render": lambda p: policy_prompt(p.prompt, cfg.system_prompt, "raw"), "cut": policy_response}
    if base and cfg.base_few_shot:
        examples = base_fewshot_examples(cfg, resources, prompts)
        kwargs = {"render": lambda p: fewshot_prompt(p.prompt, examples), "cut": cut_at_next_question}
    return evaluate("longform", model, tokenizer, list(prompts), cfg.longform_generation,
                    verifier=resources.claim_verifier(), k=cfg.longform_recall_k, tag=who,
                    answer_parsing="lenient", retrieval=cfg.longform_retrieval, **kwargs)


def win_rate(cfg: KLCFConfig, prompts: Sequence[LongformPrompt], base_responses: Sequence[str],
             trained_responses: Sequence[str], judge=None) -> dict[str, Any]:
    """WR of the trained policy (B) over the base (A), both orders (Eq. 19-20), Prompt 8 judge
    (``judge``: default the run's ``judge:`` with Prompt 8's system turn). With ``winrate.response:
    answer`` the judge reads each response's answer part, never its ``<think>`` block."""
    if judge is None:
        judge = make_judge(cfg.winrate.judge or cfg.judge, system=P.KLCF_WIN_RATE_SYSTEM,
                           max_new_tokens=cfg.winrate.max_new_tokens)

    res = evaluate("win_rate", None, None, list(prompts), cfg.longform_generation, judge=judge,
                   baseline=base_responses, responses=trained_responses, answer=cfg.winrate.answer,
                   answer_parsing=None if cfg.winrate.response == "full" else "lenient")
    out = {**res.metrics["win_rate"], "answers": res.records["win_rate"]["answers"],
           "per_instance": res.records["win_rate"]["per_instance"]}
    out["judge"] = judge.summary() if hasattr(judge, "summary") else {}
    out["response"] = cfg.winrate.response
    return out


def headline(cfg: KLCFConfig, prompts: Sequence[LongformPrompt], before: SuiteResult, after: SuiteResult,
             steps: int, rm_report: Mapping[str, Any], win: Mapping[str, Any] | None) -> dict[str, str | float]:
    """§4's claim on the notebook's one run (section 5's single run of ``steps`` steps, base ->
    KLCF): the KB precision and supported sentences per held-out answer by the mini-world's
    exact truth (a true sentence about another country is off topic), the truthfulness RM's
    accuracy (zero-shot -> trained), long-form precision by the judge's verifier, FActScore and
    the win rate over base. ``before`` / ``after``: ``longform_eval``'s. An evidence cell's
    interval leads it."""
    questions = [p.prompt for p in prompts]
    kb_before = sentence_truth(before.records["longform"]["responses"], questions=questions)
    kb_after = sentence_truth(after.records["longform"]["responses"], questions=questions)
    lf_before, lf_after = before.metrics["longform"], after.metrics["longform"]
    run = f"section 5's single run, {steps} steps"
    out: dict[str, str | float] = {
        f"KB precision of held-out answers ({run}: base → KLCF)": before_after(kb_before["kb_precision"],
                                                                              kb_after["kb_precision"]),
        f"supported sentences per held-out answer ({run}: base → KLCF)": before_after(kb_before["supported"],
                                                                                     kb_after["supported"])}
    if "SFT" in rm_report:
        out[f"truthfulness RM accuracy (zero-shot → {cfg.truth_rm.method})"] = before_after(
            rm_report["base zero-shot"]["accuracy"], rm_report["SFT"]["accuracy"])
    out[f"long-form precision, the judge's verifier ({run}: base → KLCF)"] = before_after(lf_before["precision"],
                                                                                         lf_after["precision"])
    out[f"FActScore ({run}: base → KLCF)"] = before_after(lf_before["factscore"], lf_after["factscore"])
    if win:
        out[f"win rate over base ({run})"] = win["win_rate"]
    return out


def policy_samples(model, tokenizer, prompts: Sequence[LongformPrompt], cfg: KLCFConfig) -> list[str]:
    """Greedy responses under Prompt 5 (for tables beside the metrics)."""
    g = cfg.longform_generation
    gens = generate(model, tokenizer, [policy_prompt(p.prompt, cfg.system_prompt, cfg.prompt_form, tokenizer)
                                       for p in prompts],
                    max_new_tokens=g.max_new_tokens, batch_size=g.batch_size, desc="klcf samples")
    return [policy_response(gs[0].text, cfg.prompt_form) for gs in gens]


# ---------------------------------------------------------------- the stages (notebook 05 and factlab train)


@dataclass
class KLCFInputs:
    """What KLCF's GRPO reads, and what the notebook shows of its preparation."""

    train: list[LongformPrompt]
    heldout: list[LongformPrompt]
    query_report: dict[str, Any]
    checklists: dict[str, list[str]]
    pipeline: dict[str, Any]  # offline_pipeline's report (labels_by_claim included)
    truth_folder: str | None  # the trained truthfulness RM (None: off)
    truth_report: dict[str, Any]
    rows: list[dict[str, Any]]  # the GRPO rows: training queries with their checklists

    @property
    def size(self) -> int:
        return len(self.rows)

    @classmethod
    def of(cls, cfg: KLCFConfig, train: Sequence[LongformPrompt], heldout: Sequence[LongformPrompt],
           query_report: dict[str, Any], checklists: dict[str, list[str]], pipeline: dict[str, Any],
           truth_folder: str | None, truth_report: dict[str, Any]) -> "KLCFInputs":
        """The stages' outputs, the GRPO rows built from them (``klcf_rows`` under Prompt 5)."""
        return cls(list(train), list(heldout), query_report, checklists, pipeline, truth_folder, truth_report,
                   klcf_rows(train, checklists, cfg.system_prompt, cfg.prompt_form))


def pipeline_stage(cfg: KLCFConfig, resources: Resources, run_dir: str | Path, model=None, tokenizer=None
                   ) -> tuple[list[LongformPrompt], list[LongformPrompt], dict, dict[str, list[str]], dict]:
    """§2.2: the queries (datastores pre-cached) and Stages 1-4 on them with the base model
    (``model``, else loaded here and released) into ``run_dir/pipeline`` (cached, resumable):
    (train queries, held-out queries, query report, checklists, pipeline report)."""
    train_q, held_q, q_report = queries(cfg, resources)
    own = model is None
    if own:
        model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device=cfg.model.device,
                                      adapter=cfg.model.adapter)
    try:
        checklists, pipe = offline_pipeline(cfg, resources, train_q, held_q, run_dir, model=model, tokenizer=tokenizer)
    finally:
        if own:
            del model
            release_memory()
    return train_q, held_q, q_report, checklists, pipe


def reward_model_stage(cfg: KLCFConfig, resources: Resources, run_dir: str | Path,
                       pipeline_labels: dict[str, str | None] | None) -> tuple[str | None, dict[str, Any]]:
    """Table 13: ``truth_rm`` into ``run_dir/truth_rm``; its report written to
    ``run_dir/truth_rm/report.json`` (a one-record ``StageCache``) and read back by a later call (a launched process, a
    resumed notebook) instead of scoring the base model again."""
    done = StageCache(Path(run_dir) / TRUTH_REPORT, check=_truth_report_ok, where="the reward model's report")
    saved = done.record()
    if saved is not None and (saved["folder"] is None or Path(saved["folder"]).exists()):
        return saved["folder"], saved["report"]
    folder, report = truth_rm(cfg, resources, run_dir, pipeline_labels)
    done.save_record({"folder": folder, "report": report})
    return folder, report


def _truth_report_ok(row: dict[str, Any]) -> bool:
    return (row.get("folder") is None or isinstance(row["folder"], str)) and isinstance(row.get("report"), dict)


def prepare(cfg: KLCFConfig, resources: Resources, run_dir: str | Path) -> KLCFInputs:
    """``pipeline_stage`` then ``reward_model_stage`` (the main process of a launch first; when
    the reward model is fine-tuned, ``factlab train`` has run this once in its own process
    before, so the launched processes read both from ``run_dir``), and the GRPO rows."""
    with main_process_first():
        train_q, held_q, q_report, checklists, pipe = pipeline_stage(cfg, resources, run_dir)
        folder, rm_report = reward_model_stage(cfg, resources, run_dir, pipe["labels_by_claim"])
    return KLCFInputs.of(cfg, train_q, held_q, q_report, checklists, pipe, folder, rm_report)


def prepare_alone(cfg: KLCFConfig) -> bool:
    """The warm start, or the reward model's SFT (``truth_rm.method: sft``), trains: ``factlab
    train`` prepares in its own process first (a readout is a fit, not a launched training)."""
    return warm_start_trains(cfg) or (cfg.truth_rm.enabled and cfg.truth_rm.method == "sft")


def train(cfg: KLCFConfig, inputs: KLCFInputs, resources: Resources, run_dir: str | Path
          ) -> dict[str, TrainResult]:
    """``train_run`` on the rows into ``run_dir/train``, the truthfulness rewards reading the
    trained RM; the one run by name."""
    result = train_run(cfg, inputs.rows, resources, Path(run_dir) / RECIPE.train_dir, inputs.truth_folder)
    return {result.name: result}


RECIPE = Recipe(notebook="05_klcf", config=KLCFConfig, prepare=prepare, train=train,
                headline=headline,
                what=("offline checklist pipeline and truthfulness reward model (prepared once, in their own process "
                      "when they train), then one GRPO run"),
                prepare_alone=prepare_alone)
