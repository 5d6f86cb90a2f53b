"""CorVer end to end (000_ac66a963fabf3916.txt): params, the self-filtered question pool, and
the ablation runs from one start.

Index (paper section -> function; ``../shared/papers/000_ac66a963fabf3916.txt``):

=====================================  ==============================================================
§A.1-A.2 recipe, §6.2 ablations        ``CorVerConfig`` (params), ``ablation_rewards`` (A1-A3)
§A.3 training prompt                   ``qa_rows``
§A.2 / §A.4 learning-zone self-filter  ``self_filter_pool``, ``select_questions`` (loads the model)
§3, Eq. 4 (token-level GRPO)           ``train_ablations`` (one run per ``runs`` ablation)
§3.2 sentence co-occurrence reward     ``rewards.corver`` (``content_words``, ``count_to_reward``), counted
                                       by ``corpus.infinigram.CorpusIndex.cooccurrence`` (§B.1)
§3.4 token-to-sentence alignment       ``rewards.corver.token_returns``, ``train.stepwise_grpo``
                                       (``token_level_advantages``)
§5.1 headline (fewer contradictions)   ``headline`` (``contradicted_per_answer``: the exact truth)
§5.3 reward computation cost           ``eval.cost`` (``time_sentence_rewards``)
§6.1 reward signal calibration         ``eval.calibration`` (``audit_sentences``)
stages (notebook 01, factlab train)    ``start`` (warm start) -> ``prepare`` -> ``train``
=====================================  ==============================================================

§3 (method), §A.1-A.2 (recipe), §6.2 (ablations A1-A3). The reward math lives in
``factlab.rewards.corver`` (registered as ``corver``, a per-token shaping reward, and
``corver_scalar``); the trainer in ``train.trainer`` / ``train.stepwise_grpo``; this module
wires them from a ``CorVerConfig`` so the notebook stays thin.

The params' ``rewards:`` list is the full method, by default
``qa_judge + format + corver`` (R_t = lambda_j R^j + lambda_f R^f + lambda_c r^c_sigma(t),
Eq. 4; the weights are the lambdas). ``runs`` names the ablations of §6.2 / Table 2, each
derived from that list (``ablation_rewards``):

- ``full``: the list as written.
- ``A1``: without ``corver`` (vanilla GRPO on judge + format).
- ``A2``: ``qa_judge`` weight 0 (per-token co-occurrence + format, no judge).
- ``A3``: ``corver`` replaced by ``corver_scalar``: the same sentence rewards averaged
  into one response-level scalar, no per-token alignment.
- A4 (no self-filter) is ``self_filter.enabled: false``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Mapping, Sequence

import pandas as pd
from pydantic import Field, model_validator

from ..config import ParamError
from ..data import TrainDataConfig, load_eval_set
from ..data.types import QAItem
from ..eval.calibration import CalibrationSection
from ..eval.headline import before_after
from ..eval.truth import contradicted_per_answer as _contradicted
from ..experiment import TrainingConfig
from ..paths import cache_dir
from ..prompts import CORVER_TRAIN_SYSTEM, chat_messages
from ..rewards import Resources, RewardSpec, build_rewards
from ..rewards.corver import CorVerArgs
from ..models import load_model, release_memory
from ..train.grpo import TrainResult, run
from . import selffilter
from .stages import Recipe, main_process_first, start

log = logging.getLogger(__name__)

__all__ = ["CorVerConfig", "ABLATIONS", "ablation_rewards", "qa_rows", "training_pool", "prompts_per_step",
           "SelfFilterOutcome", "self_filter_pool", "train_ablations", "select_questions", "contradicted_per_answer",
           "headline", "start", "prepare", "train", "RECIPE"]

ABLATIONS = {
    "full": "judge + format + per-token co-occurrence (CorVer)",
    "A1": "judge + format only (vanilla GRPO, no co-occurrence)",
    "A2": "format + per-token co-occurrence (no judge)",
    "A3": "judge + format + co-occurrence averaged into a response scalar",
}
Ablation = Literal["full", "A1", "A2", "A3"]
_NEEDS_CORVER = ("full", "A2", "A3")


class CorVerConfig(TrainingConfig):
    """``notebooks/01_corver.ipynb``: CorVer end to end (000_ac66a963fabf3916.txt)."""

    rewards: list[RewardSpec] = [RewardSpec(name="qa_judge"), RewardSpec(name="format"), RewardSpec(name="corver")]
    train_data: TrainDataConfig = TrainDataConfig()
    self_filter: selffilter.SelfFilterConfig = selffilter.SelfFilterConfig()
    runs: list[Ablation] = ["full", "A1"]  # trained from the same start
    calibration: CalibrationSection = CalibrationSection()
    trace_completions: int = Field(3, ge=0)  # per-sentence traces shown (§B.6)

    @model_validator(mode="after")
    def _ablations_have_their_rewards(self) -> "CorVerConfig":
        names = [s.name for s in self.rewards]
        if "corver" not in names and any(r in _NEEDS_CORVER for r in self.runs):
            raise ParamError("runs", f"runs {[r for r in self.runs if r in _NEEDS_CORVER]} are ablations of the "
                                     f"corver reward, which the rewards list lacks ({', '.join(names)})")
        if "A2" in self.runs and "qa_judge" not in names:
            raise ParamError("runs", "A2 removes the qa_judge reward, which the rewards list lacks")
        return self

    def corver_args(self) -> CorVerArgs:
        """The ``corver`` reward's arguments (defaults when the list has none): the same
        constants drive training, the calibration audit and the traces."""
        spec = next((s for s in self.rewards if s.name == "corver"), None)
        return spec.parsed_args() if spec else CorVerArgs()


def ablation_rewards(specs: Sequence[RewardSpec], run: str) -> list[RewardSpec]:
    """The reward list of one §6.2 ablation, derived from the full method's list."""
    if run not in ABLATIONS:
        raise ValueError(f"unknown CorVer run {run!r}; choose from {sorted(ABLATIONS)}")
    out = []
    for s in specs:
        if s.name == "corver" and run == "A1":
            continue
        if s.name == "corver" and run == "A3":
            s = RewardSpec(name="corver_scalar", weight=s.weight, args=s.args)
        elif s.name == "qa_judge" and run == "A2":
            s = s.model_copy(update={"weight": 0.0})
        out.append(s)
    return out


