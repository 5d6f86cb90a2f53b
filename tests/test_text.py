"""Text kernels against 000_ac66a963fabf3916.txt §A.2 and §B.1, edge cases included."""

import pytest
from hypothesis import given, strategies as st

from factlab import text
from factlab.text import BAD, GOOD, NA


# --- normalize_answer -------------------------------------------------------------------

@pytest.mark.parametrize("raw, norm", [
    ("The Eiffel Tower", "eiffel tower"),
    ("  Paris!  ", "paris"),
    ("a an the", ""),
    ("Theatre", "theatre"),             # 'the' only as a stand-alone word
    ("U.S.A.", "u s"),                   # paper order: articles, then punctuation
    ("São Tomé and Príncipe", "sao tome and principe"),
    ("Zürich", "zurich"),               # combining marks dropped, not split into words
    ("ﬁnal", "final"),                  # NFKD compatibility ligature
    ("Côte d’Ivoire", "cote d ivoire"),
    ("multiple   spaces\tand\nlines", "multiple spaces and lines"),
    ("", ""),
])
def test_normalize_answer(raw, norm):
    assert text.normalize_answer(raw) == norm


@given(st.text())
def test_normalize_is_idempotent(s):
    once = text.normalize_answer(s)
    assert text.normalize_answer(once) == once


# --- grade_answer ---------------------------------------------------------------------

@pytest.mark.parametrize("pred, golds, label", [
    ("Paris", ["Paris"], GOOD),
    ("paris, france", ["Paris"], GOOD),                       # gold inside prediction
    ("Washington", ["Washington, D.C."], GOOD),               # prediction inside gold
    ("The Big Apple", ["New York City", "Big Apple"], GOOD),  # alias
    ("Lyon", ["Paris", "City of Light"], BAD),
    ("I don't know", ["Paris"], NA),
    ("I do not know", ["Paris"], NA),
    ("  I DON'T KNOW  ", ["Paris"], NA),
    ("I don\u2019t know", ["Paris"], NA),                     # the paper's own curly apostrophe
    ("", ["Paris"], NA),
    ("   ", ["Paris"], NA),
    (None, ["Paris"], NA),
    ("I don't know, maybe Paris", ["Paris"], GOOD),            # strict NA rule: not a refusal
    ("I don't know.", ["Paris"], BAD),                        # strict equality: not NA either
    ("!!!", ["Paris"], BAD),                                  # normalizes to empty: never a match
    ("the", ["The Hague"], BAD),
    ("São Paulo", ["Sao Paulo"], GOOD),
    ("Paris", ["", "Paris"], GOOD),
    ("Paris", [""], BAD),                                     # empty gold never matches
])
def test_grade_answer(pred, golds, label):
    assert text.grade_answer(pred, golds) == label


def test_grade_answer_accepts_single_string_gold():
    assert text.grade_answer("Paris", "Paris") == GOOD


@pytest.mark.parametrize("pred,label", [
    ("TRPV4", GOOD), ("the TRPV4.", GOOD), ("trpv-4", BAD), ("T", BAD), ("RPV", BAD),
    ("TRPV1, TRPV4, PMP22, MFN2", BAD), ("It is not TRPV4", BAD), ("vanilloid 4", GOOD), ("I don't know", NA),
    (None, NA), ("...", BAD),
])
def test_grade_answer_exact_is_equality_after_normalization(pred, label):
    assert text.grade_answer_exact(pred, ["TRPV4", "Vanilloid 4"]) == label


@pytest.mark.parametrize("pred,suspicious", [
    ("T", True), ("4", True), ("It is not TRPV4", True), ("isn't TRPV4", True), ("never trpv4", True),
    ("RPV", False),  # a substring, but three characters and no negation
    ("TRPV4", False),  # exact: not a substring-only match
    ("Paris", False),  # wrong: not a match at all
    ("a", False),  # an article normalizes to nothing: BAD under the substring rule too
])
def test_suspicious_substring_match(pred, suspicious):
    assert text.suspicious_substring_match(pred, ["TRPV4"]) is suspicious


def test_split_gold_semicolons():
    assert text.split_gold("Paris; City of Light ;;") == ["Paris", "City of Light"]


