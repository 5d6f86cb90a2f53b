"""Text kernels shared by every reward and evaluator.

Everything here follows CorVer (``000_ac66a963fabf3916.txt``):

* answer normalization and three-label string-match grading: §A.2 "String-match grading"
  and "NA (refusal) detection";
* answer extraction and the format reward with its anti-hack rules: §A.2
  "Format-correct rule and answer extraction" and "Format anti-hack constraints";
* punctuation-regex sentence splitting over both blocks and token-to-sentence
  alignment by token midpoint: §3.1, §B.1 "Token alignment".

All functions are pure.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass
from typing import Sequence

GOOD, BAD, NA = "GOOD", "BAD", "NA"

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")
# Curly apostrophes: the paper's own IDK instruction prints "I don’t know" with U+2019,
# and models copy it; the strict refusal rule must not depend on which apostrophe came out.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})
_REFUSALS = {"", "i don't know", "i do not know"}


def normalize_answer(s: str) -> str:
    """Normalize an answer string for matching (§A.2 "String-match grading").

    NFKD normalize, lowercase and strip, replace stand-alone articles (a, an, the) and
    non-word punctuation with spaces, collapse whitespace. Interpretation: after NFKD the
    combining marks are dropped, so "São Tomé" and "Sao Tome" normalize alike instead of
    the accent becoming a space inside the word.
    """
    s = unicodedata.normalize("NFKD", s or "")
    s = "".join(ch for ch in s if not unicodedata.combining(ch))
    s = s.lower().strip()
    s = _ARTICLES.sub(" ", s)
    s = _PUNCT.sub(" ", s)
    return _SPACES.sub(" ", s).strip()


def is_refusal(prediction: str | None) -> bool:
    """Strict NA rule of §A.2: lower-stripped form is empty, "i don't know" or "i do not know"."""
    if prediction is None:
        return True
    return prediction.translate(_APOSTROPHES).lower().strip() in _REFUSALS


# Long-form abstentions (FActScore leaves responses that decline out of its score and reports
# the share that responded). A sentence declines when it opens with a refusal, after an
# optional apology ("I'm sorry, but I cannot ...", "There is no information about ...");
# ", but ..." / "however ..." parts must decline too.
_REFUSE_VERBS = (r"(?:provide|answer|help|assist|say|tell|find|give|confirm|verify|determine|comment|access|share"
                 r"|recall|offer|locate|identify|be\s+sure|know)")
_DECLINE = re.compile(
    r"^(?:(?:i'?m|i\s+am)\s+sorry|sorry|unfortunately|apologies)[\s,.!]*$"
    r"|^(?:(?:i'?m|i\s+am)\s+sorry|sorry|unfortunately|apologies)?[\s,.!]*(?:but\s+)?(?:"
    r"i\s+(?:do\s+not|don'?t)\s+(?:know|have\s+(?:any\s+|enough\s+|reliable\s+)?(?:information|knowledge|data|access))"
    r"|i\s+(?:cannot|can'?t|can\s+not|am\s+(?:not\s+able|unable)\s+to|'?m\s+(?:not\s+able|unable)\s+to)"
    rf"\s+(?:\w+\s+)?{_REFUSE_VERBS}"
    r"|i\s+(?:am|'?m)\s+not\s+(?:sure|aware|certain)|i\s+have\s+no\s+(?:information|knowledge|data|record|comment)"
    r"|there\s+is\s+no\s+(?:\w+\s+)?information|no\s+(?:\w+\s+)?information)\b",
    re.IGNORECASE)
# A match never starts inside a run of whitespace (the lookbehind): tried at every position of a
# long run, ``\s+`` would rescan the rest of it each time (quadratic on model text).
_BUT = re.compile(r"(?:,|(?<!\s))\s+(?:but|however)\b,?\s*", re.IGNORECASE)


def _declines(sentence: str) -> bool:
    parts = [p.strip() for p in _BUT.split(sentence) if p.strip()]
    return bool(parts) and all(_DECLINE.match(p) for p in parts)


def is_abstention(response: str | None) -> bool:
    """A long-form response that declines to answer: empty, a strict refusal of §A.2, or
    sentences that decline with fewer than three words of anything else. A response that
    hedges and then states facts ("I am not sure. Chad is in Africa.") answered, and its
    claims are judged."""
    text = (response or "").translate(_APOSTROPHES).strip()
    if is_refusal(text):
        return True
    sentences = [text[a:b] for a, b in split_sentences(text)] or [text]
    declined = [s for s in sentences if _declines(s)]
    rest = " ".join(s for s in sentences if not _declines(s))
    return bool(declined) and len(rest.split()) < 3


def split_gold(answer: str) -> list[str]:
    """Training-time gold answers come as one semicolon-separated string (§A.2)."""
    return [a.strip() for a in answer.split(";") if a.strip()]


def grade_answer(prediction: str | None, golds: Sequence[str]) -> str:
    """Three-label string-match grade of §A.2: ``"GOOD"``, ``"BAD"`` or ``"NA"``.

    NA when the prediction is a refusal (strict rule, see ``is_refusal``) or missing.
    GOOD when the normalized prediction equals, contains, or is contained in the
    normalized form of any gold answer or alias. A prediction that normalizes to the
    empty string (e.g. only punctuation) is BAD: the empty string is a substring of
    everything and must not match.
    """
    return _grade(prediction, golds, lambda pred, g: pred == g or g in pred or pred in g)


def grade_answer_exact(prediction: str | None, golds: Sequence[str]) -> str:
    """Exact-match grade ``"GOOD"`` / ``"BAD"`` / ``"NA"``: K2V's indicator 1(y_hat = y)
    (003_5e9813e66e6ba19a.txt §3.3, Eq. 8), read as equality after ``normalize_answer``
    against the gold or any alias. NA as in ``grade_answer`` (strict refusal or missing).

    Unlike CorVer's substring rule (``grade_answer``), "T", "RPV", "TRPV1, TRPV4" and "It is
    not TRPV4" are all BAD for gold "TRPV4"."""
    return _grade(prediction, golds, lambda pred, g: pred == g)


