"""The mini-world as a knowledge base: the exact truth of an answer or a sentence.

Every paper in ``../shared/papers/`` measures factuality with an LLM judge or a human sample.
In the mini-world the truth of every fact about every country is known (``miniworld``'s
``CountryFacts``), so it can be looked up instead: this module is that lookup, independent
of every reward and judge. ``factlab.eval.truth`` is its public face and measures it.

- ``label_answer(answer, golds)``: ``correct`` / ``wrong`` / ``abstain``. Exact match after the
  papers' answer normalization (``text.normalize_answer``) against the gold and its aliases, not
  a substring match ("T" is not "TRPV4", "It is not Paris" is not "Paris"); a refusal (§A.2's
  strict rule of 000) or a missing answer abstains.
- ``label_sentences(text, world)``: one row per sentence (``text.split_sentences``) with the
  country it is about, the relation, the stated value and a label: ``supported`` (the stated
  value is the world's), ``contradicted`` (it is not) or ``unverifiable`` (no world country, no
  relation the world holds, or no value that can be checked). Relations: capital, location
  (region or subregion, either counts), borders, currency, official language, demonym,
  population and area (numbers within ``NUMBER_TOLERANCE``). A list relation (borders,
  languages, currencies) is supported only when every stated value is in the world's list.

How a sentence is read (rules, no model): the first relation cue in the sentence names the
relation (``capital``, ``border``, ``currency``, ...); world country names and aliases are
found on word boundaries, longest first; the values are the relation's vocabulary (every
country's capitals, currencies, ...) found in the sentence, or, for a capital or a currency
stated as "... is <Proper Noun>", the phrase itself. The rules are measured, not assumed:
``factlab.eval.truth.measure_oracle`` reports precision and recall per label on constructed
true and perturbed sentences and on hand-labelled sentences the embedded model wrote.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Iterable, Literal, Sequence

from .. import text as T
from .miniworld import CountryFacts, load_countries

__all__ = ["CORRECT", "WRONG", "ABSTAIN", "SUPPORTED", "CONTRADICTED", "UNVERIFIABLE", "SENTENCE_LABELS",
           "NUMBER_TOLERANCE", "KnowledgeBase", "knowledge_base", "label_answer", "label_sentences",
           "label_sentence", "label_response", "parse_number", "asked_country", "off_topic"]

CORRECT, WRONG, ABSTAIN = "correct", "wrong", "abstain"
SUPPORTED, CONTRADICTED, UNVERIFIABLE = "supported", "contradicted", "unverifiable"
SENTENCE_LABELS = (SUPPORTED, CONTRADICTED, UNVERIFIABLE)
NUMBER_TOLERANCE = 0.10  # a population or area within 10% of the world's is the world's

AnswerLabel = Literal["correct", "wrong", "abstain"]


def label_answer(answer: str | None, golds: Sequence[str]) -> AnswerLabel:
    """``correct`` / ``wrong`` / ``abstain`` for a short answer against its golds: exact match
    after normalization (``text.grade_answer_exact``), never a substring match."""
    grade = T.grade_answer_exact(answer, golds)
    return {T.GOOD: CORRECT, T.BAD: WRONG, T.NA: ABSTAIN}[grade]


# ---------------------------------------------------------------- normalization and lookup


def _norm(s: str) -> str:
    """Lower-cased, accents and punctuation dropped (hyphens and apostrophes become spaces),
    articles kept: the form names and sentences are matched in."""
    s = s or ""
    if not s.isascii():  # ASCII has no accents to drop (NFKD leaves it as it is)
        s = "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch))
    s = s.lower()
    s = re.sub(r"[^\w\s]", " ", s)
    return re.sub(r"\s+", " ", s).strip()


def _find(haystack: str, phrases: dict[str, str]) -> list[tuple[int, int, str]]:
    """Non-overlapping (start, end, value) of every phrase of ``phrases`` (normalized form ->
    value) in the normalized ``haystack``, on word boundaries, longest phrases first (equal
    lengths in the dict's order, each phrase's occurrences left to right).

    A match on word boundaries is a run of the space-separated words, so the runs are looked
    up in the dict (a few per word) instead of every phrase searched for in the text: the
    same matches at a tenth of the cost (``bench/bench_kb_find.py``)."""
    if not phrases:
        return []
    longest = max(map(len, phrases))
    padded = f" {haystack} "
    words = padded.split(" ")  # words[0] and words[-1] are the padding's empty ends
    starts, at = [], 0
    for w in words:
        starts.append(at)
        at += len(w) + 1
    found = []  # (phrase, start in padded, end in padded)
    for i in range(1, len(words) - 1):
        a = starts[i]
        for j in range(i, len(words) - 1):
            b = starts[j] + len(words[j])
            if b - a > longest:
                break
            if b > a and padded[a:b] in phrases:
                found.append((padded[a:b], a, b))
    if not found:
        return []
    distinct = {f[0] for f in found}
    rank = {}
    if len({len(p) for p in distinct}) < len(distinct):  # equal lengths: the dict's order breaks the tie
        rank = {p: i for i, p in enumerate(phrases) if p in distinct}
    taken = bytearray(len(padded))
    out = []
    for phrase, a, b in sorted(found, key=lambda f: (f[1] - f[2], rank.get(f[0], 0), f[1])):
        if not any(taken[a:b]):
            taken[a:b] = b"\x01" * (b - a)
            out.append((a - 1, b - 1, phrases[phrase]))
    return sorted(out)


_REGION_SYNONYMS = {  # how a writer names a region that countryinfo spells otherwise
    "america": "Americas", "the americas": "Americas", "north america": "Northern America",
    "south america": "Latin America and the Caribbean", "central america": "Latin America and the Caribbean",
    "latin america": "Latin America and the Caribbean", "the caribbean": "Latin America and the Caribbean",
    "caribbean": "Latin America and the Caribbean", "southeast asia": "South-eastern Asia",
    "south east asia": "South-eastern Asia", "middle east": "Western Asia", "the middle east": "Western Asia",
    "east asia": "Eastern Asia", "south asia": "Southern Asia", "west asia": "Western Asia",
    "north africa": "Northern Africa", "west africa": "Sub-Saharan Africa", "east africa": "Sub-Saharan Africa",
    "southern africa": "Sub-Saharan Africa", "central africa": "Sub-Saharan Africa",
    "western africa": "Sub-Saharan Africa", "eastern africa": "Sub-Saharan Africa",
    "middle africa": "Sub-Saharan Africa", "west europe": "Western Europe", "east europe": "Eastern Europe",
    "north europe": "Northern Europe", "south europe": "Southern Europe", "scandinavia": "Northern Europe",
    "australasia": "Australia and New Zealand",
    # adjectives: "a European country", "the North African state of Egypt"
    "european": "Europe", "african": "Africa", "asian": "Asia", "american": "Americas", "oceanian": "Oceania",
    "north african": "Northern Africa", "middle eastern": "Western Asia", "caribbean": "Latin America and the Caribbean",
    "latin american": "Latin America and the Caribbean", "south american": "Latin America and the Caribbean",
    "central american": "Latin America and the Caribbean", "north american": "Northern America",
    "southeast asian": "South-eastern Asia", "east asian": "Eastern Asia", "south asian": "Southern Asia",
    "central asian": "Central Asia", "west african": "Sub-Saharan Africa", "east african": "Sub-Saharan Africa",
    "southern african": "Sub-Saharan Africa", "central african": "Sub-Saharan Africa",
    "scandinavian": "Northern Europe", "eastern european": "Eastern Europe", "western european": "Western Europe",
    "southern european": "Southern Europe", "northern european": "Northern Europe",
}
# aliases countryinfo lists that are ordinary words, a demonym or a language in running text
_NOT_NAMES = {"island", "mann", "maurice", "thai", "togolese", "montenegrin"}
# a name that follows one of these is a place of another kind: "the Gulf of Guinea", "South Georgia" handled by the
# longer name
# "a European country", "an African nation": a region word naming what the country is
_PLACE_NOUN = re.compile(r"\b(?:european|african|asian|american|caribbean|oceanian|middle eastern|scandinavian)\s+"
                         r"(?:\w+\s+)?(?:country|nation|state|island|archipelago|territory|kingdom|republic)\b", re.I)
_WATER = re.compile(r"\b(?:gulf|bay|sea|strait|straits|channel|bight|ocean) of (?:the )?$")
# countries of the "Latin America and the Caribbean" subregion a writer may place in North America
_NORTH_AMERICAN = {"Mexico", "Guatemala", "Belize", "Honduras", "El Salvador", "Nicaragua", "Costa Rica", "Panama",
                   "Cuba", "Jamaica", "Haiti", "Dominican Republic", "Bahamas", "Puerto Rico"}


@dataclass
class KnowledgeBase:
    """The world's facts indexed for lookup: countries by every name and alias, and each
    relation's vocabulary (value -> the countries it is true of)."""

    countries: list[CountryFacts]
    names: dict[str, str] = field(default_factory=dict)  # normalized name or alias -> canonical name
    by_name: dict[str, CountryFacts] = field(default_factory=dict)
    capitals: dict[str, str] = field(default_factory=dict)  # normalized capital -> capital as written
    regions: dict[str, str] = field(default_factory=dict)  # normalized region / subregion / synonym -> canonical
    currencies: dict[str, str] = field(default_factory=dict)  # normalized currency name or code -> name
    languages: dict[str, str] = field(default_factory=dict)
    demonyms: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, countries: Iterable[CountryFacts]) -> "KnowledgeBase":
        kb = cls(list(countries))
        for c in kb.countries:
            kb.by_name[c.name] = c
            for n in (c.name, *c.aliases):
                if _norm(n) not in _NOT_NAMES:
                    kb.names.setdefault(_norm(n), c.name)
            for cap in _capital_forms(c.capital):
                kb.capitals.setdefault(_norm(cap), c.capital)
            for r in (c.region, c.subregion):
                if r:
                    kb.regions[_norm(r)] = r
            for name, code in zip(c.currencies, c.currency_codes):
                kb.currencies[_norm(name)] = name
                kb.currencies[_norm(code)] = name
            for lang in c.languages:
                kb.languages[_norm(lang)] = lang
            for d in (c.demonym or "").split(","):
                if d.strip():
                    kb.demonyms[_norm(d)] = d.strip()
        for k, v in _REGION_SYNONYMS.items():
            kb.regions.setdefault(k, v)
        return kb

    def country(self, name: str) -> CountryFacts:
        return self.by_name[self.names.get(_norm(name), name)]

    def location_ok(self, c: CountryFacts, place: str) -> bool:
        """``place`` (a canonical region or subregion) contains ``c``."""
        if place in (c.region, c.subregion):
            return True
        if place == "Northern America":  # "North America" as a writer uses it
            return c.subregion == "Northern America" or c.name in _NORTH_AMERICAN
        return False