# --- extract_answer -------------------------------------------------------------------

@pytest.mark.parametrize("completion, answer", [
    ("<think>x</think><answer>Paris</answer>", "Paris"),
    ("<think>x</think><answer>  Paris  </answer> trailing", "Paris"),
    ("<think>x</think><answer>Paris", "Paris"),                          # truncated, no </answer>
    ("<answer>one</answer><answer>two</answer>", "one"),                 # first tag wins
    ("<answer></answer>", ""),
    ("no tags at all", None),
    ("", None),
    ("<think>x</think>answer: Paris", None),
])
def test_extract_answer(completion, answer):
    assert text.extract_answer(completion) == answer


# --- format_reward (three anti-hack rules) --------------------------------------------

GOOD_THINK = "France is a country in Europe and its capital city is Paris."


@pytest.mark.parametrize("completion, reward", [
    (f"<think>{GOOD_THINK}</think><answer>Paris</answer>", 1.0),
    (f"<think>{GOOD_THINK}</think>\n<answer>Paris", 1.0),               # </answer> not required
    (f"<think>{GOOD_THINK}</think>", -1.0),                             # no <answer>
    (f"<answer>Paris</answer><think>{GOOD_THINK}</think>", -1.0),       # wrong order
    ("<think></think><answer>Paris</answer>", -1.0),                    # empty think (the hack)
    ("<think>unknown</think><answer>I don't know</answer>", -1.0),      # < 30 chars
    ("<think>   short   padded with spaces   </think><answer>x", -1.0), # 25 chars after strip
    ("<think>" + "1234567890 " * 4 + "</think><answer>42", -1.0),      # no alphabetic char
    ("<think><b>" + GOOD_THINK + "</b></think><answer>Paris", -1.0),    # starts with '<'
    ("<think>\n  <" + GOOD_THINK + "</think><answer>Paris", -1.0),      # '<' after whitespace
    ("", -1.0),
    (f"reasoning outside <think></think> {GOOD_THINK}<answer>Paris", -1.0),
])
def test_format_reward(completion, reward):
    assert text.format_reward(completion) == reward


def test_format_violation_names_the_rule():
    assert "alphabetic" in text.format_violation("<think>" + "1" * 40 + "</think><answer>1")
    assert text.format_violation(f"<think>{GOOD_THINK}</think><answer>x") is None


# --- split_sentences ------------------------------------------------------------------

def _texts(s):
    return [s[a:b] for a, b in text.split_sentences(s)]


def test_split_sentences_over_both_blocks():
    c = ("<think>France is in Europe. The capital of France is Paris! Is it big?</think>"
         "\n<answer>Paris.</answer>")
    assert _texts(c) == ["France is in Europe.", "The capital of France is Paris!",
                         "Is it big?", "Paris."]


def test_split_sentences_keeps_decimals_and_unterminated_tail():
    assert _texts("Area is 3.5 km. Population 2 million") == ["Area is 3.5 km.", "Population 2 million"]


def test_split_sentences_spans_exclude_tags_and_whitespace():
    c = "<think>  A b.  </think><answer> C </answer>"
    spans = text.split_sentences(c)
    assert [c[a:b] for a, b in spans] == ["A b.", "C"]
    for a, b in spans:
        assert "<" not in c[a:b] and c[a:b] == c[a:b].strip()


def test_split_sentences_empty_and_tags_only():
    assert text.split_sentences("") == []
    assert text.split_sentences("<think></think><answer></answer>") == []


@given(st.text(alphabet=st.sampled_from(list("ab .!?\n<>/thinkanswer")), max_size=80))
def test_split_sentences_spans_are_ordered_disjoint_and_nonempty(s):
    spans = text.split_sentences(s)
    prev = 0
    for a, b in spans:
        assert prev <= a < b <= len(s)
        assert s[a:b].strip() == s[a:b]
        prev = b


# --- alignment ------------------------------------------------------------------------

