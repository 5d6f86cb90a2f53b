"""Params YAML validation: unknown keys and wrong types fail with the key path."""

from pathlib import Path

import pytest

from factlab import config
from factlab.config import ConfigError, QuickstartConfig, load_config

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(body)
    return p


def test_every_params_file_validates():
    files = sorted((ROOT / "params").glob("*.yaml"))
    assert files, "no params files"
    for f in files:
        stem = f.stem.removesuffix("_smoke")
        load_config(f, config.config_for_notebook(stem))


def test_every_notebook_has_full_and_smoke_params():
    for nb in sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")):
        assert (ROOT / "params" / f"{nb.stem}.yaml").exists(), nb
        assert (ROOT / "params" / f"{nb.stem}_smoke.yaml").exists(), nb
        assert nb.stem in config.NOTEBOOK_CONFIGS


def test_smoke_inherits_from_full_via_base():
    cfg = load_config(ROOT / "params/00_quickstart_smoke.yaml", QuickstartConfig)
    assert cfg.model.name == "smollm2-135m-instruct"
    assert cfg.generation.temperature == 0.0          # inherited from the full file
    assert cfg.generation.max_new_tokens == 96        # overridden
    assert [e.name for e in cfg.eval] == ["miniworld"]


def test_unknown_nested_key_names_its_path(tmp_path):
    p = _write(tmp_path, "bad.yaml", "generation:\n  max_tokens: 5\n")
    with pytest.raises(ConfigError, match=r"unknown key 'generation.max_tokens'") as e:
        load_config(p, QuickstartConfig)
    assert str(p) in str(e.value)


def test_wrong_type_names_path_and_expected_type(tmp_path):
    p = _write(tmp_path, "bad.yaml", "generation:\n  batch_size: many\n")
    with pytest.raises(ConfigError, match=r"'generation.batch_size'.*integer"):
        load_config(p, QuickstartConfig)


def test_list_item_error_has_index(tmp_path):
    p = _write(tmp_path, "bad.yaml", "eval:\n  - {name: miniworld}\n  - {name: x, limt: 3}\n")
    with pytest.raises(ConfigError, match=r"unknown key 'eval.1.limt'"):
        load_config(p, QuickstartConfig)


def test_unknown_pair_dataset_names_key_and_known_names(tmp_path):
    p = _write(tmp_path, "bad.yaml", "eval:\n  - {name: miniworld}\n  - {name: feverr, limit: 4}\n")
    with pytest.raises(ConfigError, match=r"'eval.1.name'.*unknown pair dataset 'feverr'.*truthfulqa"):
        load_config(p, config.SevaConfig)


def test_out_of_range_and_literal(tmp_path):
    p = _write(tmp_path, "bad.yaml", "generation:\n  top_p: 1.5\nmodel:\n  dtype: float8\n")
    with pytest.raises(ConfigError) as e:
        load_config(p, QuickstartConfig)
    msg = str(e.value)
    assert "'generation.top_p'" in msg and "'model.dtype'" in msg  # every bad key, not just the first


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
    p = _write(tmp_path, "ok.yaml", "generation:\n  batch_size: 4\n")
    cfg = load_config(p, QuickstartConfig, overrides={"generation": {"max_new_tokens": 7}})
    assert (cfg.generation.batch_size, cfg.generation.max_new_tokens) == (4, 7)
    with pytest.raises(ConfigError, match="generation.nope"):
        load_config(p, QuickstartConfig, overrides={"generation": {"nope": 1}})


def test_dump_roundtrip(tmp_path):
    cfg = load_config(ROOT / "params/00_quickstart_smoke.yaml", QuickstartConfig)
    p = _write(tmp_path, "dump.yaml", config.dump_config(cfg))
    assert load_config(p, QuickstartConfig) == cfg


def test_unknown_notebook_config():
    with pytest.raises(ConfigError, match="00_quickstart"):
        config.config_for_notebook("99_nope")
