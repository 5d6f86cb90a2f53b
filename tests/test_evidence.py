"""factlab.evidence: the hypotheses, the analysis of an evidence record (paired effects,
verdicts, the results table) and the registry's params files."""

import json
import random

import pytest

from factlab import evidence as E
from factlab.config import load_config
from factlab.runner import config_for_notebook


def _record(effect_wrong=-0.5, seeds=(0, 1, 2), n=60):
    rng = random.Random(0)
    rows = [{"arm": "base", "seed": None, "question": q, "wrong": float(rng.random() < 0.6),
             "abstain": 0.0} for q in range(n)]
    for arm, shift in (("binary", effect_wrong), ("rating", 0.0)):
        for s in seeds:
            for q in range(n):
                p = min(max(0.6 + shift, 0.0), 1.0)
                rows.append({"arm": arm, "seed": s, "question": q, "wrong": float(rng.random() < p),
                             "abstain": float(arm == "binary" and rng.random() < 0.3)})
    curves = [{"arm": a, "seed": s, "step": t, "reward": 0.1 * t, "truth/score": 0.0, "frac_reward_zero_std": 0.5}
              for a in ("binary", "rating") for s in seeds for t in (1, 2)]
    cpu = [{"arm": a, "seed": s, "cpu_seconds": 120.0, "wall_seconds": 70.0} for a in ("binary", "rating") for s in seeds]
    return {"hypothesis": "binary_rar", "seeds": list(seeds), "arms": ["binary", "rating"], "rows": rows,
            "curves": curves, "cpu_seconds": cpu}


def test_analysis_of_a_clear_effect_holds_and_the_table_is_written(tmp_path):
    effects = E.analyze(_record(), E.HYPOTHESES["binary_rar"], replicates=400)
    first = effects[0]
    assert first["comparison"] == "wrong: binary - base" and first["primary"]
    assert first["hi"] < 0 and first["verdict"] == "held" and first["seeds"] == 3 and first["questions"] == 60
    assert effects[1]["verdict"] == "held"  # more abstentions than the base
    assert E.overall(effects) == "held"
    folder = tmp_path / "results" / "binary_rar"
    folder.mkdir(parents=True)
    (folder / "effects.json").write_text(json.dumps({"hypothesis": "binary_rar", "effects": effects, "verdict": "held",
                                                     "cpu_minutes": 12.5}))
    table = E.write_table(tmp_path / "results").read_text()
    assert "| binary_rar | wrong: binary - base | lower |" in table and "[" in table and "held (hypothesis: held)" in table


def test_a_hypothesis_that_was_not_run_shows_its_reason_and_one_with_results_does_not(tmp_path):
    results = tmp_path / "results"
    for name in ("seva", "corver"):
        (results / name).mkdir(parents=True)
        (results / name / E.STATUS_FILE).write_text(f"# {name} budget too small\n\nmeasured ...\n")
    (results / "corver" / "effects.json").write_text(json.dumps({"hypothesis": "corver", "effects": [], "verdict": "null",
                                                                 "cpu_minutes": 1.0}))
    table = E.write_table(results).read_text()
    assert "| seva | n/a |" in table and "not run: seva budget too small ([seva/status.md](seva/status.md))" in table
    assert "corver budget too small" not in table and "Redone" not in table
    (results / "corver" / E.REPRODUCED_FILE).write_text("# corver: reproduced from a fresh clone\n")
    assert "Redone from a fresh clone (its reproduced.md compares the two runs): [corver](corver/reproduced.md)." in \
        E.write_table(results).read_text()


def test_a_null_and_a_failed_guard():
    null = E.analyze(_record(effect_wrong=0.0), E.HYPOTHESES["binary_rar"], replicates=300)
    assert null[0]["verdict"] == "null" and E.overall(null) == "null"
    guard = [{"primary": True, "direction": "lower", "verdict": "held"},
             {"primary": False, "direction": "not lower", "verdict": "not held"}]
    assert E.overall(guard) == "not held"


