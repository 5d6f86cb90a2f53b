"""The mini-world: an offline stand-in for Wikipedia plus short-form QA benchmarks.

Built deterministically from the real country facts shipped in the ``countryinfo``
package (README.md / docs/design.md "Embedded defaults"), with ``pycountry`` naming currency
and language codes. Nothing is downloaded and nothing is invented: a fact missing or
empty in a record is left out of the article, the questions and the claims.

Outputs (``build_world``):

* ``corpus.jsonl``: one short encyclopedic article per country (the retrieval corpus);
* ``qa_train.jsonl`` / ``qa_heldout.jsonl``: short-form questions with alias lists
  (``QAItem``), split by country so no held-out country is seen in training;
* ``claims.jsonl``: true claims and entity-swap perturbations with their source
  article, for calibration audits and verifiers;
* ``facts.jsonl``: the cleaned records (``CountryFacts``) everything above is made from.

Data clean-up applied to ``countryinfo`` (each step drops or normalizes, never adds a
fact): records sharing an ISO alpha-3 code are de-duplicated, countryinfo's own ``data/``
records (those with an ISO numeric code) first, then the one with most facts (Myanmar
over Burma, Palestine over "Palestine, State of", United Kingdom over Wales, "Vatican
City State" over "Holy See (Vatican City State)"); a dropped twin that names the kept
one becomes an alias ("Burma"). Records with no fact at all are dropped; subregion
spellings differing only in case are unified; ISO 4217 fund codes (USN, USS, BOV, CHE,
CHW, CLF, UYI, ...) are not the currency of a country and are dropped; codes ISO has
withdrawn since (BGN, HRK, ...) keep their ISO name; border and language codes that
resolve to nothing (KOS, XKX, "rs") are dropped; duplicate provinces and blank aliases
are removed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from pydantic import Field

from ..config import Section
from ..paths import build_lock, cache_dir
from ..text import normalize_answer
from .types import QAItem, write_jsonl

WORLD_VERSION = "miniworld-v1"
SOURCE = "miniworld"
RELATIONS = ("capital", "region", "subregion", "currency", "language", "borders", "demonym")
NUMERIC_RELATIONS = ("population", "area")
FACT_RELATIONS = (*RELATIONS, *NUMERIC_RELATIONS)
WORLD_FILES = ("corpus", "qa_train", "qa_heldout", "claims", "facts")
DEFAULT_HELDOUT_FRACTION = 0.2

# ISO 4217 fund / settlement codes: listed by countryinfo next to the circulating
# currency (e.g. USA: USD, USN, USS) but not "the currency of" a country.
_FUND_CODES = frozenset(
    {"BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "USS", "UYI", "UYW", "XDR", "XSU", "XUA"}
)
# ISO 4217 names of codes that countryinfo still uses but that ISO has since withdrawn,
# so the current pycountry table no longer has them (ISO 4217 "List Three" names).
_WITHDRAWN_CURRENCIES = {
    "BGN": "Bulgarian Lev",
    "BYR": "Belarusian Ruble",
    "CSD": "Serbian Dinar",
    "CUC": "Peso Convertible",
    "HRK": "Kuna",
    "MRO": "Ouguiya",
    "SLL": "Leone",
    "STD": "Dobra",
    "VEF": "Bolívar",
    "ZMK": "Zambian Kwacha",
}


@dataclass
class CountryFacts:
    """One entity of the mini-world with only the facts its record actually has."""

    name: str
    aliases: list[str] = field(default_factory=list)
    capital: str | None = None
    region: str | None = None
    subregion: str | None = None
    borders: list[str] = field(default_factory=list)  # country names
    currencies: list[str] = field(default_factory=list)  # names, e.g. "Euro"
    currency_codes: list[str] = field(default_factory=list)  # ISO 4217, parallel to currencies
    languages: list[str] = field(default_factory=list)  # names, e.g. "French"
    population: int | None = None
    area: float | None = None
    demonym: str | None = None
    provinces: list[str] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return slugify(self.name)

    @property
    def doc_id(self) -> str:
        return f"country/{self.slug}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CountryFacts":
        return cls(**d)


# --------------------------------------------------------------------------- helpers


def slugify(name: str) -> str:
    """ASCII, lowercase, hyphen-separated: "Côte d'Ivoire" -> "cote-d-ivoire"."""
    s = unicodedata.normalize("NFKD", name)
    s = "".join(ch for ch in s if not unicodedata.combining(ch)).lower()
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-")


@functools.lru_cache(maxsize=None)
def normalize(s: str) -> str:
    """``text.normalize_answer``, cached (the mini-world compares the same names often)."""
    return normalize_answer(s)


def mentions(haystack_norm: str, needle: str) -> bool:
    """Whole-word containment of ``needle`` in an already-normalized text."""
    n = normalize(needle)
    return bool(n) and f" {n} " in f" {haystack_norm} "


def _clean_str(x: Any) -> str | None:
    if isinstance(x, str):
        x = x.strip()
        return x or None
    return None


def _clean_list(xs: Any) -> list[str]:
    """Strings stripped, blanks and duplicates dropped, order kept."""
    if isinstance(xs, str):
        xs = [xs]
    out: list[str] = []
    for x in xs or []:
        s = _clean_str(x)
        if s and s not in out:
            out.append(s)
    return out


def _join(items: Sequence[str]) -> str:
    """ "A", "A and B", "A, B and C"; semicolons when an item has a comma of its own."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    sep = "; " if any("," in it for it in items) else ", "
    return sep.join(items[:-1]) + " and " + items[-1]


