"""Built folders and training checkpoints are checked before they are trusted (issue 30, item 2):
file manifests (sizes always, checksums on first load or with --verify) and the fallback from a
truncated ``checkpoint-*`` to the one before it."""

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from factlab import integrity
from factlab.integrity import IntegrityError, MissingManifest, verify_files, write_file_manifest
from factlab.train.grpo import TrainResult, resume_checkpoint


def _folder(tmp_path):
    d = tmp_path / "built"
    (d / "sub").mkdir(parents=True)
    (d / "a.bin").write_bytes(b"abc" * 100)
    (d / "sub" / "b.json").write_text('{"x": 1}')
    write_file_manifest(d)
    return d


def test_manifest_lists_every_file_and_a_clean_folder_verifies(tmp_path):
    d = _folder(tmp_path)
    files = json.loads((d / integrity.MANIFEST_FILE).read_text())["files"]
    assert set(files) == {"a.bin", "sub/b.json"} and files["a.bin"]["bytes"] == 300
    verify_files(d, "rebuild-it", full=True)


@pytest.mark.parametrize("damage, words", [
    (lambda d: (d / "a.bin").write_bytes(b"abc"), "a.bin has 3 bytes where 300 were written"),
    (lambda d: (d / "sub" / "b.json").write_text('{"x": 2}'), "b.json: its content is not what was written"),
    (lambda d: (d / "a.bin").unlink(), "a.bin is missing"),
    (lambda d: (d / integrity.MANIFEST_FILE).write_text("{trunc"), "unreadable file manifest"),
])
def test_each_damage_is_one_error_naming_the_file_and_the_rebuild(tmp_path, damage, words):
    d = _folder(tmp_path)
    damage(d)
    with pytest.raises(IntegrityError, match="rebuild: rebuild-it|rebuild the folder: rebuild-it") as e:
        verify_files(d, "rebuild-it")
    assert words in str(e.value)


@pytest.mark.parametrize("damage, words", [
    (lambda d: (d / integrity.MANIFEST_FILE).write_text(json.dumps({"format": "factlab-files", "version": 1,
                                                                    "files": {}})), "lists no files"),
    (lambda d: (d / "extra.0").write_bytes(b"unlisted shard"), "extra.0 is not listed in"),
    (lambda d: (d / integrity.MANIFEST_FILE).write_text(json.dumps({"format": "factlab-files", "version": 1,
     "files": {"a.bin": json.loads((d / integrity.MANIFEST_FILE).read_text())["files"]["a.bin"]}})),
     "b.json is not listed in"),
])
def test_an_empty_or_partial_manifest_is_a_mismatch(tmp_path, damage, words):
    """An index whose manifest lists no files, beside a truncated ``tokenized.0``, loaded and
    counted Spain 2 instead of 18 (issue 43): every file of the folder must be listed."""
    d = _folder(tmp_path)
    damage(d)
    with pytest.raises(IntegrityError, match="rebuild: rebuild-it") as e:
        verify_files(d, "rebuild-it")
    assert words in str(e.value)


def test_a_cached_model_is_checked_like_an_index(tmp_path):
    """A model factlab builds into its cache (the GGUF conversion, the tiny random model; both
    through ``models._cached_model``) gets a file manifest when built and is checked on every
    use: 4 MB zeroed inside its weights, a truncated weights file or a missing tokenizer is one
    error naming the file and the rebuild (issue 43)."""
    from factlab import models

    built = []

    def build(out):
        built.append(out)
        with integrity.published_folder(out) as tmp:
            (tmp / "config.json").write_text('{"model_type": "llama"}')
            (tmp / "model.safetensors").write_bytes(bytes(range(256)) * (6 << 12))  # 6 MB
            (tmp / "tokenizer.json").write_text('{"model": {}}')

    out = tmp_path / "models" / "m"
    assert models._cached_model(out, build) == str(out) == models._cached_model(out, build) and len(built) == 1
    assert (out / integrity.MANIFEST_FILE).is_file()
    weights = out / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[:1 << 20] + bytes(4 << 20) + good[5 << 20:])  # 4 MB zeroed: same size
    with pytest.raises(IntegrityError, match=rf"model.safetensors: its content is not what was written.*remove {out}"):
        models._cached_model(out, build)
    weights.write_bytes(good[:1000])
    with pytest.raises(IntegrityError, match=r"model.safetensors has 1,000 bytes where 6,291,456 were written"):
        models._cached_model(out, build)
    weights.write_bytes(good)
    (out / "tokenizer.json").unlink()
    with pytest.raises(IntegrityError, match=r"tokenizer.json is missing"):
        models._cached_model(out, build)
    assert len(built) == 1  # never rebuilt silently over a damaged folder