def _capital_forms(capital: str | None) -> list[str]:
    if not capital:
        return []
    forms = [capital, re.sub(r"\s*\(.*?\)\s*", " ", capital).strip()]
    forms += [p.strip() for p in capital.split(",") if p.strip()]  # "Washington, D.C." -> "Washington"
    return [f for f in dict.fromkeys(forms) if len(_norm(f)) > 1]


@functools.lru_cache(maxsize=4)
def _default_kb() -> KnowledgeBase:
    return KnowledgeBase.build(load_countries())


def knowledge_base(world: KnowledgeBase | Sequence[CountryFacts] | None = None) -> KnowledgeBase:
    """The knowledge base of ``world`` (a ``KnowledgeBase``, a list of ``CountryFacts``), or of
    the default mini-world (``miniworld.load_countries()``), built once."""
    if world is None:
        return _default_kb()
    if isinstance(world, KnowledgeBase):
        return world
    return KnowledgeBase.build(world)


# ---------------------------------------------------------------- numbers

_NUMBER = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*(million|billion|thousand|mn|bn|m\b|k\b)?", re.IGNORECASE)
_SCALE = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9}


def parse_number(s: str) -> float | None:
    """The first number in ``s`` with its scale word ("67 million" -> 67e6, "66,078,000" ->
    66078000.0), or None."""
    m = _NUMBER.search(s or "")
    if m is None:
        return None
    digits = m.group(1).replace(",", "")
    try:
        value = float(digits)
    except ValueError:
        return None
    scale = (m.group(2) or "").lower()
    return value * _SCALE.get(scale, 1.0)