def test_subsets_margins_and_the_before_after_headline():
    """Round 2 (issue 41): a comparison on one exposure bucket reads only its questions; a
    "not lower" guard with a margin is held only when the interval clears -margin, and a guard
    not shown keeps the hypothesis from holding; the headline leads with base -> treatment."""
    rows = []
    for q in range(80):
        bucket = "unknown" if q < 40 else "known"
        rows.append({"arm": "base", "seed": None, "question": q, "bucket": bucket,
                     "wrong": 1.0 if bucket == "unknown" else 0.0, "abstain": 0.0, "correct": float(bucket == "known")})
        for s in (0, 1, 2):  # binary fixes every unknown country and keeps the known ones
            rows.append({"arm": "binary", "seed": s, "question": q, "bucket": bucket, "wrong": 0.0,
                         "abstain": float(bucket == "unknown"), "correct": float(bucket == "known")})
    rec = {"hypothesis": "smoke_binary_rar", "seeds": [0, 1, 2], "arms": ["binary"], "rows": rows, "curves": [],
           "cpu_seconds": []}
    h = E.HYPOTHESES["smoke_binary_rar"]
    effects = E.analyze(rec, h, replicates=200)
    assert effects[0]["questions"] == 40 and effects[0]["mean"] == -1.0 and effects[0]["verdict"] == "held"
    assert effects[2]["questions"] == 40 and effects[2]["verdict"] == "held"  # known: 0 change, inside the margin
    assert E.overall(effects) == "held"
    frame = E.report_frame(rec, replicates=200)
    assert (frame["control_mean"].iloc[0], frame["treatment_mean"].iloc[0]) == (1.0, 0.0)
    (key, value), = E.headline(frame).items()
    assert "wrong on unknown: binary - base" in key and "3 seeds, 40 questions" in key
    assert value.startswith("1.000 → 0.000; effect -1.000 [-1.000, -1.000] held")
    # a known-country loss of 0.25, far past margin 0.03, fails the guard; an unsure one is null, and holds nothing
    guard = E.Comparison("correct", "binary", "base", "not lower", subset="known", margin=0.03, primary=False)
    lost = [{**r, "correct": 0.0} if r["arm"] == "binary" and r["bucket"] == "known" and r["question"] % 4 == 0
            else r for r in rows]
    out = E.analyze({**rec, "rows": lost}, E.Hypothesis("g", "02_binary_rar", "", (h.comparisons[0], guard)), 200)
    assert out[1]["mean"] == -0.25 and out[1]["verdict"] == "not held" and E.overall(out) == "not held"
    assert E.overall([{"primary": True, "direction": "lower", "verdict": "held"},
                      {"primary": False, "direction": "not lower", "verdict": "null"}]) == "null"
    assert "smoke_binary_rar" not in E.EVIDENCE_HYPOTHESES and "organism_binary_rar" in E.EVIDENCE_HYPOTHESES


def test_committed_rows_round_trip_and_recompute_rebuilds_the_table(tmp_path, monkeypatch):
    """Issue 41: every per-question row is committed (``rows.jsonl.gz``, byte-stable), and
    ``factlab evidence --recompute`` rebuilds the effects and the table from them alone."""
    from factlab import cli

    rec = _record()
    folder = tmp_path / "results" / "binary_rar"
    first = E.write_rows(folder, rec).read_bytes()
    assert E.write_rows(folder, rec).read_bytes() == first  # the same record, the same bytes
    back = E.read_rows(folder)
    assert back["rows"] == rec["rows"] and back["curves"] == rec["curves"] and back["seeds"] == [0, 1, 2]
    (folder / "effects.json").write_text(json.dumps({"hypothesis": "binary_rar", "effects": [], "verdict": "stale",
                                                     "cpu_minutes": 3.0, "wall_minutes": 2.0}))
    monkeypatch.setattr(E, "results_dir", lambda root=None: tmp_path / "results")
    monkeypatch.setattr(cli, "recompute_evidence", E.recompute)
    assert cli.main(["evidence", "--recompute", "binary_rar"]) == 0
    saved = json.loads((folder / "effects.json").read_text())
    assert saved["verdict"] == "held" and saved["cpu_minutes"] == 3.0  # run facts kept, effects rebuilt
    assert saved["effects"] == json.loads(json.dumps(E.analyze(rec, E.HYPOTHESES["binary_rar"]), default=float))
    assert "| binary_rar | wrong: binary - base | lower |" in (tmp_path / "results" / "README.md").read_text()
    (folder / E.ROWS_FILE).write_bytes(first[:40])  # truncated
    with pytest.raises(ValueError, match="rows.jsonl.gz: unreadable rows"):
        E.read_rows(folder)


@pytest.mark.parametrize("line", [b'[1]', b'{"kind": "row", "question": "x"}', b'"text"'])
def test_a_rows_line_of_the_wrong_shape_names_the_file(tmp_path, line):
    """A committed row that is not an object, or lacks its arm, was a TypeError / KeyError naming no
    file (issue 43 round-3b probe)."""
    import gzip

    folder = tmp_path / "binary_rar"
    path = E.write_rows(folder, _record(n=4))
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes()) + line + b"\n"))
    with pytest.raises(ValueError, match=r"rows.jsonl.gz: unreadable rows .*line \d+: .* is not a row"):
        E.read_rows(folder)


@pytest.mark.parametrize("damage", ['{"hypothesis": "binary_rar", "effe', "[1, 2]", "null"])
def test_recompute_over_a_damaged_effects_file_names_it(tmp_path, monkeypatch, damage):
    """``factlab evidence --recompute`` over a truncated effects.json was a JSONDecodeError naming no
    file; over a JSON list or null an AttributeError (issue 43 round-3b probe)."""
    folder = tmp_path / "results" / "binary_rar"
    E.write_rows(folder, _record(n=4))
    (folder / "effects.json").write_text(damage)
    monkeypatch.setattr(E, "results_dir", lambda root=None: tmp_path / "results")
    with pytest.raises(ValueError, match=r"binary_rar/effects.json: unreadable .* restore it .* or rerun factlab evidence"):
        E.recompute(["binary_rar"], replicates=20)


