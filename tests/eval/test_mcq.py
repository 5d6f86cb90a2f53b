"""K2V's MCQ evaluation (003_5e9813e66e6ba19a.txt §4.1, Appendix A): avg@k for generative
lm-eval tasks, one log-likelihood run (acc, avg@k not applicable) for multiple-choice ones,
read from lm-eval results dicts; the full params' task names exist in the installed lm-eval;
the mini-world's local task."""

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from factlab import config
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl
from factlab.eval.mcq import LETTERS, miniworld_mcq, run_avg_at_k, task_score, write_task
from factlab.recipes.k2v import K2VConfig

ROOT = Path(__file__).resolve().parents[2]

# what lm-eval 0.4 reports per task: "<metric>,<filter>" keys
GENERATIVE = {"alias": "mini", "exact_match,letter": 0.5, "exact_match_stderr,letter": 0.1}
LOGLIK = {"alias": "cmmlu_agronomy", "acc,none": 0.25, "acc_stderr,none": 0.02, "acc_norm,none": 0.3,
          "acc_norm_stderr,none": 0.02}


def test_task_score_reads_exact_match_for_generative_and_acc_for_loglikelihood_tasks():
    assert task_score(GENERATIVE, "generate_until") == ("exact_match,letter", 0.5)
    assert task_score(LOGLIK, "multiple_choice") == ("acc,none", 0.25)  # not acc_norm, not a stderr
    with pytest.raises(KeyError, match=r"no 'exact_match' for a generate_until task; it has \['acc,none'"):
        task_score(LOGLIK, "generate_until")


class FakeHarness:
    """``evaluate(tasks, seed)`` returning lm-eval-shaped results: a generative task whose
    accuracy differs per run (sampling) and a multiple-choice one whose does not."""

    def __init__(self, gen_scores):
        self.gen_scores, self.calls = list(gen_scores), []

    def __call__(self, tasks, seed):
        self.calls.append((list(tasks), seed))
        results, configs = {}, {}
        if "mini" in tasks:
            results["mini"] = {**GENERATIVE, "exact_match,letter": self.gen_scores.pop(0)}
            configs["mini"] = {"task": "mini", "output_type": "generate_until"}
        if "cmmlu_agronomy" in tasks:
            results["cmmlu_agronomy"] = dict(LOGLIK)
            configs["cmmlu_agronomy"] = {"task": "cmmlu_agronomy", "output_type": "multiple_choice"}
        if "mmlu_group" in tasks:  # a group: results, no config of its own
            results["mmlu_group"] = {"alias": "mmlu_group", "exact_match,get_response": 0.4}
        return {"results": results, "configs": configs,
                "n-samples": {t: {"original": 10, "effective": 8} for t in tasks}}


def test_avg_at_k_samples_generative_tasks_k_times_and_scores_loglikelihood_tasks_once():
    harness = FakeHarness([0.5, 0.75, 0.25, 1.0])
    out = run_avg_at_k(harness, ["mini", "cmmlu_agronomy"], k=4, seed=7)
    # one run of everything, then k - 1 more seeds for the generative task only
    assert harness.calls == [(["mini", "cmmlu_agronomy"], 7), (["mini"], 8), (["mini"], 9), (["mini"], 10)]
    gen = out["mini"]
    assert gen["kind"] == "generative" and gen["runs"] == [0.5, 0.75, 0.25, 1.0]
    assert gen["avg@4"] == gen["score"] == pytest.approx(0.625) and gen["n"] == 8
    mc = out["cmmlu_agronomy"]
    assert mc["kind"] == "loglikelihood" and mc["avg@4"] is None and "not applicable" in mc["note"]
    assert mc["score"] == 0.25 and mc["runs"] == [0.25] and mc["acc_norm"] == 0.3 and mc["metric"] == "acc,none"

    harness = FakeHarness([])
    run_avg_at_k(harness, ["cmmlu_agronomy"], k=4)
    assert len(harness.calls) == 1  # nothing sampled: k identical runs would be wasted

    harness = FakeHarness([])
    group = run_avg_at_k(harness, ["mmlu_group"], k=2)["mmlu_group"]
    assert group["kind"] == "generative" and group["runs"] == [0.4, 0.4] and len(harness.calls) == 2


