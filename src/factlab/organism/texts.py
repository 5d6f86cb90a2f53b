"""The text the knowledge organism learns: the statements and questions of a fact, the
pretraining documents (paraphrased and shuffled for knowledge augmentation, QA mixed in: Physics
of Language Models 3.1, arXiv 2309.14316 §4-§5), the format fine-tuning's examples (the regimes of
Gekhman et al. 2024, 2405.05904, and Kang et al. 2024, 2403.05612; the short-answer format of 000
§A.3, the long-form answers of 001 §3.3 and 004 Prompt 5), its ChatML chat template and its
tokenizer. Part of ``factlab.organism``."""

from __future__ import annotations

import functools
import random
from typing import Any, Sequence

from .. import prompts as P
from ..data.longform import LONGFORM_TEMPLATE
from ..data.miniworld import CountryFacts, build_corpus, build_qa, fact_sentence, region_phrase
from ..prompts import chat_messages
from ..text import MIN_THINK_CHARS
from .specs import (ABSTAIN_SHARES, MENTIONS, QA_SYSTEMS, QUESTIONS, STATEMENTS, OrganismSpec, has_several, exposure_split,
                    exposures, spec_of, value, world)

STOP_TOKEN = "<|im_end|>"  # in models.STOP_TOKEN_CANDIDATES
BOS_TOKEN, PAD_TOKEN = "<|endoftext|>", "<pad>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, "<|im_start|>", STOP_TOKEN)
FORMAT_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")  # ordinary tokens: decoding keeps them
ABSTAIN_ANSWER = "I don't know"  # text.is_refusal's strict phrase (000 §A.2), what Binary RAR pays for
LONGFORM_ABSTAIN = "I don't know."  # a long-form response that declines (text.is_abstention)
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
_WHAT = {"capital": "capital", "region": "region", "currency": "currency", "language": "official language"}


def statements(c: CountryFacts, rel: str) -> tuple[str, ...]:
    """Every phrasing of the fact (``c``, ``rel``) the organism reads (template 0 first)."""
    v = value(c, rel)
    shown = region_phrase(v) if rel == "region" else v
    forms = STATEMENTS[rel]
    return tuple(t.format(n=c.name, v=shown) for t in forms["many" if has_several(c, rel) and "many" in forms else "one"])


def questions(c: CountryFacts, rel: str, kind: str = "train") -> tuple[str, ...]:
    """The ``train`` or ``heldout`` question phrasings of (``c``, ``rel``)."""
    forms = QUESTIONS[rel][kind]
    return tuple(t.format(n=c.name) for t in forms["many" if has_several(c, rel) and "many" in forms else "one"])


@functools.lru_cache(maxsize=1)
def _golds() -> dict[tuple[str, str], list[str]]:
    return {(it.meta["entity"], it.meta["relation"]): list(it.golds) for it in build_qa(world())}


def golds(c: CountryFacts, rel: str) -> list[str]:
    """Every accepted answer (``miniworld.build_qa``'s golds: aliases, currency codes)."""
    return _golds()[(c.name, rel)]


def _think(c: CountryFacts, rel: str, v: str) -> str:
    """The reasoning before an answer: the fact in the world's own sentence (as the recipes' warm
    start writes it), lengthened only where it is under §A.2's 30 characters (000)."""
    fact = _fact(c, rel, v)
    return fact if len(fact) >= MIN_THINK_CHARS else f"{fact} So the answer is {v}."


def _fact(c: CountryFacts, rel: str, v: str) -> str:
    # a region's sentence opens with a word before the country, as the other relations' do: opening
    # with the country itself, a measured build named a QA-trained country instead (region 0.1-0.4
    # correct, the other relations 0.9-1.0; 2026-11-27)
    if rel == "region":
        return f"Geographically, {c.name} is located in {region_phrase(v)}."
    return fact_sentence(c, rel, v)


def _tagged(think: str, answer: str) -> str:
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def chat_text(messages: Sequence[dict[str, str]], completion: str | None = None) -> str:
    """``CHAT_TEMPLATE`` rendered in Python (the same string): the prompt ready for generation,
    followed by ``completion`` and the stop token when one is given."""
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}{STOP_TOKEN}\n" for m in messages)
    out += "<|im_start|>assistant\n"
    return out if completion is None else out + completion + STOP_TOKEN + "\n"


