"""The warm start (``factlab.recipes.warmstart``): its demonstrations (format, train split only,
abstentions where the papers pay them, every sentence true), its cache key and cache (a second
call loads, a concurrent caller waits and reuses), and the real warm-started model's format rate
on held-out questions."""

import multiprocessing
import re
from pathlib import Path

import pytest

from factlab import text as T
from factlab.config import ConfigError, validate
from factlab.data.miniworld import WorldConfig
from factlab.prompts import ABSTAIN_SYSTEM, FORCED_SYSTEM
from factlab.eval.truth import CONTRADICTED, SUPPORTED, label_sentences
from factlab.experiment import TrainingConfig, WarmStartSection
from factlab.prompts import CORVER_EVAL_SYSTEM, CORVER_TRAIN_SYSTEM, K2V_SYSTEM, KLCF_SYSTEM
from factlab.recipes import warmstart as W
from factlab.synth import demos as D
from factlab.recipes.corver import qa_rows
from factlab.recipes.k2v import k2v_rows
from factlab.recipes.klcf import klcf_rows
from factlab.recipes.rar import prompt_rows

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "params" / "01_corver_lm.yaml"


@pytest.fixture(scope="module")
def section():
    return WarmStartSection(enabled=True)


@pytest.fixture(scope="module")
def demos(section):
    return D.write_demos(section)


@pytest.fixture(scope="module")
def split():
    return D.world_split()


def _words(s: str) -> str:
    return " " + " ".join(re.findall(r"[\w-]+", s)) + " "


# ---------------------------------------------------------------- the demonstrations


def test_every_format_is_present_and_tagged_formats_pass_the_format_rule(demos, section):
    kinds = {d.kind for d in demos}
    assert kinds == set(D.FORMATS)
    assert sum(d.kind == "corver_qa" for d in demos) == section.corver_qa
    for d in demos:
        if d.kind == "rar_longform":  # 02's policy writes plain text (001 §3.3)
            assert "<think>" not in d.completion and d.completion.strip()
        else:
            assert T.format_violation(d.completion) is None, d.completion
            assert T.extract_answer(d.completion)


def test_demonstrations_use_each_notebooks_own_prompts(demos):
    """The same system prompts and chat messages as each notebook's GRPO rows, so the format
    learnt under them is the one RL samples under."""
    by_kind = {k: [d for d in demos if d.kind == k] for k in D.FORMATS}
    from factlab.data.types import QAItem
    from factlab.data.longform import LongformPrompt

    d = by_kind["corver_qa"][0]
    assert d.prompt == qa_rows([QAItem("x", d.user, ["a"])])[0]["prompt"]
    assert {x.prompt[0]["content"] for x in by_kind["corver_eval"]} == {CORVER_EVAL_SYSTEM}
    assert {x.prompt[0]["content"] for x in by_kind["rar_shortform"]} == {ABSTAIN_SYSTEM, FORCED_SYSTEM}
    d = by_kind["rar_longform"][0]
    assert d.prompt == prompt_rows([LongformPrompt("x", d.user)])[0]["prompt"]  # no system turn
    d = by_kind["klcf"][0]
    assert d.prompt == klcf_rows([LongformPrompt("x", d.user)], {"x": ["f"]})[0]["prompt"]
    assert d.prompt[0]["content"] == KLCF_SYSTEM and d.user.startswith("Tell me about ")
    d = by_kind["k2v"][0]
    assert d.prompt[0]["content"] == K2V_SYSTEM and "{ }" in d.user
    from factlab.synth.k2v import K2VQuestion
    assert d.prompt == k2v_rows([K2VQuestion("x", d.user, "a", ["a"], {}, "e1")])[0]["prompt"]
    assert CORVER_TRAIN_SYSTEM in {x.prompt[0]["content"] for x in by_kind["corver_qa"]}


def test_no_heldout_country_or_question_is_trained_on(demos, split):
    held_ids = {it.id for it in split.qa_heldout}
    held_questions = {it.question for it in split.qa_heldout}
    train_names = {c.name for c in split.train}
    held_names = sorted(split.heldout_names, key=len, reverse=True)
    assert held_names and train_names and not (train_names & set(held_names))
    for d in demos:
        assert d.question_id not in held_ids
        assert d.user not in held_questions
        assert set(d.countries) <= train_names, d
        # a held-out country's name nowhere in the prompt or the answer, once the train countries'
        # names that contain it are masked ("Guinea" inside "Papua New Guinea")
        text = _words(d.user + " " + d.completion)
        for name in sorted(train_names, key=len, reverse=True):
            text = text.replace(_words(name), " # ")
        for name in held_names:
            assert _words(name) not in text, (name, d.user, d.completion)


