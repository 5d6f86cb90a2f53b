"""Learning-zone self-filter (000_ac66a963fabf3916.txt §A.2, §A.4)."""

import json

import pytest

from factlab.data.types import QAItem, read_jsonl
from factlab.recipes import selffilter as sf
from factlab.recipes.selffilter import SelfFilterConfig, SelfFilterResult
from factlab.stage_cache import StageCache


def _res(i: int, n: int, g: int = 16) -> SelfFilterResult:
    item = QAItem(id=f"q{i}", question=f"question {i}?", golds=["x"], meta={"k": i})
    return SelfFilterResult(item=item, n_correct=n, n_samples=g, bucket=sf.selffilter_bucket(n, g))


def test_paper_defaults():
    cfg = SelfFilterConfig()
    assert (cfg.num_samples, cfg.temperature, cfg.top_p, cfg.max_new_tokens) == (16, 0.7, 0.95, 512)
    assert cfg.keep_range == (1, 15)
    assert cfg.lenient and not cfg.uses_anchors
    from factlab.prompts import CORVER_TRAIN_SYSTEM

    assert cfg.system == CORVER_TRAIN_SYSTEM  # §A.4: "under the CorVer generation prompt"


def test_params_section_is_the_config():
    from factlab.config import ConfigError, validate
    from factlab.recipes.corver import CorVerConfig

    cfg = validate({"self_filter": {"num_samples": 4, "anchors": 800, "progress": False}}, CorVerConfig).self_filter
    assert isinstance(cfg, SelfFilterConfig)
    assert cfg.num_samples == 4 and cfg.anchors == 800 and cfg.uses_anchors and not cfg.progress
    with pytest.raises(ConfigError, match="'self_filter.keep_min': the keep range"):
        validate({"self_filter": {"num_samples": 4, "keep_max": 5}}, CorVerConfig)


@pytest.mark.parametrize("n,bucket", [(0, "zero"), (1, "learning_zone"), (15, "learning_zone"),
                                      (16, "mastered")])
def test_bucket_boundaries(n, bucket):
    assert sf.selffilter_bucket(n, 16) == bucket


def test_bucket_rejects_out_of_range():
    with pytest.raises(ValueError):
        sf.selffilter_bucket(17, 16)
    with pytest.raises(ValueError):
        sf.selffilter_bucket(-1, 16)


def test_bad_configs():
    with pytest.raises(ValueError, match="not both"):
        SelfFilterConfig(anchors=10, anchor_fraction=0.2)
    with pytest.raises(ValueError, match="keep range"):
        SelfFilterConfig(num_samples=4, keep_max=5)


def test_select_boundaries_without_anchors():
    results = [_res(i, n) for i, n in enumerate([0, 1, 15, 16, 8])]
    items, table = sf.select_learning_zone(results, SelfFilterConfig())
    assert [it.id for it in items] == ["q1", "q2", "q4"]  # n = 1, 15, 8 in input order
    assert all(it.meta["selffilter"]["anchor"] is False for it in items)
    assert items[0].meta["k"] == 1 and "selffilter" not in results[1].item.meta  # copies
    t = table.set_index("bucket")
    assert t.loc["zero", "count"] == 1 and t.loc["learning_zone", "count"] == 3
    assert t.loc["mastered", "count"] == 1 and t.loc["mastered", "selected"] == 0
    assert t.loc["retained", "count"] == 3 and t.loc["retained", "share"] == pytest.approx(0.6)


def test_select_anchors_all_cap_and_fraction():
    results = [_res(i, n) for i, n in enumerate([16, 3, 16, 0, 16, 16, 7])]
    # include_anchors alone: every mastered question, after the learning zone
    items, table = sf.select_learning_zone(results, SelfFilterConfig(include_anchors=True))
    assert [it.id for it in items] == ["q1", "q6", "q0", "q2", "q4", "q5"]
    assert [it.meta["selffilter"]["anchor"] for it in items] == [False, False, True, True, True, True]
    assert table.set_index("bucket").loc["mastered", "selected"] == 4
    # a fixed count as in the paper (1,000 / 800): a seeded subset, in input order
    items, _ = sf.select_learning_zone(results, SelfFilterConfig(anchors=2, seed=1))
    anchors = [it.id for it in items if it.meta["selffilter"]["anchor"]]
    assert len(anchors) == 2 and set(anchors) <= {"q0", "q2", "q4", "q5"}
    assert anchors == sorted(anchors, key=lambda s: int(s[1:]))
    again, _ = sf.select_learning_zone(results, SelfFilterConfig(anchors=2, seed=1))
    assert [it.id for it in again] == [it.id for it in items]
    # more anchors asked for than exist: all of them
    items, _ = sf.select_learning_zone(results, SelfFilterConfig(anchors=100))
    assert sum(it.meta["selffilter"]["anchor"] for it in items) == 4
    # a fraction of the learning zone (2 kept x 0.5 = 1 anchor)
    items, _ = sf.select_learning_zone(results, SelfFilterConfig(anchor_fraction=0.5))
    assert sum(it.meta["selffilter"]["anchor"] for it in items) == 1


def test_custom_keep_range():
    results = [_res(i, n, g=4) for i, n in enumerate([0, 1, 2, 3, 4])]
    items, _ = sf.select_learning_zone(results, SelfFilterConfig(num_samples=4, keep_min=2, keep_max=4))
    assert [it.id for it in items] == ["q2", "q3", "q4"]