def _close(stated: float, true: float) -> bool:
    return true > 0 and abs(stated - true) <= NUMBER_TOLERANCE * true


# ---------------------------------------------------------------- sentences

# relation cues, in the order a sentence is read; the first cue found names the relation
_CUES: list[tuple[str, re.Pattern]] = [
    ("demonym", re.compile(r"\bdemonyms?\b|\bpeople (?:from|of) .{1,40}? (?:are|is) (?:called|known as)\b", re.I)),
    ("capital", re.compile(r"\bcapital\b", re.I)),
    ("currency", re.compile(r"\bcurrenc(?:y|ies)\b|\bmoney\b|\blegal tender\b", re.I)),
    ("language", re.compile(r"\blanguages?\b|\bspoken\b|\bspeaks?\b|\bspeaking\b|\bofficial status\b", re.I)),
    ("borders", re.compile(r"\bborder(?:s|ed|ing)?\b|\bneighbou?r(?:s|ing)?\b|\bshares? (?:a )?(?:land )?border", re.I)),
    ("population", re.compile(r"\bpopulation\b|\binhabitants\b|\bresidents\b|\bpeople live\b", re.I)),
    ("area", re.compile(r"\bsquare (?:kilomet|km|mile)|\bkm2\b|\bkm²|\bsq\.? ?(?:km|mi)\b|\barea of\b|\bcovers\b", re.I)),
    ("location", re.compile(r"\blocated\b|\bsituated\b|\bnestled\b|\bcrossroads\b|\blies\b|\blying\b|\bcontinent\b"
                            r"|\bregion\b|\bpart of\b"
                            r"|\bis (?:a|an) (?:\w+ )?(?:country|nation|island|state) in\b|\bis in\b|\bin the\b", re.I)),
]
_IS_PROPER = re.compile(r"\b(?:is|was|are|remains|called|named)\s+(?:the\s+)?(?:city\s+of\s+)?"
                        r"([A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|de|del|da|do|of|and|el|al|es))*)")