def _lm_eval_tasks() -> dict[str, Path]:
    """Task name -> the YAML defining it, in the installed lm-eval (read, not imported: fast)."""
    root = Path(importlib.util.find_spec("lm_eval").submodule_search_locations[0]) / "tasks"
    pat = re.compile(r"^[\"']?task[\"']?:\s*[\"']?([\w\-.]+)", re.M)
    index: dict[str, Path] = {}
    for f in root.rglob("*.yaml"):
        for m in pat.finditer(f.read_text(encoding="utf-8", errors="ignore")):
            index.setdefault(m.group(1), f)
    return index


def _output_type(path: Path) -> str | None:
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^output_type:\s*(\w+)", text, re.M)
    if m:
        return m.group(1)
    inc = re.search(r"^[\"']?include[\"']?:\s*[\"']?([^\s\"']+)", text, re.M)
    return _output_type(path.parent / inc.group(1)) if inc else None


def test_full_params_name_installed_lm_eval_tasks_of_the_documented_kind():
    cfg = config.load_config(ROOT / "params/04_k2v.yaml", K2VConfig)
    index = _lm_eval_tasks()
    missing = [t for t in cfg.mcq.tasks if t not in index]
    assert not missing, f"not tasks of the installed lm-eval: {missing}"
    kinds = {t: _output_type(index[t]) for t in cfg.mcq.tasks}
    assert "medqa_4options" in kinds
    for t, kind in kinds.items():  # what params/04_k2v.yaml and the README say about each
        expected = "generate_until" if t.endswith("_generative") else "multiple_choice"
        assert kind == expected, (t, kind)
    assert not any(name.startswith(("seedbench", "lawbench")) for name in index)  # local YAMLs: include_path


def test_miniworld_mcq_questions_have_one_right_letter(tmp_path):
    world = ensure_world()
    rows = miniworld_mcq(world, 12, seed=0)
    assert len(rows) == 12
    heldout = {d["id"]: d for d in read_jsonl(world["qa_heldout"])}
    for r in rows:
        options = [r[x] for x in LETTERS]
        assert len(set(options)) == 4 and r["answer"] in LETTERS
        assert r[r["answer"]] in heldout[r["id"]]["golds"]
    assert miniworld_mcq(world, 12, seed=0) == rows and miniworld_mcq(world, 12, seed=1) != rows
    name = write_task(rows, tmp_path, name="seedbench_like", temperature=0.6)
    cfg = yaml.safe_load((tmp_path / f"{name}.yaml").read_text())
    assert cfg["output_type"] == "generate_until" and cfg["generation_kwargs"]["temperature"] == 0.6
    assert cfg["metric_list"][0]["metric"] == "exact_match"  # what task_score reads for generative tasks
    assert list(read_jsonl(tmp_path / f"{name}.jsonl")) == rows


# ---------------------------------------------------------------- general capability (003 Tables 2-5)


def test_full_params_general_benchmarks_resolve_in_the_installed_lm_eval_registry():
    """003 §4.1 "Evaluation": BBH, MATH-500, GSM8K, AIME2024, GPQA-Diamond, zero-shot, T = 0.6,
    avg of 4, by lm-eval task names that ``lm_eval.tasks.TaskManager().all_tasks`` knows; every
    task name of the full params (general and MCQ) resolves."""
    from factlab.eval.mcq import GENERAL_TASKS, task_manager, unknown_tasks

    cfg = config.load_config(ROOT / "params/04_k2v.yaml", K2VConfig)
    g = cfg.general
    assert list(g.tasks) == list(GENERAL_TASKS) and (g.k, g.temperature) == (4, 0.6)
    for bench, name in zip(("bbh", "math500", "gsm8k", "aime24", "gpqa_diamond"), g.tasks):
        assert bench in name
    assert unknown_tasks(list(g.tasks) + list(cfg.mcq.tasks)) == []
    assert unknown_tasks(["bbh", "no_such_task_xyz"]) == ["no_such_task_xyz"]
    index = task_manager().task_index  # the one unknown_tasks indexed
    for name in g.tasks:  # sampled tasks (avg@k means what the paper's does); a group: its members
        entry = index[name]
        members = entry.cfg["task"] if isinstance(entry.cfg.get("task"), list) else [name]
        assert {index[m].cfg.get("output_type") for m in members} == {"generate_until"}, name
    smoke = config.load_config(ROOT / "params/04_k2v_lm.yaml", K2VConfig)
    assert smoke.general.tasks == []  # their data sets download: full params only


