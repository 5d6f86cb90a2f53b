"""DAPO on TRL (003 §4.1, Table 7): the preset's GRPOConfig, and dynamic sampling inside a real
training step: groups whose rewards agree are dropped and refilled from the dataloader's next
batches (no replacement, the same batch on every process), a batch that cannot be filled stops
with a clear error, and the schedule's length matches verl's. Also the trainer's rule that a
reward of None leaves its completion out of the group (issue 26.2)."""

import pytest
import torch

from factlab import config, models
from factlab.sections import DynamicSamplingSection, GRPOSection, LoraSection
from factlab.data.types import QAItem
from factlab.rewards import RewardSpec
from factlab.rewards.registry import RewardSet
from factlab.train import run
from factlab.recipes.corver import CorVerConfig, qa_rows
from factlab.train.dapo import DynamicSamplingError, RefillRepeatSampler, local_slice, step_counts
from factlab.train.grpo import grpo_args
from factlab.recipes.k2v import K2VConfig
from factlab.train.trainer import TrainerExtension, leave_out_failed_rows


def _cfg(**grpo):
    """01's smoke params on the tiny model: these tests check the sampling loop, not what it learns."""
    cfg = config.load_config("params/01_corver_lm.yaml", CorVerConfig, {"model": {"name": models.TINY_MODEL}})
    g = cfg.grpo.model_copy(update={**dict(num_generations=2, per_device_train_batch_size=2,
                                           gradient_accumulation_steps=2, max_completion_length=6, max_steps=1,
                                           save_steps=1), **grpo})
    return cfg.model_copy(update={"grpo": g, "lora": LoraSection(r=2, alpha=4, target_modules=["q_proj"])})


class FlatThenVaried:
    """Rewards that agree within each group for the first ``flat_calls`` calls (every group is
    dropped), then differ by completion length."""

    __name__ = "flat_then_varied"

    def __init__(self, flat_calls):
        self.flat_calls, self.calls = flat_calls, 0

    def __call__(self, prompts=None, completions=(), completion_ids=None, **_):
        self.calls += 1
        if self.calls <= self.flat_calls:
            return [1.0 + 1e-9 * i for i in range(len(completions))]  # float noise counts as agreement
        return [float(len(ids)) + 0.1 * i for i, ids in enumerate(completion_ids)]


ROWS = qa_rows([QAItem(f"q{i}", f"What is the capital of country number {i}?", ["x"]) for i in range(6)])


def _rewards(fn):
    return RewardSet(specs=[RewardSpec(name="format")], funcs=[fn], weights=[1.0])


def test_dapo_preset_reaches_trl():
    g = GRPOSection.model_validate({"preset": "dapo", "per_device_train_batch_size": 8,
                                           "gradient_accumulation_steps": 1, "num_generations": 8})
    args = grpo_args(g, "/tmp/unused")
    assert (args.loss_type, args.epsilon, args.epsilon_high, args.beta) == ("dapo", 0.2, 0.28, 0.0)
    assert g.dynamic_sampling.enabled
    explicit = GRPOSection.model_validate({"preset": "dapo", "beta": 0.01, "per_device_train_batch_size": 8,
                                                  "gradient_accumulation_steps": 1, "num_generations": 8})
    assert explicit.beta == 0.01  # keys the params set win


def test_dynamic_sampling_drops_agreeing_groups_and_refills(tmp_path):
    cfg = _cfg(dynamic_sampling=DynamicSamplingSection(enabled=True, max_rounds=2), preset="dapo")
    reward = FlatThenVaried(flat_calls=1)
    res = run(cfg, ROWS, _rewards(reward), tmp_path / "run")
    frame = res.steps_frame()
    assert res.steps == 1
    assert frame["dynamic/rounds"].iloc[0] == 1.0  # one extra round refilled the batch
    assert frame["dynamic/dropped_groups"].iloc[0] == 2.0 and frame["dynamic/kept_groups"].iloc[0] == 0.0
    assert reward.calls == 2


def test_dynamic_sampling_gives_up_with_a_clear_error(tmp_path):
    cfg = _cfg(dynamic_sampling=DynamicSamplingSection(enabled=True, max_rounds=1), preset="dapo")
    with pytest.raises(DynamicSamplingError, match=r"0 of 2 groups have reward variance after 1 extra generation"):
        run(cfg, ROWS, _rewards(FlatThenVaried(flat_calls=99)), tmp_path / "run")