_CURRENCY_HEADS = {"dollar", "euro", "pound", "franc", "peso", "rupee", "yen", "yuan", "renminbi", "dinar", "dirham",
                   "riyal", "rial", "krona", "krone", "lira", "shilling", "real", "rand", "ruble", "rouble", "won",
                   "lev", "leu", "lek", "kuna", "forint", "zloty", "koruna", "baht", "ringgit", "rupiah", "dong",
                   "kip", "taka", "naira", "cedi", "kwacha", "birr", "afghani", "manat", "som", "tenge", "lari",
                   "dram", "hryvnia", "tugrik", "kyat", "riel", "sol", "boliviano", "guarani", "colon", "quetzal",
                   "lempira", "cordoba", "balboa", "gourde", "dalasi", "leone", "ariary", "kwanza", "metical",
                   "pula", "loti", "lilangeni", "nakfa", "ouguiya", "dobra", "escudo", "florin", "guilder",
                   "pa anga", "tala", "vatu", "kina", "rufiyaa", "ngultrum", "sheqel", "shekel", "denar", "mark"}


def _relation_of(sentence: str) -> str | None:
    for rel, cue in _CUES:
        if cue.search(sentence):
            return rel
    return None


def _row(sentence: str, country: str | None, relation: str | None, value: str | None, label: str) -> dict:
    return {"sentence": sentence, "country": country, "relation": relation, "value": value, "label": label}


_PRONOUN = re.compile(r"\s*(?:it|its|they|their|(?:the|this) (?:country|nation|island|state|territory|archipelago))\b",
                      re.I)
# a clause break starts a whitespace run, or a comma before one (the look-behind): tried from every
# space of a long run, the pattern would rescan the run each time (quadratic: 109 s for 100 KB of spaces)
_CLAUSE = re.compile(r"(?:,|(?<!\s))\s+(?:and|but|while|whereas)\s+(?=(?:it|its|this|they|their|there)\b|the\s+"
                     r"(?:capital|currenc|official|population|area|demonym|country|nation|people)\w*\b)|;\s+", re.I)
_NEGATION = re.compile(r"\bnot\b|n't\b|\bnever\b|\boutside\b|\bno (?:official|land|border|status)\b"
                       r"|\bshares? no\b|\bneither\b|\bnor\b", re.I)
_ONLY = re.compile(r"\b(?:only|sole|single|exclusive)\b", re.I)
# a superlative about the country itself: "the most populous country", "the largest area of any country"
_SUPERLATIVE = re.compile(r"\b(largest|biggest|smallest|most populous|least populous)\b(?=[\w\s]{0,25}?\b(?:countr|"
                          r"nation|population|area|by area|by population))|\b(most populous|least populous)\b", re.I)