@pytest.mark.parametrize("power", ['{"rows": 5}', '{"rows": [{"comparison": "c", "seeds": 3, "mde": 0.1}]}', '[]'])
def test_a_damaged_power_file_reads_n_a(tmp_path, power):
    """A ``power.json`` whose rows are not a list of pilot rows broke the whole table (TypeError,
    KeyError 'seed_sd') (issue 43 round-3b probe)."""
    (tmp_path / "k2v").mkdir()
    E.write_effects(tmp_path / "k2v", {"hypothesis": "k2v", "verdict": "null", "cpu_minutes": 1.0, "effects": [_EFFECT]})
    (tmp_path / "k2v" / "power.json").write_text(power)
    assert "| k2v | c | higher | +0.100 | [+0.000, +0.200] | 3 | n/a |" in E.write_table(tmp_path).read_text()


def test_dose_response_reads_the_snapshot_rows_and_keeps_them_out_of_the_final_effect(tmp_path):
    """Issue 41's dose-response: rows at snapshot steps (``step``) give the effect per step;
    the trained policy's rows (no ``step``) alone give the effect the verdict reads."""
    rec = _record(effect_wrong=-0.5)
    final = [r for r in rec["rows"] if r["arm"] == "binary"]
    for step, shift in ((2, 0.0), (4, -0.3)):  # no effect at step 2, part of it at step 4
        rng = random.Random(step)
        rec["rows"] += [{**r, "step": step, "wrong": float(rng.random() < 0.6 + shift)} for r in final]
    rec["curves"] = [{**c, "step": 6} if c["step"] == 2 else c for c in rec["curves"]]
    h = E.HYPOTHESES["binary_rar"]
    assert E.analyze(rec, h, replicates=300)[0]["mean"] == E.analyze(_record(effect_wrong=-0.5), h, 300)[0]["mean"]
    doses = E.dose_response(rec, h, replicates=300)
    primary = [d for d in doses if d["comparison"] == "wrong: binary - base"]
    assert [d["step"] for d in primary] == [2, 4, 6] and [d["final"] for d in primary] == [False, False, True]
    assert primary[0]["lo"] < 0 < primary[0]["hi"] and primary[2]["hi"] < 0 and primary[1]["mean"] > primary[2]["mean"]
    from factlab.plots import plot_dose_response
    plot_dose_response(doses, "dose").savefig(tmp_path / "dose.png")
    assert (tmp_path / "dose.png").stat().st_size > 1000


def test_a_comparison_with_nothing_measured_says_no_data():
    rec = _record()
    for r in rec["rows"]:
        r["kb_precision"] = None  # nothing verifiable in any answer
        r["supported"] = 0.0
    rec["rows"] = [{**r, "arm": "klcf" if r["arm"] == "binary" else r["arm"]} for r in rec["rows"]]
    effects = E.analyze(rec, E.HYPOTHESES["klcf"], replicates=100)
    assert effects[0]["verdict"] == "no data" and effects[0]["questions"] == 0 and effects[0]["mean"] != effects[0]["mean"]
    assert effects[1]["verdict"] == "held"  # supported: 0 vs 0 is not lower
    assert E.overall(effects) == "no data"


def test_per_step_comparison_and_cpu_scaling():
    rec = _record()
    for c in rec["curves"]:
        c["frac_reward_zero_std"] = 0.2 if c["arm"] == "binary" else 0.6
    h = E.Hypothesis("x", "02_binary_rar", "claim", (
        E.Comparison("nonzero_advantage", "binary", "rating", "higher", per="step"),
        E.Comparison("wrong", "binary", "rating", "lower", scale="cpu_minutes")))
    step, same_cost = E.analyze(rec, h, replicates=200)
    assert step["mean"] == pytest.approx(0.4) and step["verdict"] == "held"
    plain = E.analyze(rec, E.Hypothesis("y", "02_binary_rar", "c", (E.Comparison("wrong", "binary", "rating", "lower"),)),
                      replicates=200)[0]
    # both arms cost 120 CPU seconds: the scale would be a constant, so the plain effect is reported
    assert same_cost["mean"] == pytest.approx(plain["mean"]) and same_cost["comparison"] == "wrong: binary - rating"
    for c in rec["cpu_seconds"]:
        c["cpu_seconds"] = 120.0 if c["arm"] == "binary" else 60.0
    scaled = E.analyze(rec, h, replicates=200)[1]
    assert scaled["mean"] == pytest.approx(plain["mean"] / 2.0)  # 120 CPU seconds = 2 minutes
    assert scaled["comparison"] == "wrong per CPU-minute: binary - rating"


def test_a_primary_and_its_bucket_secondary_keep_their_registered_roles():
    """One pair of arms, primary on every question and secondary on one bucket
    (reward_hallucination_klcf_judge): the bucket's role must not overwrite the primary's."""
    h = E.HYPOTHESES["reward_hallucination_klcf_judge"]
    effects = [{"comparison": c.label(), "metric": c.metric, "treatment": c.treatment, "control": c.control,
                "primary": not c.primary} for c in h.comparisons]  # a record with every role wrong
    assert [e["primary"] for e in E.registered_roles(h.name, effects)] == [c.primary for c in h.comparisons]


