"""Evaluation suites by name: one call evaluates a model on a set of data, the same way in
every notebook.

===============  ===========================================  ================================
suite            data                                         metrics per set
===============  ===========================================  ================================
shortform        ``{label: [QAItem]}``                        accuracy, strict accuracy, NA,
                                                              format rate, length (000 §4)
abstention       ``{label: [QAItem]}``                        correct / incorrect / abstained
                                                              in the abstain and forced modes
                                                              (001 §4.1, Figure 2)
longform         ``[LongformPrompt]`` + a ``ClaimVerifier``   Precision, Recall@K, F1@K,
                                                              FActScore (001 §4.1-4.2)
verification     ``{label: [ClaimPair]}``                     macro F1, accuracy, format errors,
                                                              structural quality (002 §3.1)
answer_accuracy  ``{label: [K2VQuestion]}`` (anything with    exact accuracy of the <answer>,
                 ``question`` and ``golds``)                  lenient accuracy, format rate
                                                              (K2V's held-out number, 003 §3.3)
avg_at_k         lm-eval task names + an ``MCQSection`` or    per task: avg@k of k sampled runs
                 ``GeneralSection`` (``settings=``)           (generative) or acc once
                                                              (log-likelihood), 003 §4.1
win_rate         ``[LongformPrompt]`` + a judge and the       WR of the model over the
                 baseline's responses                         baseline, both orders (004 Eq.
                                                              19-20), position consistency
===============  ===========================================  ================================

``evaluate(name, model, tokenizer, data, generation, **kw)`` runs a suite on a loaded model;
``evaluate_model(name, model_cfg, data, generation, adapter=..., **kw)`` loads the model (a
name, folder or an adapter on top), runs the suite and frees it. Each returns a
``SuiteResult``: per-set records (every generation, graded) and per-set metrics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .. import text
from ..data.longform import LongformPrompt
from ..models import chat_prompt, generate, load_model, release_memory
from ..registry import Registry
from ..rewards.k2v import format_score
from ..rewards.qa import answer_of
from ..sections import GenerationConfig, ModelConfig
from . import abstention, longform, mcq, shortform, verification, winrate

__all__ = ["SUITES", "LONGFORM_RETRIEVAL", "SuiteResult", "evaluate", "evaluate_model", "available"]


@dataclass
class SuiteResult:
    """What a suite measured: ``records[label]`` (graded generations) and ``metrics[label]``."""

    suite: str
    records: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)


SUITES: Registry[Callable[..., SuiteResult]] = Registry("evaluation suite")


def available() -> list[str]:
    return SUITES.available()


@SUITES.register("shortform")
def shortform_suite(model, tokenizer, sets: Mapping[str, Sequence], generation: GenerationConfig, *,
                    trained: bool = False, tag: str = "", progress: bool = True) -> SuiteResult:
    """Greedy short-form QA with the evaluation prompt of 000 §A.3 (``trained`` adds the
    anti-loop line, for adapter checkpoints), graded by alias matching (§A.2)."""
    out = SuiteResult("shortform")
    g = generation
    for label, items in sets.items():
        t0 = time.perf_counter()
        out.records[label], out.metrics[label] = shortform.evaluate_qa(
            model, tokenizer, items, max_new_tokens=g.max_new_tokens, batch_size=g.batch_size, trained=trained,
            temperature=g.temperature, top_p=g.top_p, seed=g.seed, progress=progress,
            desc=f"{tag} {label}".strip())
        out.metrics[label]["seconds"] = time.perf_counter() - t0
    return out


@SUITES.register("abstention")
def abstention_suite(model, tokenizer, sets: Mapping[str, Sequence], generation: GenerationConfig, *,
                     modes: Sequence[str] = abstention.MODES, tag: str = "", progress: bool = True) -> SuiteResult:
    """Short-form QA in the abstain and forced modes of 001 §4.1; keys ``<label> · <mode>``."""
    out = SuiteResult("abstention")
    g = generation
    for label, items in sets.items():
        for mode in modes:
            key = f"{label} · {mode}"
            out.records[key], out.metrics[key] = abstention.evaluate_abstention(
                model, tokenizer, items, mode, max_new_tokens=g.max_new_tokens, batch_size=g.batch_size,
                temperature=g.temperature, top_p=g.top_p, seed=g.seed, progress=progress)
    return out


LONGFORM_RETRIEVAL = ("prompt_cache", "datastore")  # the long-form suite's evidence sources (``retrieval=``)


@SUITES.register("longform")
def longform_suite(model, tokenizer, prompts: Sequence[LongformPrompt], generation: GenerationConfig, *,
                   verifier, k: int = 10, tag: str = "", progress: bool = True, system: str | None = None,
                   answer_parsing: str | None = None, render: Callable[[LongformPrompt], str] | None = None,
                   cut: Callable[[str], str] | None = None, retrieval: str = "prompt_cache") -> SuiteResult:
    """Long-form responses to ``prompts``, their claims extracted, each claim's evidence retrieved
    and verified (``rewards.rar.ClaimVerifier``): Precision, Recall@K, F1@K, FActScore.
    ``records["longform"]`` holds ``responses`` and ``per_response``.

    ``retrieval``: where a claim's top chunks come from. ``prompt_cache`` ranks only the chunks
    of the documents pre-cached for its prompt (001 §3.2's training shortcut; FActScore's
    "reference documents" of the topic, 001 §4.1; a prompt never cached searches everything);
    ``datastore`` searches the whole datastore per claim (004 App. C.4.1, Table 9: "Wiki
    Retrieval top_k=10" for every claim; VeriScore's per-claim search).

    ``system``: a system turn (a policy trained with a template, e.g. KLCF's Prompt 5);
    ``answer_parsing``: verify only the answer part (``rewards.qa.answer_of``: ``lenient`` reads
    the ``<answer>`` block, else the text outside ``<think>``) rather than the whole response.
    ``render``: the raw model input per prompt instead of the chat template (a base model's
    few-shot prompt, e.g. KLCF's 10-shot Prompt 1), ``cut``: applied to each response first (end
    it where the model starts the next few-shot question)."""
    if retrieval not in LONGFORM_RETRIEVAL:
        raise ValueError(f"retrieval {retrieval!r}: one of {', '.join(LONGFORM_RETRIEVAL)}")
    g = generation
    prompts = list(prompts)
    inputs = [render(p) if render is not None else chat_prompt(tokenizer, p.prompt, system=system) for p in prompts]
    gens = generate(model, tokenizer, inputs,
                    max_new_tokens=g.max_new_tokens, temperature=g.temperature, top_p=g.top_p,
                    batch_size=g.batch_size, seed=g.seed, progress=progress, desc=f"{tag} long-form".strip())
    texts = [gs[0].text for gs in gens]
    if cut is not None:
        texts = [cut(t) for t in texts]
    graded = [answer_of(t, answer_parsing) or "" for t in texts] if answer_parsing else texts
    ids = [p.id for p in prompts] if retrieval == "prompt_cache" else None  # None: every claim searches everything
    lf = longform.longform_precision(verifier, [p.prompt for p in prompts], graded, prompt_ids=ids, k=k)
    return SuiteResult("longform", records={"longform": {"responses": texts, "per_response": lf["per_response"]}},
                       metrics={"longform": lf["metrics"]})


@SUITES.register("verification")
def verification_suite(model, tokenizer, sets: Mapping[str, Sequence], generation: GenerationConfig, *,
                       tag: str = "", progress: bool = True) -> SuiteResult:
    """Structured verdicts (002 K.1-K.2 prompts, greedy, App. B) on claim/source pairs,
    graded by ``eval.verification``."""
    out = SuiteResult("verification")
    g = generation
    for label, pairs in sets.items():
        out.records[label], out.metrics[label] = verification.evaluate_verifier(
            model, tokenizer, pairs, max_new_tokens=g.max_new_tokens, batch_size=g.batch_size,
            temperature=g.temperature, seed=g.seed, progress=progress, desc=f"{tag} {label}".strip())
    return out


@SUITES.register("answer_accuracy")
def answer_accuracy_suite(model, tokenizer, sets: Mapping[str, Sequence], generation: GenerationConfig, *,
                          system: str | None = None, tag: str = "", progress: bool = True) -> SuiteResult:
    """K2V's held-out accuracy (003 §3.3): answers to fill-in-blank questions (``question``,
    ``golds``: ``synth.k2v.K2VQuestion``) under ``system``, graded exactly against the gold and its
    aliases, as the reward grades them: ``accuracy`` of the ``<answer>`` block (the strict
    template), ``lenient_accuracy`` (any final text), ``format_rate`` (``rewards.k2v.format_score``).
    ``records[label]``: the responses."""
    out = SuiteResult("answer_accuracy")
    g = generation
    for label, questions in sets.items():
        questions = list(questions)
        prompts = [chat_prompt(tokenizer, q.question, system=system) for q in questions]
        outs = generate(model, tokenizer, prompts, max_new_tokens=g.max_new_tokens, batch_size=g.batch_size,
                        temperature=g.temperature, top_p=g.top_p, seed=g.seed, progress=progress,
                        desc=f"{tag} {label}".strip())
        texts = [o[0].text for o in outs]
        strict = [text.grade_answer_exact(text.extract_answer(t), q.golds) == text.GOOD
                  for t, q in zip(texts, questions)]
        lenient = [text.grade_answer_exact(text.lenient_answer(t)[0], q.golds) == text.GOOD
                   for t, q in zip(texts, questions)]
        n = len(questions)
        out.records[label] = texts
        out.metrics[label] = {"n": n, "accuracy": sum(strict) / n if n else float("nan"),
                              "lenient_accuracy": sum(lenient) / n if n else float("nan"),
                              "format_rate": sum(format_score(t) > 0 for t in texts) / n if n else float("nan")}
    return out


@SUITES.register("avg_at_k")
def avg_at_k_suite(model, tokenizer, tasks: Sequence[str], generation: GenerationConfig | None = None, *,
                   settings: mcq.MCQSection | mcq.GeneralSection, include_path: str | None = None, tag: str = "",
                   progress: bool = True) -> SuiteResult:
    """Multiple-choice and general-capability benchmarks through lm-evaluation-harness as K2V
    reports them (003 §4.1, ``eval.mcq``): zero-shot, every generative task sampled ``k`` times
    at the temperature and averaged (avg@k), a log-likelihood task scored once (``acc``, avg@k
    None). ``settings``: the params' ``mcq:`` or ``general:`` section (k, temperature, limit,
    batch size, seed; ``max_gen_toks`` for ``general:``); lm-eval generates with those, not with
    ``generation``. ``include_path``: a folder of local task YAMLs (default the section's; the
    mini-world task ``mcq.write_task`` writes). ``metrics[task]``: ``mcq.run_avg_at_k``'s entry."""
    tasks = list(tasks)
    if not tasks:
        return SuiteResult("avg_at_k")
    metrics = mcq.avg_at_k(model, tokenizer, tasks, k=settings.k, temperature=settings.temperature,
                           include_path=include_path or settings.include_path, limit=settings.limit,
                           batch_size=settings.batch_size, seed=settings.seed,
                           max_gen_toks=getattr(settings, "max_gen_toks", None))
    return SuiteResult("avg_at_k", metrics=metrics)


