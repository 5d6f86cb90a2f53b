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