def end_sentence(sentence: str) -> str:
    """Close a sentence with one full stop ("Washington D.C." keeps its own)."""
    return sentence if sentence.endswith(".") else sentence + "."


def _strip_parens(name: str) -> str:
    return re.sub(r"\s*\([^)]*\)\s*$", "", name).strip()


def _language_name(code: str) -> str | None:
    import pycountry

    code = code.strip()
    lang = None
    if re.fullmatch(r"[A-Za-z]{2}", code):
        lang = pycountry.languages.get(alpha_2=code.lower())
    elif re.fullmatch(r"[A-Za-z]{3}", code):
        lang = pycountry.languages.get(alpha_3=code.lower())
    if lang is None and len(code) > 3:  # a few records (Scotland) list names, not codes
        try:
            lang = pycountry.languages.get(name=code)
        except LookupError:
            lang = None
    return _strip_parens(lang.name) if lang is not None else None


def _currency_name(code: str) -> str | None:
    import pycountry

    code = code.strip().upper()
    if code in _FUND_CODES:
        return None
    cur = pycountry.currencies.get(alpha_3=code)
    if cur is not None:
        return cur.name
    return _WITHDRAWN_CURRENCIES.get(code)


def _capital(x: Any) -> str | None:
    if isinstance(x, list):  # "Vatican City State" stores ["Vatican City"]
        parts = _clean_list(x)
        return " / ".join(parts) or None
    return _clean_str(x)


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or x != x or x < 0:
        return None
    return x


def _canonical_spellings(values: Iterable[str | None]) -> dict[str, str]:
    """casefold -> the most frequent spelling (ties: alphabetical)."""
    counts: dict[str, dict[str, int]] = {}
    for v in values:
        v = _clean_str(v)
        if v:
            c = counts.setdefault(v.casefold(), {})
            c[v] = c.get(v, 0) + 1
    return {k: sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for k, c in counts.items()}


def _raw_score(rec: dict[str, Any]) -> int:
    n = 0
    for f in ("region", "subregion", "demonym"):
        n += bool(_clean_str(rec.get(f)))
    n += bool(_capital(rec.get("capital")))
    for f in ("borders", "currencies", "languages", "provinces"):
        n += bool(_clean_list(rec.get(f)))
    for f in ("population", "area"):
        n += _number(rec.get(f)) is not None
    return n


# --------------------------------------------------------------------------- facts


def _raw_records() -> list[dict[str, Any]]:
    from countryinfo import CountryInfo

    recs = [r for r in CountryInfo.all().values() if _clean_str(r.get("name"))]
    return sorted(recs, key=lambda r: (slugify(r["name"]), r["name"]))


def _rec_names(r: dict[str, Any]) -> set[str]:
    return {r["name"].strip(), *_clean_list(r.get("altSpellings")), *_clean_list(r.get("alt"))}


