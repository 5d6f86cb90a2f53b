"""A short warm-start SFT before RL, so that a small policy starts where rewards can vary.

Why: the embedded policy (SmolLM2-135M-Instruct) never writes CorVer's
``<think>...</think><answer>...</answer>`` template unprompted, so in a 2-3 step smoke run every
completion of a group earns the same reward (the format reward -1, the strict judge -1) and GRPO
has no signal (``frac_reward_zero_std`` = 1). The papers start from instruction-tuned 3B-14B
models that follow the template from the prompt alone, and DeepSeek-R1-style cold starts
fine-tune on a few demonstrations of it first; this module does the latter for the CPU default.

What it trains on: the demonstrations ``synth.demos`` writes from the mini-world's train split, in
each training notebook's own prompts and answer format (its docstring has the table).

How it is cached: one warm start serves every notebook. ``prepare(cfg)`` builds it once under
``paths.cache_dir()/warmstart/<key>``, where ``key`` hashes everything that changes it: the
world's version and split, the ``warm_start`` section (demonstration counts, seed, SFT and LoRA
settings, the check's size), the base model (its name, and for a local folder its config), and
``DEMO_WRITER_VERSION`` (bump it when the demonstrations change). A second call loads it without
training. Two processes that start it at once serialise on a file lock (``<key>.lock``): the
second waits, then finds the finished folder. The SFT runs in ``<key>.work`` (TRL checkpoints,
resumable after a crash) and the finished folder appears by one atomic rename, so a reader never
sees half a model. ``prepare`` then points ``cfg.model.name`` at it, so every stage after it
(self-filter, GRPO, the "base" evaluation) starts from the warm start, while ``WarmStart.raw``
keeps the raw model's name for the comparison row.

The check (``check``): the format rate (and accuracy, abstentions, oracle truth) of the raw and
the warm model on ``check_questions`` held-out prompts per format, greedy; written to
``warmstart.json`` with the SFT's seconds and shown by every notebook (``report_frame``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import pandas as pd

from .. import text as T
from ..data.miniworld import WORLD_VERSION, WorldConfig
from ..data.types import read_jsonl, write_jsonl
from ..eval.truth import answer_truth, sentence_truth
from ..experiment import WarmStartSection
from ..integrity import IntegrityError, MissingManifest, verify_files, write_file_manifest
from ..models import chat_prompt, generate, load_model, model_fingerprint, release_memory
from ..paths import cache_dir, exclusive_lock, no_symlink, refuse_symlinks, write_json
from ..synth.demos import DEMO_WRITER_VERSION, Demo, check_prompts, demo_dataset, write_demos
from ..train.grpo import merge_adapter
from ..train.sft import run_sft

log = logging.getLogger(__name__)

__all__ = ["WarmStartSection", "cache_key", "WarmStart", "build", "prepare", "check", "report_frame", "unseen"]

_DONE = "warmstart.json"


def unseen(questions: Sequence[Any], demos: Sequence[Demo]) -> list[Any]:
    """``questions`` (anything with a ``question`` text) whose text no demonstration asks: a
    notebook's held-out set after the warm start (04 samples its K2V questions over every
    country, so one of them can coincide with a demonstration's)."""
    asked = {" ".join(d.user.split()) for d in demos}
    return [q for q in questions if " ".join(q.question.split()) not in asked]


# ---------------------------------------------------------------- the cache


def _model_identity(name: str) -> dict[str, Any]:
    """What names the base model in the key: the name, and for a local folder its config; for a
    name whose content is known without a folder (the organism: its spec and world,
    ``models.model_fingerprint``), that fingerprint, so a changed spec trains a new warm start."""
    folder = Path(name)
    if (folder / "config.json").is_file():
        return {"name": str(folder.resolve()),
                "config_sha": hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()[:16]}
    fingerprint = model_fingerprint(name)
    return {"name": name, "fingerprint": fingerprint} if fingerprint else {"name": name}