def test_the_table_reads_a_record_by_its_registered_rule(tmp_path):
    """compare's claim is "every family": a record that made only Binary RAR primary (issue 41's
    "held (hypothesis: held)" with three of four families null) reads null by the registration."""
    effects = [{"comparison": f"truth per CPU-minute: {fam} kb - {fam} judge", "metric": "truth",
                "treatment": f"{fam} kb", "control": f"{fam} judge", "direction": "higher", "primary": fam == "Binary RAR",
                "per": "question", "mean": 0.4 if fam == "Binary RAR" else 0.0, "lo": 0.1 if fam == "Binary RAR" else -0.1,
                "hi": 0.8, "seeds": 3, "questions": 16, "replicates": 100,
                "verdict": "held" if fam == "Binary RAR" else "null"}
               for fam in ("Binary RAR", "K2V", "KLCF", "SEVA claims")]
    assert all(e["primary"] for e in E.registered_roles("compare", effects))
    (tmp_path / "compare").mkdir()
    (tmp_path / "compare" / "effects.json").write_text(json.dumps({"hypothesis": "compare", "effects": effects,
                                                                   "verdict": "held", "cpu_minutes": 1.0}))
    table = E.write_table(tmp_path).read_text()
    assert "held (hypothesis: null)" in table and "null (hypothesis: null)" in table
    assert "(hypothesis: held)" not in table and "compare (secondary)" not in table


def test_the_table_keeps_the_first_rounds_135m_rows_in_their_own_section(tmp_path):
    """Issue 41: "The 135M results stay as they are, in their own section": an organism
    hypothesis' row stands under the organism's heading, a first-round one under its own, after it."""
    def effect(h):
        c = h.comparisons[0]
        return {"comparison": c.label(), "metric": c.metric, "treatment": c.treatment, "control": c.control,
                "direction": c.direction, "primary": True, "per": "question", "mean": 0.0, "lo": -0.1, "hi": 0.1,
                "seeds": 5, "questions": 16, "replicates": 100, "verdict": "null"}
    for name in ("corver", "organism_corver"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "effects.json").write_text(json.dumps(
            {"hypothesis": name, "effects": [effect(E.HYPOTHESES[name])], "verdict": "null", "cpu_minutes": 1.0}))
    table = E.write_table(tmp_path).read_text()
    organism, first = table.index("## On the knowledge organism"), table.index("## First round: the 135M policy")
    assert organism < table.index("| organism_corver |") < first < table.index("| corver |")


def test_every_hypothesis_has_a_valid_evidence_params_file():
    for h in E.HYPOTHESES.values():
        cfg = load_config(h.params, config_for_notebook(h.notebook))
        ev = cfg.evidence
        assert ev is not None and ev.hypothesis == h.name and len(ev.seeds) >= 3
        arms = {a.name for a in ev.arms} | {"base"}
        for c in h.comparisons:
            assert {c.treatment, c.control} <= arms, (h.name, c)


def test_factlab_evidence_end_to_end_on_tiny_steps(tmp_path):
    """``factlab evidence corver`` on the tiny random model, one step per arm and seed (plumbing
    only: the numbers mean nothing): the notebook's evidence cell trains 2 arms x 3 seeds,
    evaluates the base and every policy on the held-out rows with the exact truth, and
    ``results/`` gets the table row, effects, figure, command and manifest."""
    from pathlib import Path

    from conftest import write_tiny_params

    root = Path(__file__).resolve().parents[1]
    params = write_tiny_params(tmp_path / "01_corver_tiny.yaml", "01_corver", root / "params/01_corver_evidence.yaml", """\
train_data: {limit: 8}
self_filter: {num_samples: 2, max_new_tokens: 16}
grpo: {max_steps: 1, max_completion_length: 16, save_steps: 1}
eval: [{name: miniworld, split: heldout, limit: 6}]
eval_generation: {max_new_tokens: 16}
calibration: {limit: 40}
evidence: {heldout: 6, max_new_tokens: 16, grpo: {max_steps: 1, save_steps: 1}, workers: 2}
""")
    summaries = E.run(["corver"], out=tmp_path / "runs", params={"corver": str(params)}, root=tmp_path,
                      replicates=100)
    s = summaries[0]
    assert s["seeds"] == [0, 1, 2] and s["verdict"] in ("held", "not held", "null") and s["wall_minutes"] > 0
    record = json.loads(next(Path(s["run_dir"]).rglob("evidence.json")).read_text())
    arms = {(r["arm"], r["seed"]) for r in record["rows"]}
    assert arms == {("base", None)} | {(a, seed) for a in ("full", "A1") for seed in (0, 1, 2)}
    assert len([r for r in record["rows"] if r["arm"] == "full"]) == 3 * 6  # 6 held-out questions x 3 seeds
    assert all(r["correct"] + r["wrong"] + r["abstain"] == 1.0 for r in record["rows"])
    assert {c["step"] for c in record["curves"]} == {1}
    folder = tmp_path / "results" / "corver"
    for name in ("effects.json", "command.txt", "manifest.json", "curves.png"):
        assert (folder / name).exists(), name
    assert json.loads((folder / "manifest.json").read_text())["git"]
    assert "factlab evidence corver" in (folder / "command.txt").read_text()
    runtime = (folder / "runtime.md").read_text()  # the executed notebook's cells, then each (arm, seed) run
    assert "| `if cfg.evidence is not None:` |" in runtime and "| A1 | 2 |" in runtime and "| full | 0 |" in runtime
    table = (tmp_path / "results" / "README.md").read_text()
    assert "| corver | contradicted: full - A1 | lower |" in table and "| corver (guard) | correct: full - A1 |" in table
    m = json.loads((Path(s["run_dir"]) / "metrics.json").read_text())["evidence"]
    assert m["hypothesis"] == "corver" and len(m["effects"]) == 2


