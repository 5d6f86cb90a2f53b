"""The gpu tier: the embedded model and the token-level advantages on CUDA agree with the CPU."""

import pytest
import torch

from factlab import models
from factlab.train.stepwise_grpo import token_level_advantages

pytestmark = pytest.mark.gpu


def test_greedy_generation_on_cuda_matches_cpu():
    prompt = "What is the capital of France?"
    outs = {}
    for device in ("cpu", "cuda"):
        model, tok = models.load_model(device=device)
        (gen,), = models.generate(model, tok, [models.chat_prompt(tok, prompt)], max_new_tokens=8, progress=False)
        outs[device] = gen.text
        assert next(model.parameters()).device.type == device
    assert outs["cuda"] == outs["cpu"] and "Paris" in outs["cpu"]


def test_token_level_advantages_on_cuda_match_cpu():
    torch.manual_seed(0)
    returns, mask = torch.randn(8, 16), (torch.rand(8, 16) > 0.2).long()
    cpu = token_level_advantages(returns, mask, num_generations=4)
    cuda = token_level_advantages(returns.cuda(), mask.cuda(), num_generations=4)
    assert torch.allclose(cpu, cuda.cpu(), atol=1e-5)
