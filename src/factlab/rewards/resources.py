"""The shared resources of one run, built once and handed to every reward that needs them.

A judge, the BM25 datastores, the infini-gram index, the triplet extractor, CorVer's scorer
and the claim verifier are expensive to build and hold caches worth sharing: two rewards
that need a judge get the same judge, and a run that mixes CorVer with Binary RAR builds the
index and the datastore once each. Everything is built on first use from the params sections
of a ``TrainingConfig`` (``model``, ``world``, ``judge``, ``datastore``, ``index``,
``extractor``, ``verifier``), so a run that never asks for a judge never loads one.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, Callable, Iterable, Literal

from ..corpus.infinigram import CorpusIndex, IndexSection, ensure_index
from ..corpus.retrieval import Datastore, ensure_datastore
from ..data.longform import LongformPrompt
from ..data.miniworld import ensure_world
from ..judges import Judge, make_judge
from ..models import load_tokenizer
from ..organism import corpus_path as organism_corpus_path, is_organism
from ..sections import JudgeSection
from .corver import CorVerArgs, CorVerScorer
from .rar import ClaimVerifier
from .triplets import TripletExtractor, extractor_from

log = logging.getLogger(__name__)

__all__ = ["Resources", "index_section"]


def index_section(section: IndexSection) -> IndexSection:
    """``section`` with an organism name as ``corpus`` replaced by that organism's pretraining
    corpus JSONL (``organism.corpus_path``, building the organism on first use); otherwise as is."""
    if section.corpus and is_organism(section.corpus):
        return section.model_copy(update={"corpus": str(organism_corpus_path(section.corpus))})
    return section


def _is_judge_key(key: Any) -> bool:
    return isinstance(key, tuple) and bool(key) and key[0] == "judge"


class Resources:
    """Lazily built, memoized resources of one run (see the module docstring).

    ``cfg`` is an experiment config with the sections named above; ``judge_cache=False``
    builds judges that neither read nor write the answer cache (honest cost measurements)."""

    def __init__(self, cfg: Any, *, judge_cache: bool | None = None, progress: bool = True):
        self.cfg, self.judge_cache, self.progress = cfg, judge_cache, progress
        self._built: dict[Any, Any] = {}

    def memo(self, key: Any, build: Callable[[], Any]) -> Any:
        """The resource ``key`` of this run, built by ``build()`` the first time it is asked for.
        A key that is a tuple starting with ``"judge"`` marks a judge: ``built_judges`` lists it
        and ``uncached_judges`` leaves it out (a reward that builds its own judge, e.g. SEVA's
        verifier, shares it this way and is counted with the run's judges)."""
        if key not in self._built:
            self._built[key] = build()
        return self._built[key]

    def built_judges(self) -> list[Judge]:
        """The distinct judges built so far (the run's, the sections', the rewards' own), in
        the order they were built: what a comparison sums judge calls and tokens over
        (``rewards.base.judge_totals``)."""
        return list({id(v): v for k, v in self._built.items() if _is_judge_key(k)}.values())

    def uncached_judges(self) -> "Resources":
        """A view sharing every resource except the judges, which skip the answer cache."""
        other = copy.copy(self)
        other.judge_cache = False
        other._built = {k: v for k, v in self._built.items() if not (_is_judge_key(k) or (isinstance(k, tuple) and
                                                                                           k[0] == "claim_verifier"))}
        return other

    # ------------------------------------------------------------ data and models

    def world(self) -> dict[str, Path]:
        """The mini-world files (built on first use)."""
        return self.memo("world", lambda: ensure_world(self.cfg.world))

    def policy_tokenizer(self):
        return self.memo("policy_tokenizer", lambda: load_tokenizer(self.cfg.model.name))

    # ------------------------------------------------------------ judges

    @property
    def prefill(self) -> bool:
        """Whether judge answers start with their JSON key (``judge.prefill``)."""
        return self.cfg.judge.prefill

    def judge(self, max_new_tokens: int | None = None) -> Judge:
        """The run's judge (``judge:`` section); ``max_new_tokens`` overrides its budget."""
        overrides: dict[str, Any] = {}
        if max_new_tokens is not None:
            overrides["max_new_tokens"] = max_new_tokens
        if self.judge_cache is not None:
            overrides["cache"] = self.judge_cache
        key = ("judge", tuple(sorted(overrides.items())))
        return self.memo(key, lambda: make_judge(self.cfg.judge, **overrides))

    def judge_for(self, section: JudgeSection | None, max_new_tokens: int | None = None) -> Judge:
        """The judge a reward's own ``JudgeSection`` names (e.g. KLCF's checklist verifier, a
        model other than the run's judge), built once per run; None: the run's ``judge()``."""
        if section is None:
            return self.judge(max_new_tokens)
        overrides: dict[str, Any] = {}
        if max_new_tokens is not None:
            overrides["max_new_tokens"] = max_new_tokens
        if self.judge_cache is not None:
            overrides["cache"] = self.judge_cache
        key = ("judge", "section", section.model_dump_json(), tuple(sorted(overrides.items())))
        return self.memo(key, lambda: make_judge(section, **overrides))

    # ------------------------------------------------------------ retrieval

    def _datastore_corpus(self) -> str | Path:
        return self.cfg.datastore.corpus or self.world()["corpus"]

    def datastore(self, kind: Literal["rar", "veriscore"] = "rar") -> Datastore:
        """BM25 over ``datastore.chunk_tokens`` chunks (``rar``) or ``veriscore_chunk_tokens``
        chunks (``veriscore``); one object when both sizes are equal."""
        d = self.cfg.datastore
        chunk = {"rar": d.chunk_tokens, "veriscore": d.veriscore_chunk_tokens}[kind]
        tokenizer = d.tokenizer or self.cfg.judge.model
        return self.memo(("datastore", chunk),
                          lambda: ensure_datastore(d, self._datastore_corpus(), tokenizer, chunk))

    def datastores(self) -> dict[str, Datastore]:
        return {kind: self.datastore(kind) for kind in ("rar", "veriscore")}

    def precache(self, prompts: Iterable[LongformPrompt]) -> list[LongformPrompt]:
        """Pre-cache every datastore for ``prompts`` (prompt text plus reference, 001 §3.2) and
        return the prompts that keep at least ``datastore.min_precache_docs`` documents in the
        RAR datastore (§3.3 discards instances with fewer than three; the rest are logged)."""
        prompts = list(prompts)
        texts = {p.id: p.prompt for p in prompts}
        refs = {p.id: p.reference for p in prompts if p.reference}
        for ds in {id(s): s for s in self.datastores().values()}.values():
            ds.precache(texts, k_docs=self.cfg.datastore.precache_docs, references=refs)
        need, rar = self.cfg.datastore.min_precache_docs, self.datastore("rar")
        kept = [p for p in prompts if rar.cached_documents(p.id) >= need]
        if len(kept) < len(prompts):
            log.warning("%d of %d prompts retrieved fewer than %d documents and are discarded (001 §3.3)",
                        len(prompts) - len(kept), len(prompts), need)
        return kept

    def claim_verifier(self) -> ClaimVerifier:
        """Claim extraction + per-claim verification on the VeriScore datastore (001 §4.2)."""
        v = self.cfg.verifier
        key = ("claim_verifier", self.judge_cache)
        return self.memo(key, lambda: ClaimVerifier(self.judge(v.max_new_tokens), self.datastore("veriscore"),
                                                     k_per_claim=v.top_k, max_claims=v.max_claims,
                                                     prefill=self.prefill))

    # ------------------------------------------------------------ co-occurrence

    def index(self) -> CorpusIndex:
        """The infini-gram index (``index:`` section; default: the mini-world corpus with the
        policy's tokenizer, built into the cache once). An organism name as ``index.corpus``
        (``index: {corpus: organism}``: the policy's, ``experiment.TrainingConfig``) is that
        organism's pretraining corpus (``organism.corpus_path``), so counts follow exposure."""
        return self.memo("index", lambda: ensure_index(index_section(self.cfg.index), self.world()["corpus"],
                                                        self.cfg.model.name, progress=self.progress))

    def extractor(self) -> TripletExtractor:
        return self.memo("extractor", lambda: extractor_from(self.cfg.extractor))

    def scorer(self, args: CorVerArgs | None = None, count_limit: int | None | Literal["tau_2"] = "tau_2",
               fresh: bool = False) -> CorVerScorer:
        """CorVer's sentence scorer on this index and extractor. ``count_limit`` stops counting
        at tau_2 by default (Eq. 2 cannot tell 20 from 20,000), whatever ``args.count_thresholds``
        sets it to; None gives exact counts for audits. ``fresh``: a new scorer with empty caches
        (to time the reward honestly)."""
        args = args or CorVerArgs()
        if count_limit == "tau_2":
            count_limit = args.count_thresholds[1]
        if count_limit is not None and count_limit < args.count_thresholds[1]:
            raise ValueError(f"count_limit {count_limit} is below tau_2 {args.count_thresholds[1]}: "
                             f"the top tier of Eq. (2) would be lost")
        key = ("scorer", args.model_dump_json(), count_limit)

        def build() -> CorVerScorer:
            index, window = self.index(), args.window
            return CorVerScorer(self.extractor(), lambda words: index.cooccurrence(list(words), window,
                                                                                   limit=count_limit), args)

        return build() if fresh else self.memo(key, build)
