"""Shared fixtures: the embedded default model and the tiny random model, each loaded once per
test session, and ``tiny_params`` (a params file that runs a notebook on the tiny model)."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    from factlab import models

    return models.load_tokenizer()


@pytest.fixture(scope="session")
def model_and_tokenizer():
    """SmolLM2-135M: for tests that need a real model's behaviour (say why where it is used)."""
    from factlab import models

    return models.load_model(device="cpu")


@pytest.fixture(scope="session")
def tiny_model_and_tokenizer():
    """``tiny-random-smollm2`` (2 layers x 64, random weights, the real tokenizer): for tests of
    wiring, shapes and bookkeeping, where what the model says does not matter."""
    from factlab import models

    return models.load_model(models.TINY_MODEL, device="cpu")


def write_tiny_params(path: Path, notebook: str, base: Path, overrides: str = "") -> Path:
    """Write ``path``: ``notebook``'s params ``base`` plus ``overrides`` (YAML text), resolved,
    with every model name that names the embedded model (policy, judge, teacher, extractor,
    generator, ...) pointed at the tiny random model (``runner.retarget_models``)."""
    from factlab import models, runner

    path = Path(path)
    draft = path.with_name(path.stem + ".draft.yaml")
    draft.write_text(f"base: {base}\n{overrides}", encoding="utf-8")
    return runner.retarget_models(notebook, draft, path, models.TINY_MODEL)


@pytest.fixture
def tiny_params(tmp_path):
    """``tiny_params("01_corver", "grpo: {max_steps: 1}")``: the path of a params file on the
    notebook's smoke params, the overrides, and the tiny model everywhere."""
    root = Path(__file__).resolve().parents[1]

    def make(notebook: str, overrides: str = "") -> Path:
        return write_tiny_params(tmp_path / f"{notebook}_tiny.yaml", notebook,
                                 root / "params" / f"{notebook}_lm.yaml", overrides)

    return make


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests skip, with the reason, where CUDA is absent."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False); run `make test-gpu` on a GPU box")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