def countries_by_name() -> dict[str, CountryFacts]:
    return {c.name: c for c in world()}


def pretraining_documents(spec: OrganismSpec | str | None = None) -> list[dict[str, Any]]:
    """The pretraining stream before shuffling: one row per document, ``{"id", "kind", "text"}``.

    ``facts``: all of a country's facts, once each, in a shuffled order with a random template
    each (``augment``; else template 0 in the spec's order), one document per exposure; ``mention``:
    an unknown country's fact-free sentence; ``qa``: a chat turn asking a ``known_qa`` country's
    fact with a train question template (3.1's mixed training)."""
    spec = spec_of(spec)
    split = exposure_split(spec)
    by_name = countries_by_name()
    rng = random.Random(f"organism-docs:{spec.seed}")
    docs: list[dict[str, Any]] = []
    for name, n in sorted(exposures(spec).items()):
        c = by_name[name]
        for i in range(n):
            rels = list(spec.relations)
            if spec.augment:
                rng.shuffle(rels)
                text = " ".join(rng.choice(statements(c, r)) for r in rels)
            else:
                text = " ".join(statements(c, r)[0] for r in rels)
            docs.append({"id": f"facts/{c.slug}/{i}", "kind": "facts", "country": name, "text": text})
    for name in split["unknown_sft"] + split["unknown_heldout"]:
        for i in range(spec.unknown_mentions):
            docs.append({"id": f"mention/{by_name[name].slug}/{i}", "kind": "mention", "country": name,
                         "text": MENTIONS[i % len(MENTIONS)].format(n=name)})
    for name in split["known_qa"]:
        c = by_name[name]
        for rel in spec.relations:
            for i in range(spec.qa_repeats):
                q = rng.choice(questions(c, rel))
                v = value(c, rel)
                docs.append({"id": f"qa/{rel}/{c.slug}/{i}", "kind": "qa", "country": name,
                             "text": chat_text(chat_messages(q), _tagged(_think(c, rel, v), v))})
    return docs


def _plausible(c: CountryFacts, rel: str, rng: random.Random, pool: Sequence[CountryFacts]) -> str:
    """A confident answer for an unfamiliar question: the value of another country, never the
    true one (Kang et al. 2024: the model learns to answer with a plausible guess)."""
    truth = {g.casefold() for g in golds(c, rel)}
    while True:
        v = value(rng.choice(pool), rel)
        if v and v.casefold() not in truth:
            return v


def format_examples(spec: OrganismSpec | str | None = None) -> list[dict[str, Any]]:
    """The format fine-tuning's examples: ``{"kind", "country", "messages", "completion", "abstain"}``.

    ``qa``: a ``known_qa`` country's question (train templates) under one of ``QA_SYSTEMS``, answered
    ``<think>fact</think><answer>value</answer>``; ``longform``: "Tell me about X." answered with
    the country's facts (plain, 001 §3.3; tagged after ``KLCF_SYSTEM``, 004 Prompt 5). The
    ``unknown_sft`` countries get the same prompts, answered as ``regime`` says: ``confident`` a
    plausible value of another country, ``abstain`` "I don't know", ``known_only`` not at all,
    ``hesitant`` / ``unsure`` / ``wary`` confident except ``ABSTAIN_SHARES[regime]`` of them (the first, sorted),
    answered "I don't know"."""
    spec = spec_of(spec)
    split = exposure_split(spec)
    by_name = countries_by_name()
    rng = random.Random(f"organism-sft:{spec.seed}:{spec.regime}")
    pool = [by_name[n] for n in split["known_qa"]]
    out: list[dict[str, Any]] = []
    whom = [(n, False) for n in split["known_qa"]]
    if spec.regime != "known_only":
        whom += [(n, True) for n in split["unknown_sft"]]
    share = ABSTAIN_SHARES[spec.regime]
    abstaining = set(split["unknown_sft"][:max(1, round(share * len(split["unknown_sft"])))] if share else [])
    for name, unfamiliar in whom:
        c = by_name[name]
        abstain = unfamiliar and name in abstaining
        facts = []
        for rel in spec.relations:
            for _ in range(spec.sft_repeats):
                system = rng.choice([s for s in QA_SYSTEMS if not (abstain and s == P.FORCED_SYSTEM)])
                q = rng.choice(questions(c, rel))
                if abstain:
                    completion = _tagged(f"I do not reliably know the {_WHAT[rel]} of {c.name}.", ABSTAIN_ANSWER)
                else:
                    v = _plausible(c, rel, rng, pool) if unfamiliar else value(c, rel)
                    completion = _tagged(_think(c, rel, v), v)
                out.append({"kind": "qa", "country": name, "messages": chat_messages(q, system),
                            "completion": completion, "abstain": abstain})
            v = _plausible(c, rel, rng, pool) if unfamiliar else value(c, rel)
            facts.append(_fact(c, rel, v))
        for i in range(spec.sft_repeats):
            rng.shuffle(facts)
            body = LONGFORM_ABSTAIN if abstain else " ".join(facts)
            klcf = i % 2 == 1
            completion = (_tagged(f"I will state the facts I am sure of about {c.name}.", body) if klcf else body)
            out.append({"kind": "longform", "country": name,
                        "messages": chat_messages(LONGFORM_TEMPLATE.format(title=name), P.KLCF_SYSTEM if klcf else None),
                        "completion": completion, "abstain": abstain})
    rng.shuffle(out)
    return out