def test_runtime_table_reads_cell_seconds_and_runs(tmp_path):
    """``runtime.md``: each code cell's papermill seconds and share (a cell's pipe escaped for
    the Markdown table), then the runs' training seconds; a run folder without its notebook says so."""
    nb = {"cells": [{"cell_type": "markdown", "source": ["# title"], "metadata": {}},
                    {"cell_type": "code", "source": ["# a comment\n", "x = a | b  # why\n"],
                     "metadata": {"papermill": {"duration": 30.0}}},
                    {"cell_type": "code", "source": "train()", "metadata": {"papermill": {"duration": 90.0}}}]}
    (tmp_path / "notebook.ipynb").write_text(json.dumps(nb))
    record = {"cpu_seconds": [{"arm": "full", "seed": 0, "cpu_seconds": 80.4, "wall_seconds": 88.6},
                              {"arm": "A1", "seed": 0, "cpu_seconds": 1.0, "wall_seconds": 1.0}],
              "curves": [{"arm": "full", "seed": 0, "step": s} for s in (1, 2, 24)]}  # 24 of 60: DAPO ran out
    text = E.runtime_table("corver", 2.0, tmp_path, record)
    assert "| `x = a \\| b` | 30.0 | 25.0% |" in text and "| `train()` | 90.0 | 75.0% |" in text
    assert "| all cells | 120.0 | 100% |" in text and "| full | 0 | 24 | 89 | 80 |" in text and "2.0 min wall" in text
    assert "| A1 | 0 | n/a | 1 | 1 |" in text
    assert "no cell durations" in E.runtime_table("corver", None, tmp_path / "gone", {})
    assert "(budget 30)" in text and "(budget 20)" in E.runtime_table("organism_corver", 2.0, tmp_path, record)


# ---------------------------------------------------------------- arms, resumes and stale records (issue 43)

CORVER_EVIDENCE = "params/01_corver_evidence.yaml"


def _corver_evidence(**evidence):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    return load_config(root / CORVER_EVIDENCE, config_for_notebook("01_corver"), overrides={"evidence": evidence})


@pytest.mark.parametrize("names, words", [
    (["full", "A1", "a b", "a_b"], "arm 'a_b' and arm 'a b' would share the folder 'a_b'"),
    (["full", "A1", "a1"], "arm 'a1' and arm 'A1' would share the folder 'a1'"),  # macOS, Windows
    (["full", "A1", "Base"], "arm 'Base' and arm 'base' would share"),
    (["full", "A1", "caf\u00e9", "cafe\u0301"], "would share the folder"),  # composed and decomposed
    (["full", "A1", "x" * 300], "more than 200 for a folder name"),  # failed only when its folder was made
    (["full", "A1", "../../escape"], "is not a plain folder name"),
    (["full", "A1", "x/y"], "is not a plain folder name"),
    (["full", "A1", ".."], "is not a plain folder name"),
    (["full", "B1"], "compares arm 'A1' (contradicted: full - A1), which is not among the arms"),
])
def test_arm_names_that_collide_escape_or_miss_the_hypothesis_fail_at_load(names, words):
    from factlab.config import ConfigError

    arms = [{"name": n, "rewards": [{"name": "format"}]} for n in names]
    with pytest.raises(ConfigError, match="evidence.arms") as e:
        _corver_evidence(arms=arms)
    assert words in str(e.value), str(e.value)


def test_an_unknown_hypothesis_fails_at_load_not_after_training():
    from factlab.config import ConfigError

    with pytest.raises(ConfigError, match=r"'evidence.hypothesis': unknown hypothesis 'corvre'; known: corver"):
        _corver_evidence(hypothesis="corvre")


