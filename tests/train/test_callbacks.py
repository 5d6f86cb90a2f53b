"""Binary RAR's utility early stopping (001 §4.3): stop on a >10% drop, keep the model of the
last check that passed."""

import json
from types import SimpleNamespace

import pytest
from transformers import TrainerControl

from factlab.train.callbacks import UtilityEarlyStopping, relative_drops


class FakeModel:
    """Stands in for the trained model: its ``version`` is the step it has reached."""

    def __init__(self):
        self.training, self.version = True, 0

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode

    def save_pretrained(self, path):
        from pathlib import Path

        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "model.json").write_text(json.dumps({"version": self.version}))


def test_relative_drops():
    assert relative_drops({"a": 0.5, "b": 0.0, "c": 1.0}, {"a": 0.4, "b": 0.3}) == {"a": pytest.approx(0.2), "b": 0.0}


def test_stops_on_a_drop_and_keeps_the_last_passing_model(tmp_path):
    scores = iter([0.50, 0.48, 0.40])  # baseline, step 2 (-4%: passes), step 4 (-20%: stop)
    model = FakeModel()
    cb = UtilityEarlyStopping(lambda m: {"qa": next(scores)}, eval_every=2, keep_dir=tmp_path / "kept")
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    control = TrainerControl()
    cb.on_train_begin(None, state, control, model=model)
    assert cb.kept_step == 0 and json.loads((tmp_path / "kept/model.json").read_text()) == {"version": 0}
    for step in (1, 2, 3, 4):
        state.global_step = model.version = step
        cb.on_step_end(None, state, control, model=model)
        if control.should_training_stop:
            break
    assert cb.stopped_at == 4 and control.should_training_stop
    assert cb.kept_step == 2 and json.loads((tmp_path / "kept/model.json").read_text()) == {"version": 2}
    assert [h["step"] for h in cb.history] == [0, 2, 4] and model.training  # put back in train mode


def test_no_drop_runs_to_the_end_and_bad_settings_fail():
    cb = UtilityEarlyStopping(lambda m: {"qa": 0.5}, eval_every=1)
    state, control = SimpleNamespace(global_step=0, is_world_process_zero=True), TrainerControl()
    cb.on_train_begin(None, state, control, model=FakeModel())
    for step in (1, 2):
        state.global_step = step
        cb.on_step_end(None, state, control, model=FakeModel())
    assert cb.stopped_at is None and cb.kept_step == 2 and not control.should_training_stop
    with pytest.raises(ValueError, match="eval_every"):
        UtilityEarlyStopping(lambda m: {}, eval_every=0)
    with pytest.raises(ValueError, match="max_relative_drop"):
        UtilityEarlyStopping(lambda m: {}, max_relative_drop=1.5)
