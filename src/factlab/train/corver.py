"""CorVer runs: the index, the reward channels of each ablation, one training run.

000_ac66a963fabf3916.txt §3 (method), §A.1-A.2 (recipe), §6.2 (ablations A1-A3). The
reward math lives in ``factlab.rewards.corver``; the trainer in ``stepwise_grpo``; this
module wires them from a ``CorVerConfig`` so the notebook stays thin.

Ablations (``runs`` in params):

- ``full``: R^r = lambda_f R^f + lambda_j R^j, plus the per-token co-occurrence term.
- ``A1``: no co-occurrence (vanilla GRPO on judge + format).
- ``A2``: no judge (lambda_j = 0), per-token co-occurrence + format.
- ``A3``: co-occurrence averaged into a response-level scalar, no per-token alignment.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config import CorVerConfig
from ..corpus import CorpusIndex
from ..data.types import QAItem
from ..rewards.corver import CooccurrenceScalarReward, CorVerRewardConfig, CorVerScorer, CorVerTokenShaping
from ..rewards.qa import FormatReward, JudgeReward
from ..rewards.triplets import get_extractor

log = logging.getLogger(__name__)

ABLATIONS = {
    "full": "judge + format + per-token co-occurrence (CorVer)",
    "A1": "judge + format only (vanilla GRPO, no co-occurrence)",
    "A2": "format + per-token co-occurrence (no judge)",
    "A3": "judge + format + co-occurrence averaged into a response scalar",
}


def default_index_dir(corpus: str | Path, tokenizer: str) -> Path:
    """``<cache>/indexes/<corpus stem>-<tokenizer>-<hash of corpus path, size, mtime>``."""
    from ..models import cache_dir

    p = Path(corpus).absolute()
    st = p.stat()
    key = hashlib.sha1(f"{p}|{st.st_size}|{st.st_mtime_ns}|{tokenizer}".encode()).hexdigest()[:10]
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(tokenizer).name)
    return cache_dir() / "indexes" / f"{p.stem}-{slug}-{key}"


def ensure_index(cfg: CorVerConfig, world_corpus: str | Path | None = None, progress: bool = True) -> CorpusIndex:
    """Load the configured index, building it first when absent (§B.1).

    ``index.dir`` set and present: loaded as is. Otherwise the index of ``index.corpus``
    (default: the mini-world corpus) with ``index.tokenizer`` (default: the policy's) is
    built under the cache, keyed by corpus file and tokenizer, and reused next time.
    """
    ic = cfg.index
    if ic.dir and Path(ic.dir).exists():
        return CorpusIndex.load(ic.dir)
    corpus = ic.corpus or world_corpus
    if corpus is None:
        raise ValueError("index.corpus is not set and no mini-world corpus was given")
    if not Path(corpus).is_file():
        raise FileNotFoundError(f"index.corpus: {corpus} does not exist")
    tokenizer = ic.tokenizer or cfg.model.name
    out = Path(ic.dir) if ic.dir else default_index_dir(corpus, tokenizer)
    try:
        return CorpusIndex.load(out)
    except FileNotFoundError:
        pass
    log.info("building the co-occurrence index of %s into %s", corpus, out)
    return CorpusIndex.build(corpus, tokenizer, out, text_field=ic.text_field, shard_tokens=ic.shard_tokens,
                             progress=progress)


def make_scorer(cfg: CorVerConfig, index: CorpusIndex, count_limit: int | None = 20) -> CorVerScorer:
    """Extractor + index + Eq. (2) constants. ``count_limit`` stops counting at tau_2 (the
    reward cannot tell 20 from 20,000); pass None for exact counts in traces and audits."""
    rc = CorVerRewardConfig.from_params(cfg.reward, cfg.extractor, cfg.index)
    rc.count_limit = count_limit
    ex = cfg.extractor
    extractor = get_extractor(ex.name) if ex.name == "heuristic" else get_extractor(
        ex.name, batch_size=ex.batch_size, max_new_tokens=ex.max_new_tokens)
    window = rc.window

    def count(words: Sequence[str]) -> int:
        return index.cooccurrence(list(words), window, limit=count_limit)

    return CorVerScorer(extractor, count, rc)


@dataclass
class RewardSetup:
    """Everything the trainer needs for one ablation."""

    run: str
    reward_funcs: list[Callable]
    reward_weights: list[float]
    token_shaping: CorVerTokenShaping | None


def reward_setup(run: str, cfg: CorVerConfig, scorer: CorVerScorer, tokenizer) -> RewardSetup:
    """Reward channels of one run (§3.3-3.4, §6.2 ablations)."""
    if run not in ABLATIONS:
        raise ValueError(f"unknown CorVer run {run!r}; choose from {sorted(ABLATIONS)}")
    r = cfg.reward
    funcs: list[Callable] = [FormatReward(*r.format_rewards), JudgeReward(r.judge_rewards, r.answer_parsing)]
    weights = [r.lambda_f, 0.0 if run == "A2" else r.lambda_j]
    shaping = None
    if run in ("full", "A2"):
        shaping = CorVerTokenShaping(scorer, tokenizer)
    elif run == "A3":
        funcs.append(CooccurrenceScalarReward(scorer))
        weights.append(1.0)  # lambda_c is applied inside the scalar
    return RewardSetup(run, funcs, weights, shaping)


def train_run(run: str, cfg: CorVerConfig, items: Sequence[QAItem], scorer: CorVerScorer, out_dir: str | Path,
              system: str | None = None):
    """Train one ablation from the configured start (a fresh model load) into ``out_dir/run``."""
    from .. import models
    from ..prompts import CORVER_TRAIN_SYSTEM
    from .grpo import grpo_args, qa_prompt_dataset, train_grpo

    model, tok = models.load_model(cfg.model.name, dtype=cfg.model.dtype, device=cfg.model.device,
                                   adapter=cfg.model.adapter)
    model.train()
    ds, dropped = qa_prompt_dataset(items, system or CORVER_TRAIN_SYSTEM, tok, cfg.grpo.max_prompt_length)
    setup = reward_setup(run, cfg, scorer, tok)
    args = grpo_args(cfg.grpo, Path(out_dir) / run, run_name=f"corver-{run}")
    kwargs: dict[str, Any] = {}
    if setup.token_shaping is not None:
        kwargs["token_shaping"] = setup.token_shaping
    result = train_grpo(f"corver-{run}", model, tok, ds, setup.reward_funcs, args, lora=cfg.lora,
                        reward_weights=setup.reward_weights, **kwargs)
    if dropped:
        log.warning("%s: %d prompts dropped as longer than grpo.max_prompt_length", run, dropped)
    return result


def training_pool(kept: Sequence[QAItem], pool: Sequence[QAItem], min_questions: int) -> tuple[list[QAItem], str | None]:
    """The self-filtered questions, or the whole pool (with a warning returned and logged)
    when fewer than ``min_questions`` survive (one optimizer step needs that many prompts)."""
    if len(kept) >= min_questions:
        return list(kept), None
    msg = (f"the learning zone holds {len(kept)} questions, fewer than the {min_questions} one step needs; "
           f"training on the whole pool of {len(pool)}")
    log.warning(msg)
    return list(pool), msg


def prompts_per_step(cfg: CorVerConfig) -> int:
    """Distinct prompts in one optimizer step: B x grad-accum / G."""
    g = cfg.grpo
    return g.per_device_train_batch_size * g.gradient_accumulation_steps // g.num_generations
