"""Calibration audit (000_ac66a963fabf3916.txt §6.1, §B.5)."""

import json
import math
import re

import pytest

from factlab.eval import calibration as cal


# --------------------------------------------------------------------------- Wilson


def test_wilson_known_value():
    lo, hi = cal.wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)


@pytest.mark.parametrize("k,n,ci", [  # 000 Table 13, in percent, one decimal
    (48, 200, (18.6, 30.4)), (53, 100, (43.3, 62.5)), (70, 100, (60.4, 78.1)),
    (73, 100, (63.6, 80.7)), (162, 200, (75.0, 85.8)),
])
def test_wilson_reproduces_table_13(k, n, ci):
    lo, hi = cal.wilson_interval(k, n)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == ci


def test_wilson_edges():
    assert all(math.isnan(x) for x in cal.wilson_interval(0, 0))
    lo, hi = cal.wilson_interval(0, 10)
    assert lo == 0.0 and 0 < hi < 0.3
    lo, hi = cal.wilson_interval(10, 10)
    assert 0.7 < lo < 1.0 and hi == 1.0
    with pytest.raises(ValueError):
        cal.wilson_interval(3, 2)


# --------------------------------------------------------------------------- buckets


@pytest.mark.parametrize("count,bucket", [
    (0, "0"), (1, "1-4"), (4, "1-4"), (5, "5-9"), (9, "5-9"), (10, "10-19"), (19, "10-19"),
    (20, ">=20"), (10**9, ">=20"), (None, cal.NO_QUERY),
])
def test_count_bucket_boundaries(count, bucket):
    assert cal.count_bucket(count) == bucket


def test_count_bucket_rejects_bad_counts():
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError):
            cal.count_bucket(bad)


def test_five_paper_buckets():
    assert cal.COUNT_BUCKETS == ("0", "1-4", "5-9", "10-19", ">=20")


def test_table_order_and_empty_buckets():
    rows = [(25, True), (0, False), (0, True), (7, True), {"count": 3, "correct": "incorrect"}]
    t = cal.calibration_table(rows)
    assert list(t["bucket"]) == list(cal.COUNT_BUCKETS)  # no None count: no "no query" row
    assert list(t["n"]) == [2, 1, 1, 0, 1] and list(t["n_correct"]) == [1, 0, 1, 0, 1]
    assert t.loc[0, "p_correct"] == 0.5
    empty = t.loc[3]
    assert empty["n"] == 0 and math.isnan(empty["p_correct"]) and math.isnan(empty["wilson_lo"])
    assert (t["wilson_lo"].fillna(0) <= t["p_correct"].fillna(0)).all()
    t2 = cal.calibration_table(rows + [(None, True)])
    assert list(t2["bucket"])[-1] == cal.NO_QUERY and t2.iloc[-1]["n"] == 1
    t3 = cal.calibration_table(rows + [(None, True)], include_no_query=False)
    assert cal.NO_QUERY not in list(t3["bucket"])
    assert list(cal.calibration_table([])["n"]) == [0] * 5


def test_table_13_is_monotone():
    rows = []
    for count, n, k in [(0, 200, 48), (2, 100, 53), (7, 100, 70), (15, 100, 73), (50, 200, 162)]:
        rows += [(count, i < k) for i in range(n)]
    t = cal.calibration_table(rows)
    assert [round(100 * p, 1) for p in t["p_correct"]] == [24.0, 53.0, 70.0, 73.0, 81.0]
    assert cal.is_monotone(t)
    assert not cal.is_monotone(cal.calibration_table([(0, True), (30, False)]))


# --------------------------------------------------------------------------- AUROC


def test_auroc_perfect_inverse_ties():
    assert cal.count_auroc([0, 1, 5, 30], [False, False, True, True]) == 1.0
    assert cal.count_auroc([0, 1, 5, 30], [True, True, False, False]) == 0.0
    assert cal.count_auroc([3, 3, 3, 3], [True, False, True, False]) == 0.5
    # one tie across classes counts one half: pairs (2>1),(2=2),(3>1),(3>2) -> 3.5 / 4
    assert cal.count_auroc([1, 2, 2, 3], [False, False, True, True]) == pytest.approx(0.875)
    assert math.isnan(cal.count_auroc([1, 2], [True, True]))
    assert cal.count_auroc([None, 0, 9], [False, False, True]) == 1.0  # None left out


def test_auroc_matches_brute_force():
    import random

    rng = random.Random(0)
    counts = [rng.randint(0, 6) for _ in range(60)]
    labels = [rng.random() < 0.4 + 0.08 * c for c in counts]
    pos = [c for c, y in zip(counts, labels) if y]
    neg = [c for c, y in zip(counts, labels) if not y]
    brute = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))
    assert cal.count_auroc(counts, labels) == pytest.approx(brute)