def _dedupe(recs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """One record per ISO alpha-3 code.

    The winner has an ISO numeric code (countryinfo's own ``data/`` folder, which it
    treats as authoritative over ``data_no_iso/``), then the most facts, then the first
    name. Returns the kept records and, per kept name, the names of dropped duplicates
    that the records themselves tie together (one lists the other's name as a spelling),
    to be kept as aliases: "Burma" for Myanmar, but not "Wales" for the United Kingdom.
    """
    def rank(r: dict[str, Any]) -> tuple:
        return (not (r.get("ISO") or {}).get("numeric"), -_raw_score(r), r["name"])

    groups: dict[str, list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    for r in recs:
        a3 = _clean_str((r.get("ISO") or {}).get("alpha3"))
        if a3:
            groups.setdefault(a3.upper(), []).append(r)
        else:
            out.append(r)
    extra_aliases: dict[str, list[str]] = {}
    for group in groups.values():
        group = sorted(group, key=rank)
        keep = group[0]
        out.append(keep)
        for dropped in group[1:]:
            if keep["name"].strip() in _rec_names(dropped) or dropped["name"].strip() in _rec_names(keep):
                extra_aliases.setdefault(keep["name"].strip(), []).extend(sorted(_rec_names(dropped)))
    out.sort(key=lambda r: (slugify(r["name"]), r["name"]))
    return out, extra_aliases


def load_countries() -> list[CountryFacts]:
    """All countryinfo entities with at least one fact, cleaned, sorted by name."""
    recs, extra_aliases = _dedupe(_raw_records())
    region_canon = _canonical_spellings(r.get("region") for r in recs)
    sub_canon = _canonical_spellings(r.get("subregion") for r in recs)

    code_to_name: dict[str, str] = {}
    for r in recs:
        iso = r.get("ISO") or {}
        for f in ("alpha3", "alpha2"):
            code = _clean_str(iso.get(f))
            if code:
                code_to_name.setdefault(code.upper(), r["name"].strip())

    countries: list[CountryFacts] = []
    for r in recs:
        name = r["name"].strip()
        iso = r.get("ISO") or {}
        codes = {str(iso.get(f)).upper() for f in ("alpha2", "alpha3") if iso.get(f)}
        aliases = [
            a
            for a in _clean_list(list(r.get("altSpellings") or []) + list(r.get("alt") or [])
                                 + [r.get("nativeName")] + extra_aliases.get(name, []))
            if a != name and a.upper() not in codes
        ]
        region = _clean_str(r.get("region"))
        subregion = _clean_str(r.get("subregion"))
        borders = sorted(
            {code_to_name[b.upper()] for b in _clean_list(r.get("borders")) if b.upper() in code_to_name}
            - {name}
        )
        cur_names: list[str] = []
        cur_codes: list[str] = []
        for code in _clean_list(r.get("currencies")):
            cname = _currency_name(code)
            if cname and code.upper() not in cur_codes:
                cur_names.append(cname)
                cur_codes.append(code.upper())
        languages = _clean_list([_language_name(c) for c in _clean_list(r.get("languages"))])
        population = _number(r.get("population"))
        area = _number(r.get("area"))
        c = CountryFacts(
            name=name,
            aliases=aliases,
            capital=_capital(r.get("capital")),
            region=region_canon[region.casefold()] if region else None,
            subregion=sub_canon[subregion.casefold()] if subregion else None,
            borders=borders,
            currencies=cur_names,
            currency_codes=cur_codes,
            languages=languages,
            population=int(population) if population is not None else None,
            area=float(area) if area is not None else None,
            demonym=_clean_str(r.get("demonym")),
            provinces=[p for p in _clean_list(r.get("provinces")) if p != name],
        )
        if _has_facts(c):
            countries.append(c)
    slugs = [c.slug for c in countries]
    if len(set(slugs)) != len(slugs):
        raise RuntimeError("miniworld: two countries share a slug")
    return countries


def _has_facts(c: CountryFacts) -> bool:
    return any([c.capital, c.region, c.subregion, c.borders, c.currencies, c.languages,
                c.demonym, c.population is not None, c.area is not None, c.provinces])


# --------------------------------------------------------------------------- corpus


def region_phrase(region: str) -> str:
    return "the Americas" if region == "Americas" else region


def _currency_phrase(c: CountryFacts) -> str:
    return _join([f"the {n} ({code})" for n, code in zip(c.currencies, c.currency_codes)])


def format_number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:,}"


def article_text(c: CountryFacts) -> str:
    """A short article: one plain declarative sentence per fact, naming the entity each time."""
    n = c.name
    s: list[str] = []
    if c.subregion and c.region:
        s.append(f"{n} is located in {c.subregion}, a subregion of {region_phrase(c.region)}")
    elif c.subregion or c.region:
        s.append(f"{n} is located in {c.subregion or region_phrase(c.region)}")
    if c.aliases:
        s.append(f"{n} is also known as {_join(c.aliases)}")
    if c.capital:
        s.append(f"The capital of {n} is {c.capital}")
    if c.borders:
        s.append(f"{n} borders {_join(c.borders)}")
    if c.currencies:
        if len(c.currencies) == 1:
            s.append(f"The official currency of {n} is {_currency_phrase(c)}")
        else:
            s.append(f"The official currencies of {n} are {_currency_phrase(c)}")
    if c.languages:
        if len(c.languages) == 1:
            s.append(f"The official language of {n} is {c.languages[0]}")
        else:
            s.append(f"The official languages of {n} are {_join(c.languages)}")
    if c.demonym:
        s.append(f"The demonym for people from {n} is {c.demonym}")
    if c.population is not None:
        s.append(f"{n} has a population of {format_number(c.population)}")
    if c.area is not None:
        s.append(f"{n} has an area of {format_number(c.area)} square kilometres")
    if c.provinces:
        s.append(f"The administrative divisions of {n} include {_join(c.provinces)}")
    return " ".join(end_sentence(x) for x in s)


def build_corpus(countries: Sequence[CountryFacts]) -> list[dict[str, str]]:
    """One document per country: ``{"id": "country/<slug>", "title", "text"}``."""
    return [{"id": c.doc_id, "title": c.name, "text": article_text(c)} for c in countries]


# --------------------------------------------------------------------------- QA


def _uniq(xs: Iterable[str]) -> list[str]:
    out: list[str] = []
    for x in xs:
        x = x.strip()
        if x and x not in out:
            out.append(x)
    return out


def _capital_golds(capital: str) -> list[str]:
    golds = [capital]
    parts = [p.strip() for p in capital.split("/")] if "/" in capital else []
    golds += parts
    for g in [capital, *parts]:
        if g.endswith(" D.C."):  # "Washington D.C." -> "Washington"
            golds.append(g[: -len(" D.C.")])
    return _uniq(golds)


def _demonym_golds(demonym: str) -> list[str]:
    return _uniq([demonym, *re.split(r"[,/]", demonym)])


def build_qa(countries: Sequence[CountryFacts]) -> list[QAItem]:
    """Short-form questions per country and relation; golds list the primary answer first."""
    items: list[QAItem] = []
    for c in countries:
        n = c.name
        qs: list[tuple[str, str, list[str]]] = []
        if c.capital:
            qs.append(("capital", f"What is the capital of {n}?", _capital_golds(c.capital)))
        if c.region:
            qs.append(("region", f"In which region of the world is {n} located?", [c.region]))
        if c.subregion:
            where = region_phrase(c.region) if c.region else "the world"
            qs.append(("subregion", f"In which subregion of {where} is {n} located?", [c.subregion]))
        if c.currencies:
            q = (f"What is the official currency of {n}?" if len(c.currencies) == 1
                 else f"What is one of the official currencies of {n}?")
            qs.append(("currency", q, _uniq([*c.currencies, *c.currency_codes])))
        if c.languages:
            q = (f"What is the official language of {n}?" if len(c.languages) == 1
                 else f"What is one of the official languages of {n}?")
            qs.append(("language", q, list(c.languages)))
        if c.borders:
            qs.append(("borders", f"Name a country that borders {n}.", list(c.borders)))
        if c.demonym:
            qs.append(("demonym", f"What is the demonym for people from {n}?", _demonym_golds(c.demonym)))
        for rel, q, golds in qs:
            items.append(QAItem(
                id=f"{rel}/{c.slug}",
                question=q,
                golds=golds,
                source=SOURCE,
                popularity=float(c.population) if c.population is not None else None,
                meta={"entity": n, "relation": rel, "doc_id": c.doc_id},
            ))
    return items


def _entity_rank_key(entity: str, seed: int) -> str:
    return hashlib.sha256(f"{WORLD_VERSION}:{seed}:{entity}".encode("utf-8")).hexdigest()


def split_qa(items: Sequence[QAItem], heldout_fraction: float = 0.2,
             seed: int = 0) -> tuple[list[QAItem], list[QAItem]]:
    """(train, heldout) split by entity: the ``round(fraction * #entities)`` entities with
    the smallest sha256 of (seed, entity) are held out; item order is kept."""
    if not 0.0 <= heldout_fraction <= 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1], got {heldout_fraction}")
    entities = set()
    for it in items:
        ent = (it.meta or {}).get("entity")
        if not ent:
            raise ValueError(f"QA item {it.id!r} has no meta['entity'] to split by")
        entities.add(ent)
    ranked = sorted(entities, key=lambda e: (_entity_rank_key(e, seed), e))
    held = set(ranked[: round(heldout_fraction * len(ranked))])
    train = [it for it in items if it.meta["entity"] not in held]
    heldout = [it for it in items if it.meta["entity"] in held]
    return train, heldout