def test_abstentions_only_where_binary_rar_pays_them(demos, split):
    abstaining = [d for d in demos if d.abstain]
    assert abstaining, "Binary RAR's formats carry abstentions"
    assert {d.kind for d in abstaining} <= {"rar_shortform", "rar_longform"}
    assert any(d.kind == "rar_shortform" for d in abstaining)
    for d in abstaining:
        if d.kind == "rar_shortform":
            assert d.prompt[0]["content"] == ABSTAIN_SYSTEM  # the forced prompt never abstains
            assert T.is_refusal(T.extract_answer(d.completion))
        else:
            assert T.is_abstention(d.completion)
    # the abstained countries are the least populous train countries
    least = D._least_known(split.train, WarmStartSection().abstain_fraction)
    assert {c for d in abstaining for c in d.countries} <= least
    for d in demos:
        if not d.abstain and d.kind != "rar_longform":
            assert not T.is_refusal(T.extract_answer(d.completion))


def test_every_demonstrated_sentence_is_true(demos):
    """The truth oracle (factlab.eval.truth) finds no contradicted sentence in any demonstration,
    and supports most of them (a plan sentence or an abstention states nothing checkable)."""
    labels = [r["label"] for d in demos if not d.abstain for r in label_sentences(d.completion)]
    assert CONTRADICTED not in labels
    assert labels.count(SUPPORTED) / len(labels) > 0.6


def test_qa_answers_are_golds(demos):
    for d in demos:
        if d.golds and not d.abstain:
            assert T.grade_answer_exact(T.extract_answer(d.completion), d.golds) == T.GOOD, d


def test_demos_are_deterministic_and_follow_the_seed(section):
    a = [d.to_dict() for d in D.write_demos(section)]
    assert a == [d.to_dict() for d in D.write_demos(section)]
    assert a != [d.to_dict() for d in D.write_demos(section.model_copy(update={"seed": 1}))]


def test_unseen_drops_questions_a_demonstration_asks(demos):
    from types import SimpleNamespace

    asked = SimpleNamespace(question=demos[0].user)
    other = SimpleNamespace(question="Which entity fills the blank { } nowhere?")
    assert W.unseen([asked, other], demos) == [other]


# ---------------------------------------------------------------- params


def test_smoke_params_turn_it_on_and_full_params_keep_it_off():
    from factlab import config
    from factlab.runner import config_for_notebook

    for nb in ("01_corver", "02_binary_rar", "04_k2v", "05_klcf", "06_compare"):
        cls = config_for_notebook(nb)
        assert config.load_config(ROOT / f"params/{nb}_lm.yaml", cls).warm_start.enabled, nb
        full = config.load_config(ROOT / f"params/{nb}.yaml", cls)
        assert not full.warm_start.enabled and "135m" not in full.model.name.lower(), nb