def qa_rows(items: Sequence[QAItem], system: str | None = CORVER_TRAIN_SYSTEM) -> list[dict]:
    """GRPO rows: the chat prompt (system + raw question, 000 §A.3; ``system`` None: the question
    alone), ``golds`` and ``id``."""
    return [{"prompt": chat_messages(it.question, system),
             "golds": list(it.golds), "id": it.id, **_bucket(it)} for it in items]


def _bucket(item: QAItem) -> dict[str, str]:
    """An organism question's exposure bucket (``factlab.organism.qa_items``), as a row column."""
    return {"bucket": str(item.meta["bucket"])} if item.meta.get("bucket") else {}


def prompts_per_step(cfg: CorVerConfig) -> int:
    """Distinct prompts in one optimizer step: B x grad-accum / G."""
    g = cfg.grpo
    return g.per_device_train_batch_size * g.gradient_accumulation_steps // g.num_generations


def training_pool(kept: Sequence[QAItem], pool: Sequence[QAItem], min_questions: int) -> tuple[list[QAItem], str | None]:
    """The self-filtered questions, or the whole pool (with a warning returned and logged)
    when fewer than ``min_questions`` survive (one optimizer step needs that many prompts)."""
    if len(kept) >= min_questions:
        return list(kept), None
    msg = (f"the learning zone holds {len(kept)} questions, fewer than the {min_questions} one step needs; "
           f"training on the whole pool of {len(pool)}")
    log.warning(msg)
    return list(pool), msg


@dataclass
class SelfFilterOutcome:
    """The question pool, the self-filter's buckets (None when disabled) and what trains."""

    pool: list[QAItem]
    kept: list[QAItem]  # the learning zone (plus anchors)
    table: pd.DataFrame | None
    train_items: list[QAItem]
    note: str | None  # why the whole pool was used instead of the learning zone, if it was

    @property
    def size(self) -> int:
        return len(self.train_items)


