"""K2V end to end (003_5e9813e66e6ba19a.txt): knowledge graph -> fill-in-blank questions ->
checklists -> the answer-gated reward -> DAPO, for ``notebooks/04_k2v.ipynb``.

The pieces live where they belong (``synth.kg``: the graph; ``synth.k2v``: quintuples,
questions, checklists, leakage; ``rewards.k2v``: Eq. 4-5 and 8; ``rewards.length``: the
overlong penalty; ``train.dapo``: dynamic sampling; ``eval.mcq``: avg@k); this module wires
them from a ``K2VConfig``:

- ``knowledge_graph``: the graph the questions are sampled from (``kg.source: gold`` is the
  mini-world's own graph, ``extracted`` an LLM's NER/RE over the corpus), saved as GraphML, with
  Appendix G's quality numbers; ``extraction_check`` scores an extractor against the
  mini-world's gold graph on a few chunks (Table 12's question, a measured number for any
  extractor).
- ``synthesize``: questions and checklists with their rejection counts and cost (Table 6
  analogue), cached as JSONL in the run folder so a re-run reuses them.
- ``reward_ablation``: every §4.3 ablation on constructed responses (Figure 3's argument).
- ``answer_accuracy``: the policy's accuracy on held-out K2V questions (the in-domain number).
- ``train_run``: DAPO (``grpo.preset: dapo``) with ``cfg.rewards``.

Index (paper section -> function; ``../shared/papers/003_5e9813e66e6ba19a.txt``):

=======================================  ============================================================
§4.1 setup (params)                      ``K2VConfig``, ``ExtractionCheckSection``
§3.1, App. G knowledge graph             ``knowledge_graph``, ``extraction_check``
§3.1-3.2 questions and checklists        ``synthesize``, ``split_questions``, ``synthesis_cost``
§4.4 / Table 10 leakage                  ``leakage``
§3.3 Eq. 4-5, 8 / §4.3 ablations         ``constructed_responses``, ``reward_ablation``
§3.3 template, DAPO training             ``k2v_rows``, ``train_run`` (``run_dir/train/<rewards>``)
§4.2 evaluation                          ``answer_accuracy``, ``headline`` (base -> K2V)
stages (notebook 04, factlab train)      ``start`` (warm start) -> ``prepare`` (= ``knowledge_graph``
                                         -> ``synthesize`` -> ``split_questions``) -> ``train``
=======================================  ============================================================
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import networkx as nx
import pandas as pd
from datasets import Dataset
from pydantic import Field, model_validator

from .. import organism
from .. import prompts as P
from .. import text
from ..config import ParamError, Section
from ..corpus.retrieval import chunk_documents
from ..data.types import read_jsonl, write_jsonl
from ..eval.headline import before_after
from ..eval.mcq import GeneralSection, MCQSection
from ..eval.suites import evaluate
from ..experiment import TrainingConfig
from ..judges import make_judge
from ..rewards import Resources, RewardSpec, build_rewards
from ..rewards.k2v import ABLATIONS, ChecklistJudge, answer_gated_reward, format_score, reasoning_of
from ..rewards.length import OverlongArgs, OverlongPenalty
from ..synth import kg as kgmod
from ..synth.k2v import (ChecklistSection, K2VQuestion, SynthesisSection, TemplateChecklistJudge, leakage,
                         make_checklists, score_checklists, synthesize_questions, template_checklist)
from ..experiment import WarmStartSFTSection
from ..models import model_fingerprint
from ..paths import build_lock, cache_dir
from ..stage_cache import StageCache
from ..train.grpo import TrainResult, run
from ..train.sft import run_sft
from .stages import Recipe, main_process_first, start
from .warmstart import unseen
from ..prompts import chat_messages

log = logging.getLogger(__name__)

__all__ = ["K2VConfig", "ExtractionCheckSection", "knowledge_graph", "extraction_check", "synthesize",
           "split_questions", "k2v_rows", "constructed_responses", "reward_ablation", "answer_accuracy", "headline",
           "train_run", "synthesis_cost", "leakage", "TemplateChecklistJudge", "question_countries", "organism_split",
           "train_heldout", "FormatSFTSection", "format_demo", "format_step", "start", "prepare", "train", "RECIPE"]


class ExtractionCheckSection(Section):
    """The extractor scored against the mini-world's gold graph on ``chunks`` corpus chunks
    (0: skipped). Uses ``kg.extractor`` and ``kg.chunk_tokens``."""

    chunks: int = Field(4, ge=0)
    seed: int = 0


class FormatSFTSection(Section):
    """A short SFT of the policy into the fill-in-blank answer format before RL (``format_step``),
    on the training questions whose exposure bucket is in ``buckets`` (None: every training
    question; buckets exist on the organism, ``organism_split``): the completion states the
    quintuple's two facts in ``<think>`` and names the entity in ``<answer>`` (003 §3.3's
    template, as the warm start's K2V demonstrations). For a policy that never saw a
    fill-in-blank question (the knowledge organism); cached by the model's fingerprint, the
    demonstrations and these settings."""

    enabled: bool = False
    buckets: list[str] | None = ["known"]
    sft: WarmStartSFTSection = WarmStartSFTSection()


class K2VConfig(TrainingConfig):
    """``notebooks/04_k2v.ipynb``: K2V end to end (003_5e9813e66e6ba19a.txt)."""

    rewards: list[RewardSpec] = [RewardSpec(name="k2v"), RewardSpec(name="overlong")]
    kg: kgmod.KGSection = kgmod.KGSection()
    extraction_check: ExtractionCheckSection = ExtractionCheckSection()
    synthesis: SynthesisSection = SynthesisSection()
    checklist: ChecklistSection = ChecklistSection()
    heldout_fraction: float = Field(0.25, gt=0.0, lt=1.0)  # synthesized questions kept for evaluation
    system_prompt: str = P.K2V_SYSTEM
    ablations: list[str | None] = list(ABLATIONS)  # the constructed-response table's rows
    ablation_questions: int = Field(4, ge=1)  # held-out questions in that table (4 responses each)
    mcq: MCQSection = MCQSection()
    general: GeneralSection = GeneralSection()  # 003 §4.1, Tables 2-5: BBH, MATH-500, GSM8K, AIME24, GPQA-D
    leakage_ns: list[int] = [22, 26, 30]  # Appendix E, Table 10
    format_sft: FormatSFTSection = FormatSFTSection()

    @model_validator(mode="after")
    def _known_ablations(self) -> "K2VConfig":
        for a in self.ablations:
            if a not in ABLATIONS:
                raise ParamError("ablations", f"unknown ablation {a!r}; known: {list(ABLATIONS)}")
        return self


# ---------------------------------------------------------------- the knowledge graph


def _corpus_chunks(cfg: K2VConfig, resources: Resources, n: int | None, seed: int = 0) -> list[dict[str, str]]:
    corpus = cfg.kg.corpus or resources.world()["corpus"]
    docs = list(read_jsonl(corpus))
    if not docs:
        raise ValueError(f"kg.corpus: {corpus} has no documents")
    chunks = chunk_documents(docs, resources.policy_tokenizer(), cfg.kg.chunk_tokens)
    if n is not None and n < len(chunks):
        chunks = random.Random(seed).sample(chunks, n)
    return [{"id": c.id, "text": c.text} for c in chunks]


def knowledge_graph(cfg: K2VConfig, resources: Resources, run_dir: str | Path) -> tuple[nx.DiGraph, dict[str, Any]]:
    """The graph questions are sampled from, saved to ``run_dir/kg.graphml``; returns it and a
    report (source, size, Appendix G quality, extraction cost when extracted)."""
    t0 = time.perf_counter()
    report: dict[str, Any] = {"source": cfg.kg.source}
    if cfg.kg.source == "gold":
        graph, triples = kgmod.gold_graph(resources.world())
        report["gold_triples"] = len(triples)
    else:
        judge = make_judge(cfg.kg.extractor)
        ex = kgmod.extract(judge, _corpus_chunks(cfg, resources, cfg.kg.max_chunks), cfg.kg.gleaning)
        merged, graph = kgmod.build_graph(ex, cfg.kg)
        report.update(kgmod.quality(merged, graph), chunks=len(ex.results), calls=ex.calls,
                      parse_failure_rate=ex.parse_failure_rate, dropped=dict(ex.dropped()),
                      prompt_tokens=ex.prompt_tokens, completion_tokens=ex.completion_tokens)
    if cfg.kg.relations is not None:
        graph = kgmod.restrict_relations(graph, cfg.kg.relations)
        report["kept_relations"] = list(cfg.kg.relations)
    report.update(entities=graph.number_of_nodes(), relations=graph.number_of_edges(),
                  seconds=time.perf_counter() - t0)
    if cfg.kg.source == "gold":
        n = graph.number_of_nodes()
        lcc = max((len(c) for c in nx.weakly_connected_components(graph)), default=0)
        report.update(noise_ratio=sum(1 for v in graph.nodes if graph.degree(v) == 0) / n if n else float("nan"),
                      lcc_ratio=lcc / n if n else float("nan"))
    kgmod.save_graphml(graph, Path(run_dir) / "kg.graphml")
    return graph, report


def extraction_check(cfg: K2VConfig, resources: Resources) -> dict[str, Any] | None:
    """Table 12 for ``kg.extractor``: NER/RE on ``extraction_check.chunks`` mini-world chunks,
    scored against the gold graph restricted to the entities those chunks name, with the
    extracted graph's Appendix G quality (``kg.quality``: noise ratio, largest-component ratio,
    type and description conflicts; aliases merged first when ``kg.alias_merge``); None when
    ``chunks`` is 0."""
    n = cfg.extraction_check.chunks
    if n == 0:
        return None
    gold, _ = kgmod.gold_graph(resources.world())
    chunks = _corpus_chunks(cfg, resources, n, cfg.extraction_check.seed)
    ex = kgmod.extract(make_judge(cfg.kg.extractor), chunks, cfg.kg.gleaning)
    merged = kgmod.merge_aliases(ex.merged, cfg.kg.alias_threshold) if cfg.kg.alias_merge else ex.merged
    covered = {c["id"]: kgmod.gold_mentions(gold, c["text"]) for c in chunks}
    return {"extractor": cfg.kg.extractor.model, "chunks": len(chunks), "parse_failure_rate": ex.parse_failure_rate,
            "records": sum(r.n_records for r in ex.results), "dropped": dict(ex.dropped()),
            **kgmod.quality(merged), **kgmod.extraction_accuracy(merged, gold, covered),
            "calls": ex.calls, "cache_hits": ex.cache_hits,
            "seconds": ex.seconds,
            "prompt_tokens": ex.prompt_tokens, "completion_tokens": ex.completion_tokens}


# ---------------------------------------------------------------- questions and checklists


def synthesize(cfg: K2VConfig, graph: nx.DiGraph, resources: Resources, run_dir: str | Path
               ) -> tuple[list[K2VQuestion], dict[str, Any]]:
    """Questions (§3.1) with checklists (§3.2), cached in ``run_dir/questions.jsonl`` with their
    report (``synthesis.json``, a one-record ``StageCache`` written last): a re-run of the notebook
    reuses both."""
    out = Path(run_dir)
    cached = out / "questions.jsonl"
    done = StageCache(out / "synthesis.json", check=lambda row: isinstance(row.get("report"), dict),
                      where="K2V's synthesis report")
    if (saved := done.record()) is not None and cached.exists():
        return [K2VQuestion(**d) for d in read_jsonl(cached)], saved["report"]
    generator = (make_judge(cfg.synthesis.generator)
                 if "llm" in (cfg.synthesis.rephraser, cfg.checklist.writer) or cfg.checklist.quality_pass else None)
    questions, q_report = synthesize_questions(graph, cfg.synthesis, generator)
    if not questions:
        raise ValueError(f"synthesis kept no question of {q_report['sampled']} sampled: {q_report['rejected']}")
    questions, c_report = make_checklists(questions, graph, cfg.checklist, generator)
    if not questions:
        raise ValueError(f"no question has a valid checklist: {c_report['rejections']}")
    report = {"questions": q_report, "checklists": c_report,
              "quality": score_checklists(questions, generator) if cfg.checklist.quality_pass else None}
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(cached, [q.to_dict() for q in questions])
    done.save_record({"report": report})  # last: the questions are written when it exists
    return questions, report


def split_questions(questions: Sequence[K2VQuestion], heldout_fraction: float, seed: int = 0
                    ) -> tuple[list[K2VQuestion], list[K2VQuestion]]:
    """A seeded (train, held-out) split; both non-empty when there are two questions or more."""
    order = list(questions)
    random.Random(seed).shuffle(order)
    n_held = min(max(1, round(len(order) * heldout_fraction)), len(order) - 1) if len(order) > 1 else 0
    return order[n_held:], order[:n_held]


def k2v_rows(questions: Sequence[K2VQuestion], system: str = P.K2V_SYSTEM) -> list[dict[str, Any]]:
    """GRPO rows: the chat prompt and the columns the K2V rewards read (``golds``,
    ``question``, ``checklist``), and the question's exposure ``bucket`` where it has one
    (``organism_split``; the evidence truth evaluator copies it)."""
    return [{"prompt": chat_messages(q.question, system),
             "golds": list(q.golds), "question": q.question, "checklist": list(q.checklist), "id": q.id,
             **({"bucket": q.meta["bucket"]} if q.meta.get("bucket") else {})}
            for q in questions]


def question_countries(graph: nx.DiGraph, q: K2VQuestion) -> list[str]:
    """The names of the countries among a question's quintuple entities (masked one included)."""
    keys = [q.quintuple[k] for k in ("e1", "e2", "e3")]
    return [graph.nodes[k]["name"] for k in keys if k in graph and graph.nodes[k].get("kind") == "country"]


