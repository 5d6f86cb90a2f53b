"""Secrets stay out of files and logs; a key never travels unencrypted to another machine
unless params say so; the judge cache never hands one server's or setting's answers to another."""

import logging

import pytest

from factlab import config
from factlab.config import ConfigError, JudgeSection, dump_config, redact_url
from factlab.judges import JudgeError, OpenAIJudge, TransformersJudge


@pytest.mark.parametrize("url, shown", [
    ("https://user:s3cret@api.example.com/v1", "https://***@api.example.com/v1"),
    ("https://api.example.com/v1?api_key=s3cret&model=x", "https://api.example.com/v1?api_key=***&model=x"),
    ("http://h:8000/v1?token=s3cret", "http://h:8000/v1?token=***"),
    ("http://h/v1?key=s3cret", "http://h/v1?key=***"),
    ("http://h/v1?access_token=s3cret&x=1", "http://h/v1?access_token=***&x=1"),
    ("http://h/v1?secret=s3cret", "http://h/v1?secret=***"),
    ("http://h/v1?user=al&password=s3cret", "http://h/v1?user=al&password=***"),
    ("https://acct.blob.example.net/c?sv=2024&sig=s3cret%3D", "https://acct.blob.example.net/c?sv=2024&sig=***"),
    ("https://h/v1?expires=9&signature=s3cret", "https://h/v1?expires=9&signature=***"),
    ("https://b.s3.example.com/o?X-Amz-Credential=AKIA1&X-Amz-Signature=s3cret",
     "https://b.s3.example.com/o?X-Amz-Credential=***&X-Amz-Signature=***"),
    ("http://h/v1?monkey=banana&model=x", "http://h/v1?monkey=banana&model=x"),  # not a secret's name
    ("http://localhost:8000/v1", "http://localhost:8000/v1"),
    (None, None),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_config_dump_and_judge_messages_never_show_url_credentials(tmp_path, caplog):
    cfg = JudgeSection(backend="openai", base_url="https://user:s3cret@api.example.com/v1?key=s3cret")
    assert cfg.base_url.startswith("https://user:s3cret@")  # the run itself uses the real URL
    assert "s3cret" not in dump_config(cfg) and "s3cret" not in str(cfg.model_dump(mode="json"))
    j = OpenAIJudge("m", cfg.base_url, max_retries=0, timeout_s=0.2, cache=None)
    assert "s3cret" not in repr(j)
    with caplog.at_level(logging.WARNING), pytest.raises(JudgeError) as e:
        OpenAIJudge("m", "http://user:s3cret@127.0.0.1:9/v1", max_retries=1, backoff_s=0.0, cache=None).judge(["q"])
    assert "s3cret" not in str(e.value) and "***@127.0.0.1" in str(e.value)
    assert "s3cret" not in caplog.text and "retrying" in caplog.text


def test_a_key_is_refused_over_plain_http_to_another_host(monkeypatch):
    monkeypatch.setenv("FACTLAB_TEST_API_KEY", "k")
    with pytest.raises(ValueError, match=r"unencrypted.*allow_key_over_http"):
        JudgeSection(backend="openai", base_url="http://judge.example.com/v1", api_key_env="FACTLAB_TEST_API_KEY")
    # https, loopback, opted in, or no key set: accepted
    JudgeSection(backend="openai", base_url="https://judge.example.com/v1", api_key_env="FACTLAB_TEST_API_KEY")
    JudgeSection(backend="openai", base_url="http://127.0.0.1:8000/v1", api_key_env="FACTLAB_TEST_API_KEY")
    JudgeSection(backend="openai", base_url="http://judge.example.com/v1", api_key_env="FACTLAB_TEST_API_KEY",
                 allow_key_over_http=True)
    JudgeSection(backend="openai", base_url="http://judge.example.com/v1", api_key_env="FACTLAB_TEST_UNSET_API_KEY")
    # the same rule when the request is made (the key may be set after params load)
    j = OpenAIJudge("m", "http://judge.example.com/v1", api_key_env="FACTLAB_TEST_API_KEY", cache=None)
    with pytest.raises(JudgeError, match="unencrypted"):
        j._headers()
    assert OpenAIJudge("m", "http://localhost:1/v1", api_key_env="FACTLAB_TEST_API_KEY",
                       cache=None)._headers()["Authorization"] == "Bearer k"


def test_params_file_with_key_over_http_fails_at_load_with_the_key_path(tmp_path, monkeypatch):
    monkeypatch.setenv("FACTLAB_TEST_API_KEY", "k")
    p = tmp_path / "p.yaml"
    p.write_text("base: {}\njudge: {{backend: openai, base_url: 'http://10.0.0.5:8000/v1', "
                 "api_key_env: FACTLAB_TEST_API_KEY}}\n".format(config.__file__.replace("src/factlab/config.py",
                                                                                        "params/02_binary_rar_lm.yaml")))
    from factlab.recipes.rar import RARConfig
    with pytest.raises(ConfigError, match=r"judge.base_url"):
        config.load_config(p, RARConfig)


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "HOME", "AWS_SECRET_ACCESS_KEY", "MY_SERVICE_TOKEN", "PATH",
                                  "OPENAI_API_KEY_FILE"])