def label_sentence(sentence: str, world: KnowledgeBase | Sequence[CountryFacts] | None = None,
                   context: str | None = None) -> dict:
    """One sentence's row (``label_sentences``). ``context`` (the question a short answer
    answers) lends its country and relation to a sentence that names none ("It is Paris." after
    "What is the capital of France?"). The stated fact is read positively, then:
    a negation ("is not", "does not border", "lies outside") flips supported and
    contradicted; "the only ..." of a list relation the world lists several values for is
    contradicted; a superlative ("the most populous country", "the largest area of any
    country in <place>") is checked against every country of the place named."""
    kb = knowledge_base(world)
    clauses = [c for c in _CLAUSE.split(sentence) if c.strip()]
    if len(clauses) > 1:  # "..., and it borders Japan": each clause is a statement of its own
        rows = [label_sentence(c, kb, context if i == 0 else f"{clauses[0]} {context or ''}")
                for i, c in enumerate(clauses)]
        pick = (next((r for r in rows if r["label"] == CONTRADICTED), None)
                or next((r for r in rows if r["label"] == SUPPORTED), rows[0]))
        return {**pick, "sentence": sentence}
    lent = _in_context(sentence, context, kb) if context and _PRONOUN.match(sentence) else None
    row = lent or _positive(sentence, kb)  # "It is bordered by Kenya, ...": "it" is the context's country
    if row["label"] == UNVERIFIABLE and context and lent is None:
        row = _in_context(sentence, context, kb) or row
    if row["label"] == UNVERIFIABLE:
        return row
    if _NEGATION.search(sentence):
        row["label"] = CONTRADICTED if row["label"] == SUPPORTED else SUPPORTED
        return row
    if row["label"] == SUPPORTED and row["country"]:
        c = kb.by_name[row["country"]]
        many = {"borders": c.borders, "language": c.languages, "currency": c.currencies}.get(row["relation"])
        if many is not None and len(many) > 1 and _ONLY.search(sentence):
            row["label"] = CONTRADICTED
        elif _SUPERLATIVE.search(sentence) and _superlative_false(sentence, kb, c):
            row["label"] = CONTRADICTED
    return row


def _superlative_false(sentence: str, kb: KnowledgeBase, c: CountryFacts) -> bool:
    """A superlative about ``c`` that the world's numbers refute, within the first region or
    subregion the sentence names (the world without one)."""
    m = _SUPERLATIVE.search(sentence)
    word = (m.group(1) or m.group(2)).lower()
    by_population = "populous" in word or "population" in sentence.lower()
    metric = (lambda x: x.population) if by_population else (lambda x: x.area)
    places = _find(_norm(sentence), kb.regions)
    pool = [x for x in kb.countries if metric(x) and (not places or kb.location_ok(x, places[-1][2]))]
    if not metric(c) or not pool:
        return False
    best = (min if word.startswith(("smallest", "least")) else max)(pool, key=metric)
    return metric(best) != metric(c)


def _in_context(sentence: str, context: str, kb: KnowledgeBase) -> dict | None:
    """The sentence read as the continuation of ``context`` (the row keeps the sentence's own
    text). A sentence that opens with a pronoun ("It borders Japan.", "Its capital is Paris.",
    "The country is ...") is about the context's country: the pronoun is replaced by its name.
    A short answer to a question ("Paris." after "What is the capital of France?") takes the
    question's country and relation; only a question (ending in "?") lends a relation: a
    long-form prompt that lists topics does not."""
    lent = _countries(_norm(context), kb)
    pronoun = _PRONOUN.match(sentence)
    if pronoun is not None and lent:
        name = lent[0][2]
        word = pronoun.group(0).strip().lower()
        swapped = f"{name}'s" if word in ("its", "their") else name
        row = _positive(swapped + sentence[pronoun.end():], kb)
        if row["label"] != UNVERIFIABLE:
            row["sentence"] = sentence
            return row
    if not context.rstrip().endswith("?"):
        return None
    own = _countries(_norm(sentence), kb)
    country = own or lent
    relation = _relation_of(sentence) or _relation_of(context)
    if not country or relation is None:
        return None
    subject = country[0][2]
    # restate it so the positive reader finds both: "<subject> <cue sentence>: <sentence>"
    cue = {"capital": f"The capital of {subject} is", "currency": f"The currency of {subject} is",
           "language": f"The official language of {subject} is", "borders": f"{subject} borders",
           "demonym": f"The demonym for people from {subject} is", "population": f"The population of {subject} is",
           "area": f"The area of {subject} is", "location": f"{subject} is located in"}[relation]
    row = _positive(f"{cue} {sentence}", kb)
    row["sentence"] = sentence
    return row if row["country"] == subject else None


