# issue 43 round-3 probe (run with PYTHONPATH=src, FACTLAB_CACHE=<scratch>); one line per probe: CLASS | probe | detail
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tests")); sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from probe_round3 import record
import test_text as tt
from factlab import text, labels
from factlab.data import kb
extra = {"text.normalize_answer": text.normalize_answer, "text.is_refusal": text.is_refusal,
         "text.sentence_claims": text.sentence_claims, "text.suspicious_substring_match": lambda s: text.suspicious_substring_match(s, ["Paris"]),
         "text.grade_answer_exact": lambda s: text.grade_answer_exact(s, ["Paris"]), "kb.label_answer": lambda s: kb.label_answer(s, ["Paris"]),
         "kb.parse_number": kb.parse_number, "kb.label_sentence": kb.label_sentence, "labels.normalize_label": labels.normalize_label,
         "labels.normalize_error_type": labels.normalize_error_type, "text.split_gold": text.split_gold}
tt.DEGENERATE += [("", "1,", "x"), ("", "1 000 ", "x"), ("", "the ", ""), ("", "'", ""), ("", "- ", "")]
for name, read in extra.items():
    small, big = tt._battery(10_000), tt._battery(100_000)
    repeats, spent = 1, tt._cpu_seconds(read, small, 1)
    while spent < 0.2:
        repeats *= 4; spent = tt._cpu_seconds(read, small, repeats)
    per = spent / repeats; br = max(1, repeats // 10)
    try:
        ratio = tt._cpu_seconds(read, big, br, limit=40 * per * br + 0.02) / br / per
        record("works as documented" if ratio < 40 else "hang/superlinear", f"linear {name}", f"ratio {ratio:.1f}")
    except tt._Superlinear:
        record("hang/superlinear", f"linear {name}", f">40x ({per:.4f} s per 10 KB pass)")
