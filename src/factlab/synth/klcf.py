"""KLCF's offline data pipeline (004_4f2ca2d982459bb2.txt §2.2, Fig. 3, Appendix C.1, D.1, E.1).

Four stages, each cached on disk as one JSONL file under a run directory and resumable:

1. **Sampling** (§2.2 Stage 1): nu = 8 samples per query from the base model at a high
   temperature with Prompt 1's few-shot context C (``KLCF_FEWSHOT_*``; its examples from the
   run's corpus or your file, ``fewshot_examples``, never about a query). ``ModelSampler`` runs
   ``factlab.models.generate``; the base model sees the raw Prompt 1 text (no chat template,
   ``chat_template`` turns one on), and a sample is cut where it starts the next
   ``[Question]:`` of the few-shot format (``synth.klcf_sampling``). -> ``stage1_samples.jsonl``,
   one row per (query, j).
2. **Claim extraction** (Stage 2, Eq. 1): Prompt 2 (``KLCF_CLAIM_EXTRACTION``) per sample
   through any judge backend; the answer's "* claim" bullets are read by
   ``rewards.klcf_claims.parse_claim_list``
   (a JSON list falls back to ``rewards.rar.parse_claims``; "no verifiable objective claims" is
   an empty list; anything else is unreadable, counted). C(o_i) is the union over the nu samples
   (exact duplicates merged). -> ``stage2_claims.jsonl``, one row per sample.
3. **Verification** (Stage 3, Eq. 2): the top-k (k = 10) BM25 chunks D(c) per claim from a
   ``corpus.retrieval.Datastore``, Prompt 3 (``KLCF_CLAIM_VERIFICATION``) through the judge, one
   of SUPPORT / REFUTE / NOT ENOUGH INFO (``parse_verification_label``; unreadable = None,
   counted, neither SUPPORT nor REFUTE; ``verdict: choice`` asks ``judge.choose`` over the three
   labels instead, for judges too small to write the JSON). ``verify: cooccurrence`` instead labels a claim by
   CorVer's corpus co-occurrence count (``rewards.corver.CorVerScorer``: triplet, content
   words, windowed count): 0 -> REFUTE, >= ``cooccurrence_support`` -> SUPPORT, otherwise or
   with no query -> NOT ENOUGH INFO (ours: a cheap verifier; the mapping follows Eq. 2 of 000,
   where 0 is the strongest hallucination signal). With ``compare_verifiers`` both run and
   ``report["agreement"]`` gives their agreement and confusion table. Claims are verified once
   each (a claim shared by two queries has one label). -> ``stage3_<verifier>.jsonl``.
4. **Reward data** (Stage 4): the checklist Lambda(q_i) = f_filter(SUPPORT claims of q_i)
   (Eq. 3) with Prompt 4 (``KLCF_CLAIM_PRIORITIZATION``, ``prioritize: llm``; the ``\\boxed{}``
   lines are the items) or ``prioritize: dedupe`` (ours, for judges too small for Prompt 4:
   normalized exact duplicates removed, order kept) -> ``stage4_checklists.jsonl``; and
   D_truth (Eq. 4): SUPPORT claims -> True, REFUTE -> False, sampled to positive : negative =
   ``ratio`` (2 : 1) the way Appendix D.1 does it (every negative repeated ``negative_copies``
   = 3 times, positives down-sampled) -> ``truth.jsonl``, Prompt 6 rows
   ("Claim: ... Factual correctness:" -> " True" / " False"). D_truth comes from the training
   queries only (§2.2, Table 12): a claim any ``split: eval`` query stated is left out
   (``eval_claims``), counted.

Caching (``stage_cache.StageCache``, one file per stage): every row carries a fingerprint of what determines it (its input text, the model or
judge and their sampling settings, the prompt, k, thresholds); a rerun keeps the rows whose
fingerprint matches and computes only the missing ones, appending each finished chunk, so a
run interrupted mid-stage loses at most one chunk; a torn last line is skipped. Changing a
setting recomputes exactly the rows it affects. Stage-1 samples are seeded per chunk from
``seed`` and the chunk's (query, j) keys: a full run is reproducible; a resumed run draws the
missing samples with the seeds of their new chunks.

``report`` (also ``report.json``): per stage the items, how many came from the cache and how
many were computed, backend calls, prompt / completion tokens, backend and wall seconds; the
label distribution (Table 12 analogue), agreement, checklist statistics (Table 6 analogue:
true claims and checklist items per query) and the D_truth counts.

Stage 3's and 4's answers are read in ``synth.klcf_labels``; D_truth is sampled in
``synth.klcf_truth_data``, which also builds the CPU default's truthfulness-reward data from the
mini-world (``miniworld_truth_data``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

from pydantic import Field, model_validator

from .. import prompts as P
from ..config import MAX_TOKENS, ParamError, Section
from ..data.types import read_jsonl, write_jsonl
from ..models import load_model
from ..rewards.corver import COUNT_THRESHOLDS
from ..rewards.klcf_claims import EXTRACTION_PREFILL, parse_claim_list
from ..rewards.rar import format_passages
from ..text import sentence_claims
from ..prompts import chat_messages
from ..paths import write_json
from ..stage_cache import StageCache
from .klcf_labels import (LABELS, REFUTE, SUPPORT, VERIFICATION_PREFILL, cooccurrence_label, dedupe_claims,
                          label_agreement, parse_boxed_claims, parse_verification_label)
from .klcf_sampling import ModelSampler, corpus_fewshot, cut_at_next_question, fewshot_prompt, file_fewshot
from .klcf_truth_data import NEGATIVE_COPIES, RATIO, drop_eval_claims, eval_claims, truth_dataset, truth_row

log = logging.getLogger(__name__)

__all__ = ["KLCFPipelineSection", "KLCFPipeline", "fewshot_examples", "corpus_path", "STAGE_FILES", "from_resources",
           "TRAIN_SPLIT", "EVAL_SPLIT", "SPLITS"]

NU = 8  # §2.2 Stage 1
TOP_K = 10  # §2.2 Stage 3
STAGE_FILES = {"sampling": "stage1_samples.jsonl", "extraction": "stage2_claims.jsonl",
               "verification_judge": "stage3_judge.jsonl", "verification_cooccurrence": "stage3_cooccurrence.jsonl",
               "checklists": "stage4_checklists.jsonl", "truth": "truth.jsonl", "report": "report.json",
               "queries": "queries.jsonl"}
TRAIN_SPLIT, EVAL_SPLIT = "train", "eval"  # a query row's ``split``: 004 §2.2 builds D_truth from the training sets only
SPLITS = (TRAIN_SPLIT, EVAL_SPLIT)


class KLCFPipelineSection(Section):
    """KLCF's offline pipeline (004 §2.2, Appendix C.1, D.1). Judge, datastore and index come
    from the run's ``judge:``, ``datastore:`` and ``index:`` sections."""

    nu: int = Field(NU, ge=1)  # Stage 1: samples per query
    temperature: float = Field(1.0, ge=0.0)  # "a high temperature setting" (value not printed)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(1024, ge=1, le=MAX_TOKENS)
    batch_size: int = Field(16, ge=1)  # sampling rows per generate call, judge prompts per chunk x 4
    few_shot: int = Field(P.KLCF_FEWSHOT_EXAMPLES, ge=0)  # Prompt 1 prints 10 examples
    few_shot_chars: int = Field(600, ge=20)  # example answers cut at a sentence end below this
    # where Prompt 1's examples come from: ``corpus``, the run's ``datastore.corpus`` (the
    # mini-world corpus when unset) as ("Tell me about <title>.", its opening); ``file``, your own
    # (question, answer) pairs in ``few_shot_path`` (JSONL {"question", "answer"}). 004 prints
    # "query example 1 .. response example 10" without the examples themselves.
    few_shot_source: Literal["corpus", "file"] = "corpus"
    few_shot_path: str | None = None
    few_shot_pool: int = Field(2000, ge=1)  # corpus: examples drawn from its first N usable documents
    chat_template: bool = False  # the base model reads raw Prompt 1 text
    max_claims: int = Field(64, ge=1)  # per response (Stage 2)
    extract: Literal["judge", "sentences"] = "judge"  # Stage 2: Prompt 2, or each sentence a claim (small judges)
    top_k: int = Field(TOP_K, ge=1)  # Stage 3: D(c)
    verify: Literal["judge", "cooccurrence"] = "judge"
    verdict: Literal["generate", "choice"] = "generate"  # choice: judge.choose over the three labels (small judges)
    compare_verifiers: bool = False  # run the other verifier too and report the agreement
    cooccurrence_support: int = Field(1, ge=1)  # count >= this: SUPPORT (mini-world: one article per entity)
    count_limit: int | None = Field(20, ge=1)  # the scorer stops counting here (None: exact)
    prioritize: Literal["llm", "dedupe"] = "llm"  # Eq. 3's f_filter: Prompt 4, or exact-duplicate removal
    checklist_max: int | None = Field(None, ge=1)  # cap on checklist items (None: as filtered)
    ratio: float = Field(RATIO, gt=0.0)  # Eq. 4 positive : negative
    negative_copies: int = Field(NEGATIVE_COPIES, ge=1)  # Appendix D.1
    heldout_size: int | None = Field(None, ge=2)  # mini-world 1:1 truth test set (None: every held-out pair)
    prefill: bool = False  # start the judge's answers inside the format (small judges)
    seed: int = 0  # Stage 1 sampling
    data_seed: int = 0  # Eq. 4 sampling and few-shot examples

    @model_validator(mode="after")
    def _cross_keys(self) -> "KLCFPipelineSection":
        if self.nu > 1 and self.temperature == 0.0:
            raise ParamError("temperature", f"nu = {self.nu} greedy samples are identical; Stage 1 samples at a "
                                            f"high temperature (> 0)")
        uses_cooc = self.verify == "cooccurrence" or self.compare_verifiers
        if uses_cooc and self.count_limit is not None and self.count_limit < COUNT_THRESHOLDS[1]:
            raise ParamError("count_limit", f"{self.count_limit} is below CorVer's tau_2 = {COUNT_THRESHOLDS[1]}, "
                                            f"where the co-occurrence scorer must keep counting (Eq. 2)")
        if uses_cooc and self.count_limit is not None and self.cooccurrence_support > self.count_limit:
            raise ParamError("cooccurrence_support", f"{self.cooccurrence_support} exceeds count_limit "
                                                     f"{self.count_limit}: counts stop there, nothing would be SUPPORT")
        if self.heldout_size is not None and self.heldout_size % 2:
            raise ParamError("heldout_size", f"{self.heldout_size} is odd; the held-out set is 1:1 (Table 13)")
        return self

    @model_validator(mode="after")
    def _few_shot_file(self) -> "KLCFPipelineSection":
        if self.few_shot_source == "file" and not self.few_shot_path:
            raise ParamError("few_shot_path", "few_shot_source 'file' reads the examples from a JSONL file of "
                                              "{\"question\", \"answer\"} rows: name it here")
        if self.few_shot_source == "corpus" and self.few_shot_path:
            raise ParamError("few_shot_path", "is read only with few_shot_source 'file' (the examples come from "
                                              "datastore.corpus now)")
        return self