_VOCABULARY = {"capital": "capitals", "currency": "currencies", "language": "languages", "demonym": "demonyms",
               "location": "regions"}


def _countries(norm: str, kb: KnowledgeBase) -> list[tuple[int, int, str]]:
    """Country mentions in a normalized sentence, except a name that names a sea ("the Gulf of
    Guinea")."""
    return [m for m in _find(norm, kb.names) if not _WATER.search(norm[:m[0]])]


def _inside(span: tuple, spans: Sequence[tuple]) -> bool:
    return any(a <= span[0] and span[1] <= b for a, b, *_ in spans)


def _positive(sentence: str, kb: KnowledgeBase) -> dict:
    """The row for the sentence's fact read without negation, exclusivity or superlatives.

    The relation's values are its vocabulary found in the sentence; a country name inside a
    value is not the subject ("US" in "the US Dollar"), and a value inside the subject's name is
    not a value ("French" in "French Polynesia", "Polynesia" in it too)."""
    norm = _norm(sentence)
    relation = _relation_of(sentence)
    mentions = _countries(norm, kb)
    if relation is None and mentions and _PLACE_NOUN.search(sentence) and _find(norm, kb.regions):
        relation = "location"  # "a European country", "a Caribbean nation": the place is the cue
    if relation is None or not mentions:
        return _row(sentence, mentions[0][2] if mentions else None, relation, None, UNVERIFIABLE)
    values = _find(norm, getattr(kb, _VOCABULARY[relation])) if relation in _VOCABULARY else []
    free = [m for m in mentions if not _inside(m, values)] or mentions
    if relation == "capital":
        return _capital(sentence, norm, kb, free, values)
    subject = kb.by_name[free[0][2]]
    values = [v for v in values if not _inside(v, free[:1])]
    if relation == "borders":
        # a country named again in its own list of neighbours does not border itself
        others = list(dict.fromkeys(m[2] for m in free[1:]))
        if not others:
            return _row(sentence, subject.name, relation, None, UNVERIFIABLE)
        wrong = [o for o in others if o not in subject.borders]
        return _row(sentence, subject.name, relation, ", ".join(others), CONTRADICTED if wrong else SUPPORTED)
    if relation == "location":
        return _location(sentence, norm, kb, subject, free, values)
    if relation in ("currency", "language", "demonym"):
        return _vocabulary(sentence, norm, subject, relation, [v[2] for v in values])
    # population, area
    number = _stated_number(sentence, subject.name, relation)
    true = subject.population if relation == "population" else subject.area
    if number is None or not true:
        return _row(sentence, subject.name, relation, None, UNVERIFIABLE)
    if relation == "area" and re.search(r"square miles|sq\.? ?mi\b", sentence, re.I):
        number *= 2.589988
    return _row(sentence, subject.name, relation, f"{number:,.0f}", SUPPORTED if _close(number, true) else CONTRADICTED)


def _stated_number(sentence: str, country: str, relation: str) -> float | None:
    """The first number after the relation's cue ("population of about 66 million": not "home
    to 100 islands ... a diverse population") and after the country is named; a bare year such
    as "In 2020" is not the figure (a four-digit number from 1000 to 2100 without separators or
    a scale word)."""
    cue = dict(_CUES)[relation].search(sentence)
    m = re.search(re.escape(country), sentence, re.I)
    start = max(cue.start() if cue is not None else 0, m.end() if m is not None else 0)
    rest = sentence[start:]
    for m in _NUMBER.finditer(rest):
        value = parse_number(m.group(0))
        if value is not None and not (m.group(2) is None and 1000 <= value <= 2100 and "," not in m.group(1)):
            return value
    return None