def _grade(prediction: str | None, golds: Sequence[str] | str, matches) -> str:
    """NA for a refusal; BAD for a prediction that normalizes to nothing; else GOOD when
    ``matches(prediction, gold)`` holds for a gold or alias that normalizes to something."""
    if isinstance(golds, str):
        golds = [golds]
    if is_refusal(prediction):
        return NA
    pred = normalize_answer(prediction)
    if not pred:
        return BAD
    return GOOD if any(g and matches(pred, g) for g in map(normalize_answer, golds)) else BAD


_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|none|nothing|cannot)\b|n't\b", re.IGNORECASE)
SUSPICIOUS_MAX_CHARS = 2


def suspicious_substring_match(prediction: str | None, golds: Sequence[str]) -> bool:
    """True when ``grade_answer``'s substring rule calls ``prediction`` GOOD, it is not an exact
    match (``grade_answer_exact``), and it is at most ``SUSPICIOUS_MAX_CHARS`` normalized
    characters long or contains a negation ("It is not Paris"): the answers a policy can
    learn to game the substring rule with (issue 26; the ``substring_match`` alarm counts them)."""
    if grade_answer(prediction, golds) != GOOD or grade_answer_exact(prediction, golds) == GOOD:
        return False
    pred = normalize_answer(prediction)
    return len(pred) <= SUSPICIOUS_MAX_CHARS or bool(_NEGATION.search((prediction or "").translate(_APOSTROPHES)))


def extract_answer(completion: str) -> str | None:
    """Text after the first ``<answer>``, up to ``</answer>`` or the end, stripped (§A.2).

    ``None`` when the completion has no ``<answer>`` tag at all. The closing tag is not
    required, so truncated completions still yield an answer.
    """
    if not completion:
        return None
    start = completion.find("<answer>")
    if start < 0:
        return None
    rest = completion[start + len("<answer>"):]
    end = rest.find("</answer>")
    return (rest if end < 0 else rest[:end]).strip()