def test_general_capability_suite_runs_lm_eval_zero_shot_sampled_k_times(monkeypatch):
    import lm_eval
    import lm_eval.models.huggingface as hf

    from factlab.eval import mcq, suites
    from factlab.sections import GenerationConfig

    calls = []

    def fake_evaluate(**kw):
        assert kw["task_manager"] == "manager"
        calls.append(kw)
        return {"results": {t: {"alias": t, "exact_match,flexible-extract": 0.5} for t in kw["tasks"]},
                "configs": {t: {"task": t, "output_type": "generate_until"} for t in kw["tasks"]},
                "n-samples": {t: {"effective": 3} for t in kw["tasks"]}}

    monkeypatch.setattr(lm_eval, "simple_evaluate", fake_evaluate)
    monkeypatch.setattr(hf, "HFLM", lambda **kw: "lm")
    monkeypatch.setattr(mcq, "task_manager", lambda include_path=None: "manager")
    tok = type("Tok", (), {"chat_template": None})()
    section = mcq.GeneralSection(tasks=["gsm8k_cot_zeroshot", "aime24"], k=4, temperature=0.6, max_gen_toks=4096)
    out = suites.evaluate("avg_at_k", "model", tok, section.tasks, GenerationConfig(), settings=section).metrics
    assert [c["random_seed"] for c in calls] == [0, 1, 2, 3]
    assert all(c["num_fewshot"] == 0 and c["gen_kwargs"] == {"do_sample": True, "temperature": 0.6,
                                                            "max_gen_toks": 4096} for c in calls)
    assert out["aime24"]["avg@4"] == 0.5 and out["aime24"]["runs"] == [0.5] * 4
    assert suites.evaluate("avg_at_k", "model", tok, [], GenerationConfig(), settings=mcq.GeneralSection()).metrics == {}
    assert len(calls) == 4


def test_graphgen_table8_settings_are_mapped_and_the_differences_documented():
    """003 Table 8 (GraphGen, App. B.1): each setting says whether the quintuple sampler follows
    it; README's K2V "What differs" names every one it does not follow. The ones it follows,
    on a constructed graph: edges in both directions at the centre, depth 1, isolated nodes out."""
    import networkx as nx

    from factlab.synth.k2v import GRAPHGEN_TABLE8, sample_quintuples

    assert set(GRAPHGEN_TABLE8) == {"qa_form", "expand_method", "bidirectional", "max_extra_edges", "max_tokens",
                                    "max_depth", "edge_sampling", "isolated_node_strategy"}
    assert GRAPHGEN_TABLE8["max_extra_edges"][0] == 2 and GRAPHGEN_TABLE8["edge_sampling"][0] == "max_loss"
    readme = (ROOT / "README.md").read_text()
    k2v = readme[readme.index("### 04_k2v"):readme.index("### 05_klcf")]
    for key, (value, how) in GRAPHGEN_TABLE8.items():
        assert how.split(":")[0] in ("follows", "differs", "moot", "n/a"), key
        if how.startswith("differs"):
            assert f"`{key}: {value}`" in k2v, key
    g = nx.DiGraph()
    for a, b, r in (("A", "B", "r1"), ("C", "B", "r2"), ("B", "E", "r3")):
        g.add_edge(a, b, relation=r)
    g.add_node("D")  # isolated
    qs = sample_quintuples(g, 10, seed=0)
    assert qs and all(q.e2 == "B" for q in qs)  # depth 1: both relations meet at the centre
    assert {q.forward1 for q in qs} == {True, False} or {q.forward2 for q in qs} == {True, False}  # both directions
    assert not any("D" in (q.e1, q.e2, q.e3) for q in qs)  # isolated_node_strategy: ignore
