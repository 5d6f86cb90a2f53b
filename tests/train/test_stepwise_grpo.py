"""Stepwise GRPO (000 §3.4, §B.4): token-level advantages and the TRL seam."""

import pytest
import torch

from factlab.rewards import TokenShaping
from factlab.train.stepwise_grpo import TokenLevelAdvantages, pad_shaping, token_level_advantages
from factlab.train.trainer import FactlabGRPOTrainer, group_advantage_spread


def _trl_sequence_advantages(rewards: torch.Tensor, G: int) -> torch.Tensor:
    """TRL 1.16's sum_then_normalize / scale_rewards='group' formula, written out."""
    g = rewards.view(-1, G)
    mean = g.mean(dim=1).repeat_interleave(G)
    std = g.std(dim=1).repeat_interleave(G)  # unbiased, as trl.trainer.utils.nanstd
    return (rewards - mean) / (std + 1e-4)


def test_zero_shaping_gives_the_sequence_advantage_on_every_token():
    rewards = torch.tensor([3.0, -2.0, -2.0, 0.0, 1.0, 1.0, -2.0, 3.0])
    mask = torch.tensor([[1] * 5, [1] * 3 + [0] * 2, [1] * 5, [1] + [0] * 4] * 2)
    returns = rewards.unsqueeze(1).expand(8, 5).clone()
    adv = token_level_advantages(returns, mask, num_generations=4)
    expected = _trl_sequence_advantages(rewards, 4).unsqueeze(1).expand(8, 5) * mask
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.all(adv[mask == 0] == 0)


def _group(n_correct: int, n_wrong: int, T: int = 10):
    """R^r of 3.0 (GOOD + format) or -2.0 (BAD - format) on every token of T-token completions."""
    r = torch.tensor([3.0] * n_correct + [-2.0] * n_wrong)
    return r.unsqueeze(1).repeat(1, T), torch.ones(len(r), T), r


def test_uniform_correctness_gives_shaping_sized_advantages():
    """000 §4 / §D: one -0.3 sentence in an all-correct group must not outweigh correctness."""
    returns, mask, r = _group(16, 0)
    returns[3, 2:6] += -0.3  # one unsupported sentence in one completion
    adv = token_level_advantages(returns, mask, 16, response_returns=r)
    mixed_returns, mixed_mask, mixed_r = _group(15, 1)
    wrong = token_level_advantages(mixed_returns, mixed_mask, 16, response_returns=mixed_r)[15]
    assert adv.abs().max() <= wrong.abs().max()  # 3.75: the lone wrong completion's |A|
    assert adv[3, 2:6].max() < 0 < adv[3, 0] and adv.abs().max() < 0.31
    # the paper's literal rule (per-completion means as R^r) blows the same sentence up
    literal = token_level_advantages(returns, mask, 16)
    assert literal.abs().max() > 3.0


def test_equal_returns_on_every_token_give_zero_advantages():
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]] * 4)
    for value in (2.5, -0.3):
        returns = torch.full((8, 5), value)
        for rr in (None, torch.full((8,), 2.5), torch.full((8,), value)):
            adv = token_level_advantages(returns, mask, 4, response_returns=rr)
            assert torch.count_nonzero(adv) == 0, (value, rr)


def test_sequence_part_is_trl_and_shaping_is_centred_in_reward_units():
    r = torch.tensor([3.0, -2.0, -2.0, 3.0])
    shaping = torch.tensor([[0.1, 0.1, -0.3, 0.0], [0.0] * 4, [-0.3] * 4, [0.1] * 4])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]])
    adv = token_level_advantages(r.unsqueeze(1) + shaping, mask, 4, response_returns=r)
    sbar = torch.tensor([(0.1 + 0.1 - 0.3) / 3, 0.0, -0.3, 0.1])
    expected = _trl_sequence_advantages(r, 4).unsqueeze(1) + shaping - sbar.mean()
    assert torch.allclose(adv, expected * mask, atol=1e-6)
    # two sentences of one response get opposite local advantages in a uniform group (000 §3.4)
    same = torch.zeros(3)
    shaped = torch.tensor([[0.5, 0.5, -0.2, -0.2], [0.1, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 0.0]])
    adv = token_level_advantages(shaped, torch.ones(3, 4), num_generations=3, response_returns=same)
    assert adv[0, 0] > 0 > adv[0, 3]


@pytest.mark.parametrize("scale", ["batch", "none"])
def test_other_scalings_follow_trl(scale):
    rewards = torch.tensor([1.0, 0.0, 2.0, 5.0])
    returns = rewards.unsqueeze(1).repeat(1, 3)
    adv = token_level_advantages(returns, torch.ones(4, 3), num_generations=2, scale_rewards=scale)
    centred = rewards - rewards.view(-1, 2).mean(1).repeat_interleave(2)
    expected = centred if scale == "none" else centred / (rewards.std() + 1e-4)
    assert torch.allclose(adv[:, 0], expected, atol=1e-6)
    with pytest.raises(ValueError, match="scale_rewards"):
        token_level_advantages(returns, torch.ones(4, 3), 2, scale_rewards="groupwise")