# --------------------------------------------------------------------------- loaders


def test_load_labelled_sentences(tmp_path):
    p = tmp_path / "s.jsonl"
    rows = [{"sentence": "A.", "label": True}, {"sentence": "B.", "label": "incorrect", "extra": 1},
            {"sentence": "C.", "label": "Attributable"}, {"sentence": "D.", "label": "not_attributable"}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    out = cal.load_labelled_sentences(p)
    assert [r["correct"] for r in out] == [True, False, True, False] and out[1]["extra"] == 1


@pytest.mark.parametrize("line,msg", [
    ('{"sentence": "A."}', "missing field 'label'"),
    ('{"label": true}', "missing field 'sentence'"),
    ('{"sentence": "A.", "label": "maybe"}', "unknown correctness label"),
    ('{"sentence": "", "label": true}', "non-empty string"),
    ('{"sentence": "A.", "label": tru', "not valid JSON"),
    ('[1, 2]', "JSON object"),
])
def test_loader_errors_name_file_and_line(tmp_path, line, msg):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"sentence": "ok.", "label": "correct"}\n' + line + "\n")
    with pytest.raises(ValueError, match=msg) as e:
        cal.load_labelled_sentences(p)
    assert f"{p}:2" in str(e.value)


def test_loader_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        cal.load_labelled_sentences(tmp_path / "nope.jsonl")


# --------------------------------------------------------------------------- mini-world audit

_WORD = re.compile(r"[^\W\d_][\w'-]*")
_STOP = {"the", "of", "is", "in", "a", "an", "and", "are", "for", "from", "to", "people", "official",
         "located", "capital", "currency", "currencies", "language", "languages", "borders",
         "demonym", "region", "subregion", "one"}


class SentenceCooccurrence:
    """A real, brute-force stand-in for CorVer's count (§B.1, in miniature): the content
    words of a claim (capitalized non-stop words, else words longer than 2 characters;
    at least two, else no query) and the number of corpus sentences holding all of them."""

    def __init__(self, docs):
        self.index: dict[str, set[int]] = {}
        n = 0
        for doc in docs:
            for sent in re.split(r"(?<=[.!?])\s+", doc):
                for w in set(_WORD.findall(sent)):
                    self.index.setdefault(w, set()).add(n)
                n += 1

    @staticmethod
    def words(sentence):
        ws = [w for w in _WORD.findall(sentence) if w.lower() not in _STOP]
        caps = [w for w in ws if w[0].isupper()]
        ws = caps if len(caps) >= 2 else [w for w in ws if len(w) > 2]
        return list(dict.fromkeys(ws))

    def __call__(self, sentence):
        ws = self.words(sentence)
        if len(ws) < 2:
            return None
        return len(set.intersection(*(self.index.get(w, set()) for w in ws)))


@pytest.fixture(scope="module")
def world():
    from factlab.data.miniworld import ensure_world

    return ensure_world()


def test_miniworld_claims_balanced(world):
    claims = cal.miniworld_labelled_claims(world)
    n_true = sum(c["correct"] for c in claims)
    assert len(claims) > 500 and 0.4 < n_true / len(claims) < 0.6
    assert all(c["sentence"] and isinstance(c["correct"], bool) for c in claims)
    assert {c["perturbation"] for c in claims if not c["correct"]} == {"entity_swap"}


def test_audit_end_to_end_on_the_miniworld(world):
    from factlab import report
    from factlab.data.types import read_jsonl

    counter = SentenceCooccurrence(r["text"] for r in read_jsonl(world["corpus"]))
    claims = cal.miniworld_labelled_claims(world)
    table, per = cal.audit(claims, counter)
    assert len(per) == len(claims) and table["n"].sum() == len(claims)
    assert list(table["bucket"])[:5] == list(cal.COUNT_BUCKETS)
    assert {"sentence", "correct", "count", "bucket", "relation"} <= set(per.columns)
    # a real property of the data: true claims co-occur in the corpus, swapped ones rarely
    queried = per[per["count"].notna()]
    mean_true = queried[queried["correct"]]["count"].mean()
    mean_false = queried[~queried["correct"]]["count"].mean()
    assert mean_true > 1.0 > 0.1 > mean_false
    t = table.set_index("bucket")
    assert t.loc["0", "p_correct"] < 0.1 < 0.9 < t.loc["1-4", "p_correct"]
    assert table.attrs["auroc"] > 0.95 and table.attrs["monotone"]
    fig = report.plot_calibration(table)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    # one point per non-empty bucket, annotated with its P(correct) and n
    nonempty = table[table["n"] > 0]
    assert len(ax.lines) >= len(nonempty)
    for _, row in nonempty.iterrows():
        assert f"{row['p_correct']:.0%}\nn={int(row['n'])}" in texts