# ---------------------------------------------------------------- Prompt 1's examples


def fewshot_examples(cfg: KLCFPipelineSection, corpus: str | Path, queries: Sequence[Any] = (),
                     n: int | None = None, text_field: str = "text") -> list[tuple[str, str]]:
    """Prompt 1's few-shot context C from ``cfg.few_shot_source``: the ``corpus`` (the run's
    ``datastore.corpus``, or the mini-world corpus when it is unset) or ``few_shot_path``;
    ``queries`` (strings, mappings or ``LongformPrompt``) are kept out of the examples (their
    ``doc_id`` and any document their text names). ``n``: examples (default ``cfg.few_shot``)."""
    n = cfg.few_shot if n is None else n
    if n <= 0:
        return []
    if cfg.few_shot_source == "file":
        return file_fewshot(cfg.few_shot_path or "", n, max_chars=cfg.few_shot_chars)
    ids, texts = [], []
    for q in queries:
        if isinstance(q, str):
            texts.append(q)
            continue
        get = q.get if isinstance(q, Mapping) else lambda k, q=q: getattr(q, k, None)
        if get("doc_id"):
            ids.append(str(get("doc_id")))
        if get("prompt"):
            texts.append(str(get("prompt")))
    return corpus_fewshot(corpus, n, exclude=ids, queries=texts, seed=cfg.data_seed, max_chars=cfg.few_shot_chars,
                          pool=cfg.few_shot_pool, text_field=text_field)


