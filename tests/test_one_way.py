"""One way to do each shared job (issue 44): a second definition of a shared helper fails here."""

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "factlab"


def _sources():
    return {p.relative_to(SRC).as_posix(): p.read_text() for p in SRC.rglob("*.py")}


def test_chat_messages_are_built_in_one_place():
    """``prompts.chat_messages`` builds every system / user turn; a literal message dict elsewhere is a
    second chat-row builder (there were seven, pinned equal by a test)."""
    turn = re.compile(r"""["']role["']\s*:\s*["'](system|user)["']""")
    found = {name: len(turn.findall(text)) for name, text in _sources().items() if turn.search(text)}
    assert found == {"prompts.py": 2}, found


def test_files_are_replaced_by_one_atomic_writer():
    """``paths.atomic_open`` (and ``write_json`` / ``atomic_write_text`` / ``write_jsonl`` on it) is the one
    way a file is replaced: no second temporary-file-and-rename, no JSON written with a plain
    ``write_text`` (a stop mid-write left a truncated ``effects.json`` that broke every later run)."""
    sources = _sources()
    temp_files = sorted(name for name, text in sources.items() if "mkstemp(" in text)
    assert temp_files == ["paths.py"], temp_files
    plain_json = re.compile(r"write_text\(\s*json\.dumps|json\.dump\(")
    assert not [name for name, text in sources.items() if plain_json.search(text)]


def test_atomic_open_keeps_the_old_file_on_failure_and_honours_the_umask(tmp_path):
    import os

    import pytest

    from factlab.paths import atomic_open, write_json

    path = tmp_path / "effects.json"
    write_json(path, {"a": 1})
    with pytest.raises(RuntimeError), atomic_open(path) as f:
        f.write('{"a": 2')
        raise RuntimeError("disk full")
    assert path.read_text() == '{"a": 1}' and [p.name for p in tmp_path.iterdir()] == ["effects.json"]
    old = os.umask(0o022)
    try:
        write_json(path, {"a": 3}, end="\n")
    finally:
        os.umask(old)
    assert path.read_text() == '{"a": 3}\n' and (path.stat().st_mode & 0o777) == 0o644


def test_nonzero_advantage_share_is_defined_once():
    """One minus TRL's zero-std share was computed three times (notebook 03, compare, evidence)."""
    import pandas as pd

    from factlab.eval.alarms import nonzero_advantage_share

    assert nonzero_advantage_share(0.25) == 0.75 and nonzero_advantage_share(None) is None
    assert nonzero_advantage_share(float("nan")) is None
    assert nonzero_advantage_share(pd.DataFrame({"frac_reward_zero_std": [0.0, 0.5]})) == 0.75
    assert nonzero_advantage_share(pd.DataFrame({"reward": [1.0]})) is None
    inverted = re.compile(r"1(\.0)?\s*-\s*[^\n]{0,40}(frac_reward_zero_std|ZERO_STD_KEY)")
    copies = [name for name, text in _sources().items() if inverted.search(text)] + [
        p.name for p in (SRC.parents[1] / "notebooks").glob("*.ipynb") if inverted.search(p.read_text())]
    assert copies == [], copies


def test_every_recipe_meets_one_written_contract():
    """Each paper's recipe module ends with one ``Recipe`` (torchtune's interface, as data), not loose
    NOTEBOOK / CONFIG / WHAT constants and an ``__all__ +=`` half way down."""
    from factlab import recipes
    from factlab.recipes.stages import Recipe, warm_start_trains

    assert sorted(recipes.RECIPES) == ["01_corver", "02_binary_rar", "03_seva", "04_k2v", "05_klcf", "06_compare"]
    for stem, r in recipes.RECIPES.items():
        assert isinstance(r, Recipe) and r.notebook == stem and r.what and isinstance(r.config, type)
        assert all(callable(f) for f in (r.start, r.prepare, r.prepare_alone, r.train))
    assert recipes.recipe("05_klcf").prepare_alone is not warm_start_trains  # KLCF's reward model SFT trains too
    assert recipes.recipe("01_corver").prepare_alone is warm_start_trains
    loose = re.compile(r"^(NOTEBOOK|CONFIG|WHAT|TRAIN_DIR) = |^__all__ \+=", re.M)
    assert not [n for n, text in _sources().items() if n.startswith("recipes/") and loose.search(text)]


def test_no_notebook_defines_a_helper():
    """Notebooks stay thin (issue 44): a function or lambda a notebook needs lives in the library, where a
    test can reach it (01's contradicted-sentence headline is ``recipes.corver.contradicted_per_answer``,
    04's table helpers are in ``recipes.k2v``)."""
    import json

    helper = re.compile(r"^\s*(def|class) \w+|^\w+ = lambda", re.M)
    found = []
    for p in sorted((SRC.parents[1] / "notebooks").glob("*.ipynb")):
        cells = json.loads(p.read_text())["cells"]
        found += [(p.name, i) for i, c in enumerate(cells) if c["cell_type"] == "code" and helper.search("".join(c["source"]))]
    assert not found, found


def test_resumable_stages_share_one_stage_cache():
    """``stage_cache.StageCache`` is the one resumable stage cache: the self-filter, the KLCF
    pipeline, the compared runs and the reward model's readout each had their own (five ways,
    one of them following links, one reading a torn ``compare.json`` as a crash). A second cache
    class, a second appender of JSON lines, or a result file read back with ``json.loads`` after
    an ``exists()`` check fails here. (``judges.base.JudgeCache`` is sqlite: threads and processes
    write it at once.)"""
    sources = _sources()
    caches = sorted(f"{name}:{m.group(1)}" for name, text in sources.items()
                    for m in re.finditer(r"^\s*class (\w*Cache\w*)\b", text, re.M))
    assert caches == ["judges/base.py:JudgeCache", "stage_cache.py:StageCache"], caches
    appenders = sorted(name for name, text in sources.items()
                       if re.search(r"O_APPEND|\.open\(\s*[\"']a\+?[\"']|open\([^)\n]*,\s*[\"']a\+?[\"']", text))
    assert appenders == ["stage_cache.py"], appenders
    read_back = re.compile(r"if\s+(\w+)\.exists\(\):[ \t]*\n[ \t]*(?![ \t]|for\b)[^\n]*json\.loads\(\s*\1\.read_text")
    assert not [name for name, text in sources.items() if read_back.search(text)]