def test_dynamic_sampling_can_fill_with_flat_groups_when_asked(tmp_path):
    cfg = _cfg(dynamic_sampling=DynamicSamplingSection(enabled=True, max_rounds=1, on_exhausted="fill"), preset="dapo")
    res = run(cfg, ROWS, _rewards(FlatThenVaried(flat_calls=99)), tmp_path / "run")
    frame = res.steps_frame()
    assert res.steps == 1 and frame["dynamic/filled_groups"].iloc[0] == 2.0 and frame["dynamic/rounds"].iloc[0] == 1.0


# ---------------------------------------------------------------- None leaves a completion out (issue 26.2)


class Capture(TrainerExtension):
    """Keeps every scored batch's rewards and TRL's sequence advantages."""

    def __init__(self):
        self.batches = []

    def on_scored(self, trainer, batch):
        self.batches.append((batch.rewards_per_func.clone(), trainer.last_sequence_advantages.clone(),
                             trainer.left_out_completions))


class Scripted:
    def __init__(self, name, values):
        self.__name__, self.values = name, values

    def __call__(self, prompts=None, completions=(), **_):
        return [self.values[i % len(self.values)] for i in range(len(completions))]


def test_leave_out_failed_rows_blanks_the_whole_row():
    nan = float("nan")
    got = leave_out_failed_rows(torch.tensor([[nan, 0.5], [1.0, 0.5], [nan, nan]]))
    assert torch.isnan(got[0]).all() and got[1].tolist() == [1.0, 0.5] and torch.isnan(got[2]).all()


def test_a_none_factual_reward_leaves_the_completion_out_whatever_the_other_rewards_say(tmp_path):
    """K2V-like: the factual reward cannot read completion 0's verdict (None) while the auxiliary
    reward scores it. TRL alone would sum it to 0.5 and rank it with the wrong answers; left out,
    it gets advantage 0 and the group's baseline is the other three."""
    cfg = _cfg(num_generations=4, per_device_train_batch_size=4, gradient_accumulation_steps=1)
    factual, aux = Scripted("factual", [None, 1.0, 0.0, 0.0]), Scripted("aux", [0.5])
    rewards = RewardSet(specs=[RewardSpec(name="format"), RewardSpec(name="qa_judge")], funcs=[factual, aux],
                        weights=[1.0, 1.0])
    cap = Capture()
    res = run(cfg, ROWS[:1], rewards, tmp_path / "run", extensions=[cap])
    rpf, adv, left_out = cap.batches[0]
    assert torch.isnan(rpf[0]).all() and rpf[1].tolist() == [1.0, 0.5]
    assert adv[0].item() == 0.0  # left out: no learning signal either way
    assert adv[1].item() > 0 > adv[2].item() and adv[2].item() == pytest.approx(adv[3].item())
    assert adv[1:].sum().item() == pytest.approx(0.0, abs=1e-5)  # baseline over the three scored completions
    assert left_out == 1 and res.steps_frame()["rewards/left_out_frac"].iloc[0] == pytest.approx(0.25)


# ---------------------------------------------------------------- refills from the dataloader (issue 26.4)


class Varied:
    """Rewards that always differ within a group; records every prompt it scored."""

    __name__ = "varied"

    def __init__(self):
        self.prompts = []

    def __call__(self, prompts=None, completions=(), **_):
        self.prompts += [p[-1]["content"] if isinstance(p, list) else p for p in prompts]
        return [float(i) for i in range(len(completions))]


