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