def test_bucket_table_matches_table_11_shape():
    # Llama-3.1-8B row of 000 Table 11, scaled down: buckets sum to the pool size
    results = [_res(i, n) for i, n in enumerate([0] * 3 + [5] * 5 + [16] * 2)]
    t = sf.bucket_table(results)
    assert list(t["bucket"]) == ["zero", "learning_zone", "mastered"]
    assert list(t["n_correct_range"]) == ["n_c = 0", "1 <= n_c <= 15", "n_c = 16"]
    assert list(t["count"]) == [3, 5, 2] and t["count"].sum() == len(results)
    assert t["share"].sum() == pytest.approx(1.0)
    d = sf.bucket_table(results, detail=True)
    assert list(d["n_correct"]) == list(range(17)) and d["count"].sum() == 10
    assert d.loc[5, "count"] == 5 and d.loc[16, "bucket"] == "mastered"


def test_bucket_table_empty_and_mixed_g():
    t = sf.bucket_table([])
    assert list(t["count"]) == [0, 0, 0]
    with pytest.raises(ValueError, match="single G"):
        sf.bucket_table([_res(0, 1, g=4), _res(1, 1, g=16)], detail=True)


def test_plot_selffilter_buckets():
    from factlab import report

    results = [_res(i, n) for i, n in enumerate([0, 4, 16, 9])]
    _, table = sf.select_learning_zone(results)
    fig = report.plot_selffilter_buckets(table)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == [float(c) for c in table["count"]] and sum(heights) > 0  # one bar per bucket, its count
    detail = sf.bucket_table(results, detail=True)
    fig = report.plot_selffilter_buckets(detail)
    assert len(fig.axes[0].patches) == len(detail) and fig.axes[0].get_ylabel() == "questions"


def test_real_run_and_resume(tiny_model_and_tokenizer, tmp_path):
    """A model sampling G=4 answers to three mini-world questions; a resumed call reads the cache."""
    from factlab.data.miniworld import ensure_world

    model, tok = tiny_model_and_tokenizer
    paths = ensure_world()
    pool = {r["id"]: QAItem.from_dict(r) for key in ("qa_train", "qa_heldout")
            for r in read_jsonl(paths[key])}
    items = [pool[i] for i in ("capital/france", "demonym/germany", "subregion/peru") if i in pool]
    assert len(items) == 3
    cfg = SelfFilterConfig(num_samples=4, max_new_tokens=24, batch_size=2, progress=False)
    cache = tmp_path / "selffilter.jsonl"

    first = sf.count_correct(model, tok, items[:2], cfg, cache_path=cache)
    assert len(first) == 2 and not any(r.cached for r in first)
    assert len(cache.read_text().splitlines()) == 2

    # resume with one new question: only it is generated (one more cache line)
    res = sf.count_correct(model, tok, items, cfg, cache_path=cache)
    lines = cache.read_text().splitlines()
    assert len(lines) == 3
    assert [r.cached for r in res] == [True, True, False]
    assert [r.item.id for r in res] == [it.id for it in items]
    for a, b in zip(first, res[:2]):
        assert (a.n_correct, a.answers) == (b.n_correct, b.answers)
    for r in res:
        assert r.n_samples == 4 and 0 <= r.n_correct <= 4 and len(r.labels) == 4
        assert r.bucket == sf.selffilter_bucket(r.n_correct, 4)
        assert 0 <= r.n_correct_strict <= r.n_correct_lenient  # strict only adds the tag rule
    # the count is the samples' GOOD grades, over G distinct samples (sampling, not one greedy answer)
    assert all(r.n_correct == sum(label == "GOOD" for label in r.labels) for r in res)
    assert all(len(r.answers) == 4 for r in res) and len({a for r in res for a in r.answers}) > 1
    rows = [json.loads(x) for x in lines]
    assert {r["id"] for r in rows} == {it.id for it in items}

    # a fully cached call generates nothing; the strict switch re-reads the same samples
    strict = sf.count_correct(model, tok, items, cfg.model_copy(update={'lenient': False}),
                              cache_path=cache)
    assert len(cache.read_text().splitlines()) == 3 and all(r.cached for r in strict)
    assert [r.n_correct for r in strict] == [r.n_correct_strict for r in res]

    # different sampling settings are a different cache key: regenerated
    other = sf.count_correct(model, tok, items[:1], cfg.model_copy(update={'max_new_tokens': 8}),
                             cache_path=cache)
    assert not other[0].cached and len(cache.read_text().splitlines()) == 4

    kept, table = sf.select_learning_zone(res, cfg)
    assert table.set_index("bucket").loc[["zero", "learning_zone", "mastered"], "count"].sum() == 3
    assert all(1 <= it.meta["selffilter"]["n_correct"] <= 3 for it in kept)


def _row(qid: str, **counts) -> dict:
    return {"key": sf._cache_key("s", qid), "settings": "s", "id": qid, "n_samples": 2, "n_correct_lenient": 1, "n_correct_strict": 0,
            "labels_lenient": ["good", "bad"], "labels_strict": ["bad", "bad"], **counts}


def test_cache_lines_with_impossible_counts_are_skipped_and_sampled_again(tmp_path):
    """A line whose counts are missing, of the wrong type or outside [0, n_samples] (9 correct of 2)
    ended the call in a KeyError or a ValueError naming no file (issue 43 round-5 probe): it is
    skipped like a torn line, so its question is sampled again."""
    cache = tmp_path / "corver.jsonl"
    rows = [_row("ok"), _row("nine", n_correct_lenient=9), {"key": sf._cache_key("s", "bare"), "settings": "s",
                                                            "id": "bare"},
            _row("typed", n_samples="two"), _row("negative", n_correct_strict=-1), _row("flag", n_samples=True)]
    cache.write_text("".join(json.dumps(r) + "\n" for r in rows))
    read = StageCache(cache, check=sf._row_ok)
    assert list(read.rows) == [sf._cache_key("s", "ok")] and read.skipped == 5