def test_a_variable_that_is_not_an_api_key_is_refused_at_load(monkeypatch, name):
    monkeypatch.setenv(name, "ghp_not-for-the-judge")
    with pytest.raises(ValueError, match=rf"\${name} does not look like an API key variable"):
        JudgeSection(backend="openai", base_url="https://judge.example.com/v1", api_key_env=name)
    with pytest.raises(JudgeError, match="does not look like an API key"):  # nothing is built, nothing is sent
        OpenAIJudge("m", "http://localhost:1/v1", api_key_env=name, cache=None)
    # named explicitly in params: accepted
    JudgeSection(backend="openai", base_url="https://judge.example.com/v1", api_key_env=name, allowed_key_envs=[name])
    assert OpenAIJudge("m", "http://localhost:1/v1", api_key_env=name, allowed_key_envs=[name],
                       cache=None)._headers()["Authorization"] == "Bearer ghp_not-for-the-judge"


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "FACTLAB_TEST_API_KEY", "API_KEY", "HF_TOKEN"])
def test_api_key_variables_and_provider_tokens_are_accepted(name):
    JudgeSection(backend="openai", base_url="https://judge.example.com/v1", api_key_env=name)
    OpenAIJudge("m", "http://localhost:1/v1", api_key_env=name, cache=None)


def test_params_naming_a_non_key_variable_fail_at_check_with_the_key_path(tmp_path, capsys):
    from factlab.cli import main

    p = tmp_path / "p.yaml"
    p.write_text("base: {}\njudge: {{api_key_env: GITHUB_TOKEN}}\n".format(
        config.__file__.replace("src/factlab/config.py", "params/02_binary_rar_lm.yaml")))
    assert main(["check", "02_binary_rar", "--params", str(p)]) == 2
    assert "'judge.api_key_env': $GITHUB_TOKEN does not look like an API key" in capsys.readouterr().err


def test_httpx_request_log_never_shows_url_credentials(caplog, monkeypatch):
    import httpx

    def answer(request):
        return httpx.Response(200, json={"choices": [{"message": {"content": "yes"}}]})

    j = OpenAIJudge("m", "http://alice:hunter2pw@127.0.0.1:9/v1?api_key=k3yk3y", max_retries=0, cache=None)
    monkeypatch.setattr(j, "_http", httpx.Client(transport=httpx.MockTransport(answer)))
    with caplog.at_level(logging.INFO, logger="httpx"):
        assert j.judge(["q"]) == ["yes"]
    assert "HTTP Request: POST" in caplog.text  # logged, with the URL redacted
    assert "hunter2pw" not in caplog.text and "k3yk3y" not in caplog.text and "***@127.0.0.1" in caplog.text


def test_the_command_line_quiets_the_http_request_log(caplog):
    from factlab.cli import main

    caplog.set_level(logging.INFO)  # the command line logs at INFO ...
    logging.getLogger("httpx").setLevel(logging.NOTSET)
    assert main(["rewards"]) == 0
    assert logging.getLogger("httpx").getEffectiveLevel() == logging.WARNING  # ... but not httpx's request lines