def test_a_resume_never_mixes_settings_and_a_new_seed_rebuilds_the_record(tmp_path, monkeypatch):
    """Editing ``evidence.grpo.learning_rate`` and resuming mixed two learning rates in one
    ``evidence.json``; adding a seed returned the old file (issue 43)."""
    from types import SimpleNamespace

    from factlab.recipes import evidence as R

    trained = []

    def fake_run(cfg, rows, rewards, out, *, name, model, grpo, callbacks=()):
        trained.append((name, grpo.learning_rate))
        return SimpleNamespace(log_history=[], resumed=False)

    monkeypatch.setattr(R, "run", fake_run)
    monkeypatch.setattr(R, "build_rewards", lambda specs, resources: None)

    def evaluate(result):
        return [{"question": "q1", "contradicted": 0.0, "correct": 1.0}]

    def arms(cfg):
        return R.run_arms(cfg, cfg.evidence, [], None, evaluate, tmp_path / "evidence")

    cfg = _corver_evidence(workers=1)
    first = arms(cfg)
    assert len(trained) == 6 and first["seeds"] == [0, 1, 2]
    assert arms(cfg) == first and len(trained) == 6  # finished: read back, nothing trained
    more = arms(_corver_evidence(workers=1, seeds=[0, 1, 2, 3]))  # a seed added: only its runs train
    assert more["seeds"] == [0, 1, 2, 3] and len(trained) == 8
    assert {(r["arm"], r["seed"]) for r in more["rows"]} >= {("full", 3), ("A1", 3)}
    edited = _corver_evidence(workers=1, grpo={**cfg.evidence.grpo, "learning_rate": 1.0e-3})
    with pytest.raises(ValueError, match=r"evidence/full/seed0 was trained with other settings \(grpo.learning_rate\)"):
        arms(edited)
    assert len(trained) == 8  # nothing trained at the new rate beside the old runs


_EFFECT = {"comparison": "c", "direction": "higher", "mean": 0.1, "lo": 0.0, "hi": 0.2, "seeds": 3, "verdict": "null",
           "primary": True}


@pytest.mark.parametrize("damage", ['{"hypothesis": "binary_rar", "effects": [{"compar', '{"hypothesis": "binary_rar"}',
                                    '{"hypothesis": "k2v", "verdict": "held", "cpu_minutes": 1, "effects": [{}]}',
                                    # wrong types: a ValueError / TypeError out of the table's formats, naming no file
                                    json.dumps({"hypothesis": "k2v", "verdict": "held", "cpu_minutes": "x", "effects": []}),
                                    json.dumps({"hypothesis": "k2v", "verdict": "held", "cpu_minutes": 1,
                                                "effects": [{**_EFFECT, "mean": None}]}),
                                    json.dumps({"hypothesis": "k2v", "verdict": "held", "cpu_minutes": 1,
                                                "wall_minutes": "x", "effects": [_EFFECT]})])
def test_a_damaged_effects_file_is_one_unreadable_row_not_a_crash(tmp_path, damage):
    (tmp_path / "k2v").mkdir()
    (tmp_path / "k2v" / "effects.json").write_text(damage)
    table = E.write_table(tmp_path).read_text()
    assert "| k2v | n/a |" in table and "unreadable:" in table and "k2v/effects.json" in table


def test_effects_json_is_written_atomically_a_full_disk_leaves_the_earlier_one_whole(tmp_path):
    import resource
    import signal

    before = {"hypothesis": "k2v", "verdict": "held", "cpu_minutes": 1.0, "effects": []}
    E.write_effects(tmp_path, before)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(OSError):
            E.write_effects(tmp_path, {**before, "big": "x" * 20000})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert E.read_effects(tmp_path / "effects.json") == before
    assert [p.name for p in tmp_path.iterdir()] == ["effects.json"]


def test_a_pilot_answers_with_the_base_alone_and_prices_the_budget(tmp_path, monkeypatch):
    """``evidence.pilot``: no arm trains, the base's rows are the record (issue 41's power analysis)."""
    from types import SimpleNamespace

    from factlab.recipes import evidence as R

    trained = []
    monkeypatch.setattr(R, "run", lambda *a, **k: trained.append(k) or SimpleNamespace(log_history=[], resumed=False))
    monkeypatch.setattr(R, "build_rewards", lambda specs, resources: None)
    rng = random.Random(0)
    base_rows = [{"question": f"q{i}", "correct": float(rng.random() < 0.4),
                  "contradicted": float(rng.random() < 0.7)} for i in range(80)]
    cfg = _corver_evidence(workers=1)
    cfg.evidence.pilot = True
    record = R.run_arms(cfg, cfg.evidence, [], None, lambda result: base_rows, tmp_path / "evidence")
    assert trained == [] and record["pilot"] is True and record["arms"] == []
    assert {r["arm"] for r in record["rows"]} == {"base"} and len(record["rows"]) == 80
    rows = E.power_analysis(record, E.HYPOTHESES["organism_corver"], seeds=(3, 12), seed_sd=(0.05,),
                            simulations=40, replicates=150)
    primary = [r for r in rows if r["primary"]]
    assert [r["seeds"] for r in primary] == [3, 12] and primary[0]["questions"] == 80
    assert primary[0]["base_mean"] == pytest.approx(sum(r["contradicted"] for r in base_rows) / 80)
    assert primary[1]["mde"] < primary[0]["mde"] <= 0.3  # more seeds price a smaller effect
    assert not any("correct" in r["comparison"] for r in rows)  # the guard has a margin, not an MDE
    cfg.evidence.pilot = False  # the real run after a pilot trains every arm (the pilot record is not reused)
    real = R.run_arms(cfg, cfg.evidence, [], None, lambda result: base_rows, tmp_path / "evidence")
    assert real["pilot"] is False and len(trained) == 6


