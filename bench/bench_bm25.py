"""BM25 retrieval with bm25s (factlab's BM25Retriever) vs rank_bm25's BM25Okapi.

Binary RAR retrieves C(x, y) with BM25 over a chunked datastore (001 §3.2 "Retrieval";
§4.3: 512-token chunks, top 8 per response) and §3.2 "Practical efficiency for online RL"
notes that retrieval can become the bottleneck of RL training. This compares the two
pure-Python BM25 libraries on the SAME chunks and the SAME queries in one run:

* chunks: the mini-world corpus chunked with ``chunk_documents(..., chunk_tokens=128)``
  (the corpus is small, so 128-token windows, not 512), replicated REPEAT times with
  distinct ids so the index is large enough to matter; each chunk is indexed as
  ``title\\ntext`` (``BM25Retriever(index_title=True)``, the default).
* queries: N strings, mini-world QA questions plus "Tell me about {title}." prompts.
* tokens: both sides use ``BM25Retriever.tokenize`` (bm25s' lowercasing + English
  stopwords, no stemmer), so they see identical tokens.

Index build times include the tokenization of the chunks on both sides. Query latency is
top-8 for all N queries in one batch (bm25s' batched ``retrieve``; rank_bm25 scores each
query against every chunk, then argpartition), query tokenization included. Scoring
differs slightly: factlab uses bm25s' Lucene BM25 (IDF log(1 + (N-n+.5)/(n+.5))),
BM25Okapi the Robertson IDF with an epsilon floor (k1=1.5, b=0.75 on both), so the top-1
agreement (same best chunk text; replicas tie) is reported rather than assumed.
"""

import time

import numpy as np
from rank_bm25 import BM25Okapi

from factlab.corpus.retrieval import BM25Retriever, Chunk, chunk_documents
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl
from factlab.models import load_tokenizer

REPEAT, N, K, CHUNK_TOKENS = 20, 200, 8, 128


def main() -> None:
    world = ensure_world()
    docs = list(read_jsonl(world["corpus"]))
    base = chunk_documents(docs, load_tokenizer(), chunk_tokens=CHUNK_TOKENS)
    chunks = [Chunk(id=f"{c.id}#{r}", doc_id=f"{c.doc_id}#{r}", title=c.title, text=c.text,
                    start_token=c.start_token) for r in range(REPEAT) for c in base]
    questions = [q["question"] for q in read_jsonl(world["qa_heldout"])]
    titles = [f"Tell me about {d['title']}." for d in docs]
    queries = (questions[:N - N // 4] + titles[:N // 4])[:N]
    doc_texts = [f"{c.title}\n{c.text}" if c.title else c.text for c in chunks]

    # warm-up: one small build and query per side (imports, numba/numpy first calls)
    warm = BM25Retriever().build(chunks[:200])
    warm.search(queries[:4], k=K)
    w_ok = BM25Okapi(warm.tokenize(doc_texts[:200]))
    w_ok.get_scores(warm.tokenize(queries[:1])[0])

    t0 = time.perf_counter()
    retriever = BM25Retriever().build(chunks)
    t_build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    okapi = BM25Okapi(retriever.tokenize(doc_texts))
    t_build_r = time.perf_counter() - t0

    t0 = time.perf_counter()
    hits = retriever.search(queries, k=K)
    t_query_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    top_r = []
    for toks in retriever.tokenize(queries):
        scores = okapi.get_scores(toks)
        best = np.argpartition(-scores, K)[:K]
        best = best[np.argsort(-scores[best], kind="stable")]
        top_r.append([int(i) for i in best if scores[i] > 0])
    t_query_r = time.perf_counter() - t0

    both = [(h, r) for h, r in zip(hits, top_r) if h and r]
    agree = sum(h[0].chunk.text == chunks[r[0]].text for h, r in both) / max(1, len(both))
    print(f"chunks={len(chunks)} ({len(base)} x {REPEAT}, {CHUNK_TOKENS} tokens) queries={len(queries)} "
          f"top-k={K}; queries with hits: bm25s {sum(bool(h) for h in hits)}, "
          f"rank_bm25 {sum(bool(r) for r in top_r)}")
    print(f"bm25s (BM25Retriever): build {t_build_s:.3f}s, query {1e3 * t_query_s:.1f} ms "
          f"({1e3 * t_query_s / len(queries):.3f} ms/query)")
    print(f"rank_bm25 (BM25Okapi): build {t_build_r:.3f}s, query {1e3 * t_query_r:.1f} ms "
          f"({1e3 * t_query_r / len(queries):.3f} ms/query)")
    print(f"top-1 agreement (same best chunk text, {len(both)} queries): {agree:.3f}")
    print(f"ratio query latency rank_bm25 / bm25s: {t_query_r / t_query_s:.2f}x")
    print(f"ratio index build rank_bm25 / bm25s: {t_build_r / t_build_s:.2f}x")


if __name__ == "__main__":
    main()