@SUITES.register("win_rate")
def win_rate_suite(model, tokenizer, prompts: Sequence[LongformPrompt], generation: GenerationConfig, *,
                   judge, baseline: Sequence[str], responses: Sequence[str] | None = None, system: str | None = None,
                   answer_parsing: str | None = None, answer: str = "generate", tag: str = "",
                   progress: bool = True) -> SuiteResult:
    """KLCF's win rate (004 Eq. 19-20, ``eval.winrate``): the model's responses to ``prompts``
    (B; generated under ``system``, or ``responses`` when already generated, then ``model`` may be
    None) against ``baseline`` (A), each pair judged in both orders by ``judge`` (built with
    Prompt 8's system turn). ``answer_parsing``: the judge reads each response's answer part
    (``rewards.qa.answer_of``), never its ``<think>`` block; None: the whole response.
    ``answer``: ``generate`` or ``choice`` (``winrate.judge_win_rate``). ``metrics["win_rate"]``:
    WR, wins / ties / losses, position consistency; ``records["win_rate"]``: the responses, the
    judge's answers and the per-instance wins."""
    prompts = list(prompts)
    if responses is None:
        g = generation
        gens = generate(model, tokenizer, [chat_prompt(tokenizer, p.prompt, system=system) for p in prompts],
                        max_new_tokens=g.max_new_tokens, temperature=g.temperature, top_p=g.top_p,
                        batch_size=g.batch_size, seed=g.seed, progress=progress, desc=f"{tag} win rate".strip())
        responses = [gs[0].text for gs in gens]
    responses, baseline = list(responses), list(baseline)
    if not (len(prompts) == len(responses) == len(baseline)):
        raise ValueError(f"{len(prompts)} prompts, {len(responses)} responses and {len(baseline)} baseline "
                         f"responses: one of each per prompt")

    def shown(texts: list[str]) -> list[str]:
        return [answer_of(t, answer_parsing) or "" for t in texts] if answer_parsing else texts

    wr = winrate.judge_win_rate(judge, [p.prompt for p in prompts], shown(baseline), shown(responses), answer=answer)
    records = {"responses": responses, "baseline": baseline, "answers": wr.pop("answers"),
               "per_instance": wr.pop("per_instance")}
    return SuiteResult("win_rate", records={"win_rate": records}, metrics={"win_rate": wr})


def evaluate(suite: str, model, tokenizer, data, generation: GenerationConfig, **kwargs: Any) -> SuiteResult:
    """Run the named suite on a loaded model (see the module docstring for ``data``)."""
    return SUITES.get(suite)(model, tokenizer, data, generation, **kwargs)


def evaluate_model(suite: str, model: ModelConfig | str, data, generation: GenerationConfig, *,
                   adapter: str | None = None, model_cfg: ModelConfig | None = None, **kwargs: Any) -> SuiteResult:
    """Load a model, run the named suite, free the model.

    ``model``: a ``ModelConfig`` (its name, dtype, device and adapter), or a model name /
    folder loaded with ``model_cfg``'s dtype and device; ``adapter`` puts a PEFT adapter on
    top (a trained checkpoint)."""
    if isinstance(model, ModelConfig):
        model_cfg, name, adapter = model, model.name, adapter or model.adapter
    else:
        model_cfg, name = model_cfg or ModelConfig(), model
    loaded, tokenizer = load_model(name, dtype=model_cfg.dtype, device=model_cfg.device, adapter=adapter)
    try:
        return evaluate(suite, loaded, tokenizer, data, generation, **kwargs)
    finally:
        del loaded
        release_memory()