def test_the_table_carries_the_pilots_mde_at_the_rows_seeds_and_the_organisms_budget(tmp_path):
    effects = E.analyze(_record(seeds=(0, 1, 2, 3, 4)), E.HYPOTHESES["binary_rar"], replicates=200)
    for name in ("binary_rar", "organism_binary_rar"):
        folder = tmp_path / "results" / name
        folder.mkdir(parents=True)
        (folder / "effects.json").write_text(json.dumps({"hypothesis": name, "effects": effects, "verdict": "held",
                                                         "cpu_minutes": 30.0, "wall_minutes": 25.0}))
    power = [{"comparison": "wrong: binary - base", "seeds": s, "seed_sd": sd, "mde": m}
             for s, grid in ((5, (0.02, 0.03, float("nan"))), (8, (0.01, 0.02, 0.05))) for sd, m in zip((0.0, 0.02, 0.05), grid)]
    (tmp_path / "results" / "organism_binary_rar" / E.POWER_FILE).write_text(json.dumps({"rows": power}))
    table = E.write_table(tmp_path / "results").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| organism_binary_rar | wrong: binary - base"))
    assert "| 5 | 0.02 / 0.03 / none |" in row and "25.0 (over the 20-minute budget)" in row
    first = next(line for line in table.splitlines() if line.startswith("| binary_rar | wrong: binary - base"))
    assert "| 5 | n/a |" in first and "25.0 |" in first  # round 1: no pilot, a 30-minute budget
    (tmp_path / "results" / "organism_binary_rar" / E.POWER_FILE).write_text("{not json")
    assert "| 5 | n/a |" in E.write_table(tmp_path / "results").read_text().split("organism_binary_rar | wrong")[1]


def test_each_arm_against_the_base_and_the_tables_figure_links(tmp_path):
    record = _record(seeds=(0, 1, 2))
    arms = E.arm_effects(record, E.HYPOTHESES["binary_rar"], replicates=200)
    assert [a["arm"] for a in arms] == ["binary", "rating"] and arms[0]["label"] == "wrong"
    assert arms[0]["hi"] < 0 < arms[1]["hi"] and arms[1]["lo"] < 0  # binary lowers it, rating does not
    fig = E.plot_arm_effects(arms, "t")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["binary", "rating"]
    results = tmp_path / "results"
    (results / "binary_rar").mkdir(parents=True)
    (results / "binary_rar" / E.ARMS_FIGURE).write_bytes(b"png")
    assert "[binary_rar: each arm against the base](binary_rar/arms.png)" in E.write_table(results).read_text()
    assert "Figures" not in E.write_table(tmp_path / "nothing").read_text()


@pytest.mark.parametrize("edit, words", [
    ({"heldout": 8}, "evaluation.heldout, evaluation.questions"),
    ({"max_new_tokens": 16}, "evaluation.max_new_tokens"),
    ({"model": "tiny-random-smollm2"}, "evaluation.model.name"),
    ({"dose_steps": [2]}, "dose_steps"),  # a finished arm has no snapshots: its dose rows were silently missing
])
def test_a_resume_never_mixes_rows_evaluated_otherwise(tmp_path, monkeypatch, edit, words):
    """``evidence.heldout``, ``evidence.max_new_tokens`` or ``model.name`` edited and resumed returned
    the old rows (the base's and the trained arms'), measured on other questions, at another answer
    length or of another model (issue 43 round-3b probe)."""
    from types import SimpleNamespace

    from factlab.recipes import evidence as R

    trained = []
    monkeypatch.setattr(R, "run", lambda *a, name, **k: trained.append(name) or SimpleNamespace(log_history=[], resumed=False))
    monkeypatch.setattr(R, "build_rewards", lambda specs, resources: None)

    def arms(cfg):
        ev = cfg.evidence

        def evaluate(result):
            return [{"question": f"q{i}", "contradicted": 0.0, "correct": 1.0} for i in range(ev.heldout)]
        evaluate.settings = {"questions": [f"q{i}" for i in range(ev.heldout)], "max_new_tokens": ev.max_new_tokens}
        return R.run_arms(cfg, ev, [], None, evaluate, tmp_path / "evidence")

    first = arms(_corver_evidence(workers=1))
    model = edit.pop("model", None)
    cfg = _corver_evidence(workers=1, **edit)
    if model:
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": model})})
    with pytest.raises(ValueError, match=r"evidence/(base/once|full/seed0) was (evaluated|trained) with other settings") as e:
        arms(cfg)
    assert words in str(e.value)
    assert arms(_corver_evidence(workers=1)) == first and len(trained) == 6  # the original settings still resume