# ---------------------------------------------------------------- caching


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _judge_identity(judge) -> dict[str, Any]:
    sampling = judge.sampling() if hasattr(judge, "sampling") else {}
    out = {"backend": getattr(judge, "backend", type(judge).__name__), "model": getattr(judge, "model_name", ""),
           "system": getattr(judge, "system", None), "sampling": sampling}
    if getattr(judge, "model_fingerprint", None):  # a local model, by content
        out["model_fingerprint"] = judge.model_fingerprint
    return out


class _Meter:
    """Backend calls, tokens and seconds of one stage (deltas of a judge's or sampler's stats)."""

    def __init__(self, *backends):
        self.backends = [b for b in backends if b is not None]
        self.before = [(Counter(getattr(b, "stats", {})), getattr(b, "seconds", 0.0)) for b in self.backends]
        self.t0 = time.perf_counter()

    def done(self, **extra: Any) -> dict[str, Any]:
        out = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "backend_seconds": 0.0}
        for b, (stats, secs) in zip(self.backends, self.before):
            now = Counter(getattr(b, "stats", {}))
            for k in ("calls", "prompt_tokens", "completion_tokens"):
                out[k] += now[k] - stats[k]
            out["backend_seconds"] += getattr(b, "seconds", 0.0) - secs
        out["backend_seconds"] = round(out["backend_seconds"], 3)
        out["seconds"] = round(time.perf_counter() - self.t0, 3)
        out.update(extra)
        return out