def test_cache_key_holds_every_setting_that_changes_the_answer():
    base = dict(cache=None)
    ref = TransformersJudge(**base).cache_key("p")
    assert TransformersJudge(**base).cache_key("p") == ref
    for change in ({"dtype": "bfloat16"}, {"max_prompt_tokens": 512}, {"max_new_tokens": 7}, {"temperature": 0.5},
                   {"top_p": 0.9}, {"seed": 1}, {"system": "S"}, {"enable_thinking": False}):
        assert TransformersJudge(**base, **change).cache_key("p") != ref, change
    assert TransformersJudge(model="other", **base).cache_key("p") != ref
    assert TransformersJudge(**base).cache_key("p", prefix='{"SCORE": ') != ref
    a = OpenAIJudge("m", "http://127.0.0.1:8000/v1", cache=None).cache_key("p")
    assert OpenAIJudge("m", "http://127.0.0.1:8001/v1", cache=None).cache_key("p") != a  # another server
    assert OpenAIJudge("m", "http://u:p@127.0.0.1:8000/v1", cache=None).cache_key("p") != a  # credentials redacted
    assert OpenAIJudge("m", "http://127.0.0.1:8000/v1", concurrency=2, cache=None).cache_key("p") == a


# ---------------------------------------------------------------- caches keyed by what the model is


def _local_model(folder, weights: bytes):
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(weights)
    return str(folder)


def test_a_judge_retrained_into_the_same_folder_is_not_served_the_old_answers(tmp_path, monkeypatch):
    """A verifier saved again into its folder must be asked again (issue 30: ``cache_hits: 1`` with
    the old model's answer)."""
    answers = {"now": "old model's answer"}
    monkeypatch.setattr(TransformersJudge, "_generate", lambda self, prompts, prefix="": [answers["now"]] * len(prompts))
    folder = tmp_path / "verifier"
    path = _local_model(folder, b"weights-v1")
    cache = tmp_path / "cache.sqlite"
    first = TransformersJudge(path, cache=cache)
    assert first.judge(["is it true?"]) == ["old model's answer"]
    again = TransformersJudge(path, cache=cache)
    assert again.judge(["is it true?"]) == ["old model's answer"] and again.stats["cache_hits"] == 1  # same model
    _local_model(folder, b"weights-v2, retrained")  # training writes the new weights into the same folder
    answers["now"] = "new model's answer"
    retrained = TransformersJudge(path, cache=cache)
    assert retrained.judge(["is it true?"]) == ["new model's answer"] and retrained.stats["cache_hits"] == 0
    # a hub id or alias has no folder: its key is what it always was
    assert TransformersJudge("smollm2-135m-instruct", cache=None).answer_settings() == {
        "dtype": "float32", "max_prompt_tokens": None}


def test_completions_judges_with_another_tokenizer_do_not_share_answers(tokenizer):
    import copy

    other = copy.deepcopy(tokenizer)
    other.chat_template = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
    url = "http://127.0.0.1:8000/v1"
    a = OpenAIJudge("m", url, prefill_mode="completions", tokenizer=tokenizer, cache=None)
    b = OpenAIJudge("m", url, prefill_mode="completions", tokenizer=other, cache=None)
    assert a.render("q") != b.render("q")
    assert a.cache_key("q", '{"SCORE": ') != b.cache_key("q", '{"SCORE": ')
    same = OpenAIJudge("m", url, prefill_mode="completions", tokenizer=copy.deepcopy(tokenizer), cache=None)
    assert same.cache_key("q") == a.cache_key("q")  # the same rendering: the same answer


def test_self_filter_counts_are_keyed_by_a_local_model_content(tmp_path):
    from factlab.recipes.selffilter import SelfFilterConfig, _settings_key

    path = _local_model(tmp_path / "policy", b"v1")
    before = _settings_key(path, SelfFilterConfig())
    assert _settings_key(path, SelfFilterConfig()) == before
    _local_model(tmp_path / "policy", b"v2 retrained")
    assert _settings_key(path, SelfFilterConfig()) != before