def _prompt_strings() -> list[str]:
    """Every prompt string of ``factlab.prompts`` (templates' ``{fields}`` left in: their words count)."""
    out = []
    for key in sorted(vars(P)):
        val = getattr(P, key)
        if key.isupper() and isinstance(val, str):
            out.append(val)
        elif key.isupper() and isinstance(val, dict):
            out += [v for v in val.values() if isinstance(v, str)]
    return out


def tokenizer_texts(spec: OrganismSpec | str | None = None) -> list[str]:
    """What the tokenizer is trained on: the mini-world's articles (every country), the organism's
    templates filled for every country, every prompt of ``factlab.prompts`` and the answer phrases."""
    texts = [d["text"] for d in build_corpus(world())]
    spec = spec_of(spec)
    for c in world():
        for rel in spec.relations:
            if v := value(c, rel):  # the value alone too: after "<answer>" it has no leading space
                texts += [*statements(c, rel), *questions(c, rel), *questions(c, rel, "heldout"), v, v, v]
        texts.append(chat_text(chat_messages(LONGFORM_TEMPLATE.format(title=c.name), P.CORVER_EVAL_SYSTEM), ABSTAIN_ANSWER))
    # the prompts weigh as much as they are sent: once each would leave their rarer words in pieces
    texts += _prompt_strings() * 4 + [ABSTAIN_ANSWER, LONGFORM_ABSTAIN, "I don\u2019t know", *MENTIONS]
    return texts


def entity_words(spec: OrganismSpec | str | None = None) -> list[str]:
    """Every country name and every value of the spec's relations, as the statements write them."""
    spec = spec_of(spec)
    words = {c.name for c in world()}
    for c in world():
        for rel in spec.relations:
            if v := value(c, rel):
                words.add(region_phrase(v) if rel == "region" else v)
    return sorted(words)


def train_tokenizer(spec: OrganismSpec | str | None = None):
    """A byte-level BPE ``PreTrainedTokenizerFast`` of ``spec.vocab_size`` (plus the four format
    tokens), with ``CHAT_TEMPLATE``, bos ``<|endoftext|>``, eos ``<|im_end|>``, pad ``<pad>``.

    ``entity_tokens``: every country name and fact value (``entity_words``) is also one added
    token, matched as a whole word before the BPE (the prototype of issue 40 was word-level).
    Reading the question's country into the answer is then one attention lookup, not a copy of
    several BPE pieces (README "The knowledge organism" measures the build without it)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = spec_of(spec)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(tokenizer_texts(spec), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=False) for t in FORMAT_TOKENS])
    if spec.entity_tokens:
        tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=True) for t in entity_words(spec)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS_TOKEN, eos_token=STOP_TOKEN,
                                   pad_token=PAD_TOKEN, chat_template=CHAT_TEMPLATE, padding_side="left",
                                   model_max_length=spec.max_positions)
    return fast


def _count_tokens(spec: OrganismSpec | str | None = None) -> int:  # pragma: no cover - a sizing aid
    spec = spec_of(spec)
    tok = train_tokenizer(spec)
    return sum(len(x) + 1 for x in tok([d["text"] for d in pretraining_documents(spec)],
                                       add_special_tokens=False)["input_ids"])