def _query_rows(queries: Iterable[Any]) -> list[dict[str, str]]:
    """{"id", "prompt"} per query, plus ``split`` when a mapping names one (``EVAL_SPLIT``: an
    evaluation prompt, whose claims never train the truthfulness reward model)."""
    out = []
    for i, q in enumerate(queries):
        if isinstance(q, str):
            out.append({"id": str(i), "prompt": q})
        elif isinstance(q, Mapping):
            out.append({"id": str(q.get("id", i)), "prompt": str(q["prompt"])})
            if q.get("split") is not None:
                if q["split"] not in SPLITS:
                    raise ValueError(f"query {out[-1]['id']!r}: split {q['split']!r}, not one of {', '.join(SPLITS)}")
                out[-1]["split"] = str(q["split"])
        else:  # LongformPrompt
            out.append({"id": str(q.id), "prompt": str(q.prompt)})
    if len({q["id"] for q in out}) != len(out):
        raise ValueError("query ids are not unique")
    return out


# ---------------------------------------------------------------- the pipeline


class KLCFPipeline:
    """The four stages on one run directory. Pass only what the stages you run need: a
    ``sampler`` (``ModelSampler`` or any object with ``sample(prompts, seed)`` and
    ``identity()``) for Stage 1; a ``judge`` (``judges.Judge`` interface) for Stage 2, Stage 3
    with ``verify: judge`` and Stage 4 with ``prioritize: llm``; a ``datastore``
    (``corpus.retrieval.Datastore``) for judge verification; a ``scorer``
    (``rewards.corver.CorVerScorer``) for co-occurrence verification. Each ``stageN`` reads the
    previous stage from disk, so stages can run in separate processes."""

    def __init__(self, cfg: KLCFPipelineSection, run_dir: str | Path, *, sampler=None, judge=None, datastore=None,
                 scorer=None, examples: Sequence[tuple[str, str]] = ()):
        self.cfg, self.dir = cfg, Path(run_dir)
        self.sampler, self.judge, self.datastore, self.scorer = sampler, judge, datastore, scorer
        self.examples = list(examples)[:cfg.few_shot]
        self.report: dict[str, Any] = {"stages": {}}
        self.dir.mkdir(parents=True, exist_ok=True)
        rp = self.dir / STAGE_FILES["report"]
        if rp.exists():
            try:
                self.report = json.loads(rp.read_text())
                self.report.setdefault("stages", {})
            except ValueError:
                pass

    # -- helpers --------------------------------------------------------------------------
    def _path(self, stage: str) -> Path:
        return self.dir / STAGE_FILES[stage]

    def _need(self, what: str, obj: Any) -> Any:
        if obj is None:
            raise ValueError(f"KLCF pipeline: this stage needs a {what}")
        return obj

    def _save_report(self) -> None:
        write_json(self.dir / STAGE_FILES["report"], self.report, indent=1, default=str)

    def _chunk(self) -> int:
        return self.cfg.batch_size * 4

    def queries(self) -> list[dict[str, str]]:
    
        path = self._path("queries")
        if not path.exists():
            raise FileNotFoundError(f"{path}: run stage1 first")
        return list(read_jsonl(path))

    def _rows(self, stage: str) -> list[dict]:
    
        path = self._path(stage)
        if not path.exists():
            raise FileNotFoundError(f"{path}: run the previous stage first")
        return list(read_jsonl(path))

    # -- Stage 1 --------------------------------------------------------------------------
    def stage1(self, queries: Iterable[Any]) -> list[dict]:
        """nu samples per query (§2.2 Stage 1) -> ``stage1_samples.jsonl``."""
        sampler = self._need("sampler", self.sampler)
        qs = _query_rows(queries)

        write_jsonl(self._path("queries"), qs)
        cache = StageCache(self._path("sampling"))
        meter = _Meter(sampler)
        ident = sampler.identity() if hasattr(sampler, "identity") else {}
        items = []  # (key, fp, query row, j, prompt)
        for q in qs:
            prompt = fewshot_prompt(q["prompt"], self.examples)
            for j in range(self.cfg.nu):
                fp = _hash({"prompt": prompt, "sampler": ident, "seed": self.cfg.seed, "j": j})
                items.append((f"{q['id']}#{j}", fp, q, j, prompt))
        todo = [it for it in items if cache.get(it[0], it[1]) is None]
        for s in range(0, len(todo), self.cfg.batch_size):
            chunk = todo[s:s + self.cfg.batch_size]
            seed = int(_hash([self.cfg.seed, [it[0] for it in chunk]]), 16) % (2 ** 31)
            outs = sampler.sample([it[4] for it in chunk], seed)
            if len(outs) != len(chunk):
                raise RuntimeError(f"sampler returned {len(outs)} samples for {len(chunk)} prompts")
            cache.put([{"key": k, "fp": fp, "query_id": q["id"], "query": q["prompt"], "sample": j,
                           "text": cut_at_next_question(o["text"]), "n_tokens": o.get("n_tokens"),
                           "finished": o.get("finished")} for (k, fp, q, j, _), o in zip(chunk, outs)])
        cache.rewrite([it[0] for it in items])
        self.report["stages"]["sampling"] = meter.done(items=len(items), cached=len(items) - len(todo),
                                                       computed=len(todo), queries=len(qs))
        self._save_report()
        return [cache.rows[it[0]] for it in items]

    # -- Stage 2 --------------------------------------------------------------------------
    def stage2(self) -> list[dict]:
        """Claims per sample (Eq. 1, Prompt 2) -> ``stage2_claims.jsonl``."""
        judge = self._need("judge", self.judge)
        samples = self._rows("sampling")
        cache = StageCache(self._path("extraction"))
        meter = _Meter(judge)
        if self.cfg.extract == "sentences":
            ident = {"extract": "sentences", "max_claims": self.cfg.max_claims}
        else:
            ident = {"judge": _judge_identity(judge), "prompt": _hash(P.KLCF_CLAIM_EXTRACTION),
                     "prefill": self.cfg.prefill, "max_claims": self.cfg.max_claims}
        items = [(s["key"], _hash({"text": s["text"], **ident}), s) for s in samples]
        todo = [it for it in items if cache.get(it[0], it[1]) is None]
        empty = [it for it in todo if not it[2]["text"].strip()]
        if empty:  # nothing to extract from: no judge call
            cache.put([{"key": k, "fp": fp, "query_id": s["query_id"], "claims": [], "raw": ""}
                          for k, fp, s in empty])
        todo = [it for it in todo if it[2]["text"].strip()]
        prefix = EXTRACTION_PREFILL if self.cfg.prefill else None
        for c in range(0, len(todo), self._chunk()):
            chunk = todo[c:c + self._chunk()]
            if self.cfg.extract == "sentences":
                cache.put([{"key": k, "fp": fp, "query_id": s["query_id"], "raw": "",
                               "claims": sentence_claims(s["text"])[:self.cfg.max_claims]} for k, fp, s in chunk])
                continue
            answers = judge.judge([P.KLCF_CLAIM_EXTRACTION.format(response=s["text"]) for _, _, s in chunk],
                                  prefix=prefix)
            rows = []
            for (k, fp, s), a in zip(chunk, answers):
                claims = parse_claim_list(a)
                rows.append({"key": k, "fp": fp, "query_id": s["query_id"], "raw": a,
                             "claims": None if claims is None else claims[:self.cfg.max_claims]})
            cache.put(rows)
        cache.rewrite([it[0] for it in items])
        rows = [cache.rows[it[0]] for it in items]
        self.report["stages"]["extraction"] = meter.done(
            items=len(items), cached=len(items) - len(todo) - len(empty), computed=len(todo), empty_samples=len(empty),
            unreadable=sum(r["claims"] is None for r in rows), claims=sum(len(r["claims"] or []) for r in rows))
        self._save_report()
        return rows

    def claims_by_query(self) -> dict[str, list[str]]:
        """C(o_i) (Eq. 1): the union of a query's samples' claims, first-seen order."""
        out: dict[str, list[str]] = {q["id"]: [] for q in self.queries()}
        for r in self._rows("extraction"):
            out.setdefault(r["query_id"], []).extend(r["claims"] or [])
        return {k: list(dict.fromkeys(v)) for k, v in out.items()}

    def query_of(self) -> dict[str, str]:
        """Claim -> the first query whose samples stated it (Stage 2's rows)."""
        out: dict[str, str] = {}
        for qid, claims in self.claims_by_query().items():
            for c in claims:
                out.setdefault(c, qid)
        return out

    def eval_claims(self) -> set[str]:
        """The claims of the queries whose ``split`` is ``EVAL_SPLIT`` (``eval_claims``): never
        in D_truth (``truth.jsonl``) nor the truthfulness reward model's data."""
        held = [q["id"] for q in self.queries() if q.get("split") == EVAL_SPLIT]
        return eval_claims(self.claims_by_query(), held) if held else set()

    # -- Stage 3 --------------------------------------------------------------------------
    def _verifiers(self) -> list[str]:
        other = "cooccurrence" if self.cfg.verify == "judge" else "judge"
        return [self.cfg.verify] + ([other] if self.cfg.compare_verifiers else [])

    def stage3(self) -> dict[str, dict[str, str | None]]:
        """A label per distinct claim (Eq. 2) from every verifier run -> ``stage3_<verifier>.jsonl``;
        returns {verifier: {claim: label}}."""
        claims = list(dict.fromkeys(c for cs in self.claims_by_query().values() for c in cs))
        out = {}
        for v in self._verifiers():
            out[v] = self._verify_judge(claims) if v == "judge" else self._verify_cooc(claims)
        labels = out[self.cfg.verify]
        self.report["labels"] = {lab: sum(x == lab for x in labels.values()) for lab in LABELS}
        self.report["labels"]["unreadable"] = sum(x is None for x in labels.values())
        if len(out) == 2:
            self.report["agreement"] = {"pair": "judge -> cooccurrence",
                                        **label_agreement(out["judge"], out["cooccurrence"])}
        self._save_report()
        return out

    def _verify_judge(self, claims: list[str]) -> dict[str, str | None]:
        judge = self._need("judge", self.judge)
        ds = self._need("datastore", self.datastore)
        cache = StageCache(self._path("verification_judge"))
        meter = _Meter(judge)
        ident = {"judge": _judge_identity(judge), "prompt": _hash(P.KLCF_CLAIM_VERIFICATION), "k": self.cfg.top_k,
                 "datastore": len(ds), "prefill": self.cfg.prefill, "verdict": self.cfg.verdict}
        items = [(c, _hash({"claim": c, **ident})) for c in claims]
        todo = [it for it in items if cache.get(*it) is None]
        prefix = VERIFICATION_PREFILL if self.cfg.prefill else None
        for s in range(0, len(todo), self._chunk()):
            chunk = todo[s:s + self._chunk()]
            hits = ds.retrieve_many([c for c, _ in chunk], k=self.cfg.top_k)
            prompts = [P.KLCF_CLAIM_VERIFICATION.format(claim=c, evidence=format_passages(h) or "(no evidence)")
                       for (c, _), h in zip(chunk, hits)]
            answers = (judge.choose(prompts, LABELS) if self.cfg.verdict == "choice"
                       else judge.judge(prompts, prefix=prefix))
            cache.put([{"key": c, "fp": fp, "label": parse_verification_label(a), "raw": a,
                           "evidence": [x.chunk.id for x in h]} for (c, fp), a, h in zip(chunk, answers, hits)])
        cache.rewrite([c for c, _ in items])
        labels = {c: cache.rows[c]["label"] for c, _ in items}
        self.report["stages"]["verification_judge"] = meter.done(
            items=len(items), cached=len(items) - len(todo), computed=len(todo),
            unreadable=sum(v is None for v in labels.values()))
        return labels

    def _verify_cooc(self, claims: list[str]) -> dict[str, str | None]:
        scorer = self._need("co-occurrence scorer", self.scorer)
        cache = StageCache(self._path("verification_cooccurrence"))
        meter = _Meter()
        lookups0 = getattr(scorer, "lookups", 0)
        args = getattr(scorer, "args", None)
        ident = {"support": self.cfg.cooccurrence_support, "count_limit": self.cfg.count_limit,
                 "extractor": getattr(getattr(scorer, "extractor", None), "name", ""),
                 "args": args.model_dump() if hasattr(args, "model_dump") else None}
        items = [(c, _hash({"claim": c, **ident})) for c in claims]
        todo = [it for it in items if cache.get(*it) is None]
        for s in range(0, len(todo), self._chunk()):
            chunk = todo[s:s + self._chunk()]
            triplets = scorer.triplets([c for c, _ in chunk])
            rows = []
            for (c, fp), ts in zip(chunk, triplets):
                sc = scorer.score(ts)
                rows.append({"key": c, "fp": fp, "count": sc.count, "words": sc.words,
                             "label": cooccurrence_label(sc.count, self.cfg.cooccurrence_support)})
            cache.put(rows)
        cache.rewrite([c for c, _ in items])
        labels = {c: cache.rows[c]["label"] for c, _ in items}
        self.report["stages"]["verification_cooccurrence"] = meter.done(
            items=len(items), cached=len(items) - len(todo), computed=len(todo),
            lookups=getattr(scorer, "lookups", 0) - lookups0)
        return labels

    def labels(self, verifier: str | None = None) -> dict[str, str | None]:
        """{claim: label} of a verifier's Stage 3 file (default: ``cfg.verify``)."""
        v = verifier or self.cfg.verify
        return {r["key"]: r["label"] for r in self._rows(f"verification_{v}")}

    # -- Stage 4 --------------------------------------------------------------------------
    def stage4(self) -> tuple[list[dict], list[dict]]:
        """Checklists (Eq. 3) -> ``stage4_checklists.jsonl`` and D_truth (Eq. 4) -> ``truth.jsonl``."""
        labels = self.labels()
        by_query = self.claims_by_query()
        queries = {q["id"]: q["prompt"] for q in self.queries()}
        cache = StageCache(self._path("checklists"))
        use_llm = self.cfg.prioritize == "llm"
        judge = self._need("judge", self.judge) if use_llm else None
        meter = _Meter(judge)
        ident = {"mode": self.cfg.prioritize, "max": self.cfg.checklist_max,
                 "judge": _judge_identity(judge) if judge is not None else None,
                 "prompt": _hash(P.KLCF_CLAIM_PRIORITIZATION) if use_llm else None}
        items = []
        for qid, claims in by_query.items():
            support = [c for c in claims if labels.get(c) == SUPPORT]
            items.append((qid, _hash({"query": queries.get(qid, ""), "support": support, **ident}), support))
        todo = [it for it in items if cache.get(it[0], it[1]) is None]
        direct = [it for it in todo if not use_llm or not it[2]]
        cache.put([self._checklist_row(qid, fp, support, dedupe_claims(support), "dedupe" if support else "none",
                                          None) for qid, fp, support in direct])
        ask = [it for it in todo if use_llm and it[2]]
        for s in range(0, len(ask), self._chunk()):
            chunk = ask[s:s + self._chunk()]
            answers = judge.judge([P.KLCF_CLAIM_PRIORITIZATION.format(
                query=queries.get(qid, ""), claims="\n" + "\n".join(f"* {c}" for c in support))
                for qid, _, support in chunk], prefix="\\boxed{\n" if self.cfg.prefill else None)
            cache.put([self._checklist_row(qid, fp, support, parse_boxed_claims(a), "llm", a)
                          for (qid, fp, support), a in zip(chunk, answers)])
        cache.rewrite([it[0] for it in items])
        rows = [cache.rows[it[0]] for it in items]
        with_list = [r for r in rows if r["checklist"]]
        truth = self._truth(labels)
        self.report["stages"]["checklists"] = meter.done(
            items=len(items), cached=len(items) - len(todo), computed=len(todo), judged=len(ask),
            unreadable=sum(r["source"] == "llm" and r["checklist"] is None for r in rows),
            no_support=sum(not r["n_support"] for r in rows))
        self.report["checklist"] = {  # Table 6 analogue
            "queries": len(rows), "with_checklist": len(with_list),
            "mean_true_claims": sum(r["n_support"] for r in rows) / len(rows) if rows else float("nan"),
            "mean_items": sum(len(r["checklist"]) for r in with_list) / len(with_list) if with_list else float("nan")}
        self._save_report()
        return rows, truth

    def _checklist_row(self, qid, fp, support, checklist, source, raw) -> dict[str, Any]:
        if checklist is not None and self.cfg.checklist_max is not None:
            checklist = checklist[:self.cfg.checklist_max]
        return {"key": qid, "fp": fp, "query_id": qid, "checklist": checklist, "source": source,
                "n_support": len(support), "raw": raw}

    def _truth(self, labels: Mapping[str, str | None]) -> list[dict]:
        labels, excluded = drop_eval_claims(labels, self.eval_claims())
        sup = [c for c, v in labels.items() if v == SUPPORT]
        ref = [c for c, v in labels.items() if v == REFUTE]
        pos, neg = truth_dataset(sup, ref, ratio=self.cfg.ratio, negative_copies=self.cfg.negative_copies,
                                 seed=self.cfg.data_seed)
        rows = [truth_row(c, True, "pipeline") for c in pos] + [truth_row(c, False, "pipeline") for c in neg]
        random.Random(self.cfg.data_seed).shuffle(rows)

        write_jsonl(self._path("truth"), rows)
        self.report["truth"] = {"support_claims": len(sup), "refute_claims": len(ref), "positives": len(pos),
                                "negatives": len(neg), "distinct_negatives": len(set(neg)),
                                "eval_claims_excluded": excluded}
        return rows

    # -- everything -------------------------------------------------------------------------
    def run(self, queries: Iterable[Any]) -> dict[str, Any]:
        """Stages 1-4; returns the report (also in ``report.json``)."""
        self.stage1(queries)
        self.stage2()
        self.stage3()
        self.stage4()
        return self.report

    def checklist_rows(self) -> list[dict[str, Any]]:
        """GRPO rows for the KLCF rewards: ``question`` and ``checklist`` (queries with one)."""
        queries = {q["id"]: q["prompt"] for q in self.queries()}
        return [{"id": r["query_id"], "question": queries.get(r["query_id"], ""), "checklist": r["checklist"],
                 "prompt": chat_messages(queries.get(r["query_id"], ""))}
                for r in self._rows("checklists") if r["checklist"]]