_THINK_BLOCK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_ANY_TAG = re.compile(r"</?(?:think|answer)>")


def lenient_answer(completion: str) -> tuple[str, str]:
    """``(answer, source)``: the ``<answer>`` block (source ``"tag"``), else the completion
    with its ``<think>`` block and stray tags removed (source ``"lenient"``).

    Interpretation of §4's "lenient regex parsing" (evaluation); ``extract_answer`` is the
    strict §A.2 rule."""
    tagged = extract_answer(completion)
    if tagged is not None:
        return tagged, "tag"
    rest = _ANY_TAG.sub(" ", _THINK_BLOCK.sub(" ", completion or "")).strip()
    return rest, "lenient"


MIN_THINK_CHARS = 30


def _think_before_answer(completion: str) -> str | None:
    """The content of the first ``<think>...</think>`` that an ``<answer>`` follows, else
    ``None``: what ``<think>(.*?)</think>.*?<answer>`` finds, by three ``str.find`` calls (that
    regex is cubic on repeated ``<think>a</think>``). The first ``<think>`` and the first
    ``</think>`` after it are the regex's own choice whenever it matches at all."""
    start = completion.find("<think>")
    if start < 0:
        return None
    end = completion.find("</think>", start + len("<think>"))
    if end < 0 or completion.find("<answer>", end + len("</think>")) < 0:
        return None
    return completion[start + len("<think>"):end]


def format_violation(completion: str) -> str | None:
    """Why a completion fails the format rule of §A.2, or ``None`` when it passes.

    The rule: contains ``<think>...</think>...<answer>`` (closing ``</answer>`` not
    required) and the think content (i) has at least 30 characters, (ii) has an
    alphabetic character, (iii) does not start with ``<`` at its first non-whitespace
    character. Interpretation: (i) counts characters after stripping surrounding
    whitespace, so whitespace padding cannot buy the length.
    """
    think = _think_before_answer(completion or "")
    if think is None:
        return "missing <think>...</think>...<answer>"
    think = think.strip()
    if len(think) < MIN_THINK_CHARS:
        return f"think shorter than {MIN_THINK_CHARS} characters"
    if not any(ch.isalpha() for ch in think):
        return "think has no alphabetic character"
    if think.startswith("<"):
        return "think starts with '<'"
    return None


def format_reward(completion: str, positive: float = 1.0, negative: float = -1.0) -> float:
    """Format reward R^f of §3.3 / §A.2: ``+1.0`` when format-correct, else ``-1.0``."""
    return positive if format_violation(completion) is None else negative


_TAGS = re.compile(r"</?(?:think|answer)>")
# A sentence ends at . ! or ? followed by whitespace or the end of the segment, so
# decimals ("3.5") and inner dots stay inside one sentence.
# (the lookbehind: a match starts at the first mark of a run, so a long run of dots not followed
# by whitespace is scanned once, not once per position)
_SENTENCE_END = re.compile(r"(?<![.!?])[.!?]+(?=\s|$)")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the sentences of a completion (§3.1, §B.1).

    Both the ``<think>`` and ``<answer>`` blocks are parsed jointly: the tags are
    boundaries and never part of a sentence, then each tag-free segment is split on
    ``. ! ?`` boundaries. Spans index into the original ``text`` (tags kept in place),
    so tokenizer offsets of the same string can be aligned to them; surrounding
    whitespace is excluded from every span.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    segments = []
    for m in _TAGS.finditer(text):
        segments.append((pos, m.start()))
        pos = m.end()
    segments.append((pos, len(text)))
    for seg_start, seg_end in segments:
        segment = text[seg_start:seg_end]
        cut = 0
        bounds = [m.end() for m in _SENTENCE_END.finditer(segment)] + [len(segment)]
        for b in bounds:
            piece = segment[cut:b]
            stripped = piece.strip()
            if stripped:
                lead = len(piece) - len(piece.lstrip())
                start = seg_start + cut + lead
                spans.append((start, start + len(stripped)))
            cut = b
    return spans


