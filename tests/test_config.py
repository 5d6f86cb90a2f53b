"""Params YAML validation: unknown keys and wrong types fail with the key path."""

from pathlib import Path

import pytest

from factlab import config, runner
from factlab.config import ConfigError, load_config
from factlab.experiment import QuickstartConfig
from factlab.recipes.corver import CorVerConfig
from factlab.recipes.rar import RARConfig
from factlab.recipes.seva import SevaConfig

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(body)
    return p


def test_every_params_file_validates():
    files = sorted((ROOT / "params").glob("*.yaml"))
    assert files, "no params files"
    for f in files:
        stem = next((nb for nb in runner.NOTEBOOK_CONFIGS if f.stem == nb or f.stem.startswith(nb + "_")), f.stem)
        load_config(f, runner.config_for_notebook(stem))  # <notebook>[_anything].yaml: that notebook's config


def test_every_notebook_has_full_and_smoke_params():
    for nb in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        assert (ROOT / "params" / f"{nb.stem}.yaml").exists(), nb
        assert (ROOT / "params" / f"{nb.stem}_lm.yaml").exists(), nb
        assert nb.stem in runner.NOTEBOOK_CONFIGS


def test_smoke_inherits_from_full_via_base():
    cfg = load_config(ROOT / "params/00_quickstart_smoke.yaml", QuickstartConfig)
    assert cfg.model.name == "smollm2-135m-instruct"
    assert cfg.eval_generation.temperature == 0.0          # inherited from the full file
    assert cfg.eval_generation.max_new_tokens == 96        # overridden
    assert [e.name for e in cfg.eval] == ["miniworld"]


def test_unknown_nested_key_names_its_path(tmp_path):
    p = _write(tmp_path, "bad.yaml", "eval_generation:\n  max_tokens: 5\n")
    with pytest.raises(ConfigError, match=r"unknown key 'eval_generation.max_tokens'") as e:
        load_config(p, QuickstartConfig)
    assert str(p) in str(e.value)


def test_wrong_type_names_path_and_expected_type(tmp_path):
    p = _write(tmp_path, "bad.yaml", "eval_generation:\n  batch_size: many\n")
    with pytest.raises(ConfigError, match=r"'eval_generation.batch_size'.*integer"):
        load_config(p, QuickstartConfig)


def test_list_item_error_has_index(tmp_path):
    p = _write(tmp_path, "bad.yaml", "eval:\n  - {name: miniworld}\n  - {name: x, limt: 3}\n")
    with pytest.raises(ConfigError, match=r"unknown key 'eval.1.limt'"):
        load_config(p, QuickstartConfig)


def test_unknown_pair_dataset_names_key_and_known_names(tmp_path):
    p = _write(tmp_path, "bad.yaml", "eval:\n  - {name: miniworld}\n  - {name: feverr, limit: 4}\n")
    with pytest.raises(ConfigError, match=r"'eval.1.name'.*unknown pair dataset 'feverr'.*truthfulqa"):
        load_config(p, SevaConfig)