def test_alignment_by_midpoint_with_tags_and_whitespace_at_zero():
    c = "<think>Ab cd. Ef.</think><answer>Gh</answer>"
    # hand-made tokenization: tags, words, punctuation, spaces
    pieces = ["<think>", "Ab", " cd", ".", " ", "Ef", ".", "</think>", "<answer>", "Gh", "</answer>"]
    offsets, pos = [], 0
    for p in pieces:
        offsets.append((pos, pos + len(p)))
        pos += len(p)
    assert pos == len(c)
    al = text.align_tokens_to_sentences(c, offsets)
    assert al.sentence_ids == [0, 1, 1, 1, 0, 2, 2, 0, 0, 3, 0]
    assert al.rate == 1.0


def test_alignment_rate_drops_when_offsets_are_garbage():
    c = "<think>Ab cd. Ef.</think><answer>Gh</answer>"
    spans = text.split_sentences(c)
    # offsets pointing into the tags only -> no content token aligned
    al = text.align_tokens_to_sentences(c, [(0, 7), (17, 25)], spans)
    assert al.sentence_ids == [0, 0]
    # and content tokens mapped to nowhere (beyond the end) count as unaligned content
    al2 = text.align_tokens_to_sentences(c + "zzz", [(7, 9), (len(c), len(c) + 3)], spans)
    assert al2.sentence_ids[0] == 1 and al2.sentence_ids[1] == 0
    assert al2.rate == 0.5


def test_alignment_empty_completion_rate_zero():
    assert text.align_tokens_to_sentences("", []).rate == 0.0


def test_alignment_with_real_tokenizer(tokenizer):
    c = ("<think>France is a country in Western Europe. The capital of France is Paris.</think>"
         "<answer>Paris</answer>")
    ids = tokenizer(c, add_special_tokens=False)["input_ids"]
    decoded, offsets = text.token_char_offsets(tokenizer, ids)
    assert decoded == c
    assert offsets[0][0] == 0 and offsets[-1][1] == len(c)
    assert all(a <= b for a, b in offsets)
    al = text.align_tokens_to_sentences(decoded, offsets)
    assert al.rate >= 0.99
    spans = text.split_sentences(decoded)
    assert len(spans) == 3
    # every token whose midpoint lies in "Paris" (the answer sentence) is aligned to sentence 3
    for (a, b), sid in zip(offsets, al.sentence_ids):
        if spans[2][0] <= (a + b) / 2 < spans[2][1]:
            assert sid == 3
    assert set(al.sentence_ids) == {0, 1, 2, 3}


def test_token_char_offsets_unicode(tokenizer):
    s = "<answer>São Tomé ✓ 東京</answer>"
    ids = tokenizer(s, add_special_tokens=False)["input_ids"]
    decoded, offsets = text.token_char_offsets(tokenizer, ids)
    assert decoded == s
    assert len(offsets) == len(ids)
    assert offsets[-1][1] == len(s)
    assert all(offsets[i][1] == offsets[i + 1][0] for i in range(len(offsets) - 1))


@pytest.mark.parametrize("response, abstains", [
    ("", True), ("I don't know.", True), ("I don\u2019t know much about Chad.", True),
    ("I cannot answer that question.", True), ("I'm sorry, but I cannot provide information about it.", True),
    ("There is no information about X.", True), ("Sorry, I do not have information on that.", True),
    ("I do not know. I cannot say.", True), ("No reliable information exists on this topic.", True),
    ("I don't know the exact figure, but the capital is Paris.", False), ("Chad is a country in Africa.", False),
    ("I am not sure. Chad is in Africa.", False), ("Chad borders Libya. I do not know more.", False),
    ("I cannot stress enough how big Chad is: it spans 1.28 million square kilometres.", False),
])
def test_is_abstention(response, abstains):
    assert text.is_abstention(response) is abstains


# --- model text never stalls: every regex that reads it runs in linear time (issue 30) --------

import re  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402

from factlab import parsing  # noqa: E402
from factlab.data import kb  # noqa: E402
from factlab.eval import alarms, truth, winrate  # noqa: E402
from factlab.rewards import corver, k2v, klcf, klcf_claims, klcf_verify, rar, seva_output, triplets  # noqa: E402
from factlab.synth import kg, klcf_labels  # noqa: E402