def self_filter_pool(cfg: CorVerConfig, model, tokenizer) -> SelfFilterOutcome:
    """§A.2 / §A.4: load the candidate pool (``train_data``), sample G completions per question
    from the raw ``model`` (cached under ``<cache>/selffilter``, resumable) and keep the
    learning zone; fall back to the whole pool when one step's worth does not survive."""
    pool = load_eval_set(cfg.train_data, cfg.world)
    sf = cfg.self_filter
    if not sf.enabled:
        kept, table = pool, None
    else:
        sf = sf.model_copy(update={"model_name": sf.model_name or cfg.model.name})
        results = selffilter.count_correct(model, tokenizer, pool, sf,
                                           cache_path=cache_dir() / "selffilter" / "corver.jsonl")
        kept, table = selffilter.select_learning_zone(results, sf)
    items, note = training_pool(kept, pool, prompts_per_step(cfg))
    return SelfFilterOutcome(pool, list(kept), table, items, note)


def train_ablations(cfg: CorVerConfig, items: Sequence[QAItem], resources: Resources,
                    out_dir: str | Path) -> dict[str, TrainResult]:
    """Every run of ``cfg.runs`` from the same start into ``out_dir/<run>`` (resumable)."""
    rows = qa_rows(items)
    results = {}
    for name in cfg.runs:
        rewards = build_rewards(ablation_rewards(cfg.rewards, name), resources)
        log.info("CorVer %s: %s", name, rewards.describe())
        results[name] = run(cfg, rows, rewards, Path(out_dir) / name, name=f"corver-{name}")
    return results


# ---------------------------------------------------------------- the stages (notebook 01 and factlab train)



def contradicted_per_answer(records: Sequence) -> float:
    """The hypothesis metric of notebook 01's headline and of ``organism_corver`` (README
    "Evidence"): contradicted sentences per held-out answer by the exact truth, over one eval
    set's records (each with ``completion`` and ``question``)."""
    return _contradicted([r.completion for r in records], [r.question for r in records])


def headline(records: Mapping[str, Mapping[str, Sequence]], metrics: Mapping[str, Mapping[str, Mapping]],
             start: str, runs: Sequence[str], steps: int, eval_set: str) -> dict[str, str]:
    """§5.1's claim on the notebook's own run (one seed, ``steps`` steps): contradicted sentences
    per held-out answer and held-out accuracy on ``eval_set``, the start model (``start``, e.g.
    ``warm``) -> the ``full`` run (else the first of ``runs``). ``records`` / ``metrics``: the
    short-form suite's, per model then eval set. An evidence cell's interval leads it."""
    trained = "full" if "full" in runs else runs[0]
    run = f"{start} → {trained}, {steps} steps, one seed"
    return {f"contradicted sentences per held-out answer ({run})":
            before_after(contradicted_per_answer(records[start][eval_set]),
                         contradicted_per_answer(records[trained][eval_set])),
            f"held-out accuracy ({run})":
            before_after(metrics[start][eval_set]["accuracy"], metrics[trained][eval_set]["accuracy"])}


def select_questions(cfg: CorVerConfig, model=None, tokenizer=None) -> SelfFilterOutcome:
    """§A.2 / §A.4: the candidate pool, self-filtered by the start model when
    ``self_filter.enabled`` (cached, so a second process or a resumed notebook reads it). Without
    ``model`` the start model is loaded here and released after."""
    if not cfg.self_filter.enabled or model is not None:
        return self_filter_pool(cfg, model, tokenizer)
    model, tokenizer = load_model(cfg.model.name, dtype=cfg.model.dtype, device=cfg.model.device,
                                  adapter=cfg.model.adapter)
    try:
        return self_filter_pool(cfg, model, tokenizer)
    finally:
        del model
        release_memory()


def prepare(cfg: CorVerConfig, resources: Resources, run_dir: str | Path) -> SelfFilterOutcome:
    """The self-filtered training questions (``select_questions``, the start model loaded and
    released here); the main process of a launch first. The notebook shows its buckets."""
    with main_process_first():
        return select_questions(cfg)


def train(cfg: CorVerConfig, inputs: SelfFilterOutcome, resources: Resources, run_dir: str | Path
          ) -> dict[str, TrainResult]:
    """Every ``runs`` ablation on ``prepare``'s training questions into ``run_dir/train/<run>``
    (``train_ablations``; resumable)."""
    return train_ablations(cfg, inputs.train_items, resources, Path(run_dir) / RECIPE.train_dir)


RECIPE = Recipe(notebook="01_corver", config=CorVerConfig, prepare=prepare, train=train,
                headline=headline,
                what="self-filtered mini-world questions; one GRPO run per `runs` ablation")
