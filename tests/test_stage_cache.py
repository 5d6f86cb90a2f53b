"""``stage_cache.StageCache``: the one resumable stage cache (issue 44)."""

import json
import os
import threading

import pytest

from factlab.paths import SymlinkRefused
from factlab.stage_cache import StageCache


def test_rows_are_kept_by_key_and_fingerprint_and_survive_a_reread(tmp_path):
    path = tmp_path / "stage" / "rows.jsonl"
    cache = StageCache(path)
    assert len(cache) == 0 and cache.get("a") is None and not path.exists()
    cache.put([{"key": "a", "fp": "f1", "v": 1}, {"key": "b", "fp": "f1", "v": 2}])
    cache.put([{"key": "a", "fp": "f2", "v": 3}])  # a later row of a key wins
    again = StageCache(path)
    assert again.get("a", "f2")["v"] == 3 and again.get("a", "f1") is None and again.get("a")["v"] == 3
    assert again.get("b", "f1")["v"] == 2 and "b" in again and "c" not in again and len(again) == 2
    again.rewrite(["b"])
    assert [json.loads(line)["key"] for line in path.read_text().splitlines()] == ["b"]
    again.replace({"key": "only", "x": [1.5]})
    assert StageCache(path).rows == {"only": {"key": "only", "x": [1.5]}}


def test_a_torn_line_is_skipped_counted_and_repaired_on_the_next_append(tmp_path, caplog):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"key": "a"}) + '\n{"key": "b", "n_')
    cache = StageCache(path)
    assert list(cache.rows) == ["a"] and cache.skipped == 1 and "c.jsonl:2" in caplog.text
    cache.put([{"key": "c"}])  # on a line of its own, after the torn one
    assert list(StageCache(path).rows) == ["a", "c"] and StageCache(path).skipped == 1
    cache.rewrite(["a", "c"])
    assert list(StageCache(path).rows) == ["a", "c"] and StageCache(path).skipped == 0


def test_foreign_rows_and_rows_the_stage_refuses_are_skipped(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = [{"key": "ok", "n": 1}, {"id": "no key"}, {"key": 7}, [1, 2], {"key": "bad", "n": -1}, {"key": "odd"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + "\n")
    cache = StageCache(path, check=lambda r: r["n"] >= 0)  # "odd" has no n: a KeyError is a refusal
    assert list(cache.rows) == ["ok"] and cache.skipped == 5


def test_a_row_without_a_string_key_is_refused_before_anything_is_written(tmp_path):
    cache = StageCache(tmp_path / "c.jsonl")
    with pytest.raises(ValueError, match="string 'key'"):
        cache.put([{"key": "a"}, {"id": "b"}])
    assert not (tmp_path / "c.jsonl").exists() and len(cache) == 0


@pytest.mark.parametrize("plant", ["symlink", "dangling", "hard link", "fifo"])
def test_the_cache_is_never_read_or_written_through_a_link_nor_blocks_on_a_fifo(tmp_path, plant):
    """A self-filter cache planted as a link had rows appended to its target (or created it); as a
    FIFO, the read blocked forever (issue 43 round-5 probe)."""
    cache, victim = tmp_path / "corver.jsonl", tmp_path / "victim"
    if plant != "dangling":
        victim.write_text("precious\n")
    if plant in ("symlink", "dangling"):
        cache.symlink_to(victim)
    elif plant == "hard link":
        os.link(victim, cache)
    else:
        os.mkfifo(cache)
    unread = StageCache(tmp_path / "fresh.jsonl")
    unread.path = cache  # what is tested is the append, not the read before it
    for call in (lambda: StageCache(cache), lambda: unread.put([{"key": "q"}])):
        seen = []

        def go():
            try:
                call()
                seen.append("returned")
            except SymlinkRefused as e:
                seen.append(str(e))

        t = threading.Thread(target=go, daemon=True)
        t.start()
        t.join(10)
        assert seen and str(cache) in seen[0], seen or "blocked"
    assert (victim.read_text() == "precious\n") if plant != "dangling" else not victim.exists()