# (prefix, unit repeated to the size, suffix): the shapes that made factlab's regexes superlinear
# (repeated and unclosed tags, long runs of one character that a pattern half matches, unclosed
# fences, quotes and brackets), plus plain text.
DEGENERATE = [("", "<think>a</think>", ""), ("", "<think>", ""), ("", "<think><answer>", ""), ("", ".", "a"),
              ("a", " ", "b"), ("a", "\n", "b"), ("```", " ", ""), ("```", "a", ""), ("- a", " ", "b"),
              ("", "[", ""), ("", "{", ""), ('"', "a", ""), ("(", " ", "x"), ("1", ",", "x"), ("", "not ", ""),
              ("x", ", ", "y"), ("", "#", ""), ("", "*", "x"), ("", "<|>", ""), ('("entity"<|>', "a", ""),
              ('("entity"<|>a', " ", "b"), ('("entity"<|>', ".", "a<|>PLACE<|>x)"),
              ("", "Paris is the capital of France. ", ""), ("* ", "a ", ""),
              ("", "a", "")]

MODEL_TEXT_READERS = {
    "text.format_violation": text.format_violation, "text.split_sentences": text.split_sentences,
    "text.is_abstention": text.is_abstention, "text.lenient_answer": text.lenient_answer,
    "text.extract_answer": text.extract_answer, "text.grade_answer": lambda s: text.grade_answer(s, ["Paris"]),
    "text.content_words": text.content_words, "parsing.parse_json": parsing.parse_json,
    "parsing.parse_score": parsing.parse_score, "winrate.parse_win_judgment": winrate.parse_win_judgment,
    "k2v.format_score": k2v.format_score, "k2v.parse_yes_no": k2v.parse_yes_no,
    "klcf.format_reward": klcf.format_reward, "klcf_verify.parse_verification": klcf_verify.parse_verification,
    "rar.parse_verdict": rar.parse_verdict, "rar.parse_claims": rar.parse_claims,
    "seva_output.claim_verdict": seva_output.claim_verdict,
    "seva_output.parse_verifier_output": seva_output.parse_verifier_output,
    "corver.entity_content_words": corver.entity_content_words, "triplets.parse_triplets": triplets.parse_triplets,
    "kg.parse_records": kg.parse_records, "klcf_claims.parse_claim_list": klcf_claims.parse_claim_list,
    "klcf_labels.parse_verification_label": klcf_labels.parse_verification_label,
    "alarms.completion_health": lambda s: alarms.completion_health([s]),
    # the exact-truth oracle: every sentence of a completion, its clauses and relation patterns (issue 43)
    "truth.label_sentences": lambda s: truth.label_sentences(s, context="What is the capital of France?"),
}


# A reader that cuts its input reads no more than that: compare below the cut.
SIZES = {"parsing.parse_json": (5_000, parsing.MAX_PARSE_CHARS), "parsing.parse_score": (5_000, parsing.MAX_PARSE_CHARS),
         "truth.label_sentences": (2_000, 20_000)}  # every sentence checked against the world: 10x fewer characters