def _capital(sentence: str, norm: str, kb: KnowledgeBase, mentions, capitals) -> dict:
    """Capital sentences: the country is the one named after "capital of" / before "'s
    capital", else the first country named; the value is a world capital named in the sentence
    (not the subject's own name), else the proper noun after "is"."""
    subject, at = None, None
    m = re.search(r"capital (?:city )?of (?:the )?", norm)
    if m is not None:
        after = [x for x in mentions if x[0] == m.end()]
        if after:
            subject, at = after[0][2], after[0]
    if subject is None:
        m = re.search(r" s capital", norm)
        before = [x for x in mentions if m is not None and x[1] == m.start()]
        subject, at = (before[0][2], before[0]) if before else (mentions[0][2], mentions[0])
    c = kb.by_name[subject]
    truth = {_norm(f) for f in _capital_forms(c.capital)}
    stated = [v for v in capitals if not _inside(v, [at])]
    if truth and any(_norm(v[2]) in truth for v in stated):
        return _row(sentence, subject, "capital", c.capital, SUPPORTED)
    if stated:
        return _row(sentence, subject, "capital", stated[0][2], CONTRADICTED if c.capital else UNVERIFIABLE)
    proper = _IS_PROPER.search(sentence)
    if proper is not None and c.capital:
        value = proper.group(1).strip(" .")
        if _norm(value) in truth or any(_norm(value).startswith(t + " ") for t in truth):
            return _row(sentence, subject, "capital", value, SUPPORTED)
        if kb.names.get(_norm(value)) != subject:
            return _row(sentence, subject, "capital", value, CONTRADICTED)
    return _row(sentence, subject, "capital", None, UNVERIFIABLE)


def _location(sentence: str, norm: str, kb: KnowledgeBase, subject: CountryFacts, mentions, places) -> dict:
    if places:
        names = list(dict.fromkeys(p[2] for p in places))
        ok = [kb.location_ok(subject, p) for p in names]
        return _row(sentence, subject.name, "location", ", ".join(names), SUPPORTED if all(ok) else CONTRADICTED)
    # "<capital> is located in <country>": the capital relation, read from the city's side
    caps = [x for x in _find(norm, kb.capitals) if not _inside(x, mentions)]
    countries = [m for m in mentions if not caps or (m[0], m[1]) != (caps[0][0], caps[0][1])]
    if caps and countries:
        city, c = caps[0][2], kb.by_name[countries[-1][2]]
        if c.capital == city:
            return _row(sentence, c.name, "capital", city, SUPPORTED)
        if any(x.capital == city for x in kb.countries):
            return _row(sentence, c.name, "capital", city, CONTRADICTED)
    return _row(sentence, subject.name, "location", None, UNVERIFIABLE)


def _vocabulary(sentence: str, norm: str, subject: CountryFacts, relation: str, stated: list[str]) -> dict:
    """Currency, language, demonym: every stated value of the relation's vocabulary must be
    the country's; a currency may also be stated by its head noun ("the dollar")."""
    if relation == "language":
        truth = set(subject.languages)
    elif relation == "demonym":
        truth = {d.strip() for d in (subject.demonym or "").split(",") if d.strip()}
    else:
        truth = set(subject.currencies)
    if relation == "currency" and not stated:
        return _currency_phrase(sentence, norm, subject)
    if not stated or not truth:
        return _row(sentence, subject.name, relation, None, UNVERIFIABLE)
    stated = list(dict.fromkeys(stated))
    wrong = [v for v in stated if v not in truth]
    return _row(sentence, subject.name, relation, ", ".join(stated), CONTRADICTED if wrong else SUPPORTED)


def _currency_phrase(sentence: str, norm: str, subject: CountryFacts) -> dict:
    """A currency named by its head noun and qualifiers ("the Canadian dollar", "the US
    dollar"): supported when a world currency of the country has that head and every qualifier
    word, contradicted when the head is a currency word the country's currencies lack or a
    qualifier disagrees."""
    words = norm.split()
    heads = [i for i, w in enumerate(words) if w in _CURRENCY_HEADS or (w.endswith("s") and w[:-1] in _CURRENCY_HEADS)]
    if not heads or not subject.currencies:
        return _row(sentence, subject.name, "currency", None, UNVERIFIABLE)
    i = heads[0]
    head = words[i][:-1] if words[i] not in _CURRENCY_HEADS else words[i]
    qualifier = words[i - 1] if i > 0 and words[i - 1] not in ("the", "a", "its", "their", "official", "local") else None
    phrase = " ".join(w for w in (qualifier, head) if w)
    for cur in subject.currencies:
        cw = _norm(cur).split()
        if head in cw or (head + "s") in cw:
            if qualifier is None or qualifier in cw or _same_country_word(qualifier, subject, cw):
                return _row(sentence, subject.name, "currency", phrase, SUPPORTED)
    return _row(sentence, subject.name, "currency", phrase, CONTRADICTED)


