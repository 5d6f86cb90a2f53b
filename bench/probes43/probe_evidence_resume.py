# issue 43 round-3b probe: evidence resume with changed evaluation params, a stopped forked worker,
# damaged effects / eval files. One line per probe: CLASS | probe | detail.
import sys, os, json, time, signal, threading, multiprocessing as mp
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.config import load_config
from factlab.runner import config_for_notebook
from factlab.recipes import evidence as R

trained = []
R.run = lambda cfg, rows, rewards, out, *, name, model, grpo, callbacks=(): (trained.append(name), SimpleNamespace(log_history=[], resumed=False, steps=6))[1]
R.build_rewards = lambda specs, resources: None

def cfg_with(**ev):
    over = {"evidence": {"workers": 1, **ev.pop("evidence", {})}, **ev}
    return load_config(ROOT / "params/01_corver_evidence.yaml", config_for_notebook("01_corver"), overrides=over)

def evaluator(cfg, tag):
    ev = cfg.evidence
    def evaluate(result):
        # what truth_evaluator would measure: the first ev.heldout questions, answered with max_new_tokens
        return [{"question": f"q{i}", "correct": 1.0, "contradicted": 0.0, "made_with": tag} for i in range(ev.heldout)]
    evaluate.settings = {"questions": [f"q{i}" for i in range(ev.heldout)], "max_new_tokens": ev.max_new_tokens}  # as truth_evaluator
    return evaluate

def arms(cfg, tag, out):
    return R.run_arms(cfg, cfg.evidence, [], None, evaluator(cfg, tag), out)

def probe(name, first, second, check):
    out = T / name.replace(" ", "_") / "evidence"
    c1 = cfg_with(**first); arms(c1, "first", out)
    c2 = cfg_with(**second)
    try:
        rec = arms(c2, "second", out)
    except Exception as e:
        record("clear error" if isinstance(e, ValueError) else "traceback", name, f"{type(e).__name__}: {str(e)[:200]}")
        return
    ok, detail = check(rec, c2)
    record("works as documented" if ok else "silently wrong", name, detail)

def rows_for(rec, arm):
    return [r for r in rec["rows"] if r["arm"] == arm]

probe("evidence.heldout 24 -> 8, resumed", {"evidence": {"heldout": 24}}, {"evidence": {"heldout": 8}},
      lambda rec, c: (len(rows_for(rec, "base")) == 8 and len(rows_for(rec, "full")) == 8 * 3,
                      f"base rows {len(rows_for(rec, 'base'))}, full rows {len(rows_for(rec, 'full'))} (params ask 8 questions)"))
probe("evidence.max_new_tokens 64 -> 16, resumed", {"evidence": {"max_new_tokens": 64}}, {"evidence": {"max_new_tokens": 16}},
      lambda rec, c: (all(r["made_with"] == "second" for r in rec["rows"]),
                      f"rows evaluated at the old length: {sum(r['made_with'] == 'first' for r in rec['rows'])} of {len(rec['rows'])}"))
other = str(ROOT / "params")  # any other model name: the warm start is not loaded here (fake run)
probe("model.name changed, resumed", {}, {"model": {"name": "tiny-random-smollm2"}},
      lambda rec, c: (all(r["made_with"] == "second" for r in rec["rows"]) and len(trained) > 12,
                      f"base rows of the old model: {sum(r['made_with'] == 'first' for r in rows_for(rec, 'base'))}; trained {len(trained)}"))
probe("a seed added", {}, {"evidence": {"seeds": [0, 1, 2, 3]}},
      lambda rec, c: ({r["seed"] for r in rows_for(rec, "full")} == {0, 1, 2, 3}, f"seeds {sorted({r['seed'] for r in rows_for(rec, 'full')})}"))
probe("a seed removed", {"evidence": {"seeds": [0, 1, 2, 3]}}, {"evidence": {"seeds": [0, 1, 2]}},
      lambda rec, c: ({r["seed"] for r in rows_for(rec, "full")} == {0, 1, 2}, f"seeds {sorted({r['seed'] for r in rows_for(rec, 'full')})}"))
probe("evidence.dose_steps [] -> [2], resumed", {}, {"evidence": {"dose_steps": [2]}},
      lambda rec, c: (any(r.get("step") == 2 for r in rec["rows"]), "no dose rows at step 2 (finished arms kept, no snapshots)"))
probe("evidence.grpo.learning_rate changed", {}, {"evidence": {"grpo": {"max_steps": 6, "learning_rate": 1e-3, "save_steps": 6, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2}}},
      lambda rec, c: (False, "accepted"))

# a damaged eval.json in an arm folder (written atomically, but a user / disk may damage it)
out = T / "damaged_eval" / "evidence"
c = cfg_with(); arms(c, "first", out)
(out / "full" / "seed0" / "eval.json").write_text('{"rows": [')
(out / "evidence.json").unlink()
try:
    arms(c, "second", out); record("silently wrong", "truncated arm eval.json, evidence.json gone", "accepted")
except Exception as e:
    record("clear error" if "eval.json" in str(e) else "traceback", "truncated arm eval.json, evidence.json gone", f"{type(e).__name__}: {str(e)[:200]}")
(out / "once" if False else out / "base" / "once" / "eval.json").write_text("[1, 2")
(out / "full" / "seed0" / "eval.json").unlink()
try:
    arms(c, "second", out); record("silently wrong", "truncated base eval.json", "accepted")
except Exception as e:
    record("clear error" if "eval.json" in str(e) else "traceback", "truncated base eval.json", f"{type(e).__name__}: {str(e)[:200]}")