def test_a_damaged_or_missing_eval_json_names_the_file(tmp_path, monkeypatch):
    """A truncated ``eval.json`` (or none: a worker that exited 0 without it) was a bare JSONDecodeError /
    FileNotFoundError naming no file (issue 43 round-3b probe)."""
    from types import SimpleNamespace

    from factlab.recipes import evidence as R

    monkeypatch.setattr(R, "run", lambda *a, **k: SimpleNamespace(log_history=[], resumed=False))
    monkeypatch.setattr(R, "build_rewards", lambda specs, resources: None)
    cfg = _corver_evidence(workers=1)
    out = tmp_path / "evidence"
    R.run_arms(cfg, cfg.evidence, [], None, lambda result: [{"question": "q1", "contradicted": 0.0}], out)
    (out / "evidence.json").unlink()
    (out / "full" / "seed0" / "eval.json").write_text('{"rows": [')
    with pytest.raises(ValueError, match=r"full/seed0/eval.json: unreadable or incomplete .* remove .*full/seed0"):
        R.run_arms(cfg, cfg.evidence, [], None, lambda result: [], out)
    monkeypatch.setattr(R, "run_jobs", lambda jobs, workers, desc: None)  # a worker that wrote nothing
    (out / "full" / "seed0" / "eval.json").unlink()
    with pytest.raises(ValueError, match=r"full/seed0/eval.json: missing"):
        R.run_arms(cfg, cfg.evidence, [], None, lambda result: [], out)


def _run_folder(tmp_path, name, pilot):
    from pathlib import Path

    h = E.HYPOTHESES[name]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    root = Path(__file__).resolve().parents[1]
    (run_dir / "config.yaml").write_text(f"base: {json.dumps(str(root / h.params))}\n"
                                         + ("evidence: {pilot: true}\n" if pilot else ""))
    return run_dir


def test_an_interrupted_evidence_run_resumes_into_results(tmp_path, monkeypatch):
    """`factlab evidence NAME --resume RUN`: the interrupted run folder is continued in place and
    its results written (the runner's `factlab run --resume` line finished the notebook, never results/)."""
    from factlab import runner

    run_dir = _run_folder(tmp_path, "organism_binary_rar_hesitant", pilot=True)
    power = [{"comparison": "wrong", "primary": True, "seeds": 3, "mde": 0.1}]
    (run_dir / "metrics.json").write_text(json.dumps({"evidence": {"power": power}}))
    calls = []

    def run_notebook(notebook, **kw):
        calls.append(kw)
        return runner.RunResult(run_dir, run_dir / "notebook.ipynb", run_dir / "report.html", {}, ok=True)

    monkeypatch.setattr(E, "run_notebook", run_notebook)
    E.run(["organism_binary_rar_hesitant"], root=tmp_path, pilot=True, resume=run_dir)
    assert calls[0].get("resume") == run_dir and "params" not in calls[0]
    assert json.loads((tmp_path / "results" / "organism_binary_rar_hesitant" / "power.json").read_text())["rows"] == power


@pytest.mark.parametrize("names, pilot, words", [
    (["organism_binary_rar_hesitant", "organism_corver"], True, "one hypothesis"),
    (["organism_binary_rar"], True, "not a run of the hypothesis organism_binary_rar"),
    (["organism_binary_rar_hesitant"], False, "a pilot run; add --pilot"),
])
def test_a_resume_of_another_hypothesis_or_kind_is_refused_before_it_runs(tmp_path, monkeypatch, names, pilot, words):
    run_dir = _run_folder(tmp_path, "organism_binary_rar_hesitant", pilot=True)
    monkeypatch.setattr(E, "run_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
    with pytest.raises(ValueError, match=words):
        E.run(names, root=tmp_path, pilot=pilot, resume=run_dir)


def test_the_cli_ends_an_interrupted_evidence_run_with_its_resume_line(monkeypatch, capsys):
    from factlab import cli

    def interrupted(*a, **kw):
        raise KeyboardInterrupt("signal 15")

    monkeypatch.setattr(cli, "run_evidence", interrupted)
    assert cli.main(["evidence", "organism_corver", "--pilot"]) == 130
    err = capsys.readouterr().err
    assert "factlab evidence organism_corver --pilot --resume RUN_DIR" in err and "Traceback" not in err


@pytest.mark.parametrize("planted", ["README.md", "binary_rar/command.txt", "binary_rar/rows.jsonl.gz.tmp"])
def test_a_link_planted_in_results_is_refused_before_anything_runs_and_its_target_untouched(tmp_path, monkeypatch,
                                                                                            planted):
    """results/ is committed: a clone's symbolic link there (README.md, a file of a hypothesis' folder, the rows'
    temporary file) was written through by `factlab evidence` / `--recompute` (issue 43 round 3c probe)."""
    E.write_rows(tmp_path / "results" / "binary_rar", _record())
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "results" / planted
    link.symlink_to(victim)
    monkeypatch.setattr(E, "run_notebook", lambda *a, **k: pytest.fail("a notebook ran"))
    with pytest.raises(ValueError, match="is a symbolic link"):
        E.run(["binary_rar"], root=tmp_path)
    with pytest.raises(ValueError, match="is a symbolic link"):
        E.recompute(["binary_rar"], root=tmp_path, replicates=50)
    assert victim.read_text() == "precious\n"