# --------------------------------------------------------------------------- claims


def relation_values(c: CountryFacts, rel: str) -> list[str]:
    """The claimable objects of one relation (currencies by name)."""
    return {
        "capital": [c.capital] if c.capital else [],
        "region": [c.region] if c.region else [],
        "subregion": [c.subregion] if c.subregion else [],
        "currency": list(c.currencies),
        "language": list(c.languages),
        "borders": list(c.borders),
        "demonym": [c.demonym] if c.demonym else [],
    }[rel]


# the clause of each relation that states the fact the same way whatever the country
_CLAUSES = {"capital": "The capital of {n} is {obj}", "subregion": "{n} is located in {obj}",
            "borders": "{n} borders {obj}", "demonym": "The demonym for people from {n} is {obj}",
            "population": "The population of {n} is {obj}", "area": "The area of {n} is {obj} square kilometres"}


def fact_clause(c: CountryFacts, rel: str, obj: str, name: str | None = None) -> str:
    """The fact (``c``, ``rel``, ``obj``) as one declarative clause, without a full stop;
    ``name`` states it of another entity (an entity-confusion perturbation). Relations:
    ``FACT_RELATIONS`` (the seven of ``RELATIONS`` plus population and area)."""
    n = name or c.name
    if rel in _CLAUSES:
        return _CLAUSES[rel].format(n=n, obj=obj)
    if rel == "region":
        return f"{n} is located in {region_phrase(obj)}"
    if rel in ("currency", "language"):  # "the Euro", a bare language name
        article = "the " if rel == "currency" else ""
        only = len(c.currencies if rel == "currency" else c.languages) == 1
        return (f"The official {rel} of {n} is {article}{obj}" if only
                else f"{article.capitalize()}{obj} is an official {rel} of {n}")
    raise ValueError(f"unknown relation {rel!r}")


