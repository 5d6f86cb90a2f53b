"""Evidence runs: arms x seeds on one budget, each evaluated per held-out question with the
mini-world's exact truth (issue 28).

A paper's claim is tested as a pre-registered hypothesis (``factlab.evidence``): a treatment
arm against its control(s) on a named truth metric. ``run_arms`` trains every arm with every
seed through the one GRPO entry point (``train.run``: resumable, every run logging reward
validity, ``train.validity``), evaluates the base model once and every trained policy with the
notebook's own ``evaluate(result) -> [{"question": id, <metric>: value, ...}]`` (``result``: the
arm's ``TrainResult``, whose ``load_policy`` gives the trained model; None for the base model),
and writes
``evidence.json``:

- ``rows``: one per (arm, seed, question) with the metrics (the base arm has seed None); with
  ``evidence.dose_steps``, also one per (arm, seed, question, step) at each snapshot step below
  the run's last (``step``: the dose-response; rows without ``step`` are the trained policy's);
- ``curves``: one per (arm, seed, step) with ``reward`` and ``truth/score`` from the training
  log (the figures: the truth metric and the reward over steps, one line per seed);
- ``cpu_seconds``: per (arm, seed), the training's process CPU time (every thread), the
  denominator of "truth gain per CPU-minute".

With ``evidence.workers: N`` the base evaluation and the (arm, seed) runs go to N forked
processes of one thread each (``factlab.forked``); each writes its ``eval.json`` and its
``worker.log`` in its own folder, so a run is the same job in the notebook's process or a worker.

``factlab.evidence`` reads it, computes each effect with a paired bootstrap over questions and
seeds (``eval.bootstrap``) and writes ``results/``. Everything resumes: a finished arm is read
back from its folder.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

from ..forked import Job, run_jobs
from ..eval.truth import completion_truth, label_sentences, question_of
from ..models import generate, load_model, release_memory
from ..experiment import BASE_ARM, EvidenceArm, EvidenceSection, arm_folder_name
from ..rewards import build_rewards
from ..rewards.registry import RewardSpec
from ..paths import write_json
from ..train.callbacks import StepSnapshots
from ..train.grpo import TrainResult, run

__all__ = ["EvidenceArm", "EvidenceSection", "BASE_ARM", "run_arms", "EVIDENCE_FILE", "truth_evaluator",
           "generate_for_rows"]

EVIDENCE_FILE = "evidence.json"
log = logging.getLogger(__name__)


def _folder(out: Path, arm: str, seed: int | None) -> Path:
    return out / arm_folder_name(arm) / ("once" if seed is None else f"seed{seed}")


def _curves(arm: str, seed: int, result: TrainResult) -> list[dict[str, Any]]:
    keys = ("reward", "truth/score", "frac_reward_zero_std", "validity/reward/auroc")
    return [{"arm": arm, "seed": seed, "step": int(h["step"]), **{k: h.get(k) for k in keys if k in h}}
            for h in result.log_history if "loss" in h]


def run_arms(cfg: Any, section: EvidenceSection, rows: Sequence[dict], resources: Any,
             evaluate: Callable[[TrainResult | None], list[dict[str, Any]]], out_dir: str | Path, *,
             start_model: str | None = None, arm_rows: dict[str, Sequence[dict]] | None = None,
             adapt_rewards: Callable[[list[RewardSpec]], list[RewardSpec]] | None = None) -> dict[str, Any]:
    """Train every arm of ``section`` with every seed on ``rows`` (or ``arm_rows[arm]``) from
    ``start_model`` (default the run's model), evaluate each policy and the base model with
    ``evaluate``, and write ``<out_dir>/evidence.json`` (module docstring); returns its content.
    ``adapt_rewards``: what the notebook does to its own reward list before training (e.g.
    KLCF's truthfulness RM folder, ``recipes.klcf.with_truth_model``), applied to every arm's."""
    out = Path(out_dir)
    done = out / EVIDENCE_FILE

    def arm_grpo(arm: EvidenceArm, seed: int):
        return (cfg.evidence_grpo(arm, seed) if getattr(cfg, "evidence", None) is section
                else cfg.grpo.model_copy(update={**section.grpo, **arm.grpo, "seed": seed}))

    arms = [] if section.pilot else list(section.arms)  # a pilot: the base alone (EvidenceSection.pilot)
    model = _model_settings(cfg, start_model)
    evaluation = _plain({"heldout": section.heldout, "max_new_tokens": section.max_new_tokens, "model": model,
                         **(getattr(evaluate, "settings", None) or {})})
    settings = {arm.name: {str(seed): _plain({"grpo": arm_grpo(arm, seed).model_dump(mode="json"),
                                              "rewards": [r.model_dump(mode="json") for r in arm.rewards],
                                              "start_model": start_model, "model": model,
                                              "lora": _plain(getattr(cfg, "lora", None) and cfg.lora.model_dump(mode="json")),
                                              "evaluation": evaluation,
                                              # snapshots are taken while training: a finished arm has none
                                              "dose_steps": list(section.dose_steps)})
                           for seed in section.seeds} for arm in arms}
    record: dict[str, Any] = {"hypothesis": section.hypothesis, "seeds": list(section.seeds),
                              "arms": [a.name for a in arms], "settings": settings, "evaluation": evaluation,
                              "pilot": section.pilot, "rows": [], "curves": [], "cpu_seconds": []}
    old = _read_json(done) if done.exists() else None
    if isinstance(old, dict) and all(old.get(k) == record[k] for k in ("hypothesis", "seeds", "arms", "settings",
                                                                       "evaluation", "pilot")):
        return old
    if old is not None:
        log.info("%s was written for other arms, seeds or settings; rebuilt from the arm folders", done)
    # a folder trained or evaluated with other settings is never mixed into this record: the model, the held-out
    # questions and the answer length included (issue 43: each changed and resumed returned the old rows)
    _claim_folder(_folder(out, BASE_ARM, None), {"evaluation": evaluation})
    for arm in arms:
        for seed in section.seeds:
            _claim_folder(_folder(out, arm.name, seed), settings[arm.name][str(seed)])
    base_file = _folder(out, BASE_ARM, None) / "eval.json"

    def evaluate_base() -> None:
        base_file.parent.mkdir(parents=True, exist_ok=True)
        write_json(base_file, evaluate(None), default=float)

    def train_and_evaluate(arm: EvidenceArm, seed: int, arm_file: Path) -> None:
        specs = adapt_rewards(list(arm.rewards)) if adapt_rewards else list(arm.rewards)
        rewards = build_rewards(specs, resources)
        grpo = arm_grpo(arm, seed)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        snapshots = StepSnapshots(section.dose_steps, arm_file.parent / "snapshots")
        result = run(cfg, (arm_rows or {}).get(arm.name, rows), rewards, arm_file.parent / "train",
                     name=f"evidence-{arm.name}-seed{seed}", model=start_model, grpo=grpo,
                     callbacks=[snapshots] if section.dose_steps else [])
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        evaluated = evaluate(result)
        for step in section.dose_steps:  # the dose-response: the same evaluation at each snapshot
            if step < result.steps and snapshots.path(step).exists():
                at = dataclasses.replace(result, model_dir=str(snapshots.path(step)))
                evaluated += [{**r, "step": step} for r in evaluate(at)]
        write_json(arm_file, {"rows": evaluated, "curves": _curves(arm.name, seed, result),
                                                "cpu_seconds": cpu, "wall_seconds": wall,
                                                "resumed": result.resumed}, default=float)

    jobs = [Job("base", evaluate_base, base_file.parent / "worker.log")] if not base_file.exists() else []
    for arm in arms:
        for seed in section.seeds:
            arm_file = _folder(out, arm.name, seed) / "eval.json"
            if not arm_file.exists():
                jobs.append(Job(f"{arm.name} seed {seed}", partial(train_and_evaluate, arm, seed, arm_file),
                                arm_file.parent / "worker.log"))
    run_jobs(jobs, section.workers, desc=f"evidence {section.hypothesis}")
    record["rows"] += [{"arm": BASE_ARM, "seed": None, **r} for r in _read_eval(base_file, list)]
    for arm in arms:
        for seed in section.seeds:
            got = _read_eval(_folder(out, arm.name, seed) / "eval.json", dict)
            record["rows"] += [{"arm": arm.name, "seed": seed, **r} for r in got["rows"]]
            record["curves"] += got["curves"]
            record["cpu_seconds"].append({"arm": arm.name, "seed": seed, "cpu_seconds": got["cpu_seconds"],
                                          "wall_seconds": got["wall_seconds"]})
    write_json(done, record, indent=1, default=float)
    return record


SETTINGS_FILE = "settings.json"  # an (arm, seed) folder's training settings: GRPO section, rewards, start model


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None


def _model_settings(cfg: Any, start_model: str | None) -> dict[str, Any]:
    """The model an arm starts from and the base is evaluated on: ``start_model``, else the run's
    ``model.name`` with its adapter; and the dtype."""
    m = getattr(cfg, "model", None)
    return {"name": start_model or getattr(m, "name", None), "adapter": None if start_model else getattr(m, "adapter", None),
            "dtype": getattr(m, "dtype", None)}


def _read_eval(path: Path, kind: type) -> Any:
    """An (arm, seed) or base folder's ``eval.json``; ``ValueError`` naming it when it is missing
    (a worker that exited without writing it) or damaged."""
    got = _read_json(path) if path.is_file() else None
    if not isinstance(got, kind) or (kind is dict and not {"rows", "curves", "cpu_seconds", "wall_seconds"} <= set(got)):
        raise ValueError(f"{path}: {'missing' if not path.exists() else 'unreadable or incomplete'} (its job ended "
                         f"without writing it whole); remove {path.parent} to run that job again")
    return got


def _changed(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [k for key in sorted(set(old) | set(new), key=str)
                for k in _changed(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))]
    return [] if old == new else [path or "(all)"]


def _claim_folder(folder: Path, settings: dict[str, Any]) -> None:
    """Record the settings an (arm, seed) folder trains with (``settings.json``), or refuse one
    that trained with others: a resume after ``evidence.grpo.learning_rate`` was edited would
    otherwise put runs at two learning rates in one ``evidence.json``. A folder from before
    settings were recorded is adopted with a warning."""
    path = folder / SETTINGS_FILE
    if path.exists():
        before = _read_json(path)
        changed = _changed(before, settings) if isinstance(before, dict) else ["(unreadable settings.json)"]
        added = [k for k in settings if isinstance(before, dict) and k not in before]
        if added and all(c.split(".")[0] in added for c in changed):  # recorded before these keys were
            log.warning("%s: %s records no %s (written by an older factlab); taken as the current ones", folder,
                        SETTINGS_FILE, ", ".join(added))
            write_json(path, settings, indent=1)
            return
        if changed:
            shown = ", ".join(changed[:6]) + (f" (+{len(changed) - 6} more)" if len(changed) > 6 else "")
            again = "evaluate the base" if folder.name == "once" else "train this arm and seed"
            raise ValueError(f"{folder} was {'evaluated' if folder.name == 'once' else 'trained'} with other settings "
                             f"({shown}); restore them, or remove that folder to {again} again with the new ones")
        return
    if folder.exists() and any(folder.iterdir()):
        log.warning("%s has no %s (written before settings were recorded); its runs are taken as trained with "
                    "the current settings", folder, SETTINGS_FILE)
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, settings, indent=1)



# ---------------------------------------------------------------- per-question truth of a policy


def generate_for_rows(cfg: Any, result: TrainResult | None, rows: Sequence[dict], *, max_new_tokens: int,
                      batch_size: int = 16, start_model: str | None = None) -> list[str]:
    """Greedy answers of a policy to training-style rows (``prompt``: chat messages, rendered
    with the policy's chat template): the trained one (``result``), else the start model."""
    if result is None:
        model, tok = load_model(start_model or cfg.model.name, dtype=cfg.model.dtype, device=cfg.model.device)
    else:
        model, tok = result.load_policy(dtype=cfg.model.dtype, device=cfg.model.device)
    prompts = [tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
    outs = generate(model, tok, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, progress=False,
                    desc="evidence eval")
    del model
    release_memory()
    return [o[0].text for o in outs]


def truth_evaluator(cfg: Any, rows: Sequence[dict], *, max_new_tokens: int, batch_size: int = 16,
                    start_model: str | None = None) -> Callable[[TrainResult | None], list[dict[str, Any]]]:
    """``evaluate`` for ``run_arms``: each held-out row answered greedily, then its exact truth
    (``eval.truth.completion_truth``) as the per-question metrics: short answers ``correct``,
    ``wrong``, ``abstain`` (0 / 1), ``truth`` (+1 / 0 / -1) and ``contradicted`` (contradicted
    sentences, read in the question); verdicts ``correct`` and ``format_ok`` (a readable label);
    long answers ``kb_precision`` (None when nothing is verifiable), ``supported`` and
    ``contradicted`` sentence counts."""
    def evaluate(result: TrainResult | None) -> list[dict[str, Any]]:
        texts = generate_for_rows(cfg, result, rows, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                  start_model=start_model)
        out = []
        for row, text in zip(rows, texts):
            t = completion_truth(row, text)
            rec: dict[str, Any] = {"question": str(row.get("id") or row.get("prompt_id") or len(out))}
            if row.get("bucket"):  # the organism's exposure bucket of the question's country
                rec["bucket"] = str(row["bucket"])
            if t["kind"] == "short":
                rec.update(correct=float(t["label"] == "correct"), wrong=float(t["label"] == "wrong"),
                           abstain=float(t["label"] == "abstain"), truth=t["score"],
                           contradicted=float(sum(r["label"] == "contradicted"
                                                  for r in label_sentences(text, context=question_of(row)))))
            elif t["kind"] == "verdict":
                rec.update(correct=float(t["truthful"]), format_ok=float(t["readable"]))
            else:
                rec.update(kb_precision=t["score"], supported=float(t["supported"]),
                           contradicted=float(t["contradicted"]), truth=t["score"])
            out.append(rec)
        return out
    # what its rows depend on, beside the model (run_arms refuses a folder evaluated otherwise)
    evaluate.settings = {"questions": [str(r.get("id") or r.get("prompt_id") or i) for i, r in enumerate(rows)],
                         "max_new_tokens": max_new_tokens}
    return evaluate