def test_groups_split_across_processes_are_normalized_together():
    """Each process sees its rows; the gather supplies everyone's per-row values, then its own
    slice is used."""
    torch.manual_seed(0)
    returns, mask = torch.randn(8, 6), (torch.rand(8, 6) > 0.3).long()
    mask[:, 0] = 1
    r = torch.randn(8)
    full = token_level_advantages(returns, mask, num_generations=8, response_returns=r)
    means = (returns * mask).sum(1) / mask.sum(1)
    everyone = torch.stack([r, means - r], dim=1)  # what accelerator.gather returns: every process's rows
    for p in (0, 1):
        rows = slice(4 * p, 4 * p + 4)
        part = token_level_advantages(returns[rows], mask[rows], num_generations=8, gather=lambda local: everyone,
                                      process_index=p, response_returns=r[rows])
        assert torch.allclose(part, full[rows], atol=1e-6)


def test_unscorable_rows_and_empty_completions_get_zero_advantage():
    returns = torch.tensor([[float("nan")] * 2, [1.0, 1.0], [0.0, 0.0], [2.0, 2.0]])
    mask = torch.tensor([[1, 1], [1, 1], [0, 0], [1, 1]])
    r = torch.tensor([float("nan"), 1.0, 0.0, 2.0])
    assert torch.equal(token_level_advantages(returns, mask, 4, response_returns=r),
                       token_level_advantages(returns, mask, 4))
    adv = token_level_advantages(returns, mask, num_generations=4)
    assert torch.all(adv[0] == 0) and torch.all(adv[2] == 0)
    # the NaN row is left out of the baseline (nanmean 1.0) and scale (nanstd of 1, 0, 2 = 1.0)
    assert adv[3, 0].item() == pytest.approx(1 / (1 + 1e-4)) and adv[1, 0].item() == 0.0
    with pytest.raises(ValueError, match="groups of 3"):
        token_level_advantages(returns, mask, num_generations=3)


def test_group_advantage_spread():
    adv = torch.tensor([[1.0, 3.0], [0.0, 0.0], [2.0, 9.0], [2.0, 9.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 0], [1, 0]])
    # completion means: 2, 0 | 2, 2  -> spreads 2 and 0 (a collapsed group)
    assert group_advantage_spread(adv, mask, 2).tolist() == [2.0, 0.0]
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantage_spread(adv, mask, 3)
    # TRL's own (B,) sequence advantages: the completions' values themselves
    assert group_advantage_spread(torch.tensor([1.0, -1.0, 0.5, 0.5]), None, 2).tolist() == [2.0, 0.0]