def organism_split(questions: Sequence[K2VQuestion], graph: nx.DiGraph, organism_name: str,
                   exclude: Sequence[str] = ()) -> tuple[list[K2VQuestion], list[K2VQuestion], dict[str, Any]]:
    """(train, held-out, report) for a knowledge organism (``factlab.organism``): a question
    trains when every country it names is in the organism's RL train split (``organism.qa_split``)
    and is held out when every one is in the held-out split and none is in ``exclude`` (e.g. the
    countries a warm start's demonstrations state facts of); the others are dropped (counted).
    Each kept question gets ``meta['bucket']``: the exposure bucket (``organism.exposure_bucket``)
    of the masked entity when it is a country, else of the best-exposed country it names (the
    fact a model can answer from), and ``meta['relations']`` (its two relation labels)."""
    spec = organism.spec_of(organism_name)
    split = organism.qa_split(spec)
    train_c, held_c, ex = set(split["train"]), set(split["heldout"]) - set(exclude), organism.exposures(spec)
    train, held, dropped = [], [], Counter()
    for q in questions:
        names = question_countries(graph, q)
        if not names:
            dropped["no country"] += 1
            continue
        hidden = graph.nodes[q.quintuple[q.masked]]
        n = ex.get(hidden["name"], 0) if hidden.get("kind") == "country" else max(ex.get(c, 0) for c in names)
        q.meta.update(bucket=organism.exposure_bucket(n, spec.known_exposures),
                      relations=" + ".join(sorted((q.quintuple["r1"], q.quintuple["r2"]))))
        if all(c in train_c for c in names):
            train.append(q)
        elif all(c in held_c for c in names):
            held.append(q)
        else:
            dropped["countries on both sides, or excluded"] += 1
    report = {"train": len(train), "heldout": len(held), "dropped": dict(dropped),
              "heldout_by_bucket": dict(sorted(Counter(q.meta["bucket"] for q in held).items())),
              "train_by_bucket": dict(sorted(Counter(q.meta["bucket"] for q in train).items()))}
    return train, held, report


