"""Building the knowledge organism and caching it: the pretrained base (shared by the regimes),
the format fine-tuning, the folder written under a lock and published with a file manifest, read
back after an integrity check; and Physics of Language Models 3.1's own protocol (arXiv
2309.14316, "BIO pretrain + QA finetune") on a cached base. Part of ``factlab.organism``."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import resource
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..data.kb import CORRECT
from ..integrity import MANIFEST_FILE, MissingManifest, verify_files, write_file_manifest, published_folder
from ..paths import build_lock, cache_dir, write_json
from ..text import extract_answer
from ..threads import intra_op_threads
from .evaluation import answer_rows, cloze, eval_questions, evaluate, summary
from .specs import (ORGANISM_VERSION, OrganismSpec, exposure_split, exposures, fingerprint, pretrain_fingerprint,
                    spec_of, world_digest)
from .texts import format_examples, pretraining_documents, train_tokenizer
from .training import model_config, pretrain_batches, train_steps, seeded, sft_batches

log = logging.getLogger(__name__)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far: on a shared machine, closer to what the
    build costs on idle cores than its wall time (with 2 threads, idle wall >= cpu / 2)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _build_base(spec: OrganismSpec, out: Path, progress: bool) -> None:
    """Tokenizer + pretraining into ``out`` (the regime-independent base)."""
    import torch
    from transformers import LlamaForCausalLM

    t0 = time.perf_counter()
    tok = train_tokenizer(spec)
    t_tok = time.perf_counter() - t0
    docs = pretraining_documents(spec)
    batches = pretrain_batches(spec, tok, docs)
    with torch.random.fork_rng(devices=[]):
        seeded(spec.seed)
        model = LlamaForCausalLM(model_config(spec, tok))
        n_params = sum(p.numel() for p in model.parameters())
        tokens = sum(b[0].numel() for b in batches)
        log.info("organism %s: pretraining %.2fM parameters on %d tokens (%d steps)", pretrain_fingerprint(spec),
                 n_params / 1e6, tokens, len(batches))
        t1, c1 = time.perf_counter(), _cpu_seconds()
        curve = train_steps(model, batches, spec.lr, spec.warmup, spec.weight_decay, "organism pretraining", progress)
        seconds, cpu = time.perf_counter() - t1, _cpu_seconds() - c1
    t2 = time.perf_counter()
    stored = cloze(model.eval(), tok, spec)
    log.info("organism base: facts completed by exposure group %s", {g: round(v["correct"], 3) for g, v in stored.items()})
    report = {"pretrain_fingerprint": pretrain_fingerprint(spec), "parameters": n_params, "vocab": len(tok),
              "cloze": stored, "cloze_seconds": time.perf_counter() - t2,
              "documents": dict(Counter(d["kind"] for d in docs)), "tokens": tokens, "steps": len(batches),
              "tokenizer_seconds": t_tok, "pretrain_seconds": seconds, "pretrain_cpu_seconds": cpu, "tokens_per_second": tokens / max(seconds, 1e-9),
              "loss_curve": curve}
    with published_folder(out) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        with open(tmp / "corpus.jsonl", "w", encoding="utf-8") as f:  # CorVer's index reads the organism's own corpus
            for d in docs:
                if d["kind"] != "qa":
                    f.write(json.dumps({"id": d["id"], "title": d["country"], "text": d["text"]}) + "\n")
        write_json(tmp / "pretrain.json", report)


def _base_dir(spec: OrganismSpec) -> Path:
    return cache_dir() / "organism" / f"base-{pretrain_fingerprint(spec)}"


def model_dir(spec: OrganismSpec | str | None = None) -> Path:
    """Where the organism of ``spec`` lives (built or not)."""
    return cache_dir() / "organism" / fingerprint(spec)


# The build's torch intra-op threads, whatever the caller's: torch's CPU kernels split their reductions by thread, so
# the weights depend on the count, and the fingerprint names the weights. Measured 2026-11-28 on one machine: the
# default organism built on 1 thread answered 0.76 of known countries' held-out questions, on 2 threads 0.98 (the
# README's build, on which every organism result ran; results/organism/).
BUILD_THREADS = 2


def build(spec: OrganismSpec | str | None = None, progress: bool = True) -> Path:
    """The organism's model folder (HF format: config, safetensors, tokenizer with its chat
    template; ``exposures.json``, ``spec.json``, ``report.json``, ``corpus.jsonl``), built on
    first use under a lock, then read from the cache. The build pretrains (or reuses) the base,
    format fine-tunes it under ``spec.regime`` and measures it (``report.json``, printed)."""
    spec = spec_of(spec)
    out = model_dir(spec)
    if (out / "report.json").is_file():
        return _checked(out)
    with build_lock(out):
        if (out / "report.json").is_file():
            return _checked(out)
        t0 = time.perf_counter()
        base = _base_dir(spec)
        with intra_op_threads(BUILD_THREADS):
            with build_lock(base):
                if not (base / "pretrain.json").is_file():
                    _build_base(spec, base, progress)
            _format_finetune(spec, _checked(base), out, progress, t0)
    return _checked(out)


def _checked(folder: Path) -> Path:
    """``folder`` (a built organism, or its pretrained base) after ``integrity.verify_files``, as
    models factlab builds are checked: zeroed or truncated weights, a missing tokenizer are one
    ``IntegrityError`` naming the file and the rebuild. A folder built before manifests gets
    one, listing its files as they are (``models._cached_model`` does the same)."""
    rebuild = f"remove {folder} (factlab builds it again on next use)"
    try:
        verify_files(folder, rebuild)
    except MissingManifest:
        with build_lock(folder.with_name(folder.name + ".manifest")):
            if not (folder / MANIFEST_FILE).exists():
                log.warning("the organism %s has no file manifest (built by an older factlab); listing its files as "
                            "they are now", folder)
                write_file_manifest(folder)
        verify_files(folder, rebuild)
    return folder


def _format_finetune(spec: OrganismSpec, base: Path, out: Path, progress: bool, t0: float) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(base)
    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32)
    examples = format_examples(spec)
    batches = sft_batches(spec, tok, examples, spec.sft_epochs)
    with torch.random.fork_rng(devices=[]):
        seeded(spec.seed + 1)
        t1, c1 = time.perf_counter(), _cpu_seconds()
        curve = train_steps(model, batches, spec.sft_lr, spec.warmup, 0.0, f"organism format fine-tuning ({spec.regime})",
                     progress)
        sft_seconds, sft_cpu = time.perf_counter() - t1, _cpu_seconds() - c1
    pre = json.loads((base / "pretrain.json").read_text())
    build_seconds = time.perf_counter() - t0
    report: dict[str, Any] = {
        "fingerprint": fingerprint(spec), "spec": spec.to_dict(), **pre,
        "sft": {"examples": dict(Counter(f"{e['kind']}{'/abstain' if e['abstain'] else ''}" for e in examples)),
                "steps": len(batches), "seconds": sft_seconds, "cpu_seconds": sft_cpu, "loss_curve": curve},
        "build_seconds": build_seconds}
    split = exposure_split(spec)
    with published_folder(out) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        shutil.copy2(base / "corpus.jsonl", tmp / "corpus.jsonl")
        write_json(tmp / "spec.json", {"fingerprint": fingerprint(spec), "version": ORGANISM_VERSION,
                                                   "world": world_digest(), "spec": spec.to_dict()}, indent=1)
        write_json(tmp / "exposures.json",
            {"exposures": exposures(spec), "groups": {**split, "rare": {str(d): v for d, v in split["rare"].items()}}},
            indent=1, sort_keys=True)
        if spec.eval_per_group:
            t2 = time.perf_counter()
            report["eval"] = evaluate(model, tok, spec)
            report["eval_seconds"] = time.perf_counter() - t2
        report["process_cpu_seconds"] = _cpu_seconds()
        report["peak_rss_mb"] = _peak_rss_mb()
        write_json(tmp / "report.json", report, indent=1, default=float)
    print(summary(report))


def extraction_after_qa_finetune(spec: OrganismSpec | str | None = None, augment: bool = True, epochs: int = 6,
                                 lr: float = 5e-4, replay: float = 1.0, per_group: int = 96,
                                 progress: bool = False) -> dict[str, Any]:
    """Physics of LMs 3.1's protocol (2309.14316, "BIO pretrain + QA finetune"): a base pretrained
    on the facts alone (``qa_repeats: 0``, with or without ``augment``), then fine-tuned on the
    ``known_qa`` half's questions answered directly (``<answer>value</answer>``, no recitation),
    ``epochs`` at constant ``lr``, each step beside a pretraining batch with probability ``replay``
    (so the fine-tuning does not overwrite what the base stored); returns the correct share on the
    other half (``known_heldout``, held-out and train templates) and on the fine-tuned half, after
    each epoch. The base is built (and cached) like any organism's."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    spec = dataclasses.replace(spec_of(spec), qa_repeats=0, augment=augment)
    base = _base_dir(spec)
    with build_lock(base):
        if not (base / "pretrain.json").is_file():
            _build_base(spec, base, progress)
    tok = AutoTokenizer.from_pretrained(base)
    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32)
    fine_tuned = set(exposure_split(spec)["known_qa"])
    examples = [{**e, "completion": f"<answer>{extract_answer(e['completion'])}</answer>"}
                for e in format_examples(spec) if e["kind"] == "qa" and e["country"] in fine_tuned]
    questions_ = [q for q in eval_questions(spec, per_group) if q["group"] in ("known_heldout", "known_qa")]
    replay_batches = pretrain_batches(spec, tok, pretraining_documents(spec))
    rng = random.Random(f"organism-3.1:{spec.seed}")
    rng.shuffle(replay_batches)

    def measure() -> dict[str, float]:
        groups: dict[str, list[bool]] = {}
        for r in answer_rows(model, tok, questions_):
            groups.setdefault(f"{r['group']}/{r['template']}", []).append(r["label"] == CORRECT)
        return {g: sum(v) / len(v) for g, v in groups.items()}

    curve, t0, k = [], time.perf_counter(), 0
    with torch.random.fork_rng(devices=[]):
        seeded(spec.seed + 2)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
        for epoch in range(1, epochs + 1):
            model.train()
            for ids, labels, mask in sft_batches(dataclasses.replace(spec, seed=spec.seed + epoch), tok, examples, 1):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                if replay and rng.random() < replay:
                    block = replay_batches[k % len(replay_batches)][0]
                    k += 1
                    loss = loss + model(input_ids=block, labels=block).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            model.eval()
            curve.append({"epoch": epoch, "seconds": time.perf_counter() - t0, **measure()})
            log.info("3.1 protocol, augment=%s, epoch %d: %s", augment, epoch, curve[-1])
    return {"augment": augment, "epochs": epochs, "lr": lr, "replay": replay, "examples": len(examples),
            "pretraining_documents": json.loads((base / "pretrain.json").read_text())["documents"],
            "curve": curve, **curve[-1]}