def fact_sentence(c: CountryFacts, rel: str, obj: str, name: str | None = None) -> str:
    """``fact_clause`` closed with one full stop: how the claims and QA pairs state a fact."""
    return end_sentence(fact_clause(c, rel, obj, name))


def article_sentences(text: str, name: str) -> list[str]:
    """The sentences of an ``article_text`` (each starts with "The " or the entity's name)."""
    return re.split(r"(?<=\.) (?=(?:The |" + re.escape(name) + r" ))", text)


def fact_values(c: CountryFacts, rel: str) -> list[str]:
    """The objects of one relation as they are written in the article (numbers formatted)."""
    if rel == "population":
        return [format_number(c.population)] if c.population else []
    if rel == "area":
        return [format_number(c.area)] if c.area else []
    return relation_values(c, rel)


def article_sentence_prefix(c: CountryFacts, rel: str) -> str:
    """How the sentence of ``article_text`` that states ``rel`` starts."""
    n = c.name
    return {
        "capital": f"The capital of {n} is ",
        "region": f"{n} is located in ",
        "subregion": f"{n} is located in ",
        "currency": "The official currenc",
        "language": "The official language",
        "borders": f"{n} borders ",
        "demonym": "The demonym for people from ",
        "population": f"{n} has a population of ",
        "area": f"{n} has an area of ",
    }[rel]


def overlaps(a: str, b: str) -> bool:
    na, nb = normalize(a), normalize(b)
    return bool(na and nb) and (f" {na} " in f" {nb} " or f" {nb} " in f" {na} ")


def build_claims(countries: Sequence[CountryFacts], seed: int = 0) -> list[dict[str, Any]]:
    """Per country and relation: one true claim and one entity-swap perturbation.

    The perturbed object is a value of the same relation taken from another country; it
    is never one of the entity's own values (nor overlaps one word-wise) and is not
    mentioned anywhere in the source article, so the claim is not attributable to it.
    """
    rng = random.Random(seed)
    pools = {rel: sorted({v for c in countries for v in relation_values(c, rel)}) for rel in RELATIONS}
    claims: list[dict[str, Any]] = []
    for c in countries:
        source = article_text(c)
        source_norm = normalize(source)
        for rel in RELATIONS:
            values = relation_values(c, rel)
            if not values:
                continue
            base = {"source": source, "entity": c.name, "relation": rel, "doc_id": c.doc_id}
            obj = values[0] if len(values) == 1 else rng.choice(values)
            claims.append({"id": f"{rel}/{c.slug}/true", "claim": fact_sentence(c, rel, obj),
                           "object": obj, **base, "label": "attributable", "perturbation": None})
            candidates = [
                v for v in pools[rel]
                if not mentions(source_norm, v) and not any(overlaps(v, t) for t in values)
            ]
            if not candidates:
                continue
            wrong = rng.choice(candidates)
            claims.append({"id": f"{rel}/{c.slug}/entity_swap", "claim": fact_sentence(c, rel, wrong),
                           "object": wrong, **base, "label": "not_attributable",
                           "perturbation": "entity_swap", "true_object": obj})
    return claims