@pytest.mark.parametrize("body, key", [
    ({"warm_start": {"enabeld": True}}, "warm_start.enabeld"),
    ({"warm_start": {"k2v": -1}}, "warm_start.k2v"),
    ({"warm_start": {"lora": {"r": 8}, "train_top_layers": 4}}, "warm_start.train_top_layers"),
    ({"warm_start": {"enabled": True, "corver_qa": 0, "corver_eval": 0, "rar_shortform": 0, "rar_longform": 0,
                     "k2v": 0, "klcf": 0}}, "warm_start.enabled"),
])
def test_bad_warm_start_params_fail_at_load(body, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        validate(body, TrainingConfig)


def test_seva_refuses_the_policy_warm_start():
    from factlab.recipes.seva import SevaConfig

    with pytest.raises(ConfigError, match="warm_start.enabled"):
        validate({"warm_start": {"enabled": True}}, SevaConfig)


# ---------------------------------------------------------------- the cache key and the cache


def test_cache_key_changes_with_every_setting(section, monkeypatch):
    base = W.cache_key(section, "smollm2-135m-instruct")
    assert base == W.cache_key(section.model_copy(), "smollm2-135m-instruct")
    assert base == W.cache_key(section.model_copy(update={"enabled": False}), "smollm2-135m-instruct")
    # where the SFT logs its metrics trains nothing differently: the cached warm start is reused
    assert base == W.cache_key(section.model_copy(update={"sft": section.sft.model_copy(update={"report_to": "none"})}),
                               "smollm2-135m-instruct")
    changed = [
        W.cache_key(section.model_copy(update={"k2v": 7}), "smollm2-135m-instruct"),
        W.cache_key(section.model_copy(update={"seed": 3}), "smollm2-135m-instruct"),
        W.cache_key(section.model_copy(update={"abstain_fraction": 0.3}), "smollm2-135m-instruct"),
        W.cache_key(section.model_copy(update={"sft": section.sft.model_copy(update={"learning_rate": 1e-3})}),
                    "smollm2-135m-instruct"),
        W.cache_key(section.model_copy(update={"train_top_layers": 4}), "smollm2-135m-instruct"),
        W.cache_key(section, "HuggingFaceTB/SmolLM2-360M-Instruct"),
        W.cache_key(section, "smollm2-135m-instruct", WorldConfig(heldout_fraction=0.3)),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    monkeypatch.setattr(W, "DEMO_WRITER_VERSION", W.DEMO_WRITER_VERSION + 1)
    assert W.cache_key(section, "smollm2-135m-instruct") != base


def test_cache_key_follows_the_organism_spec_not_its_name(section, monkeypatch):
    """The organism is named, not a folder: its key holds its content fingerprint (spec + world),
    so a changed spec under the same name trains a new warm start (issue 40)."""
    import dataclasses

    from factlab import organism

    before = W.cache_key(section, "organism-tiny")
    assert before != W.cache_key(section, "organism")
    monkeypatch.setitem(organism.SPECS, "organism-tiny", dataclasses.replace(organism.TINY, seed=5))
    assert W.cache_key(section, "organism-tiny") != before


def _fake_sft(log: Path, delay: float = 0.0):
    """A stand-in for the SFT (the cache is under test, not the training): writes a model folder
    and appends one line to ``log`` per call."""
    import time

    from factlab.train.grpo import TrainResult

    def run(spec, dataset, out_dir, *, model=None, sft=None, name="sft", train_top_layers=None):
        with open(log, "a") as fh:
            fh.write("trained\n")
        time.sleep(delay)
        folder = Path(out_dir) / "model"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")
        return TrainResult(name, str(out_dir), str(folder), False, model, [{"loss": 1.0, "step": 1}], 0.1, 1)

    return run


def test_second_call_loads_without_training(tmp_path, monkeypatch, section):
    log = tmp_path / "calls.log"
    monkeypatch.setattr(W, "run_sft", _fake_sft(log))
    ws = section.model_copy(update={"check_questions": 0})
    first = W.build(ws, "smollm2-135m-instruct", root=tmp_path / "ws")
    again = W.build(ws, "smollm2-135m-instruct", root=tmp_path / "ws")
    assert first.built and not again.built and log.read_text().count("trained") == 1
    assert first.model_dir == again.model_dir and Path(again.model_dir, "config.json").is_file()
    assert again.key == W.cache_key(ws, "smollm2-135m-instruct") == Path(again.folder).name
    assert [d.to_dict() for d in again.demos()] == [d.to_dict() for d in D.write_demos(ws)]
    assert not list((tmp_path / "ws").glob("*.work"))  # the work folder is gone once the rename happened
    other = W.build(ws.model_copy(update={"seed": 5}), "smollm2-135m-instruct", root=tmp_path / "ws")
    assert other.built and other.key != first.key and log.read_text().count("trained") == 2


@pytest.mark.parametrize("damage, words", [
    (lambda f: (f / "warmstart.json").write_text("{trunc"), "warmstart.json has 6 bytes"),
    (lambda f: (f / "model" / "config.json").write_text('{"x": 1}'), "config.json has 8 bytes"),
    (lambda f: (f / "demos.jsonl").unlink(), "demos.jsonl is missing"),
])
def test_a_damaged_warm_start_is_one_error_naming_the_file_and_the_rebuild(tmp_path, monkeypatch, section,
                                                                           damage, words):
    """A corrupt ``warmstart.json`` gave a JSONDecodeError naming no file (issue 43): a warm start
    is checked against its file manifest like an index."""
    from factlab.integrity import IntegrityError

    monkeypatch.setattr(W, "run_sft", _fake_sft(tmp_path / "calls.log"))
    ws = section.model_copy(update={"check_questions": 0})
    folder = Path(W.build(ws, "smollm2-135m-instruct", root=tmp_path / "ws").folder)
    damage(folder)
    with pytest.raises(IntegrityError, match=rf"{words}.*remove {folder} \(the warm start trains again"):
        W.build(ws, "smollm2-135m-instruct", root=tmp_path / "ws")


@pytest.mark.parametrize("report, words", [
    ("{}", "'sft' must hold the numbers"),
    ('{"sft": {"seconds": "x", "steps": 2, "first_loss": 1.0, "last_loss": 1.0}}', "'sft' must hold the numbers"),
    ("[" * 100_000 + "]" * 100_000, "RecursionError"),
    (None, "warmstart.json is missing or not a file"),
    ("fifo", "warmstart.json is missing or not a file"),
])
def test_a_warm_start_report_of_the_wrong_shape_or_missing_fails_before_training(tmp_path, monkeypatch, section,
                                                                                 report, words):
    """A ``warmstart.json`` without ``sft`` (its manifest matching) was a KeyError in the notebook's
    summary, a string number a ValueError, one nested 100,000 deep a RecursionError, each naming no file;
    a folder without it, or with a FIFO there, trained the SFT again and failed at the final rename
    (issue 43 round-3b probe)."""
    import os

    from factlab.integrity import IntegrityError, write_file_manifest

    log = tmp_path / "calls.log"
    monkeypatch.setattr(W, "run_sft", _fake_sft(log))
    ws = section.model_copy(update={"check_questions": 0})
    folder = Path(W.build(ws, "smollm2-135m-instruct", root=tmp_path / "ws").folder)
    (folder / "warmstart.json").unlink()
    if report == "fifo":
        os.mkfifo(folder / "warmstart.json")
    elif report is not None:
        (folder / "warmstart.json").write_text(report)
    write_file_manifest(folder)
    with pytest.raises(IntegrityError, match=rf"{words}.*remove {folder} \(the warm start trains again"):
        W.build(ws, "smollm2-135m-instruct", root=tmp_path / "ws").summary()
    assert log.read_text().count("trained") == 1  # the damaged cache cost no second SFT


def test_a_warm_start_that_logged_no_loss_has_a_summary(tmp_path, monkeypatch, section):
    """An SFT shorter than its logging interval records first_loss / last_loss null; the summary
    formatted None with :.2f (TypeError) (issue 43 round-3b probe)."""
    from factlab.train.grpo import TrainResult

    def run(spec, dataset, out_dir, *, model=None, sft=None, name="sft", train_top_layers=None):
        (Path(out_dir) / "model").mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "model" / "config.json").write_text("{}")
        return TrainResult(name, str(out_dir), str(Path(out_dir) / "model"), False, model, [], 0.1, 1)
    monkeypatch.setattr(W, "run_sft", run)
    w = W.build(section.model_copy(update={"check_questions": 0}), "smollm2-135m-instruct", root=tmp_path / "ws")
    assert "loss n/a -> n/a" in w.summary()


def _build_in_child(root: str, log: str, out: str) -> None:
    W.run_sft = _fake_sft(Path(log), delay=1.5)
    ws = WarmStartSection(enabled=True, check_questions=0)
    res = W.build(ws, "smollm2-135m-instruct", root=root)
    Path(out).write_text(f"{res.built} {res.model_dir}")


def test_concurrent_callers_train_once_and_share_it(tmp_path):
    ctx = multiprocessing.get_context("fork")
    log = tmp_path / "calls.log"
    procs = [ctx.Process(target=_build_in_child, args=(str(tmp_path / "ws"), str(log), str(tmp_path / f"out{i}")))
             for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    outs = [(tmp_path / f"out{i}").read_text().split() for i in range(2)]
    assert log.read_text().count("trained") == 1  # the second caller waited on the lock, then loaded
    assert sorted(o[0] for o in outs) == ["False", "True"] and outs[0][1] == outs[1][1]


def test_prepare_points_the_config_at_the_warm_start(tmp_path, monkeypatch):
    monkeypatch.setenv("FACTLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(W, "run_sft", _fake_sft(tmp_path / "calls.log"))
    from factlab import config
    from factlab.recipes.corver import CorVerConfig

    cfg = config.load_config(SMOKE, CorVerConfig)
    cfg.warm_start.check_questions = 0
    raw = cfg.model.name
    ws = W.prepare(cfg)
    assert ws.enabled and ws.raw == raw and cfg.model.name == ws.model_dir != raw
    assert cfg.index.tokenizer == raw  # the corpus index keeps its cache key (same tokenizer)
    assert W.prepare(cfg).model_dir == ws.model_dir  # a second prepare is harmless
    off = config.load_config(SMOKE, CorVerConfig)
    off.warm_start.enabled = False
    assert not W.prepare(off).enabled and off.model.name == raw


# ---------------------------------------------------------------- the real warm start


@pytest.fixture(scope="session")
def warm_start():
    """The smoke params' warm start, built once into the user cache (as `make run` does) and
    shared by every test and notebook run that needs it."""
    from factlab import config
    from factlab.recipes.corver import CorVerConfig

    cfg = config.load_config(SMOKE, CorVerConfig)
    return W.prepare(cfg)


def test_warm_started_model_writes_the_format_on_heldout_questions(warm_start, split):
    # the real embedded model: its behaviour after the warm start is what is under test
    from factlab.models import chat_prompt, generate, load_model

    items = split.qa_heldout[::40][:8]
    model, tok = load_model(warm_start.model_dir, device="cpu")
    outs = generate(model, tok, [chat_prompt(tok, it.question, system=CORVER_TRAIN_SYSTEM) for it in items],
                    max_new_tokens=48, batch_size=len(items), progress=False)
    rate = sum(T.format_violation(o[0].text) is None for o in outs) / len(outs)
    assert rate > 0.5, [o[0].text for o in outs]
    assert warm_start.report["check"]["warm"]["corver_qa"]["format_rate"] > 0.5
    assert warm_start.report["check"]["raw"]["corver_qa"]["format_rate"] < 0.5  # what the warm start is for


def test_freeze_below_top_layers_leaves_the_top_trainable():
    from transformers import LlamaConfig, LlamaForCausalLM

    from factlab.train.sft import freeze_below_top_layers

    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True))
    n = freeze_below_top_layers(model, 2)
    layers = model.model.layers
    assert all(p.requires_grad for layer in layers[2:] for p in layer.parameters())
    assert not any(p.requires_grad for layer in layers[:2] for p in layer.parameters())
    assert not model.model.embed_tokens.weight.requires_grad and model.model.norm.weight.requires_grad
    assert n == sum(p.numel() for layer in layers[2:] for p in layer.parameters()) + model.model.norm.weight.numel()
    assert freeze_below_top_layers(model, 5) == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert all(p.requires_grad for p in layers.parameters())  # more than the model has: every layer trains
    with pytest.raises(ValueError, match="at least one"):
        freeze_below_top_layers(model, 0)


@pytest.mark.parametrize("plant", ["work", "work/sft"])
def test_a_link_planted_in_the_work_folder_is_refused_before_anything_is_written(tmp_path, monkeypatch, section,
                                                                                   plant):
    """A ``<key>.work`` (or a folder in it) that is a symbolic link: the demos, the SFT and the stage
    (removed, then renamed into place) went through it, deleting ``stage/`` where it points (issue 43
    round-5 probe)."""
    from factlab.paths import SymlinkRefused

    monkeypatch.setattr(W, "run_sft", _fake_sft(tmp_path / "calls.log"))
    ws = section.model_copy(update={"check_questions": 0})
    root, key = tmp_path / "ws", W.cache_key(ws, "smollm2-135m-instruct")
    victim = tmp_path / "victim"
    (victim / "stage").mkdir(parents=True)
    (victim / "stage" / "notes.txt").write_text("precious")
    work = root / f"{key}.work"
    if plant == "work":
        root.mkdir()
        work.symlink_to(victim, target_is_directory=True)
    else:
        work.mkdir(parents=True)
        (work / "sft").symlink_to(victim, target_is_directory=True)
    with pytest.raises(SymlinkRefused, match="symbolic link"):
        W.build(ws, "smollm2-135m-instruct", root=root)
    assert sorted(p.relative_to(victim).as_posix() for p in victim.rglob("*")) == ["stage", "stage/notes.txt"]
    assert not (tmp_path / "calls.log").exists()  # refused before the SFT
