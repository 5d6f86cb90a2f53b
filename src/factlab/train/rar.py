"""Binary RAR end to end (001_f9c1f8134c3dd554.txt): prompts, datastores, rewards, GRPO.

The pieces live where they belong (``factlab.judges``, ``factlab.corpus.retrieval``,
``factlab.rewards.rar``, ``factlab.eval``); this module wires them from a ``RARConfig`` for
``notebooks/02_binary_rar.ipynb``:

- ``load_prompts``: long-form prompts with a reference (ground truth) per prompt; the
  mini-world default is "Tell me about <country>." with the country's article, split by
  country exactly like the short-form QA heldout split.
- ``build_datastores``: BM25 over the corpus chunked by the judge tokenizer, 512-token
  chunks for RAR and 256 for VeriScore (§4.2-4.3), each pre-cached per prompt from the
  prompt and its reference (§3.2 "pre-caching strategy").
- ``make_rewards``: every reward by name on one shared judge (§4.2 baselines included).
- ``controlled_responses``: for the reward comparison (Figure 4), one faithful and one
  perturbed response per prompt built from the mini-world's labelled claims.
- ``train_run``: GRPO with the KL term and the utility early-stopping callback (§4.3).
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config import RARConfig
from ..corpus.retrieval import Datastore
from ..data.types import read_jsonl
from ..rewards.rar import BinaryRAR, LMJudgeReward, RatingRAR, VeriScoreReward

log = logging.getLogger(__name__)

LONGFORM_TEMPLATE = "Tell me about {title}."


@dataclass
class LongformPrompt:
    """One long-form prompt; ``reference`` is its ground-truth response (may be empty)."""

    id: str
    prompt: str
    reference: str = ""
    doc_id: str | None = None


def _read_prompts(path: str | Path) -> list[LongformPrompt]:
    rows = []
    for i, row in enumerate(read_jsonl(path)):
        if "prompt" not in row:
            raise ValueError(f"{path}: line {i + 1} has no 'prompt' field (expected id, prompt, reference?)")
        rows.append(LongformPrompt(str(row.get("id", i)), row["prompt"], row.get("reference") or "",
                                   row.get("doc_id")))
    if not rows:
        raise ValueError(f"{path}: no prompts")
    return rows


def miniworld_prompts(world: dict[str, Path]) -> tuple[list[LongformPrompt], list[LongformPrompt]]:
    """(train, heldout) "Tell me about <country>." prompts, heldout = the QA heldout countries."""
    held_docs = {r["meta"]["doc_id"] for r in read_jsonl(world["qa_heldout"])}
    train, held = [], []
    for doc in read_jsonl(world["corpus"]):
        p = LongformPrompt(doc["id"], LONGFORM_TEMPLATE.format(title=doc["title"]), doc["text"], doc["id"])
        (held if doc["id"] in held_docs else train).append(p)
    return train, held


def load_prompts(cfg: RARConfig, world: dict[str, Path]) -> tuple[list[LongformPrompt], list[LongformPrompt]]:
    """(train, heldout) prompts from ``prompts.path``/``heldout_path`` or the mini-world,
    each sampled down to ``train_limit``/``eval_limit`` with ``prompts.seed``."""
    pc = cfg.prompts
    if pc.path:
        train = _read_prompts(pc.path)
        held = _read_prompts(pc.heldout_path) if pc.heldout_path else []
    else:
        train, held = miniworld_prompts(world)
    rng = random.Random(pc.seed)
    if pc.train_limit and len(train) > pc.train_limit:
        train = rng.sample(train, pc.train_limit)
    if pc.eval_limit and len(held) > pc.eval_limit:
        held = rng.sample(held, pc.eval_limit)
    return train, held


def datastore_dir(cfg: RARConfig, corpus: str | Path, tokenizer: str, chunk_tokens: int) -> Path:
    """``datastore.dir``, else ``<cache>/datastores/<corpus>-<tokenizer>-<chunk>t-<hash>``."""
    from ..models import cache_dir

    if cfg.datastore.dir:
        return Path(cfg.datastore.dir) / f"chunks{chunk_tokens}"
    p = Path(corpus).resolve()
    stat = p.stat()
    digest = hashlib.sha256(f"{p}:{stat.st_size}:{stat.st_mtime_ns}:{cfg.datastore.overlap}".encode()).hexdigest()[:10]
    return cache_dir() / "datastores" / f"{p.stem}-{Path(tokenizer).name}-{chunk_tokens}t-{digest}"


def ensure_datastore(cfg: RARConfig, corpus: str | Path, tokenizer_name: str, chunk_tokens: int) -> Datastore:
    """Load the chunked BM25 datastore from disk, or chunk + index the corpus and save it."""
    from ..models import load_tokenizer

    out = datastore_dir(cfg, corpus, tokenizer_name, chunk_tokens)
    if (out / "chunks.jsonl").exists():
        log.info("loading datastore %s", out)
        return Datastore.load(out)
    log.info("building datastore %s (%d-token chunks)", out, chunk_tokens)
    ds = Datastore.from_jsonl(corpus, load_tokenizer(tokenizer_name), chunk_tokens=chunk_tokens,
                              overlap=cfg.datastore.overlap, text_field=cfg.datastore.text_field)
    ds.save(out)
    return ds


def build_datastores(cfg: RARConfig, world: dict[str, Path], prompts: Sequence[LongformPrompt]) -> dict[str, Datastore]:
    """``{"rar": 512-token datastore, "veriscore": 256-token datastore}``, both pre-cached
    for ``prompts`` (prompt text + reference as the caching query, §3.2)."""
    corpus = cfg.datastore.corpus or world["corpus"]
    if not Path(corpus).exists():
        raise FileNotFoundError(f"datastore.corpus: {corpus} does not exist")
    tok = cfg.datastore.tokenizer or cfg.judge.model
    stores = {"rar": ensure_datastore(cfg, corpus, tok, cfg.datastore.chunk_tokens)}
    if cfg.datastore.veriscore_chunk_tokens == cfg.datastore.chunk_tokens:
        stores["veriscore"] = stores["rar"]
    else:
        stores["veriscore"] = ensure_datastore(cfg, corpus, tok, cfg.datastore.veriscore_chunk_tokens)
    texts = {p.id: p.prompt for p in prompts}
    refs = {p.id: p.reference for p in prompts if p.reference}
    for ds in {id(s): s for s in stores.values()}.values():
        ds.precache(texts, k_docs=cfg.datastore.precache_docs, references=refs)
    return stores


def make_rewards(cfg: RARConfig, judge, stores: dict[str, Datastore], names: Sequence[str] | None = None,
                 claim_judge=None) -> dict[str, Callable]:
    """Reward functions by name (``binary_rar``, ``rating_rar``, ``veriscore``, ``lm_judge``)
    sharing one judge; ``claim_judge`` (default: ``judge``) runs VeriScore's extraction and
    verification."""
    d, r = cfg.datastore, cfg.reward
    factories = {
        "binary_rar": lambda: BinaryRAR(judge, stores["rar"], k=d.top_k, prefill=r.prefill),
        "rating_rar": lambda: RatingRAR(judge, stores["rar"], k=d.top_k, prefill=r.prefill),
        "veriscore": lambda: VeriScoreReward(claim_judge or judge, stores["veriscore"], k_per_claim=d.veriscore_top_k,
                                             max_claims=r.max_claims, prefill=r.prefill),
        "lm_judge": lambda: LMJudgeReward(judge, prefill=r.prefill),
    }
    names = list(names) if names is not None else [r.train]
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise ValueError(f"unknown reward(s) {unknown}; choose from {sorted(factories)}")
    return {n: factories[n]() for n in names}


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


def prompt_dataset(prompts: Sequence[LongformPrompt], tokenizer=None, max_prompt_length: int | None = None):
    """``datasets.Dataset`` of chat prompts with ``prompt_id`` and ``reference`` columns (the
    reward functions read them); prompts over ``max_prompt_length`` tokens are dropped."""
    from datasets import Dataset

    rows, dropped = [], 0
    for p in prompts:
        chat = [{"role": "user", "content": p.prompt}]
        if tokenizer is not None and max_prompt_length:
            rendered = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            if len(tokenizer(rendered, add_special_tokens=False)["input_ids"]) > max_prompt_length:
                dropped += 1
                continue
        rows.append({"prompt": chat, "prompt_id": p.id, "reference": p.reference})
    if dropped:
        log.warning("dropped %d of %d prompts longer than %d tokens", dropped, len(prompts), max_prompt_length)
    if not rows:
        raise ValueError("no training prompts left (empty input, or every prompt exceeds grpo.max_prompt_length)")
    return Dataset.from_list(rows), dropped


def utility_fn(cfg: RARConfig, tokenizer, qa_items) -> Callable:
    """The early-stopping utility: lm-evaluation-harness tasks when configured and installed,
    else forced-answer short-form accuracy on ``qa_items`` (see ``factlab.eval.utility``)."""
    from ..eval.utility import UtilityUnavailable, forced_qa_utility, lm_eval_utility

    es = cfg.early_stopping
    if es.lm_eval_tasks:
        try:
            return lm_eval_utility(es.lm_eval_tasks, tokenizer)
        except UtilityUnavailable as e:
            log.warning("%s; using forced-answer QA accuracy instead", e)
    return forced_qa_utility(tokenizer, list(qa_items)[:es.qa_limit], max_new_tokens=cfg.eval_generation.max_new_tokens,
                             batch_size=cfg.eval_generation.batch_size)


def train_run(cfg: RARConfig, prompts: Sequence[LongformPrompt], reward: Callable, out_dir: str | Path,
              utility_items=None):
    """GRPO on the long-form prompts with one reward (§4.3); returns ``(TrainResult, callback)``.

    The early-stopping callback (when enabled) measures utility before training and every
    ``early_stopping.eval_every`` steps and stops on a drop over ``max_relative_drop``.
    """
    from .. import models
    from .callbacks import UtilityEarlyStopping
    from .grpo import grpo_args, train_grpo

    model, tok = models.load_model(cfg.model.name, dtype=cfg.model.dtype, device=cfg.model.device,
                                   adapter=cfg.model.adapter)
    model.train()
    ds, _ = prompt_dataset(prompts, tok, cfg.grpo.max_prompt_length)
    name = getattr(reward, "__name__", "reward")
    args = grpo_args(cfg.grpo, Path(out_dir) / name, run_name=f"rar-{name}")
    callbacks = []
    stopper = None
    if cfg.early_stopping.enabled and utility_items:
        stopper = UtilityEarlyStopping(utility_fn(cfg, tok, utility_items), cfg.early_stopping.eval_every,
                                       cfg.early_stopping.max_relative_drop)
        callbacks.append(stopper)
    # StepwiseGRPOTrainer without token shaping is plain GRPO (tested) that also logs the
    # advantage-collapse diagnostics (group spread, collapsed groups)
    result = train_grpo(f"rar-{name}", model, tok, ds, [reward], args, lora=cfg.lora, callbacks=callbacks)
    return result, stopper