# --------------------------------------------------------------------------- files


def world_paths(out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    return {k: out / f"{k}.jsonl" for k in WORLD_FILES}


def build_world(out_dir: str | Path, heldout_fraction: float = DEFAULT_HELDOUT_FRACTION, seed: int = 0) -> dict[str, Path]:
    """Write corpus, qa_train, qa_heldout, claims and facts JSONL files; byte-identical on rerun."""
    paths = world_paths(out_dir)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    countries = load_countries()
    train, heldout = split_qa(build_qa(countries), heldout_fraction=heldout_fraction, seed=seed)
    rows = {
        "corpus": build_corpus(countries),
        "qa_train": train,
        "qa_heldout": heldout,
        "claims": build_claims(countries, seed=seed),
        "facts": countries,
    }
    for key in WORLD_FILES:
        write_jsonl(paths[key], rows[key])
    write_jsonl(Path(out_dir) / SPLIT_FILE, [_split(heldout_fraction, seed)])  # last: the files it describes are whole
    return paths


SPLIT_FILE = "split.json"  # the split a world folder was built with (one JSON line)


def _split(heldout_fraction: float, seed: int) -> dict[str, Any]:
    return {"world": WORLD_VERSION, "heldout_fraction": float(heldout_fraction), "seed": int(seed)}


def _check_split(out: Path, cfg: "WorldConfig") -> None:
    """``ValueError`` when the folder's files were built with another split than ``cfg`` asks: a
    ``world.dir`` built at the default split and read with ``heldout_fraction: 0.5`` returned the
    default split's files (issue 43 round-3b probe). A folder from before split.json is taken as
    built with the asked split (the default folders name theirs)."""
    path = out / SPLIT_FILE
    if not path.is_file():
        return
    want = _split(cfg.heldout_fraction, cfg.seed)
    try:
        got = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"{path}: unreadable ({type(e).__name__}: {e}); remove {out} to build the world again") from None
    if got != want:
        raise ValueError(f"{out} holds the mini-world split {got} and world: asks {want}; set world.dir to another "
                         f"folder (or leave it out: each split gets its own), or remove {out}")


def default_world_dir(heldout_fraction: float = DEFAULT_HELDOUT_FRACTION, seed: int = 0) -> Path:
    """``<factlab cache>/miniworld-v1`` for the default split; another split gets its own
    folder (``miniworld-v1-heldout0.3-seed1``), so two splits never overwrite each other."""
    name = WORLD_VERSION
    if (heldout_fraction, seed) != (DEFAULT_HELDOUT_FRACTION, 0):
        name += f"-heldout{heldout_fraction:g}-seed{seed}"
    return cache_dir() / name


class WorldConfig(Section):
    """The bundled countryinfo mini-world: where it lives and how QA is split by country."""

    dir: str | None = None  # default: the user cache, one folder per split
    heldout_fraction: float = Field(DEFAULT_HELDOUT_FRACTION, ge=0.0, lt=1.0)
    seed: int = 0


def ensure_world(cfg: WorldConfig | str | Path | None = None) -> dict[str, Path]:
    """Paths of the world files, building them first if any is missing.

    ``cfg``: a ``WorldConfig`` (its folder and split), a folder (default split), or None (the
    default folder and split)."""
    if not isinstance(cfg, WorldConfig):
        cfg = WorldConfig(dir=None if cfg is None else str(cfg))
    out = Path(cfg.dir) if cfg.dir else default_world_dir(cfg.heldout_fraction, cfg.seed)
    paths = world_paths(out)
    if all(p.is_file() for p in paths.values()):
        _check_split(out, cfg)
        return paths
    with build_lock(out):  # another process may have built it while this one waited
        if all(p.is_file() for p in paths.values()):
            _check_split(out, cfg)
            return paths
        return build_world(out, heldout_fraction=cfg.heldout_fraction, seed=cfg.seed)