def corpus_path(resources) -> Path:
    """The run's corpus: ``datastore.corpus``, else the mini-world's."""
    datastore = getattr(resources.cfg, "datastore", None)
    return Path(getattr(datastore, "corpus", None) or resources.world()["corpus"])


def from_resources(cfg: KLCFPipelineSection, resources, run_dir: str | Path, *, model=None, tokenizer=None,
                   examples: Sequence[tuple[str, str]] | None = None, queries: Sequence[Any] = ()) -> KLCFPipeline:
    """A pipeline on a run's ``Resources``: the base model (``model`` / ``tokenizer``, else
    ``resources.cfg.model`` loaded here), its judge, the claim-level (``veriscore``) datastore and
    CorVer's scorer as the stages need them; Prompt 1's few-shot examples from
    ``cfg.few_shot_source`` (``fewshot_examples``: the run's ``datastore.corpus``, the mini-world
    corpus only when none is set, or your file), none of them about a query."""

    if model is None:
        m = resources.cfg.model
        model, tokenizer = load_model(m.name, dtype=m.dtype, device=m.device)
    sampler = ModelSampler(model, tokenizer, name=str(resources.cfg.model.name), max_new_tokens=cfg.max_new_tokens,
                           temperature=cfg.temperature, top_p=cfg.top_p, batch_size=cfg.batch_size,
                           chat_template=cfg.chat_template)
    verifiers = {cfg.verify} | ({"judge", "cooccurrence"} if cfg.compare_verifiers else set())
    if examples is None:
        examples = fewshot_examples(cfg, corpus_path(resources), queries,
                                    text_field=getattr(getattr(resources.cfg, "datastore", None), "text_field", "text"))
    # Stage 2 always extracts with the judge
    return KLCFPipeline(cfg, run_dir, sampler=sampler, judge=resources.judge(),
                        datastore=resources.datastore("veriscore") if "judge" in verifiers else None,
                        scorer=resources.scorer(count_limit=cfg.count_limit) if "cooccurrence" in verifiers else None,
                        examples=examples)

