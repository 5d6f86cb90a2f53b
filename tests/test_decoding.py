"""factlab.decoding: shared-prefix prefill and finished-row dropping give transformers' own
greedy tokens."""

import pytest

from factlab import models, prompts
from factlab.decoding import common_prefix_length


def test_common_prefix_length():
    assert common_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 9]]) == 2
    assert common_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # every row keeps a token of its own
    assert common_prefix_length([[4], [4, 5]]) == 0 and common_prefix_length([[7, 1], [8, 1]]) == 0
    assert common_prefix_length([]) == 0


@pytest.mark.parametrize("system", [prompts.corver_eval_system(False), None])
def test_greedy_tokens_equal_transformers_generate(model_and_tokenizer, system):
    """With a shared system prompt (the prefix path) and without one (no common prefix); rows of
    different lengths, some stopping early and dropped, some hitting the length limit."""
    model, tok = model_and_tokenizer  # the real model: only it ends rows early (the dropped-row path)
    questions = ["What is the capital of France?", "Name a country that borders Peru.", "Hi", "What is 2+2?",
                 "In which region of the world is Kenya located? Answer in one word.", "Say yes."]
    chats = [models.chat_prompt(tok, q, system=system) for q in questions]
    ours = models.generate(model, tok, chats, max_new_tokens=40, batch_size=6, progress=False)
    theirs = models.generate(model, tok, chats, max_new_tokens=40, batch_size=6, progress=False, engine="transformers")
    assert [g[0].token_ids for g in ours] == [g[0].token_ids for g in theirs]
    assert [g[0].finished for g in ours] == [g[0].finished for g in theirs]
    assert any(g[0].finished for g in ours) and "Paris" in ours[0][0].text


def test_sampling_is_seeded_and_returns_n_per_prompt(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    chats = [models.chat_prompt(tok, "Name a colour."), models.chat_prompt(tok, "Name an animal.")]
    a = models.generate(model, tok, chats, max_new_tokens=12, temperature=1.0, top_p=0.9, num_return_sequences=3,
                        seed=5, progress=False)
    b = models.generate(model, tok, chats, max_new_tokens=12, temperature=1.0, top_p=0.9, num_return_sequences=3,
                        seed=5, progress=False)
    assert [len(x) for x in a] == [3, 3] and [[g.token_ids for g in x] for x in a] == [[g.token_ids for g in x] for x in b]
    assert len({tuple(g.token_ids) for x in a for g in x}) > 1  # sampling, not greedy
    with pytest.raises(ValueError, match="engine"):
        models.generate(model, tok, chats, engine="vllm")


def test_next_token_logits_equal_one_row_at_a_time(tiny_model_and_tokenizer):
    import torch

    from factlab.decoding import next_token_logits

    model, tok = tiny_model_and_tokenizer
    shared = tok("You are a careful judge. Answer yes or no.", add_special_tokens=False)["input_ids"]
    rows = [shared + tok(q, add_special_tokens=False)["input_ids"]
            for q in (" Is Paris in France?", " Is the sky green today?", " Is 2+2 four?")]
    got = next_token_logits(model, rows, pad_id=tok.eos_token_id)
    assert got.shape == (3, model.config.vocab_size)
    for row, logits in zip(rows, got):
        with torch.inference_mode():
            alone = model(input_ids=torch.tensor([row])).logits[0, -1].float()
        assert torch.allclose(logits, alone, atol=1e-3)


def test_generation_builds_no_autograd_graph(tiny_model_and_tokenizer):
    """A KV cache that carries an autograd graph grows memory and time with every step (a
    120-token verdict took minutes and 24 GB before this was fixed)."""
    import torch

    from factlab import models

    model, tok = tiny_model_and_tokenizer
    seen = []
    handle = model.register_forward_hook(lambda mod, args, out: seen.append(torch.is_grad_enabled()))
    try:
        models.generate(model, tok, ["Hello there", "What is the capital of France?"], max_new_tokens=4,
                        progress=False)
    finally:
        handle.remove()
    assert seen and not any(seen)


def test_reserved_layer_holds_what_concatenation_holds():
    """``ReservedLayer``: after prefill, tokens, dropped rows, a repeated prefix and growth past
    its capacity, its keys / values equal transformers' concatenating ``DynamicLayer``'s."""
    import torch
    from transformers.cache_utils import DynamicLayer

    from factlab.decoding import ReservedLayer

    torch.manual_seed(0)
    ours, theirs = ReservedLayer(capacity=5), DynamicLayer()
    ops = [("update", 1, 3), ("repeat", 4), ("update", 4, 2), ("update", 4, 1), ("select", [0, 2, 3]),
           ("update", 3, 1), ("update", 3, 4), ("select", [2]), ("update", 1, 1)]  # 3 + 2 + 1 > 5: growth
    for op in ops:
        if op[0] == "update":
            k, v = torch.randn(op[1], 2, op[2], 8), torch.randn(op[1], 2, op[2], 8)
            got, want = ours.update(k, v), theirs.update(k.clone(), v.clone())
            assert all(torch.equal(a, b) for a, b in zip(got, want))
        elif op[0] == "repeat":
            ours.batch_repeat_interleave(op[1]), theirs.batch_repeat_interleave(op[1])
        else:
            idx = torch.tensor(op[1])
            ours.batch_select_indices(idx), theirs.batch_select_indices(idx)
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
        assert ours.get_seq_length() == theirs.get_seq_length()
    assert ours.get_seq_length() == 12 and ours._key_buffer.shape[-2] >= 12


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_reserved_cache_decodes_the_tokens_the_dynamic_cache_does(tiny_model_and_tokenizer, monkeypatch, temperature):
    """The same tokens with transformers' ``DynamicCache``, greedy and sampled (the same RNG
    draws), through the shared-prefix prefill, rows stopping at different steps and dropped,
    and a capacity too small for the completions (the growth path)."""
    import torch
    from transformers import DynamicCache

    from factlab import decoding

    model, tok = tiny_model_and_tokenizer
    shared = tok("You are a careful judge. Answer in one word.", add_special_tokens=False)["input_ids"]
    rows = [shared + tok(q, add_special_tokens=False)["input_ids"]
            for q in (" Is Paris in France?", " Name a colour.", " Is 2+2 four? Think first.", " Hi")]
    stops = list(range(0, model.config.vocab_size, 5))  # a fifth of the vocabulary: rows stop at different steps

    def run(max_new_tokens=24):
        torch.manual_seed(3)
        return decoding.decode(model, rows, max_new_tokens=max_new_tokens, stop_ids=stops, pad_id=tok.eos_token_id,
                               temperature=temperature)

    ours, small = run(), None
    real = decoding.reserved_cache
    monkeypatch.setattr(decoding, "reserved_cache", lambda config, capacity: real(config, capacity - 20))
    small = run()
    monkeypatch.setattr(decoding, "reserved_cache", lambda config, capacity: DynamicCache(config=config))
    theirs = run()
    assert ours == theirs and small == theirs
    lengths = {len(ids) for ids, _ in theirs}
    assert len(lengths) > 1 and any(done for _, done in theirs)  # rows stopped at different steps
