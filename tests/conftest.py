"""Shared fixtures: the embedded default model, loaded once per test session."""

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    from factlab import models

    return models.load_tokenizer()


@pytest.fixture(scope="session")
def model_and_tokenizer():
    from factlab import models

    return models.load_model(device="cpu")


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests skip, with the reason, where CUDA is absent."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False); run `make test-gpu` on a GPU box")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
