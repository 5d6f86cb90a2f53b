"""The knowledge organism: a small causal LM pretrained from scratch on the mini-world, with
controlled exposure, so a paper's reward can change what a model knows on a CPU in minutes.

Why (issue 40): the embedded SmolLM2-135M takes 15-35 s a GRPO step on 2 cores and already
knows some country facts, which nothing controls. The field's tool for testing claims about
knowledge exactly is a model organism trained on a controlled world:

- Physics of Language Models 3.1 (arXiv 2309.14316, §4-§5): facts are stored extractably only
  with knowledge augmentation (paraphrased templates, permuted sentences); with one phrasing per
  person, QA extraction on people whose QA was never trained is 9.7% against 96.6%; mixing QA
  into pretraining ("mixed training") also works. Here: the known countries' facts are stated
  with paraphrased templates in shuffled order; QA is mixed in for ``qa_fraction`` of them; the
  others are the test of extraction, asked with question templates held out from all training.
- 3.3 (2404.05405): about 2 bits per parameter at 1,000 exposures, 1 bit at 100, from 1M
  parameters (depth >= 2; tied embeddings for tiny Llamas): ``known_exposures`` >= 100.
- Gekhman et al. 2024 (2405.05904) and Kang et al. 2024 (2403.05612): how unfamiliar fine-tuning
  examples are supervised decides how a model answers what it does not know. ``regime``:
  ``confident`` (unknown countries' questions answered with a plausible value of another
  country: the base organism hallucinates on unknown countries, the problem the papers fix),
  ``abstain`` (answered "I don't know", the phrase Binary RAR's strict rule pays for),
  ``known_only`` (no unknown country in the fine-tuning) or ``hesitant`` (confident, but
  ``HESITANT_SHARE`` of the unfamiliar countries answered "I don't know": a base that still
  hallucinates on unknown countries yet samples an abstention now and then, as a pretrained LM
  does, so that a reward paying for abstention has something to reinforce; the issue's prototype
  learned abstention from 2 such examples, the confident organism from none). ``unsure``: the
  same with a third of them (8 of 24), ``wary`` with two thirds (16 of 24), because the hesitant base
  sampled no abstention on held-out unknown countries at all (``bench/probe_abstention_sampling.py``,
  8 samples of the 160 questions at temperature 1 under 001's abstain prompt: hesitant 0, unsure 1,
  wary 8, abstain 172 of 1,280). The abstention is learnt per country more than as a trait.

What it is: a byte-level BPE tokenizer (HF ``tokenizers``; every country name and fact value one
added token, ``entity_tokens``) trained on the mini-world's text and
every prompt of ``factlab.prompts`` (so no prompt is dropped for length and nothing maps to an
unknown token; ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` are ordinary tokens), a
ChatML chat template ending turns with ``<|im_end|>`` (a stop token ``models`` knows), and a
transformers ``LlamaForCausalLM`` with tied embeddings, pretrained by a plain torch loop (AdamW,
one-cycle) on documents of a country's facts, then format fine-tuned (prompt-masked SFT) into the
``<think>…</think><answer>…</answer>`` short-answer format (000 §A.3) under the prompts 01-06 use,
and into long-form answers ("Tell me about X.", plain as 001 §3.3 and tagged as 004 Prompt 5).

Exposure (``exposure_split``, seeded, recorded in the model folder as ``exposures.json``): the
countries holding every relation of the spec (and whose statements the truth oracle reads,
``_readable``) are shuffled; the first ``known`` are known
(``known_exposures`` statements per fact), then ``rare_per_dose`` countries per dose of
``rare_doses``, and the rest are unknown (0; their name appears in ``unknown_mentions`` fact-free
sentences). An exposure is one statement of the fact in the pretraining stream (one pass).

Caching: ``build`` writes ``<cache>/organism/<fingerprint>/`` (the pretrained base under
``organism/base-<pretrain fingerprint>/``, shared by the regimes), under ``paths.build_lock``,
written in a temporary folder and renamed. The fingerprint hashes the spec, the world's facts and
``ORGANISM_VERSION``; ``models.model_fingerprint("organism")`` is this fingerprint, so warm
starts, judge caches and self-filter caches follow the spec, never the name.

The package's modules, bottom to top: ``specs`` (the spec, its regimes, the templates, the
fingerprint, the exposure split), ``texts`` (the pretraining documents, the format fine-tuning's
examples, the chat template, the tokenizer), ``training`` (the plain torch loop and its batches),
``evaluation`` (greedy completions, the report's questions, cloze, summary), ``builder`` (build
and cache; 3.1's protocol), ``asking`` (load, ask, the report and the corpus) and ``qa`` (the QA
sets of the notebooks). This ``__init__`` re-exports their public names: ``organism.build``,
``organism.exposures`` and ``organism.ask`` are docs/design.md's "Public API contract".
"""

from __future__ import annotations

from .asking import ask, corpus_path, load, read_report
from .builder import build, extraction_after_qa_finetune, model_dir
from .evaluation import answer_rows, cloze, complete, eval_questions, evaluate, summary
from .qa import qa_items, qa_split
from .specs import (ABSTAIN_SHARES, DEFAULT, MENTIONS, ORGANISM_VERSION, QUESTIONS, REGIMES, SPECS, TINY, OrganismSpec,
                    exposure_bucket, exposure_split, exposures, fingerprint, is_organism, pretrain_fingerprint, spec_of,
                    value, world)
from .texts import (ABSTAIN_ANSWER, CHAT_TEMPLATE, FORMAT_TOKENS, LONGFORM_ABSTAIN, STOP_TOKEN, chat_text, entity_words,
                    format_examples, golds, pretraining_documents, questions, statements, tokenizer_texts,
                    train_tokenizer)

__all__ = ["ORGANISM_VERSION", "OrganismSpec", "SPECS", "DEFAULT", "TINY", "REGIMES", "build", "exposures", "ask",
           "load", "cloze", "fingerprint", "pretrain_fingerprint", "spec_of", "is_organism", "exposure_split",
           "exposure_bucket", "statements", "questions", "pretraining_documents", "format_examples",
           "tokenizer_texts", "train_tokenizer", "chat_text", "CHAT_TEMPLATE", "STOP_TOKEN", "ABSTAIN_ANSWER",
           "LONGFORM_ABSTAIN", "read_report", "corpus_path", "eval_questions", "answer_rows", "qa_split", "qa_items",
           "ABSTAIN_SHARES", "MENTIONS", "QUESTIONS", "FORMAT_TOKENS", "world", "value", "golds", "entity_words",
           "model_dir", "complete", "evaluate", "summary", "extraction_after_qa_finetune"]