def _battery(size: int) -> list[str]:
    return [pre + unit * (size // len(unit)) + post for pre, unit, post in DEGENERATE]


class _Superlinear(Exception):
    pass


def _cpu_seconds(read, texts, repeats: int, limit: float | None = None) -> float:
    """CPU time of ``repeats`` passes of ``read`` over ``texts``; ``_Superlinear`` past ``limit``
    (a CPU-time alarm: the regex engine checks for signals, so a runaway match stops)."""
    def stop(*_):
        raise _Superlinear

    previous = signal.signal(signal.SIGPROF, stop)
    if limit is not None:
        signal.setitimer(signal.ITIMER_PROF, limit)
    t0 = time.process_time()
    try:
        for _ in range(repeats):
            for t in texts:
                try:
                    read(t)
                except _Superlinear:
                    raise
                except Exception:  # noqa: BLE001 - an error on garbage is fine; only the time matters here
                    pass
        return time.process_time() - t0
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


RATIO_BOUND = 40  # linear: 10; n log n: about 13; quadratic: 100


@pytest.mark.parametrize("name", sorted(MODEL_TEXT_READERS))
def test_reading_model_text_is_linear_on_degenerate_input(name):
    """100 KB of degenerate text against 10 KB (below its cut for a reader that cuts its input),
    as a ratio of CPU times measured in this process (no absolute time): linear code takes about
    10x, quadratic 100x, the cubic ``format_violation`` of issue 30 (22 s for 12.8 KB) far more."""
    read = MODEL_TEXT_READERS[name]
    small_size, big_size = SIZES.get(name, (10_000, 100_000))
    small, big = _battery(small_size), _battery(big_size)
    repeats, spent = 1, _cpu_seconds(read, small, 1)
    while spent < 0.2:  # enough passes to read well above the CPU clock's resolution
        repeats *= 4
        spent = _cpu_seconds(read, small, repeats)
    per_pass = spent / repeats
    big_repeats = max(1, repeats // 10)
    allowed = RATIO_BOUND * per_pass * big_repeats + 0.02  # + the CPU clock's resolution
    try:
        ratio = _cpu_seconds(read, big, big_repeats, limit=allowed) / big_repeats / per_pass
    except _Superlinear:
        pytest.fail(f"{name}: {big_size:,} characters took more than {RATIO_BOUND}x the time of {small_size:,} "
                    f"({per_pass:.4f} s a pass)")
    assert ratio < RATIO_BOUND, (name, ratio)


# The patterns the linear code replaced, as references: same answers on ordinary text.
OLD_FORMAT = re.compile(r"<think>(.*?)</think>.*?<answer>", re.DOTALL)
OLD_BUT = re.compile(r",?\s+(?:but|however)\b,?\s*", re.IGNORECASE)
OLD_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
OLD_WORD_EDGE = re.compile(r"^[^\w]+|[^\w]+$")
OLD_EDGE_PUNCT = re.compile(r"^[\s\"'`<>\[\]{}.,;:*#-]+|[\s\"'`<>\[\]{}.,;:*-]+$")
OLD_TRAILING_DELIM = re.compile(r"(?:\s|##|\*{2,})+\Z")
OLD_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)
OLD_RECORD = re.compile(r"\(\s*[\"'`]?\s*([a-z_]+)\s*[\"'`]?\s*<\|>", re.IGNORECASE)
OLD_CLAUSE = re.compile(r",?\s+(?:and|but|while|whereas)\s+(?=(?:it|its|this|they|their|there)\b|the\s+(?:capital|"
                        r"currenc|official|population|area|demonym|country|nation|people)\w*\b)|;\s+", re.I)

PIECES = st.lists(st.sampled_from(["<think>", "</think>", "<answer>", "a", "Paris", " ", "\n", ".", "!", ",", "but",
                                   "however", "##", "**", "*", "#", "```", "json", "(", '"', "entity", "<|>", "-", "é"]),
                  max_size=14).map("".join)


@given(PIECES)
def test_linear_readers_answer_as_the_patterns_they_replaced(s):
    from factlab.text import _BUT, _SENTENCE_END, _think_before_answer

    m = OLD_FORMAT.search(s)
    assert _think_before_answer(s) == (m.group(1) if m else None)
    assert _BUT.split(s) == OLD_BUT.split(s)
    assert [x.span() for x in _SENTENCE_END.finditer(s)] == [x.span() for x in OLD_SENTENCE_END.finditer(s)]
    assert corver._WORD_EDGE.sub("", s) == OLD_WORD_EDGE.sub("", s)
    assert kg._EDGE_PUNCT.sub("", s) == OLD_EDGE_PUNCT.sub("", s)
    assert kg._without_trailing_delimiters(s) == OLD_TRAILING_DELIM.sub("", s)
    assert parsing.fenced_blocks(s) == [x.group(1).strip() for x in OLD_FENCE.finditer(s)]
    assert [x.group(1) for x in kg._RECORD.finditer(s)] == [x.group(1) for x in OLD_RECORD.finditer(s)]
    clauses = s.replace("*", " and ").replace("#", "; ").replace("json", " the capital ")  # the clause words
    assert kb._CLAUSE.split(clauses) == OLD_CLAUSE.split(clauses)