def test_a_cached_model_built_before_manifests_is_listed_as_it_is(tmp_path, caplog):
    from factlab import models

    out = tmp_path / "old"
    out.mkdir()
    (out / "config.json").write_text("{}")
    with caplog.at_level(logging.WARNING):
        models._cached_model(out, lambda o: pytest.fail("rebuilt under a reader's feet"))
    assert "no file manifest" in caplog.text and (out / integrity.MANIFEST_FILE).is_file()


def test_a_folder_without_manifest_says_so(tmp_path):
    (tmp_path / "old").mkdir()
    with pytest.raises(MissingManifest, match="older factlab.*rebuild it: make-it"):
        verify_files(tmp_path / "old", "make-it")


# ---------------------------------------------------------------- checkpoints


def _checkpoint(out, step: int):
    d = out / f"checkpoint-{step}"
    d.mkdir(parents=True)
    save_file({"w": torch.ones(64, 8)}, str(d / "adapter_model.safetensors"))
    (d / "adapter_config.json").write_text('{"r": 8}')
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    torch.save({"state": {0: torch.zeros(64)}}, d / "optimizer.pt")
    torch.save({"last_epoch": step}, d / "scheduler.pt")
    return d


def _truncate(path):
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


@pytest.mark.parametrize("broken", ["adapter_model.safetensors", "trainer_state.json", "optimizer.pt",
                                    "scheduler.pt"])
def test_a_truncated_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, broken):
    _checkpoint(tmp_path, 2)
    newest = _checkpoint(tmp_path, 4)
    assert resume_checkpoint(tmp_path) == newest  # whole: the newest is used
    _truncate(newest / broken)
    with caplog.at_level(logging.WARNING):
        assert resume_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert broken in caplog.text and "falling back" in caplog.text
    assert (tmp_path / "unreadable-checkpoint-4").is_dir() and not newest.exists()  # set aside, not reused


def test_no_readable_checkpoint_starts_over_and_none_is_quiet(tmp_path, caplog):
    assert resume_checkpoint(tmp_path) is None
    ckpt = _checkpoint(tmp_path, 1)
    _truncate(ckpt / "optimizer.pt")
    with caplog.at_level(logging.WARNING):
        assert resume_checkpoint(tmp_path) is None
    assert "starts from the beginning" in caplog.text


def test_an_unreadable_train_result_is_an_unfinished_run(tmp_path, caplog):
    (tmp_path / "train_result.json").write_text('{"name": "x", "output_')
    with caplog.at_level(logging.WARNING):
        assert TrainResult.load(tmp_path) is None
    assert "unreadable" in caplog.text


def test_a_read_only_folder_is_verified_once_with_its_stamp_under_the_cache(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("FACTLAB_CACHE", str(tmp_path / "cache"))
    d = _folder(tmp_path)
    (d / integrity.STAMP_FILE).unlink()
    real_access = os.access
    monkeypatch.setattr(integrity.os, "access", lambda p, mode: False if Path(p) == d else real_access(p, mode))
    hashed = []
    real = integrity.file_sha256
    monkeypatch.setattr(integrity, "file_sha256", lambda p, *a: hashed.append(p) or real(p, *a))
    verify_files(d, "rebuild-it")
    assert hashed and integrity.stamp_path(d).parent == tmp_path / "cache" / "verified"
    hashed.clear()
    verify_files(d, "rebuild-it")
    assert hashed == []  # remembered, though the folder could not hold the stamp