def test_refills_consume_the_dataloaders_next_batches_without_replacement(tmp_path):
    """generation_batches = 2: every step generates this batch and the next one not yet begun
    from the dataloader (verl's gen_batch_size = 2 x train batch) and trims to one batch's
    groups, so the epoch ends sooner; no prompt is drawn twice. The dataloader keeps one batch
    ahead of the trainer, so the order is (b0, b2), (b1, b4), then b3 and b5 alone: the epoch
    has run out of batches to refill from."""
    cfg = _cfg(num_generations=2, per_device_train_batch_size=2, gradient_accumulation_steps=1, max_steps=-1,
               num_train_epochs=1.0, dynamic_sampling=DynamicSamplingSection(enabled=True, generation_batches=2),
               preset="dapo")
    reward = Varied()
    res = run(cfg, ROWS, _rewards(reward), tmp_path / "run")
    assert res.steps == 4  # 6 one-prompt batches, not 6 steps
    assert sorted(reward.prompts[::2]) == sorted(r["prompt"][-1]["content"] for r in ROWS)  # each prompt once
    frame = res.steps_frame()
    assert frame["dynamic/refill_batches"].tolist() == [1.0, 1.0, 0.0, 0.0] and (frame["dynamic/rounds"] == 0).all()


def test_refill_sampler_keeps_trls_order_and_never_repeats_a_batch():
    from trl.trainer.utils import RepeatSampler

    data = list(range(12))
    trl = list(RepeatSampler(data, mini_repeat_count=2, batch_size=2, repeat_count=3, seed=7))
    ours = RefillRepeatSampler(data, mini_repeat_count=2, batch_size=2, repeat_count=3, seed=7)
    assert list(ours) == trl  # untouched, it is TRL's sampler
    ours = RefillRepeatSampler(data, mini_repeat_count=2, batch_size=2, repeat_count=3, seed=7)
    it = iter(ours)
    head = [next(it) for _ in range(12)]  # the first batch, repeated 3 times
    taken = ours.take_next_batch()
    rest = list(it)
    assert head == trl[:12] and taken == trl[12:16]  # the next batch, G repeats, once
    assert rest == trl[24:] and set(taken).isdisjoint(rest)
    # two processes draw the same batch (same seed) and each takes its own slice
    rows = [0, 0, 1, 1, 2, 2, 3, 3]
    assert local_slice(rows, 0, 2) == [0, 0, 1, 1] and local_slice(rows, 1, 2) == [2, 2, 3, 3]
    with pytest.raises(ValueError):
        local_slice(rows, 0, 3)


def test_refill_sampler_carries_into_the_next_epochs_order():
    """verl's DAPO batch outlives the dataloader loop: a refill at an epoch's end takes the next
    epoch's first batch (drawn in that epoch's own order), which the next epoch then skips; with
    no epoch left there is nothing to take."""
    from trl.trainer.utils import RepeatSampler

    data = list(range(6))
    trl = RepeatSampler(data, mini_repeat_count=2, batch_size=2, seed=3)
    epoch1, epoch2 = list(trl), list(trl)
    ours = RefillRepeatSampler(data, mini_repeat_count=2, batch_size=2, seed=3, epochs=2)
    assert ours.take_next_batch() is None  # nothing has begun
    assert list(ours) == epoch1
    taken = ours.take_next_batch()  # epoch 1 is used up: the next epoch's first batch
    assert taken == epoch2[:4]
    assert list(ours) == epoch2[4:]  # epoch 2 yields only what is left
    assert ours.take_next_batch() is None  # the last epoch has ended
    once = RefillRepeatSampler(data, mini_repeat_count=2, batch_size=2, seed=3, epochs=1)
    assert list(once) == epoch1 and once.take_next_batch() is None


def test_refill_sampler_streams_epochs_for_a_run_of_max_steps():
    """A run of max_steps: the epochs' orders are one stream; a refill takes its next batch and
    every epoch still yields a whole epoch's count (3 batches here), so refills never shorten it."""
    from trl.trainer.utils import RepeatSampler

    data = list(range(6))
    trl = RepeatSampler(data, mini_repeat_count=2, batch_size=2, seed=3)
    stream = [list(trl) for _ in range(3)]
    flat = [i for epoch in stream for i in epoch]
    batches = [flat[k:k + 4] for k in range(0, len(flat), 4)]
    ours = RefillRepeatSampler(data, mini_repeat_count=2, batch_size=2, seed=3, stream=True)
    assert ours.take_next_batch() is None  # nothing has begun
    it = iter(ours)
    first = [next(it) for _ in range(4)]
    taken = [ours.take_next_batch(), ours.take_next_batch(), ours.take_next_batch()]
    rest = list(it)
    assert first == batches[0] and taken == batches[1:4]  # refills run into the next epoch's order
    assert rest == batches[4][:] + batches[5][:]  # the epoch still yields 3 batches: the stream's next two
    assert list(ours) == [i for b in batches[6:9] for i in b]


