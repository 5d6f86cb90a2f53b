"""Data loaders: the bundled mini-world and the QA benchmarks of 000 §4."""

from __future__ import annotations

from .types import QAItem, read_jsonl, write_jsonl

__all__ = ["QAItem", "read_jsonl", "write_jsonl", "load_eval_set"]


def load_eval_set(cfg, world_dir: str | None = None) -> list[QAItem]:
    """Load one evaluation set described by a ``config.EvalDataConfig``.

    ``miniworld`` reads the bundled mini-world (built on first use) split ``train`` or
    ``heldout``; any other name goes through the benchmark registry
    (``factlab.data.benchmarks``) by HF id or local JSONL.
    """
    import random

    if cfg.name == "miniworld":
        from .miniworld import ensure_world

        paths = ensure_world(world_dir)
        key = {"train": "qa_train", "heldout": "qa_heldout"}.get(cfg.split)
        if key is None:
            raise ValueError(f"miniworld split must be 'train' or 'heldout', got '{cfg.split}'")
        items = [QAItem.from_dict(d) for d in read_jsonl(paths[key])]
        if cfg.limit and len(items) > cfg.limit:
            keep = sorted(random.Random(cfg.seed).sample(range(len(items)), cfg.limit))
            items = [items[i] for i in keep]
        return items
    from .benchmarks import load_benchmark

    return load_benchmark(cfg.name, path=cfg.path, hf_id=cfg.hf_id,
                          split=None if cfg.split == "heldout" else cfg.split,
                          limit=cfg.limit, seed=cfg.seed)