@dataclass
class Alignment:
    """Token-to-sentence alignment sigma of §3.1: ``sentence_ids[t]`` is 1-based, 0 = none."""

    sentence_ids: list[int]
    rate: float  # share of content tokens (not whitespace, not tag) inside some sentence


def align_tokens_to_sentences(
    text: str,
    token_offsets: Sequence[tuple[int, int]],
    spans: Sequence[tuple[int, int]] | None = None,
) -> Alignment:
    """Assign each token to the sentence whose span contains its midpoint (§B.1).

    ``token_offsets`` are character offsets of each token in ``text`` (from a fast
    tokenizer's ``offset_mapping`` or ``token_char_offsets``). Tag positions and
    inter-sentence whitespace get 0. The alignment rate is the share of *content* tokens
    (tokens whose text is neither whitespace nor part of a tag) that landed in a
    sentence; it is 0.0 when there are no content tokens, so an empty completion falls
    back to the response-level return (§B.1: fallback when the rate is below 0.5).
    """
    if spans is None:
        spans = split_sentences(text)
    tag_chars = bytearray(len(text))
    for m in _TAGS.finditer(text):
        tag_chars[m.start():m.end()] = b"\x01" * (m.end() - m.start())
    ids: list[int] = []
    content = aligned = 0
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    starts = [spans[i][0] for i in order]
    for start, end in token_offsets:
        sid = 0
        if end > start:
            mid = (start + end) / 2.0
            k = bisect.bisect_right(starts, mid) - 1
            if k >= 0 and mid < spans[order[k]][1]:
                sid = order[k] + 1
            piece = text[start:end]
            is_tag = all(tag_chars[k] for k in range(start, min(end, len(text))))
            if piece.strip() and not is_tag:
                content += 1
                aligned += sid > 0
        ids.append(sid)
    return Alignment(ids, aligned / content if content else 0.0)


def token_char_offsets(tokenizer, token_ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decode generated ``token_ids`` and return ``(text, offsets)`` for each token.

    Offsets come from incremental decoding (the text of the first k tokens), so they are
    exact for the very string the rewards read, even when re-tokenizing that string would
    give different tokens. Tokens that only complete a multi-byte character get an empty
    span and the character goes to the token that completes it.
    """
    ids = list(token_ids)
    text = tokenizer.decode(ids, skip_special_tokens=False)
    offsets: list[tuple[int, int]] = []
    prev = 0
    for k in range(1, len(ids) + 1):
        prefix = tokenizer.decode(ids[:k], skip_special_tokens=False)
        # an incomplete UTF-8 sequence decodes to U+FFFD until the next token completes it
        cur = len(prefix.rstrip("\ufffd")) if k < len(ids) else len(text)
        cur = max(prev, min(cur, len(text)))
        offsets.append((prev, cur))
        prev = cur
    return text, offsets


def sentence_claims(text: str, min_words: int = 4) -> list[str]:
    """Claims without a judge (KLCF Stage 2 ``extract: sentences`` and ``klcf_truth``'s
    ``claim_extraction: sentences``, ours): each complete sentence of the
    sample with at least ``min_words`` words is one claim; a cut-off last sentence (no final
    punctuation) is dropped."""
    out = []
    for a, b in split_sentences(text):
        sent = text[a:b].strip()
        if len(sent.split()) >= min_words and sent[-1:] in ".!?":
            out.append(sent)
    return list(dict.fromkeys(out))


# Function words left out of ``content_words``: articles, copulas, prepositions, conjunctions,
# pronouns.
_FUNCTION_WORDS = frozenset(
    "a an the is are was were be been being of in on at to for from by with and or but as its it "
    "this that these those has have had also which who whom whose there their they he she his her".split())
_WORD = re.compile(r"[\w'-]+")


def content_words(text: str) -> set[str]:
    """Lower-cased words of ``text`` without function words (``overlap_label``'s vocabulary)."""
    return {w for w in _WORD.findall(text.lower().translate(_APOSTROPHES)) if w not in _FUNCTION_WORDS}