def key_inputs(ws: WarmStartSection, model_name: str, world: WorldConfig | None = None) -> dict[str, Any]:
    """Everything the warm start depends on (what ``cache_key`` hashes)."""
    world = world or WorldConfig()
    return {"writer": DEMO_WRITER_VERSION, "world": {"version": WORLD_VERSION, **world.model_dump(exclude={"dir"}),
                                                      "dir": str(Path(world.dir).resolve()) if world.dir else None},
            "model": _model_identity(model_name),  # where the SFT logs (sft.report_to) changes nothing it trains
            "warm_start": ws.model_dump(exclude={"enabled": True, "sft": {"report_to"}})}


def cache_key(ws: WarmStartSection, model_name: str, world: WorldConfig | None = None) -> str:
    """A 16-hex-digit hash of ``key_inputs``: a setting that changes the warm start changes it."""
    blob = json.dumps(key_inputs(ws, model_name, world), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass
class WarmStart:
    """A warm start (or its absence: ``enabled`` False, ``model_dir`` the raw model)."""

    enabled: bool
    raw: str  # the raw model's name: the comparison row beside the warm start
    model_dir: str  # the model every stage starts from
    key: str | None = None
    folder: str | None = None
    built: bool = False  # trained by this call (False: loaded from the cache)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float | None:
        """The SFT's wall seconds when it was built (whichever process built it)."""
        return self.report.get("sft", {}).get("seconds")

    @property
    def label(self) -> str:
        """How the start model is named in a notebook's tables: ``warm`` (the warm start, the
        base of every comparison) or ``raw`` (no warm start)."""
        return "warm" if self.enabled else "raw"

    def summary(self) -> str:
        """One line for a notebook: what the policy starts from and how it was made."""
        if not self.enabled:
            return f"warm start: off (warm_start.enabled: false); RL starts from {self.raw}"
        r = self.report
        demos = ", ".join(f"{k} {v}" for k, v in sorted(r.get("demos", {}).items()))
        return (f"warm start {self.key} ({'trained now' if self.built else 'from the cache'}): {self.raw} after "
                f"{r['sft']['steps']} SFT steps on {sum(r.get('demos', {}).values())} demonstrations ({demos}; "
                f"{r.get('abstentions', 0)} abstain), {r['sft']['seconds']:.0f} s when built; loss "
                f"{_loss(r['sft']['first_loss'])} -> {_loss(r['sft']['last_loss'])}; every stage starts from "
                f"{self.model_dir}")

    def metrics(self) -> dict[str, Any]:
        """What a notebook saves under ``warm_start`` in ``metrics.json``."""
        if not self.enabled:
            return {"enabled": False, "raw": self.raw}
        r = self.report
        return {"enabled": True, "key": self.key, "raw": self.raw, "model_dir": self.model_dir, "built_now": self.built,
                "demos": r.get("demos"), "abstentions": r.get("abstentions"), "sft": r.get("sft"),
                "check": {who: {k: {m: v for m, v in per[k].items() if m != "example"} for k in per}
                          for who, per in (r.get("check") or {}).items()}}

    def demos(self) -> list[Demo]:
        """The demonstrations it was trained on ([] when disabled)."""
        if not self.folder:
            return []
        return [Demo(**d) for d in read_jsonl(Path(self.folder) / "demos.jsonl")]


def _loss(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"  # None: an SFT that logged no loss (fewer steps than logging_steps)


def _load(folder: Path, raw: str, key: str, built: bool) -> WarmStart:
    """A finished warm start, checked first against its file manifest like an index (weights,
    tokenizer, demos and ``warmstart.json``: sizes always, checksums after a change): a
    damaged one is an ``IntegrityError`` naming the file and the rebuild."""
    rebuild = f"remove {folder} (the warm start trains again on next use)"
    try:
        verify_files(folder, rebuild)
    except MissingManifest:  # finished before manifests: listed as it is now
        log.warning("warm start %s has no file manifest (built by an older factlab); listing its files as they are",
                    folder)
        write_file_manifest(folder)
    try:
        report = json.loads((folder / _DONE).read_text(encoding="utf-8"))
        if not isinstance(report, dict):
            raise ValueError(f"a JSON object is expected, got {type(report).__name__}")
        sft = report.get("sft")  # what summary() and metrics() format (a KeyError / ValueError naming no file)
        if (not isinstance(sft, dict) or not all(
                isinstance(sft.get(k), (int, float)) and not isinstance(sft.get(k), bool) for k in ("seconds", "steps"))
                or not all(sft.get(k) is None or isinstance(sft.get(k), (int, float)) for k in ("first_loss", "last_loss"))
                or not isinstance(report.get("demos", {}), dict)):
            raise ValueError("'sft' must hold the numbers seconds, steps, first_loss and last_loss; 'demos' counts")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise IntegrityError(f"{folder / _DONE}: unreadable ({type(e).__name__}: {e}); {rebuild}") from None
    return WarmStart(True, raw, str(folder / "model"), key, str(folder), built, report)


def build(ws: WarmStartSection, model_name: str, *, world: WorldConfig | None = None, dtype: str = "float32",
          device: str = "auto", root: str | Path | None = None) -> WarmStart:
    """The warm start of ``model_name`` with ``ws``: loaded from ``<root>/<key>`` when it is
    there, else trained (resumably, under the key's lock) and checked; see the module docstring.
    ``root`` defaults to ``paths.cache_dir()/warmstart``."""
    key = cache_key(ws, model_name, world)
    root = Path(root) if root else cache_dir() / "warmstart"
    folder = root / key
    if (folder / _DONE).is_file():
        return _load(folder, model_name, key, False)
    with exclusive_lock(root / f"{key}.lock"):
        if (folder / _DONE).is_file():  # another process finished it while this one waited
            return _load(folder, model_name, key, False)
        if folder.exists() or folder.is_symlink():  # only a finished one is renamed into place: this one is damaged;
            # training first would fail at the rename, minutes later (issue 43 round-3b probe)
            raise IntegrityError(f"{folder / _DONE} is missing or not a file, so the warm start {folder} is damaged; "
                                 f"remove {folder} (the warm start trains again on next use)")
        work = root / f"{key}.work"
        no_symlink(work, "factlab's cache").mkdir(parents=True, exist_ok=True)
        refuse_symlinks(work, "factlab's cache")  # a resumed one: no demo, checkpoint or stage written through a link
        demos = write_demos(ws, world)
        write_jsonl(work / "demos.jsonl", demos)
        log.info("warm start %s: SFT of %s on %d demonstrations (%s)", key, model_name, len(demos),
                 dict(Counter(d.kind for d in demos)))
        spec = SimpleNamespace(model=SimpleNamespace(name=model_name, dtype=dtype, device=device), lora=ws.lora)
        t0 = time.perf_counter()
        result = run_sft(spec, demo_dataset(demos), work / "sft", model=model_name, sft=ws.sft, name="warm-start",
                         train_top_layers=ws.train_top_layers)
        seconds = time.perf_counter() - t0
        model_dir = merge_adapter(result) if result.is_adapter else result.model_dir
        losses = result.losses()
        report: dict[str, Any] = {
            "key": key, "inputs": key_inputs(ws, model_name, world), "base_model": model_name,
            "demos": dict(Counter(d.kind for d in demos)), "abstentions": sum(d.abstain for d in demos),
            "sft": {"seconds": seconds, "train_runtime_s": result.runtime_s, "steps": result.steps,
                    "first_loss": losses[0][1] if losses else None, "last_loss": losses[-1][1] if losses else None,
                    "resumed": result.resumed}}
        if ws.check_questions:
            t0 = time.perf_counter()
            report["check"] = check(model_name, model_dir, ws, world, dtype=dtype, device=device)
            report["check_seconds"] = time.perf_counter() - t0
        stage = work / "stage"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        shutil.copytree(model_dir, stage / "model")
        shutil.copy2(work / "demos.jsonl", stage / "demos.jsonl")
        write_json(stage / _DONE, report, indent=1, default=float)
        write_file_manifest(stage)  # checked on every load (``_load``)
        os.replace(stage, folder)  # one rename: readers see no folder or a finished one
        shutil.rmtree(work, ignore_errors=True)
        return _load(folder, model_name, key, True)


def prepare(cfg: Any) -> WarmStart:
    """The warm start of a training config: when ``cfg.warm_start.enabled``, build or load it
    and point ``cfg.model.name`` at it (every stage after this starts from it; ``.raw`` keeps the
    raw model); disabled, ``cfg`` is left as it is. Calling it twice is harmless."""
    ws: WarmStartSection = cfg.warm_start
    raw = cfg.model.name
    if not ws.enabled:
        return WarmStart(False, raw, raw)
    if cfg.model.adapter:
        raise ValueError("warm_start: the base model has an adapter (model.adapter); merge it first or turn the "
                         "warm start off")
    root = cache_dir() / "warmstart"
    if Path(raw).resolve().parent.parent == root.resolve():  # cfg already points at a warm start
        here = _load(Path(raw).parent, raw, Path(raw).parent.name, False)
        here.raw = str(here.report.get("base_model", raw))
        return here
    out = build(ws, raw, world=cfg.world, dtype=cfg.model.dtype, device=cfg.model.device)
    index = getattr(cfg, "index", None)
    if index is not None and index.tokenizer is None:
        # the warm start keeps the raw model's tokenizer: name it, so the corpus index cached for
        # the raw model's name (its key) is reused rather than rebuilt for a new folder name
        index.tokenizer = raw
    cfg.model.name = out.model_dir
    log.info("warm start %s (%s): every stage starts from %s", out.key, "trained" if out.built else "cached",
             out.model_dir)
    return out


# ---------------------------------------------------------------- the check


def _measure(model, tokenizer, rows_by_kind: dict[str, list[dict[str, Any]]], max_new_tokens: int) -> dict[str, dict]:
    flat = [(kind, r) for kind, rows in rows_by_kind.items() for r in rows]
    if not flat:
        return {}
    gens = generate(model, tokenizer, [chat_prompt(tokenizer, r["user"], system=r["system"]) for _, r in flat],
                    max_new_tokens=max_new_tokens, batch_size=len(flat), progress=False, desc="warm-start check")
    out = {}
    for kind, rows in rows_by_kind.items():
        mine = [g[0] for (k, _), g in zip(flat, gens) if k == kind]
        if not mine:
            continue
        texts = [g.text for g in mine]
        m: dict[str, Any] = {"n": len(texts), "mean_tokens": sum(len(g.token_ids) for g in mine) / len(mine)}
        if kind == "rar_longform":  # plain text: no template; truth of its sentences
            m["format_rate"] = sum(bool(t.strip()) and "<think>" not in t for t in texts) / len(texts)
        else:
            m["format_rate"] = sum(T.format_violation(t) is None for t in texts) / len(texts)
        if "golds" in rows[0]:
            truth = answer_truth(texts, [r["golds"] for r in rows], [r["question"] for r in rows])
            m.update(correct=truth["correct"], wrong=truth["wrong"], abstain=truth["abstain"])
        else:
            st = sentence_truth(texts)
            m.update(supported=st["supported"], contradicted=st["contradicted"], kb_precision=st["kb_precision"])
        m["example"] = texts[0]
        out[kind] = m
    return out


def check(raw: str, warm: str, ws: WarmStartSection, world: WorldConfig | None = None, *, dtype: str = "float32",
          device: str = "auto") -> dict[str, dict[str, dict]]:
    """``{"raw": {format: metrics}, "warm": {...}}`` on ``check_prompts``, greedy: the format
    rate (§A.2's rule; for ``rar_longform``, untagged non-empty text), the truth of the answer
    (``eval.truth``: correct / wrong / abstain) or of the sentences (supported / contradicted
    per response), the mean length and one example."""
    rows = check_prompts(ws, world)
    out = {}
    for who, name in (("raw", raw), ("warm", warm)):
        model, tok = load_model(name, dtype=dtype, device=device)
        out[who] = _measure(model, tok, rows, ws.check_max_new_tokens)
        del model
        release_memory()
    return out


def report_frame(ws: WarmStart) -> pd.DataFrame:
    """The check as a table: one row per (format, model), raw beside the warm start."""
    check_ = ws.report.get("check") or {}
    rows = [{"format": kind, "model": who, **{k: v for k, v in m.items() if k != "example"}}
            for who, per in check_.items() for kind, m in per.items()]
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).set_index(["format", "model"]).sort_index()