def synthesis_cost(kg_report: dict[str, Any], synth_report: dict[str, Any],
                   extraction: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Table 6 analogue: calls, tokens and seconds per synthesis stage (graph, extraction check,
    questions, checklists, and the Appendix F quality pass when it ran). Tokens are the judge's
    own counts (``Judge.stats`` deltas per stage); a template stage costs no call and no token,
    and a writer without accounting shows None."""
    rows = [{"stage": f"knowledge graph ({kg_report['source']})", "calls": kg_report.get("calls", 0),
             "prompt_tokens": kg_report.get("prompt_tokens", 0),
             "completion_tokens": kg_report.get("completion_tokens", 0), "seconds": kg_report["seconds"]}]
    if extraction is not None:
        rows.append({"stage": "extraction check (NER/RE vs gold)", "calls": extraction["calls"],
                     "prompt_tokens": extraction["prompt_tokens"], "completion_tokens": extraction["completion_tokens"],
                     "seconds": extraction["seconds"]})
    q, c = synth_report["questions"], synth_report["checklists"]
    rows.append({"stage": f"questions ({q['sampled']} quintuples, {q['kept']} kept)", "calls": q["generator_calls"],
                 "prompt_tokens": q.get("prompt_tokens", 0), "completion_tokens": q.get("completion_tokens", 0),
                 "seconds": q["seconds"]})
    rows.append({"stage": f"checklists ({c['with_checklist']} of {c['questions']})", "calls": c["writer_calls"],
                 "prompt_tokens": c.get("prompt_tokens", 0), "completion_tokens": c.get("completion_tokens", 0),
                 "seconds": c["seconds"]})
    quality = synth_report.get("quality")
    if quality:
        rows.append({"stage": f"checklist quality pass ({quality['scored']} scored)", "calls": quality.get("calls"),
                     "prompt_tokens": quality.get("prompt_tokens"), "completion_tokens": quality.get("completion_tokens"),
                     "seconds": quality.get("seconds")})
    return rows


def train_heldout(cfg: K2VConfig, questions: Sequence[K2VQuestion], graph: nx.DiGraph, raw_model: str,
                  demos: Sequence[Any] = ()) -> tuple[list[K2VQuestion], list[K2VQuestion], dict[str, Any]]:
    """The notebook's (train, held-out, report): for a knowledge organism ``raw_model`` (the
    policy before any warm start), ``organism_split`` with the countries of the warm start's
    ``demos`` excluded from the held-out side; otherwise the seeded ``split_questions``, without
    the held-out questions a demonstration asks (``recipes.warmstart.unseen``)."""
    if organism.is_organism(raw_model):
        return organism_split(questions, graph, raw_model, exclude={c for d in demos for c in d.countries})
    train, held = split_questions(questions, cfg.heldout_fraction, cfg.synthesis.seed)
    held = unseen(held, demos)
    return train, held, {"train": len(train), "heldout": len(held)}


def format_demo(graph: nx.DiGraph, q: K2VQuestion) -> str:
    """The fill-in-blank demonstration of ``q``: ``<think>`` its two facts ``</think>\n<answer>``
    the entity ``</answer>`` (the facts are the first two items of its template checklist)."""
    facts = [c.split(": ", 1)[1] for c in template_checklist(graph, q) if c.startswith("States the fact: ")]
    return f"<think>{' '.join(facts)}</think>\n<answer>{q.answer}</answer>"


def format_step(cfg: K2VConfig, train_q: Sequence[K2VQuestion], graph: nx.DiGraph) -> dict[str, Any]:
    """``cfg.format_sft``: the SFT of ``cfg.model.name`` on ``format_demo`` of the chosen training
    questions (a full fine-tune), built once under ``<cache>/k2v-format/<key>``; points
    ``cfg.model.name`` at it (every later stage, the evidence base included, starts there) and
    returns a report (``enabled``, ``examples``, ``steps``, first / last loss, ``seconds``)."""
    fs = cfg.format_sft
    if not fs.enabled:
        return {"enabled": False}
    chosen = [q for q in train_q if fs.buckets is None or q.meta.get("bucket") in fs.buckets]
    if not chosen:
        raise ValueError(f"format_sft.buckets {fs.buckets}: no training question is in them")
    rows = [{"prompt": r["prompt"], "completion": [{"role": "assistant", "content": format_demo(graph, q)}]}
            for r, q in zip(k2v_rows(chosen, cfg.system_prompt), chosen)]
    blob = json.dumps({"model": model_fingerprint(cfg.model.name), "rows": rows, "settings": fs.model_dump()},
                      sort_keys=True, default=str)
    folder = cache_dir() / "k2v-format" / hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
    spec = SimpleNamespace(model=cfg.model, lora=None)
    with build_lock(folder):
        cached = TrainResult.load(folder) is not None
        result = run_sft(spec, Dataset.from_list(rows), folder, sft=fs.sft, name="k2v-format")
    losses = result.losses()
    cfg.model.name = result.model_dir
    return {"enabled": True, "examples": len(rows), "buckets": fs.buckets, "steps": result.steps,
            "first_loss": losses[0][1] if losses else None, "last_loss": losses[-1][1] if losses else None,
            "seconds": result.runtime_s, "cached": cached, "model": result.model_dir}


# ---------------------------------------------------------------- the reward on constructed responses


def constructed_responses(question: K2VQuestion, wrong: str, pad_tokens: int = 0) -> dict[str, str]:
    """Four responses to one question (Figure 3's cases): the right answer with reasoning that
    states the checklist's facts; the right answer with empty reasoning; a wrong answer after
    the same good reasoning; and the right answer after reasoning padded with repeats of
    itself to about ``pad_tokens`` words (0: twice the good reasoning)."""
    facts = [c.split(": ", 1)[1] if c.startswith("States the fact: ") else c for c in question.checklist]
    good = " ".join(facts[:2]) + f" So the blank is filled by {question.answer}."
    poor = "I am not sure, but I will guess the answer directly here."
    pad_words = max(pad_tokens, 2 * len(good.split()))
    padded = " ".join((good + " ") * (pad_words // max(len(good.split()), 1) + 1)).split()[:pad_words]
    return {"correct + good reasoning": f"<think>{good}</think><answer>{question.answer}</answer>",
            "correct + poor reasoning": f"<think>{poor}</think><answer>{question.answer}</answer>",
            "wrong + good reasoning": f"<think>{good.replace(question.answer, wrong)}</think><answer>{wrong}</answer>",
            "padded + correct": f"<think>{' '.join(padded)}</think><answer>{question.answer}</answer>"}


def reward_ablation(questions: Sequence[K2VQuestion], judge, *, alpha: float, ablations: Sequence[str | None],
                    verdict: str = "generate", overlong: OverlongArgs | None = None, tokenizer=None,
                    seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Eq. 8 and each §4.3 ablation on the constructed responses of every question (one judge
    pass for all of them); returns one row per (response kind, ablation) with the mean reward,
    and statistics: the judge's, the mean pass rate p, the mean length (tokens) and, when
    ``overlong`` is given, the mean overlong penalty per response kind (reported apart, so the
    table shows what Eq. 8 itself rewards). The wrong answer is another question's answer."""
    rng = random.Random(seed)
    cases = []
    answers = [q.answer for q in questions]
    for q in questions:
        others = [a for a in answers if text.normalize_answer(a) != text.normalize_answer(q.answer)] or ["Atlantis"]
        pad = overlong.max_len if overlong is not None else 0
        for kind, resp in constructed_responses(q, rng.choice(others), pad).items():
            cases.append((q, kind, resp))
    cj = ChecklistJudge(judge, verdict)
    rates = cj.pass_rates([q.question for q, _, _ in cases], [q.answer for q, _, _ in cases],
                          [q.checklist for q, _, _ in cases], [reasoning_of(r) for _, _, r in cases])
    lengths = ([len(tokenizer(r, add_special_tokens=False)["input_ids"]) for _, _, r in cases]
               if tokenizer is not None else [0] * len(cases))
    penalty = [0.0] * len(cases)
    if overlong is not None:
        penalty = OverlongPenalty(overlong)(completion_ids=[[0] * n for n in lengths])
    table: dict[tuple[str, str], list[float]] = {}
    for (q, kind, resp), p in zip(cases, rates):
        ok = text.grade_answer_exact(text.extract_answer(resp), q.golds) == text.GOOD
        for ab in ablations:
            if p is None and (ab in ("no_answer", "no_gate") or (ab is None and ok)):
                continue  # unreadable judge answers: left out and counted in the stats
            r = answer_gated_reward(format_score(resp), ok, p or 0.0, alpha, ab)
            table.setdefault((kind, ab or "K2V (Eq. 8)"), []).append(r)
    rows = [{"response": kind, "reward": ab, "mean": sum(v) / len(v), "n": len(v)} for (kind, ab), v in table.items()]
    kinds = list(dict.fromkeys(kind for _, kind, _ in cases))
    stats = {**cj.stats, "seconds": cj.seconds,
             "overlong_penalty": {k: _mean([x for (_, kk, _), x in zip(cases, penalty) if kk == k]) for k in kinds},
             "mean_pass_rate": {k: _mean([p for (_, kk, _), p in zip(cases, rates) if kk == k and p is not None])
                                for k in dict.fromkeys(kind for _, kind, _ in cases)},
             "mean_tokens": {k: _mean([n for (_, kk, _), n in zip(cases, lengths) if kk == k])
                             for k in dict.fromkeys(kind for _, kind, _ in cases)}}
    return rows, stats


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# ---------------------------------------------------------------- evaluation and training


def headline(before: dict[str, Any], after: dict[str, Any]) -> dict[str, str]:
    """§4.2's metric on the notebook's one shrunk run, base -> K2V: held-out fill-in-blank exact
    accuracy (against the gold and its aliases, every bucket) and the answer format rate.
    ``before`` / ``after``: ``answer_accuracy``'s. An evidence cell's interval leads it."""
    run = "base → K2V, this notebook's one shrunk run"
    return {f"held-out fill-in-blank exact accuracy, every bucket ({run})": before_after(before["accuracy"],
                                                                                       after["accuracy"]),
            f"held-out answer format rate ({run})": before_after(before["format_rate"], after["format_rate"])}


def answer_accuracy(model, tokenizer, questions: Sequence[K2VQuestion], cfg: K2VConfig) -> dict[str, Any]:
    """Answers to held-out K2V questions under the run's system prompt, graded by the
    ``answer_accuracy`` suite (``eval.suites``): ``accuracy`` of the ``<answer>`` (strict §3.3
    template), ``format_rate``, ``lenient_accuracy`` (any final text), and the ``responses``."""
    res = evaluate("answer_accuracy", model, tokenizer, {"heldout": list(questions)}, cfg.eval_generation,
                   system=cfg.system_prompt, tag="k2v")
    return {**res.metrics["heldout"], "responses": res.records["heldout"]}


def train_run(cfg: K2VConfig, questions: Sequence[K2VQuestion], resources: Resources, out_dir: str | Path
              ) -> TrainResult:
    """DAPO (or GRPO, per ``grpo.preset``) on the synthesized questions with ``cfg.rewards``
    into ``out_dir/<rewards>``; resumable like every run."""
    rewards = build_rewards(cfg.rewards, resources)
    name = "+".join(rewards.names)
    return run(cfg, k2v_rows(questions, cfg.system_prompt), rewards, Path(out_dir) / name, name=f"k2v-{name}")


# ---------------------------------------------------------------- the stages (notebook 04 and factlab train)



def prepare(cfg: K2VConfig, resources: Resources, run_dir: str | Path) -> list[K2VQuestion]:
    """The training questions, as the notebook makes them: ``knowledge_graph`` -> ``synthesize``
    (both cached in ``run_dir``; the main process of a launch first) -> the train side of
    ``train_heldout`` (the organism's own split for an organism policy, else the seeded
    ``split_questions``), then ``format_step`` (``format_sft``: cached; ``cfg.model.name`` points
    at it, as in the notebook)."""
    with main_process_first():
        graph, _ = knowledge_graph(cfg, resources, run_dir)
        questions, _ = synthesize(cfg, graph, resources, run_dir)
        train_q, _, _ = train_heldout(cfg, questions, graph, cfg.model.name)
        format_step(cfg, train_q, graph)
    return train_q



def train(cfg: K2VConfig, questions: Sequence[K2VQuestion], resources: Resources, run_dir: str | Path
          ) -> dict[str, TrainResult]:
    """``train_run`` into ``run_dir/train``; the one run by name."""
    result = train_run(cfg, questions, resources, Path(run_dir) / RECIPE.train_dir)
    return {result.name: result}

# ---------------------------------------------------------------- notebook 04's tables


def scalar_items(report: dict[str, Any]) -> dict[str, Any]:
    """A report's scalar entries (a table's column), its nested ones left out."""
    return {k: v for k, v in report.items() if not isinstance(v, (dict, list))}


def without_responses(accuracy: dict[str, Any]) -> dict[str, Any]:
    """An ``answer_accuracy`` result without its per-question responses (a table's row)."""
    return {k: v for k, v in accuracy.items() if k != "responses"}


def mcq_frame(results: dict[str, dict[str, Any]], k: int) -> pd.DataFrame:
    """One row per MCQ task of an ``avg_at_k`` suite result: its kind, metric, n, avg@k, score
    and the k runs' scores (003 §4.1)."""
    return pd.DataFrame({t: {"kind": r["kind"], "metric": r["metric"], "n": r["n"], f"avg@{k}": r[f"avg@{k}"],
                             "score": r["score"], "runs": ", ".join(f"{x:.3f}" for x in r["runs"])}
                         for t, r in results.items()}).T


RECIPE = Recipe(notebook="04_k2v", config=K2VConfig, prepare=prepare, train=train,
                headline=headline,
                what="knowledge graph -> synthesized questions; one DAPO / GRPO run")
