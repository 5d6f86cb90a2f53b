"""Measuring a knowledge organism: greedy completions of chat prompts, the build report's
questions by exposure group (held-out question templates: the extraction test of Physics of
Language Models 3.1, arXiv 2309.14316 §4-§5), graded exactly, the pretrained base's cloze test
and the report's summary. Part of ``factlab.organism``."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Sequence

from .. import prompts as P
from ..data.kb import ABSTAIN, CORRECT, WRONG, label_answer
from ..decoding import decode
from ..prompts import chat_messages
from ..text import extract_answer
from .specs import OrganismSpec, has_several, exposure_split, exposures, spec_of
from .texts import BOS_TOKEN, STOP_TOKEN, countries_by_name, chat_text, golds, questions


def complete(model, tok, prompts: Sequence[Sequence[dict[str, str]]], max_new_tokens: int = 48,
             batch_size: int = 64) -> list[str]:
    """Greedy completions (special tokens dropped) of chat ``prompts`` (message lists), batched
    through ``factlab.decoding``."""
    stops = [tok.convert_tokens_to_ids(STOP_TOKEN), tok.eos_token_id]
    out: list[str] = [""] * len(prompts)
    rows = tok([chat_text(m) for m in prompts], add_special_tokens=False)["input_ids"]
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        got = decode(model, [rows[i] for i in idx], max_new_tokens=max_new_tokens, stop_ids=stops,
                     pad_id=tok.pad_token_id, temperature=0.0, top_p=1.0)
        for i, (ids, _) in zip(idx, got):
            out[i] = tok.decode(ids, skip_special_tokens=True)
    return out


def eval_questions(spec: OrganismSpec | str | None = None, per_group: int | None = None) -> list[dict[str, Any]]:
    """The build report's questions: per group (``known_heldout`` with held-out and with train
    templates, ``known_qa``, each rare dose, ``unknown_heldout``), up to ``per_group`` (country,
    relation) pairs, each asked with one seeded template; rows carry ``group``, ``country``,
    ``relation``, ``template`` (``train`` | ``heldout``), ``exposures``, ``question``, ``golds``."""
    spec = spec_of(spec)
    n = spec.eval_per_group if per_group is None else per_group
    split = exposure_split(spec)
    ex = exposures(spec)
    by_name = countries_by_name()
    groups = [("known_heldout", split["known_heldout"], "heldout"), ("known_heldout", split["known_heldout"], "train"),
              ("known_qa", split["known_qa"], "heldout")]
    groups += [(f"rare-{d}", names, "heldout") for d, names in split["rare"].items()]
    groups += [("unknown_heldout", split["unknown_heldout"], "heldout")]
    rows = []
    for group, names, kind in groups:
        rng = random.Random(f"organism-eval:{spec.seed}:{group}:{kind}")
        pairs = [(nm, r) for nm in names for r in spec.relations]
        rng.shuffle(pairs)
        for nm, rel in pairs[:n]:
            c = by_name[nm]
            rows.append({"group": group, "template": kind, "country": nm, "relation": rel, "exposures": ex[nm],
                         "question": rng.choice(questions(c, rel, kind)), "golds": golds(c, rel)})
    return rows


def answer_rows(model, tok, rows: Sequence[dict[str, Any]], system: str | None = None) -> list[dict[str, Any]]:
    """``rows`` (``eval_questions``) answered greedily: ``completion``, ``answer`` and ``label``
    (``truth.label_answer``: correct / wrong / abstain; no ``<answer>`` tag reads as abstain)."""
    completions = complete(model, tok, [chat_messages(r["question"], system) for r in rows])
    out = []
    for r, comp in zip(rows, completions):
        ans = extract_answer(comp)
        out.append({**r, "completion": comp, "answer": ans, "formatted": ans is not None,
                    "label": label_answer(ans, r["golds"])})
    return out


def _shares(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    c = Counter(r["label"] for r in rows)
    n = len(rows)
    return {"n": n, **{k: c[k] / n if n else float("nan") for k in (CORRECT, WRONG, ABSTAIN)},
            "formatted": sum(r["formatted"] for r in rows) / n if n else float("nan")}


def evaluate(model, tok, spec: OrganismSpec | str | None = None) -> dict[str, Any]:
    """Greedy exact-match truth of the organism by group (``eval_questions``), with no system turn
    and with Binary RAR's abstain instruction (``prompts.ABSTAIN_SYSTEM``)."""
    spec = spec_of(spec)
    qs = eval_questions(spec)
    out: dict[str, Any] = {}
    for label, system in (("plain", None), ("abstain_prompt", P.ABSTAIN_SYSTEM)):
        rows = answer_rows(model, tok, qs, system)
        groups: dict[str, list] = {}
        for r in rows:
            groups.setdefault(f"{r['group']}/{r['template']}", []).append(r)
        out[label] = {g: _shares(rs) for g, rs in groups.items()}
        if label == "plain":
            out["examples"] = {g: {k: rs[0][k] for k in ("question", "completion", "label")} for g, rs in groups.items()}
    return out