def _same_country_word(qualifier: str, subject: CountryFacts, currency_words: list[str]) -> bool:
    """"Barbadian Dollar" for the world's "Barbados Dollar": the qualifier and a word of the
    currency's name are both the country's (its name or its demonym). "Kiribati Dollar" for
    Kiribati's "Australian Dollar" is not: the currency's name holds no word of Kiribati's."""
    own = {_norm(d) for d in (subject.demonym or "").split(",") if d.strip()} | set(_norm(subject.name).split())
    return qualifier in own and any(w in own for w in currency_words)


def label_sentences(text: str, world: KnowledgeBase | Sequence[CountryFacts] | None = None,
                    context: str | None = None) -> list[dict]:
    """One row per sentence of ``text`` (``text.split_sentences``: both the ``<think>`` and
    ``<answer>`` blocks): ``sentence``, ``country``, ``relation``, ``value``, ``label``
    (``supported`` / ``contradicted`` / ``unverifiable``), checked against the world's facts
    (the default mini-world, or ``world``); ``context`` as in ``label_sentence``. Without one,
    a sentence that opens with a pronoun ("Its capital is Paris.") takes the last sentence that
    named a country as its context."""
    kb = knowledge_base(world)
    rows, previous = [], None
    for a, b in T.split_sentences(text or ""):
        sentence = text[a:b]
        # "Its capital is Paris." continues the sentence before it
        lent = context if context is not None or not _PRONOUN.match(sentence) else previous
        rows.append(label_sentence(sentence, kb, lent))
        previous = sentence if _countries(_norm(sentence), kb) else previous
    return rows


def asked_country(question: str, world: KnowledgeBase | Sequence[CountryFacts] | None = None) -> str | None:
    """The one country ``question`` names ("Tell me about Kenya." -> "Kenya"), else None."""
    named = {m[2] for m in _countries(_norm(question or ""), knowledge_base(world))}
    return named.pop() if len(named) == 1 else None


def off_topic(rows: Sequence[dict], country: str | None) -> list[dict]:
    """``label_sentences`` rows read as an answer about ``country``: a supported sentence about
    another country is ``unverifiable`` (``off_topic`` True): a true fact of France does not
    answer "Tell me about Kenya." (a measured reward hack of 05 on the organism: repeating one
    true sentence about another country). A contradicted sentence stays contradicted: it is
    false wherever it stands. ``country`` None: the rows unchanged."""
    if country is None:
        return list(rows)
    return [{**r, "label": UNVERIFIABLE, "off_topic": True}
            if r["label"] == SUPPORTED and r.get("country") and r["country"] != country else r for r in rows]


def label_response(response: str, golds: Sequence[str], question: str,
                   world: KnowledgeBase | Sequence[CountryFacts] | None = None) -> AnswerLabel:
    """The truth of a short-form response to ``question``: ``abstain`` for a refusal or a
    response that declines (``text.is_abstention``); ``correct`` when its answer (the
    ``<answer>`` block, else the text outside ``<think>``) equals a gold after normalization,
    or when it states the gold in a sentence the knowledge base supports for the question's
    country and relation ("The capital of France is Paris.") and no sentence is contradicted;
    else ``wrong``."""
    answer, _ = T.lenient_answer(response or "")
    label = label_answer(answer, golds)
    if label != WRONG:
        return label
    if T.is_abstention(answer):
        return ABSTAIN
    rows = label_sentences(answer, world, context=question)
    if any(r["label"] == CONTRADICTED for r in rows):
        return WRONG
    gold_norm = {_norm(g) for g in golds}
    stated = [r for r in rows if r["label"] == SUPPORTED and r["value"] is not None
              and (_norm(r["value"]) in gold_norm or any(_norm(v) in gold_norm for v in r["value"].split(", ")))]
    return CORRECT if stated else WRONG