def test_out_of_range_and_literal(tmp_path):
    p = _write(tmp_path, "bad.yaml", "eval_generation:\n  top_p: 1.5\nmodel:\n  dtype: float8\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, QuickstartConfig)
    msg = str(e.value)
    assert "'eval_generation.top_p'" in msg and "'model.dtype'" in msg  # every bad key, not just the first


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml", QuickstartConfig)
    p = _write(tmp_path, "bad.yaml", "a: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p, QuickstartConfig)
    p = _write(tmp_path, "list.yaml", "- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(p, QuickstartConfig)


def test_base_chain_loop_is_an_error(tmp_path):
    _write(tmp_path, "a.yaml", "base: b.yaml\n")
    _write(tmp_path, "b.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError, match="loops"):
        load_config(tmp_path / "a.yaml", QuickstartConfig)


def test_overrides_are_merged_and_validated(tmp_path):
    p = _write(tmp_path, "ok.yaml", "eval_generation:\n  batch_size: 4\n")
    cfg = load_config(p, QuickstartConfig, overrides={"eval_generation": {"max_new_tokens": 7}})
    assert (cfg.eval_generation.batch_size, cfg.eval_generation.max_new_tokens) == (4, 7)
    with pytest.raises(ConfigError, match="eval_generation.nope"):
        load_config(p, QuickstartConfig, overrides={"eval_generation": {"nope": 1}})


def test_dump_roundtrip(tmp_path):
    cfg = load_config(ROOT / "params/00_quickstart_smoke.yaml", QuickstartConfig)
    p = _write(tmp_path, "dump.yaml", config.dump_config(cfg))
    assert load_config(p, QuickstartConfig) == cfg


def test_unknown_notebook_config():
    with pytest.raises(ConfigError, match="00_quickstart"):
        runner.config_for_notebook("99_nope")


# --- the rewards list and the rules that involve several keys --------------------------------------

def _corver(tmp_path, body: str):
    return _write(tmp_path, "cv.yaml", f"base: {ROOT / 'params/01_corver_lm.yaml'}\n{body}")


def test_corver_smoke_with_binary_rar_added_validates(tmp_path):
    p = _corver(tmp_path, "rewards:\n  - {name: qa_judge}\n  - {name: format}\n  - {name: corver}\n"
                          "  - {name: binary_rar, weight: 0.5, args: {top_k: 8}}\n")
    cfg = load_config(p, CorVerConfig)
    assert [(s.name, s.weight) for s in cfg.rewards][-1] == ("binary_rar", 0.5)
    assert cfg.rewards[-1].args == {"top_k": 8, "verdict": "judge", "flip_rate": 0.0, "flip_seed": 0,
                                    "judge_model": "organism"}  # defaults filled in
    assert cfg.rewards[2].args["window"] == 1000  # defaults filled in, visible in config.yaml


@pytest.mark.parametrize("body, match", [
    ("rewards:\n  - {name: qa_judge}\n  - {name: binary_rarr}\n",
     r"'rewards.1.name': unknown reward 'binary_rarr'; known: .*binary_rar.*seva_process"),
    ("rewards:\n  - {name: qa_judge}\n  - {name: corver, args: {windw: 5}}\n",
     r"'rewards.1.args.windw': unknown argument of reward 'corver'; it takes: .*window"),
    ("rewards:\n  - {name: format, args: {positive: high}}\n", r"'rewards.0.args.positive': .*number"),
    ("rewards:\n  - {name: format}\n  - {name: format}\n", r"'rewards.1.name': reward 'format' is listed twice"),
    ("rewards:\n  - {name: corver}\n", r"shaping reward needs at least one sequence-level reward"),
    ("rewards: []\n", r"'rewards': a training run needs at least one reward"),
    ("rewards:\n  - {name: qa_judge}\n  - {name: format}\nruns: [full, A1]\n",
     r"'runs': runs \['full'\] are ablations of the corver reward"),
    ("rewards:\n  - {name: qa_judge, args: {rewards: {GOOD: 1.0}}}\n", r"'rewards.0.args.rewards'.*missing \['BAD', 'NA'\]"),
    ("rewards:\n  - {name: qa_judge}\n  - {name: format}\n  - {name: corver, args: {count_thresholds: [20, 5]}}\n",
     r"'rewards.2.args.count_thresholds'.*0 < tau_1 < tau_2"),
    ("grpo: {num_generations: 3}\n", r"'grpo.per_device_train_batch_size'.*not a multiple of num_generations = 3"),
    ("judge: {backend: openai, base_url: null}\n", r"'judge.base_url': the openai backend needs base_url"),
    ("datastore: {chunk_tokens: 64, veriscore_chunk_tokens: 32, overlap: 32}\n", r"'datastore.overlap'"),
    ("self_filter: {num_samples: 1}\n", r"'self_filter.num_samples'"),
    ("self_filter: {anchors: 3, anchor_fraction: 0.2}\n", r"'self_filter.anchor_fraction': set either anchors"),
    ("train_data: {name: nq_opn}\n", r"'train_data.name': unknown QA set 'nq_opn'; known: miniworld, triviaqa"),
    ("eval: [{name: miniworld, split: validation}]\n", r"'eval.0.split': the miniworld split is 'train' or 'heldout'"),
])
def test_bad_training_params_fail_at_load_naming_the_key(tmp_path, body, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_corver(tmp_path, body), CorVerConfig)


def test_seva_weight_split_is_checked_at_load(tmp_path):
    p = _write(tmp_path, "s.yaml", f"base: {ROOT / 'params/03_seva_lm.yaml'}\n"
                                   "rewards:\n  - {name: seva_process, args: {weights: '75/25'}}\n")
    with pytest.raises(ConfigError, match=r"'rewards.0.args.weights': unknown weight split '75/25'; known: 90/10"):
        load_config(p, SevaConfig)
    p.write_text(f"base: {ROOT / 'params/03_seva_lm.yaml'}\nsft: {{max_steps: -7}}\n")
    with pytest.raises(ConfigError, match=r"'sft.max_steps': must be a positive number of steps, or -1"):
        load_config(p, SevaConfig)


def test_rar_compare_rewards_are_registry_names(tmp_path):
    p = _write(tmp_path, "r.yaml", f"base: {ROOT / 'params/02_binary_rar_lm.yaml'}\n"
                                   "compare: {rewards: [{name: veriscor}]}\n")
    with pytest.raises(ConfigError, match=r"'compare.rewards.0.name': unknown reward 'veriscor'"):
        load_config(p, RARConfig)


def test_factlab_check_exit_codes(tmp_path, capsys):
    from factlab.cli import main

    assert main(["check", "01_corver", "--smoke"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: ") and "CorVerConfig" in out and "corver x1" in out
    bad = _corver(tmp_path, "rewards:\n  - {name: qa_judge}\n  - {name: nope}\n")
    assert main(["check", "01_corver", "--params", str(bad)]) == 2
    assert "'rewards.1.name': unknown reward 'nope'" in capsys.readouterr().err


def test_full_params_carry_the_papers_settings():
    """Settings the full params cite, read back through the config classes (issue 13)."""
    seva = load_config(ROOT / "params/03_seva.yaml", runner.config_for_notebook("03_seva"))
    assert (seva.sft.warmup_ratio, seva.sft.weight_decay, seva.sft.max_length) == (0.05, 0.01, 1280)  # 002 Table 8
    rar = load_config(ROOT / "params/02_binary_rar.yaml", runner.config_for_notebook("02_binary_rar"))
    assert rar.max_steps_by_reward == {"veriscore": 1000}  # 001 App. C


def _hide_package(monkeypatch, hidden: str):
    """``importlib.util.find_spec`` as if ``hidden`` were not installed (whether it is or not)."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == hidden else real(name, *a, **k))


@pytest.mark.parametrize("notebook, cls, section", [("01_corver", CorVerConfig, "grpo"), ("03_seva", SevaConfig, "sft")])
def test_report_to_a_missing_tracker_is_refused_at_load_naming_the_key(tmp_path, monkeypatch, notebook, cls, section):
    _hide_package(monkeypatch, "wandb")
    p = _write(tmp_path, "t.yaml", f"base: {ROOT / 'params' / (notebook + '_lm.yaml')}\n{section}: {{report_to: wandb}}\n")
    with pytest.raises(ConfigError, match=rf"'{section}.report_to': report_to: wandb needs the wandb package, which is "
                                          r"not installed \(pip install wandb\)"):
        load_config(p, cls)


def test_report_to_defaults_to_tensorboard_and_takes_only_known_trackers(tmp_path, monkeypatch):
    cfg = load_config(ROOT / "params/03_seva_lm.yaml", SevaConfig)
    assert cfg.grpo.report_to == cfg.sft.report_to == "tensorboard"  # the smoke params keep the default
    none = load_config(_corver(tmp_path, "grpo: {report_to: none}\n"), CorVerConfig)
    assert none.grpo.report_to == "none"
    with pytest.raises(ConfigError, match=r"'grpo.report_to': Input should be 'none', 'tensorboard', 'trackio' or "
                                          r"'wandb' \(got 'mlflow'\)"):
        load_config(_corver(tmp_path, "grpo: {report_to: mlflow}\n"), CorVerConfig)
    with pytest.raises(ConfigError, match=r"'grpo.extra.report_to': grpo.report_to is a validated setting of its own"):
        load_config(_corver(tmp_path, "grpo: {extra: {report_to: wandb}}\n"), CorVerConfig)
    _hide_package(monkeypatch, "tensorboard")
    _hide_package(monkeypatch, "tensorboardX")
    with pytest.raises(ConfigError, match=r"'grpo.report_to': report_to: tensorboard needs the tensorboard package"):
        load_config(_corver(tmp_path, ""), CorVerConfig)  # the default is checked too


@pytest.mark.parametrize("text", ["seed: 190:20:30\n", "grpo: {learning_rate: 1:30.5}\n"])
def test_an_unquoted_base_60_number_is_refused(text):
    """YAML 1.1 reads ``190:20:30`` as 685230 (issue 43 round-6 probe): refused, naming the key; quoted, it is text."""
    with pytest.raises(ConfigError, match=r"base-60 number.*quote it"):
        config.load_yaml(text, "p.yaml")
    assert config.load_yaml('seed: "190:20:30"\n', "p.yaml") == {"seed": "190:20:30"}
    assert config.load_yaml("name: a:b\n", "p.yaml") == {"name": "a:b"}