CLOZE = {"capital": {"one": "The capital of {n} is"}, "region": {"one": "{n} is located in"},
         "currency": {"one": "The official currency of {n} is the", "many": "One of the official currencies of {n} is the"},
         "language": {"one": "The official language of {n} is", "many": "One of the official languages of {n} is"}}


def cloze(model, tok, spec: OrganismSpec | str | None = None) -> dict[str, Any]:
    """What the pretrained base stores, without any chat format: each stated or unknown country's
    fact as a sentence to complete ("The capital of Peru is"), greedy, the words up to the full
    stop graded exactly (``truth.label_answer``); per exposure group the share correct."""
    spec = spec_of(spec)
    split = exposure_split(spec)
    by_name = countries_by_name()
    groups = {"known": split["known_qa"] + split["known_heldout"],
              **{f"rare-{d}": names for d, names in split["rare"].items()},
              "unknown": (split["unknown_sft"] + split["unknown_heldout"])[:64]}  # 64 are enough to show guessing
    rows = []
    for group, names in groups.items():
        for nm in names:
            c = by_name[nm]
            for rel in spec.relations:
                forms = CLOZE[rel]
                prefix = forms["many" if has_several(c, rel) and "many" in forms else "one"].format(n=nm)
                rows.append((group, prefix, golds(c, rel)))
    ids = tok([r[1] for r in rows], add_special_tokens=False)["input_ids"]
    stops = [tok.convert_tokens_to_ids(BOS_TOKEN)]
    out = []
    for b in range(0, len(ids), 128):
        out += decode(model, ids[b:b + 128], max_new_tokens=10, stop_ids=stops, pad_id=tok.pad_token_id,
                      temperature=0.0, top_p=1.0)
    per: dict[str, list[bool]] = {}
    for (group, _, gold), (got, _) in zip(rows, out):
        said = tok.decode(got, skip_special_tokens=True).split(".")[0].strip()
        if said.lower().startswith("the "):
            said = said[4:]
        per.setdefault(group, []).append(label_answer(said, gold) == CORRECT)
    return {g: {"n": len(v), "correct": sum(v) / len(v)} for g, v in per.items()}


def summary(report: dict[str, Any]) -> str:
    """The build's figures, one per line."""
    lines = [f"organism {report['fingerprint']}: {report['parameters'] / 1e6:.2f}M parameters, vocab {report['vocab']}, "
             f"{report['tokens']:,} pretraining tokens in {report['steps']} steps "
             f"({report['pretrain_seconds']:.0f} s, {report['tokens_per_second']:.0f} tokens/s), "
             f"format fine-tuning {report['sft']['steps']} steps ({report['sft']['seconds']:.0f} s); "
             f"build {report['build_seconds']:.0f} s, peak RSS {report.get('peak_rss_mb', float('nan')):.0f} MB"]
    curve = report["loss_curve"]
    if curve:
        marks = sorted({0, len(curve) // 4, len(curve) // 2, 3 * len(curve) // 4, len(curve) - 1})
        lines.append("pretraining loss: " + ", ".join(f"step {curve[i][0]} {curve[i][1]:.3f}" for i in marks))
    if report.get("cloze"):
        lines.append("pretrained base, facts completed (cloze, greedy, exact): "
                     + ", ".join(f"{g} {v['correct']:.3f}" for g, v in report["cloze"].items()))
    for prompt, groups in (report.get("eval") or {}).items():
        if prompt == "examples":
            continue
        for g, s in groups.items():
            lines.append(f"  [{prompt}] {g:28s} n={s['n']:4d} correct {s['correct']:.3f} wrong {s['wrong']:.3f} "
                         f"abstain {s['abstain']:.3f} formatted {s['formatted']:.3f}")
    return "\n".join(lines)