def test_pad_shaping_checks_lengths():
    out = pad_shaping([TokenShaping([0.1, -0.3]), TokenShaping([])], [2, 0], width=3)
    assert torch.allclose(out, torch.tensor([[0.1, -0.3, 0.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="completion 0 has 1 values for 2 tokens"):
        pad_shaping([TokenShaping([0.1])], [2], width=3)


# --- the real TRL seam: SmolLM2, real sampling -------------------------------------------------

def _grpo_setup(model, tok, tmp_path_factory):
    from datasets import Dataset
    from trl import GRPOConfig

    from factlab import prompts
    from factlab.rewards.qa import FormatReward, JudgeReward

    rows = [{"prompt": [{"role": "system", "content": prompts.CORVER_TRAIN_SYSTEM},
                        {"role": "user", "content": q}], "golds": g}
            for q, g in [("What is the capital of France?", ["Paris"]),
                         ("What is the capital of Japan?", ["Tokyo"])]]
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("grpo")), per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=16, max_steps=1, report_to="none",
                      use_cpu=True, bf16=False, beta=0.0, seed=42, save_strategy="no", disable_tqdm=True)
    return model, tok, Dataset.from_list(rows), args, [JudgeReward(), FormatReward()]


@pytest.fixture(scope="module")
def grpo_setup(tiny_model_and_tokenizer, tmp_path_factory):
    """The tiny model: these tests compare two trainers' arithmetic on the same samples. The
    trainers put the session's shared model in training mode; it is handed back in eval mode."""
    yield _grpo_setup(*tiny_model_and_tokenizer, tmp_path_factory)
    tiny_model_and_tokenizer[0].eval()


@pytest.fixture(scope="module")
def real_grpo_setup(model_and_tokenizer, tmp_path_factory):
    """SmolLM2-135M: it ends some rollouts on a stop token (random weights never do)."""
    yield _grpo_setup(*model_and_tokenizer, tmp_path_factory)
    model_and_tokenizer[0].eval()


def _score(trainer, ds, seed=0):
    trainer.model.train()
    torch.manual_seed(seed)
    batch = [dict(ds[0]) for _ in range(4)] + [dict(ds[1]) for _ in range(4)]
    return trainer._generate_and_score_completions(batch)


def test_stepwise_without_shaping_equals_plain_trl_grpo(grpo_setup):
    from trl import GRPOTrainer

    model, tok, ds, args, funcs = grpo_setup
    plain = _score(GRPOTrainer(model=model, processing_class=tok, reward_funcs=funcs, args=args,
                               train_dataset=ds), ds)
    stepwise = FactlabGRPOTrainer(model=model, processing_class=tok, reward_funcs=funcs, args=args,
                                  train_dataset=ds, extensions=[TokenLevelAdvantages()], fast_generation=False)
    out = _score(stepwise, ds)
    assert torch.equal(plain["completion_ids"], out["completion_ids"])  # same seed, same samples
    m = out["completion_mask"].bool()
    assert out["advantages"].shape == out["completion_ids"].shape
    seq = plain["advantages"].unsqueeze(1).expand_as(out["advantages"])
    assert torch.allclose(out["advantages"][m], seq[m], atol=1e-6)
    assert torch.allclose(stepwise.last_sequence_advantages, plain["advantages"])
    logged = stepwise._metrics["train"]
    assert logged["advantages/min"][-1] <= logged["advantages/max"][-1]
    groups = plain["advantages"].view(-1, 4)
    spread = groups.max(1).values - groups.min(1).values
    assert logged["advantages/group_spread"][-1] == pytest.approx(spread.mean().item(), abs=1e-5)
    assert logged["advantages/collapsed_group_frac"][-1] == pytest.approx((spread < 1e-6).float().mean().item())


def test_shaping_moves_token_advantages_inside_the_trainer(grpo_setup):
    model, tok, ds, args, funcs = grpo_setup

    def first_half_bonus(texts, ids, rows):
        return [TokenShaping([0.5 if t < len(x) // 2 else 0.0 for t in range(len(x))], {"alignment_rate": 1.0})
                for x in ids]

    ext = TokenLevelAdvantages(first_half_bonus)
    trainer = FactlabGRPOTrainer(model=model, processing_class=tok, reward_funcs=funcs, args=args,
                                 train_dataset=ds, extensions=[ext])
    out = _score(trainer, ds)
    adv, mask = out["advantages"], out["completion_mask"]
    row = int(torch.argmax(mask.sum(1)))
    n = int(mask[row].sum())
    assert n >= 2 and adv[row, 0] > adv[row, n - 1]  # the bonus half is ahead of the rest
    assert trainer._metrics["train"]["stepwise/alignment_rate"][-1] == 1.0

    def wrong_length(texts, ids, rows):
        return [TokenShaping([0.0]) for _ in ids]

    ext.token_shaping = wrong_length
    with pytest.raises(ValueError, match="token shaping for completion"):
        _score(trainer, ds)


def test_token_level_advantages_refuse_a_liger_fused_loss(grpo_setup):
    """A fused Liger GRPO loss takes one advantage per completion; (B, T) advantages must not
    reach it silently (TRL 1.16's own loss takes them, tested above)."""
    import copy

    model, tok, ds, args, funcs = grpo_setup
    liger = copy.deepcopy(args)
    liger.use_liger_loss = True
    with pytest.raises(ValueError, match="Liger"):
        FactlabGRPOTrainer(model=model, processing_class=tok, reward_funcs=funcs, args=liger, train_dataset=ds,
                           extensions=[TokenLevelAdvantages()])


def test_fast_rollouts_are_sampled_completions_ending_in_eos(real_grpo_setup):
    """Rollouts through factlab.decoding: G completions per prompt, TRL's layout (the stop
    token kept as the last id of a finished completion), reproducible under one seed."""
    model, tok, ds, args, funcs = real_grpo_setup
    trainer = FactlabGRPOTrainer(model=model, processing_class=tok, reward_funcs=funcs, args=args, train_dataset=ds,
                                 extensions=[TokenLevelAdvantages()])
    a, b = _score(trainer, ds), _score(trainer, ds)
    assert torch.equal(a["completion_ids"], b["completion_ids"])
    ids, mask = a["completion_ids"], a["completion_mask"]
    assert ids.shape[0] == 8 and 0 < int(mask.sum(1).max()) <= 16
    eos = set(trainer.eos_token_ids)
    for row, m in zip(ids, mask):
        n = int(m.sum())
        if n < 16:  # stopped early: its last kept id is the stop token
            assert int(row[n - 1]) in eos
    assert len({tuple(r[:int(m.sum())].tolist()) for r, m in zip(ids, mask)}) > 1  # sampled, not one greedy text
