"""SEVA's adversarial claim/source pairs on the mini-world (002_56f1a732f42030d3.txt §2.5 Probe,
Appendix F, Tables 19-20): the six Table 19 perturbation strategies applied to the true facts
of ``factlab.data.miniworld``.

``miniworld_pairs`` turns the true facts of the offline mini-world (``miniworld.ensure_world``)
into attributable pairs and applies the six Table 19 strategies to *other* true facts to make
not-attributable ones. A base fact is one (country, relation, object) with relation one of
``miniworld.RELATIONS`` plus ``population`` / ``area`` (the only numbers, formatted as in the
article). Its source is a 1-3 sentence excerpt of the country's article that contains the
sentence stating the fact (``source="article"``: the whole article). Each base fact yields its
attributable pair and exactly one perturbation, with the same source, so the labels are balanced
1:1 and every negative has a contrastive positive twin (``meta["base_id"]``).

======================  ======================  ==================================================
strategy (Table 19)     error_type (Table 20)   what it does to a true fact
======================  ======================  ==================================================
entity_confusion        entity_substitution     swaps the subject for another country (same
                                                subregion first) whose own value differs and which
                                                the source does not mention: "The capital of
                                                Belgium is Paris."
numerical_perturbation  numerical_exaggeration  population / area inflated or deflated by a factor
                                                in [1.5, 4]: "The population of France is
                                                163,469,500."
multi_hop_graft         entity_substitution     grafts the same relation's value from a bordering
                                                country (for ``borders``: a neighbour's neighbour):
                                                "The capital of France is Madrid.", "France borders
                                                Portugal."
paraphrase              negation_flip           meaning-changing rewording, announced -> denied:
                                                "France does not border Spain.", "Paris is not the
                                                capital of France.", "France lies outside Europe."
presupposition          scope_inflation         adds a superlative / exclusive presupposition that
                                                is false in the mini-world (checked against the
                                                facts) and absent from the source: "..., the largest
                                                population of any country in Western Europe",
                                                "French is the only official language of Belgium."
unanswerable_wrap       fabrication             wraps the true fact in an unverifiable qualifier the
                                                source lacks: "..., according to the 2011 national
                                                census", "According to a 1987 government report,
                                                ...", "..., spoken natively by 71% of the
                                                population."
======================  ======================  ==================================================

Why these error types: Table 20 defines entity substitution as "entity swapped for a different
one", which is what both entity confusion and the multi-hop graft produce (the graft's entity is a
related one, the harder case). "Announced -> denied" flips the polarity of the predicate
(negation flip). Table 19's presupposition "rose by 2°C, highest on record" widens a specific
claim into a superlative one (scope inflation: "specific claim overgeneralized"). The unanswerable
wrap ("results significant at p<0.001") adds detail the source never gives (fabrication:
"information absent from source"). No strategy produces ``temporal_shift``: the mini-world has no
dates.

Allocation: every base fact is used by at most one strategy. The strategies take turns (round
robin, in a seeded order) drawing their next candidate in a seeded shuffle; ``per_strategy=None``
gives every strategy the same count, the largest all six can fill (the "naive" equal allocation
of §2.5); an int caps each strategy; a mapping ``{strategy: n}`` gives the weakness-guided
allocation of the Probe stage (a strategy that runs out of candidates stops early;
``strategy_counts`` reports what was made). Everything is deterministic given ``seed``.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..data import miniworld as mw
from ..data.pairs import MINIWORLD, ClaimPair
from ..data.types import read_jsonl
from ..labels import STRATEGIES, STRATEGY_ERROR_TYPES

__all__ = ["miniworld_pairs", "probe_filter", "STRATEGIES", "STRATEGY_ERROR_TYPES"]

@dataclass
class _Base:
    """One true fact with its source, the seed of an attributable pair and of one perturbation."""

    id: str
    country: mw.CountryFacts
    relation: str
    obj: str
    claim: str
    source: str
    source_norm: str
    order: int


def _lcfirst_the(body: str) -> str:
    return "the " + body[4:] if body.startswith("The ") else body


def _excerpt(sentences: list[str], i: int, rng: random.Random) -> str:
    """1-3 consecutive sentences, sentence ``i`` among them."""
    k = min(rng.choice((1, 2, 3)), len(sentences))
    start = rng.randint(max(0, i - k + 1), min(i, len(sentences) - k))
    return " ".join(sentences[start:start + k])


def _load_world(world_paths: Mapping[str, Any] | str | Path) -> tuple[list[mw.CountryFacts], dict[str, str]]:
    if isinstance(world_paths, (str, Path)):
        world_paths = mw.world_paths(world_paths)
    for key in ("facts", "corpus"):
        if key not in world_paths:
            raise ValueError(f"miniworld_pairs: world_paths has no '{key}' file "
                             f"(expected the dict of miniworld.ensure_world())")
    countries = [mw.CountryFacts.from_dict(d) for d in read_jsonl(world_paths["facts"])]
    docs = {d["id"]: d["text"] for d in read_jsonl(world_paths["corpus"])}
    return countries, docs


def _bases(countries: Sequence[mw.CountryFacts], docs: Mapping[str, str], seed: int,
           source_mode: str) -> list[_Base]:
    bases: list[_Base] = []
    for c in countries:
        article = docs.get(c.doc_id) or mw.article_text(c)
        sentences = mw.article_sentences(article, c.name)
        for rel in mw.FACT_RELATIONS:
            values = mw.fact_values(c, rel)
            if not values:
                continue
            rng = random.Random(f"{seed}/base/{c.doc_id}/{rel}")
            obj = values[0] if len(values) == 1 else rng.choice(values)
            prefix = mw.article_sentence_prefix(c, rel)
            idx = next((i for i, s in enumerate(sentences) if s.startswith(prefix)), None)
            if source_mode == "article" or idx is None:
                source = article
            else:
                source = _excerpt(sentences, idx, rng)
            source_norm = mw.normalize(source)
            if not (mw.mentions(source_norm, obj) and mw.mentions(source_norm, c.name)):
                continue  # never expected: the fact must be readable off its source
            bases.append(_Base(
                id=f"{MINIWORLD}/{c.slug}/{rel}", country=c, relation=rel, obj=obj,
                claim=mw.fact_sentence(c, rel, obj), source=source, source_norm=source_norm,
                order=len(bases),
            ))
    return bases


class _World:
    """Lookups the strategies share."""

    def __init__(self, countries: Sequence[mw.CountryFacts]):
        self.countries = list(countries)
        self.by_name = {c.name: c for c in countries}
        self.by_subregion: dict[str, list[mw.CountryFacts]] = {}
        self.by_region: dict[str, list[mw.CountryFacts]] = {}
        for c in countries:
            if c.subregion:
                self.by_subregion.setdefault(c.subregion, []).append(c)
            if c.region:
                self.by_region.setdefault(c.region, []).append(c)

    @staticmethod
    def is_max(c: mw.CountryFacts, group: Sequence[mw.CountryFacts], attr: str) -> bool | None:
        """Whether ``c`` has the largest ``attr`` of its group; None if undecidable."""
        mine = getattr(c, attr)
        others = [getattr(o, attr) for o in group if o is not c and getattr(o, attr) is not None]
        if mine is None or not others:
            return None
        return mine >= max(others)


def _fresh(b: _Base, text: str) -> bool:
    """A phrase the source does not contain (word-wise, normalized)."""
    return not mw.mentions(b.source_norm, text)


def _entity_confusion(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel, obj = b.country, b.relation, b.obj

    def ok(o: mw.CountryFacts) -> bool:
        values = mw.fact_values(o, rel)  # o must have its own, different value: the swap is false
        if o is c or not values or any(v == obj or mw.overlaps(v, obj) for v in values):
            return False
        return not (mw.overlaps(o.name, c.name) or mw.overlaps(o.name, obj)) and _fresh(b, o.name)

    tiers = [w.by_subregion.get(c.subregion or "", []), w.by_region.get(c.region or "", []), w.countries]
    for tier in tiers:  # the first acceptable country of a seeded shuffle, nearest tier first
        order = sorted(tier, key=lambda o: o.name)
        rng.shuffle(order)
        o = next((o for o in order if ok(o)), None)
        if o is not None:
            return mw.fact_sentence(c, rel, obj, name=o.name), {"confused_with": o.name}
    return None


def _numerical_perturbation(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel = b.country, b.relation
    if rel not in mw.NUMERIC_RELATIONS:
        return None
    x = c.population if rel == "population" else c.area
    if not x:
        return None
    integral = rel == "population" or float(x).is_integer()
    for _ in range(20):
        factor = rng.uniform(1.5, 4.0)
        up = rng.random() < 0.5
        y = x * factor if up else x / factor
        y = int(round(y)) if integral else round(y, 2)
        if y <= 0 or y == x:
            continue
        text = mw.format_number(y)
        if not _fresh(b, text) or str(y).replace(".", "") in b.source.replace(",", "").replace(".", ""):
            continue
        return (mw.fact_sentence(c, rel, text),
                {"true_value": x, "perturbed_value": y, "direction": "inflated" if up else "deflated",
                 "factor": round(y / x, 3)})
    return None


def _multi_hop_graft(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel = b.country, b.relation
    if rel in mw.NUMERIC_RELATIONS:
        return None
    own = mw.fact_values(c, rel)
    neighbours = [w.by_name[n] for n in c.borders if n in w.by_name]
    via: dict[str, str] = {}
    for nb in sorted(neighbours, key=lambda o: o.name):
        vals = nb.borders if rel == "borders" else mw.fact_values(nb, rel)
        for v in vals:
            via.setdefault(v, nb.name)
    if rel == "borders":
        for v in [c.name, *c.borders]:
            via.pop(v, None)
    cands = sorted(
        v for v in via
        if not any(mw.overlaps(v, t) for t in own) and not mw.overlaps(v, c.name) and _fresh(b, v)
    )
    if not cands:
        return None
    v = rng.choice(cands)
    return mw.fact_sentence(c, rel, v), {"grafted_object": v, "via": via[v]}


def _paraphrase(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel, obj, n = b.country, b.relation, b.obj, b.country.name
    if rel == "capital":
        variants = [f"The capital of {n} is not {obj}", f"{obj} is not the capital of {n}"]
    elif rel in ("region", "subregion"):
        place = mw.region_phrase(obj) if rel == "region" else obj
        variants = [f"{n} is not located in {place}", f"{n} lies outside {place}"]
    elif rel == "currency":
        variants = ([f"The official currency of {n} is not the {obj}"] if len(c.currencies) == 1
                    else [f"The {obj} is not an official currency of {n}"])
        variants.append(f"{n} does not use the {obj} as an official currency")
    elif rel == "language":
        variants = ([f"The official language of {n} is not {obj}"] if len(c.languages) == 1
                    else [f"{obj} is not an official language of {n}"])
        variants.append(f"{obj} has no official status in {n}")
    elif rel == "borders":
        variants = [f"{n} does not border {obj}", f"{n} shares no border with {obj}"]
    elif rel == "demonym":
        variants = [f"The demonym for people from {n} is not {obj}"]
    else:
        return None
    return mw.end_sentence(rng.choice(variants)), {}


def _presupposition(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel, obj, n = b.country, b.relation, b.obj, b.country.name
    body = mw.fact_clause(c, rel, obj)
    sub, region = c.subregion, c.region
    if rel in mw.NUMERIC_RELATIONS and sub:
        if w.is_max(c, w.by_subregion[sub], rel) is False:
            noun = "population" if rel == "population" else "area"
            return (mw.end_sentence(f"{body}, the largest {noun} of any country in {sub}"),
                    {"presupposed": f"largest {noun} in {sub}"})
    elif rel == "region" and region:
        if w.is_max(c, w.by_region[region], "population") is False:
            return (mw.end_sentence(f"{body}, where it is the most populous country"),
                    {"presupposed": f"most populous in {region}"})
    elif rel == "subregion" and sub:
        if w.is_max(c, w.by_subregion[sub], "area") is False:
            return (mw.end_sentence(f"{body}, where it is the largest country by area"),
                    {"presupposed": f"largest by area in {sub}"})
    elif rel == "borders" and len(c.borders) >= 2:
        return mw.end_sentence(f"{body}, its only neighbouring country"), {"presupposed": "only neighbour"}
    elif rel == "language" and len(c.languages) >= 2:
        return mw.end_sentence(f"{obj} is the only official language of {n}"), {"presupposed": "only language"}
    elif rel == "currency" and len(c.currencies) >= 2:
        return mw.end_sentence(f"The {obj} is the only official currency of {n}"), {"presupposed": "only currency"}
    return None


def _unanswerable_wrap(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    rel = b.relation
    body = mw.fact_clause(b.country, rel, b.obj)
    year = rng.randint(1950, 2023)
    options = [
        (f"According to a {year} government report, {_lcfirst_the(body)}", str(year)),
        (f"{body}, as confirmed by a {year} national survey", str(year)),
    ]
    if rel == "population":
        options.append((f"{body}, according to the {year} national census", str(year)))
    elif rel == "area":
        options.append((f"{body}, as measured by a {year} satellite survey", str(year)))
    elif rel == "language":
        pct = rng.randint(52, 97)
        options.append((f"{body}, spoken natively by {pct}% of the population", str(pct)))
    elif rel == "borders":
        km = rng.randint(120, 4800)
        options.append((f"{body}, along a frontier of {km:,} kilometres", f"{km:,}"))
    elif rel == "capital":
        options.append((f"{body}, which has held that status since {year}", str(year)))
    elif rel == "currency":
        options.append((f"{body}, in circulation since {year}", str(year)))
    text, added = rng.choice(options)
    if not _fresh(b, added):
        return None
    return mw.end_sentence(text), {"added_detail": added}


_STRATEGY_FNS: Mapping[str, Callable[[_Base, _World, random.Random], tuple[str, dict] | None]] = {
    "entity_confusion": _entity_confusion,
    "numerical_perturbation": _numerical_perturbation,
    "multi_hop_graft": _multi_hop_graft,
    "paraphrase": _paraphrase,
    "presupposition": _presupposition,
    "unanswerable_wrap": _unanswerable_wrap,
}


def _quotas(per_strategy: int | Mapping[str, int] | None) -> dict[str, int | None]:
    if per_strategy is None:
        return {s: None for s in STRATEGIES}
    if isinstance(per_strategy, Mapping):
        unknown = sorted(set(per_strategy) - set(STRATEGIES))
        if unknown:
            raise ValueError(f"per_strategy: unknown strategy {unknown}; known: {', '.join(STRATEGIES)}")
        out = {s: int(per_strategy.get(s, 0)) for s in STRATEGIES}
    else:
        out = {s: int(per_strategy) for s in STRATEGIES}
    bad = {s: q for s, q in out.items() if q < 0}
    if bad:
        raise ValueError(f"per_strategy counts must be >= 0, got {bad}")
    return out


def miniworld_pairs(
    world_paths: Mapping[str, Any] | str | Path,
    seed: int = 0,
    per_strategy: int | Mapping[str, int] | None = None,
    source: str = "excerpt",
) -> list[ClaimPair]:
    """Attributable and Table 19-perturbed pairs from the mini-world's true facts.

    ``world_paths``: the dict of ``miniworld.ensure_world()`` (or its directory). ``per_strategy``:
    ``None`` = the same number for every strategy, the most all six can fill; an int = at most
    that many each; a ``{strategy: n}`` mapping = weakness-guided counts (missing strategies get
    0). ``source``: ``"excerpt"`` (1-3 article sentences containing the fact) or ``"article"``.
    Returns, per used base fact in world order, its attributable pair then its perturbation: labels
    balanced 1:1, ids unique, the same list for the same arguments. See the module docstring for
    the strategies and their error types.
    """
    if source not in ("excerpt", "article"):
        raise ValueError(f"source must be 'excerpt' or 'article', got {source!r}")
    quotas = _quotas(per_strategy)
    countries, docs = _load_world(world_paths)
    world = _World(countries)
    bases = _bases(countries, docs, seed, source)

    # Every candidate perturbation, each with its own seeded rng (independent of allocation).
    candidates: dict[str, list[tuple[_Base, str, dict]]] = {}
    for s in STRATEGIES:
        fn = _STRATEGY_FNS[s]
        found: list[tuple[_Base, str, dict]] = []
        for b in bases:
            out = fn(b, world, random.Random(f"{seed}/{s}/{b.id}"))
            if out is None:
                continue
            claim, meta = out
            cn = mw.normalize(claim)
            if cn == mw.normalize(b.claim) or cn in b.source_norm:
                continue
            found.append((b, claim, meta))
        random.Random(f"{seed}/order/{s}").shuffle(found)
        candidates[s] = found

    # Round-robin allocation: each base fact feeds at most one strategy.
    rng = random.Random(seed)
    turn = rng.sample(STRATEGIES, len(STRATEGIES))
    used: set[str] = set()
    picked: dict[str, list[tuple[_Base, str, dict]]] = {s: [] for s in STRATEGIES}
    cursor = {s: 0 for s in STRATEGIES}
    active = [s for s in turn if quotas[s] is None or quotas[s] > 0]
    equal = per_strategy is None
    while active:
        for s in list(active):
            got = None
            while cursor[s] < len(candidates[s]):
                cand = candidates[s][cursor[s]]
                cursor[s] += 1
                if cand[0].id not in used:
                    got = cand
                    break
            if got is None:
                active.remove(s)
                if equal:  # equal counts: stop at the first strategy that runs dry
                    active = []
                    break
                continue
            used.add(got[0].id)
            picked[s].append(got)
            if quotas[s] is not None and len(picked[s]) >= quotas[s]:
                active.remove(s)
    if equal:
        k = min(len(v) for v in picked.values())
        picked = {s: v[:k] for s, v in picked.items()}

    rows: list[tuple[int, ClaimPair, ClaimPair]] = []
    for s in STRATEGIES:
        for b, claim, extra in picked[s]:
            c = b.country
            base_meta = {"entity": c.name, "relation": b.relation, "object": b.obj,
                         "doc_id": c.doc_id, "source_kind": source}
            true_pair = ClaimPair(id=f"{b.id}/true", claim=b.claim, source=b.source,
                                  label="attributable", dataset=MINIWORLD,
                                  meta={**base_meta, "perturbed_id": f"{b.id}/{s}"})
            bad_pair = ClaimPair(id=f"{b.id}/{s}", claim=claim, source=b.source,
                                 label="not_attributable", dataset=MINIWORLD,
                                 error_type=STRATEGY_ERROR_TYPES[s], strategy=s,
                                 meta={**base_meta, "base_id": f"{b.id}/true",
                                       "true_claim": b.claim, **extra})
            rows.append((b.order, true_pair, bad_pair))
    rows.sort(key=lambda r: r[0])
    return [p for _, t, f in rows for p in (t, f)]


# --------------------------------------------------------------------------- App. F filter

_DOUBLED_WORD = re.compile(r"\b([a-z]+)\s+\1\b")  # "the the"; names such as "Pago Pago" are fine
_BROKEN = re.compile(r"\s{2,}|\s[,.;:]|[,;:]{2,}|\.\.(?!\.)")
_NEGATION = re.compile(r"\b(not|no|outside)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\d[\d,.]*\d|\d")


def _marks_its_error(p: ClaimPair) -> bool:
    """The perturbation carries the mark of its error type (App. F criterion 3)."""
    meta, claim = p.meta or {}, p.claim
    if p.strategy == "numerical_perturbation":
        true_numbers = set(_NUMBER.findall(meta.get("true_claim", "")))
        return bool(set(_NUMBER.findall(claim)) - true_numbers)
    if p.strategy == "paraphrase":
        return bool(_NEGATION.search(claim)) and not _NEGATION.search(meta.get("true_claim", ""))
    if p.strategy == "entity_confusion":
        return bool(meta.get("confused_with")) and meta["confused_with"] in claim
    if p.strategy == "multi_hop_graft":
        return bool(meta.get("grafted_object")) and meta["grafted_object"] in claim
    if p.strategy == "presupposition":
        return bool(meta.get("presupposed")) and claim != meta.get("true_claim")
    if p.strategy == "unanswerable_wrap":
        return bool(meta.get("added_detail")) and meta["added_detail"] in claim
    return True


def probe_filter(pairs: Sequence[ClaimPair]) -> tuple[list[ClaimPair], dict[str, int]]:
    """002 Appendix F's filter of generated probes, on what a rule can check.

    A perturbed pair is kept when (1) it is detectable: the claim differs from its true claim
    and the source does not state it; (2) it is fluent: capitalised, closed by a full stop, no doubled
    word or broken punctuation; (3) it targets its intended error type: the error type is its
    strategy's (Table 19 -> Table 20) and the claim carries that error's mark (a number not in
    the true claim, an added negation, the swapped entity, the grafted object, the presupposed
    or wrapped detail). The paper cross-checks (3) with GPT-4o-mini and drops about 15%; the
    mini-world's template perturbations satisfy (1)-(2) by construction, so this filter drops
    what a construction bug would let through. A dropped perturbation takes its attributable
    twin with it, keeping labels balanced. Returns ``(kept, counts by reason)``."""
    dropped: dict[str, int] = {"not_detectable": 0, "not_fluent": 0, "wrong_error_type": 0}
    bad: set[str] = set()
    for p in pairs:
        if p.label != "not_attributable" or p.strategy is None:
            continue
        meta, claim = p.meta or {}, p.claim.strip()
        if claim == meta.get("true_claim", "").strip() or mw.normalize(claim) in mw.normalize(p.source):
            reason = "not_detectable"
        elif not (claim[:1].isupper() or claim[:1].isdigit()) or not claim.endswith(".") or _DOUBLED_WORD.search(
                claim) or _BROKEN.search(claim):
            reason = "not_fluent"
        elif p.error_type != STRATEGY_ERROR_TYPES[p.strategy] or not _marks_its_error(p):
            reason = "wrong_error_type"
        else:
            continue
        dropped[reason] += 1
        bad |= {p.id, meta.get("base_id", "")}
    kept = [p for p in pairs if p.id not in bad]
    return kept, {"generated": len(pairs), "kept": len(kept), **dropped}