def test_a_run_of_max_steps_trains_every_step_however_many_batches_refills_take(tmp_path):
    """generation_batches = 2 takes two batches a step, so one epoch of 6 batches gives 4 steps
    (the test above); with max_steps = 5 transformers plans one epoch, and the run must still
    take 5 steps (organism_k2v's 60-step arms stopped at 22-28 before the stream)."""
    cfg = _cfg(num_generations=2, per_device_train_batch_size=2, gradient_accumulation_steps=1, max_steps=5,
               save_steps=5, dynamic_sampling=DynamicSamplingSection(enabled=True, generation_batches=2),
               preset="dapo")
    res = run(cfg, ROWS, _rewards(Varied()), tmp_path / "run")
    assert res.steps == 5
    assert res.steps_frame()["dynamic/refill_batches"].tolist() == [1.0] * 5


class FlatOnCall:
    """Rewards that agree within the group on the given calls (1-based), else vary."""

    __name__ = "flat_on_call"

    def __init__(self, flat):
        self.flat, self.calls = set(flat), 0

    def __call__(self, prompts=None, completions=(), completion_ids=None, **_):
        self.calls += 1
        if self.calls in self.flat:
            return [1.0] * len(completions)
        return [float(len(ids)) + 0.1 * i for i, ids in enumerate(completion_ids)]


def test_a_refill_at_an_epochs_end_carries_into_the_next_epoch_instead_of_stopping_the_run(tmp_path):
    """K2V trains 2 epochs with on_exhausted: raise. The last batch of epoch 1 (call 6 of 6
    one-prompt batches) is flat: its refill comes from epoch 2's order, the run goes on, and
    epoch 2 has one batch fewer (6 + 5 steps)."""
    cfg = _cfg(num_generations=2, per_device_train_batch_size=2, gradient_accumulation_steps=1, max_steps=-1,
               num_train_epochs=2.0, dynamic_sampling=DynamicSamplingSection(enabled=True, max_rounds=1),
               preset="dapo")
    assert cfg.grpo.dynamic_sampling.on_exhausted == "raise"
    reward = FlatOnCall({6})
    res = run(cfg, ROWS, _rewards(reward), tmp_path / "run")
    frame = res.steps_frame()
    assert res.steps == 11 and reward.calls == 12  # every prompt twice, one refill across the boundary
    assert frame["dynamic/refill_batches"].tolist() == [0.0] * 5 + [1.0] + [0.0] * 5
    assert (frame["dynamic/filled_groups"] == 0).all()


def test_the_full_k2v_schedule_matches_verls_step_count():
    """Table 7: 64 prompts a step, mini-batches of 32 (two updates), generation batch 192, 2 epochs.
    For 19,000 training questions verl takes at most 98 x 2 = 196 generation steps and 392
    updates; factlab's full params give the same bounds (TRL's planned count is the upper line)."""
    cfg = config.load_config("params/04_k2v.yaml", K2VConfig)
    # the file ships one GPU's values; its comment gives 8 GPUs' (issue 42: the same global batch)
    eight = cfg.grpo.model_copy(update={"gradient_accumulation_steps": 8, "steps_per_generation": 16})
    for g, world in ((cfg.grpo, 1), (eight, 8)):
        per_update = g.per_device_train_batch_size * g.gradient_accumulation_steps * world // g.num_generations
        per_generation = g.per_device_train_batch_size * g.steps_per_generation * world // g.num_generations
        assert (per_update, per_generation) == (32, 64), world
    counts = step_counts(19_000, prompts_per_generation=per_generation,
                         updates_per_generation=g.steps_per_generation // g.gradient_accumulation_steps,
                         epochs=g.num_train_epochs, generation_batches=g.dynamic_sampling.generation_batches)
    assert g.optim == "adamw_torch"  # verl trains with AdamW, not CorVer's 8-bit default
    assert counts["max_generation_steps"] == 2 * (19_000 // 192) == 196
    assert counts["max_updates"] == 392
    assert counts["planned_updates"] == 2 * (19_000 // 64) * 2  # what TRL's progress bar plans
