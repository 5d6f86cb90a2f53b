"""Secrets stay out of files and logs; a key never travels unencrypted to another machine
unless params say so; the judge cache never hands one server's or setting's answers to another."""

import json
import logging

import pytest

from factlab import config
from factlab.config import ConfigError, dump_config
from factlab.credentials import redact_url
from factlab.judges import JudgeError, OpenAIJudge, TransformersJudge
from factlab.sections import GRPOSection, JudgeSection


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
    ("https://h/v1?authorization=Bearer%20s3cret&n=1", "https://h/v1?authorization=***&n=1"),
    ("https://h/v1?client_secret=s3cret&client_id=c", "https://h/v1?client_secret=***&client_id=c"),
    ("https://h/v1?credentials=s3cret", "https://h/v1?credentials=***"),
    ("https://h/v1?api%5Fkey=s3cret&API%2Dkey=s3cret", "https://h/v1?api%5Fkey=***&API%2Dkey=***"),
    ("https://h/v1#access_token=s3cret&token_type=bearer", "https://h/v1#access_token=***&token_type=bearer"),
    ("https://h/v1?apiKey=s3cret;accessToken=s3cret", "https://h/v1?apiKey=***;accessToken=***"),
    ("http://[::1/v1?key=s3cret", "http://***"),  # does not parse: nothing but its scheme
    ("https://h/v1?accesstoken=s3cret&apitoken=s3cret", "https://h/v1?accesstoken=***&apitoken=***"),  # glued
    ("https://h/v1?api_key[]=s3cret&token[0]=s3cret", "https://h/v1?api_key[]=***&token[0]=***"),  # array names
    ("https://h/v1?session_id=s3cret", "https://h/v1?session_id=***"),
    ("https://h/v1;api_key=s3cret", "https://h/v1;api_key=***"),  # a path parameter
    ("https://f.azurewebsites.net/api/judge?code=s3cret", "https://f.azurewebsites.net/api/judge?code=***"),  # a
    ("https://h/v1?auth_code=s3cret&state=x", "https://h/v1?auth_code=***&state=x"),  # function key, an OAuth code
    ("https://h/v1?api%255Fkey=s3cret&key%3D=s3cret", "https://h/v1?api%255Fkey=***&key%3D=***"),  # issue 43 round 5
    ("https://u:pa/s3cret@h/v1", "https://***"),  # a password with an unencoded / ends the host early
    ("https://u:pa#s3cret@h/v1", "https://***"),
    ("https://u:pa?s3cret@h/v1", "https://***"),
    ("u:s3cret@h:8000/v1", "***"),  # no scheme: not a URL, its user part hidden all the same
    ("https:/u:s3cret@h/v1", "***"),  # one slash: no host, the password sits in the path
    ("https://api.cloudflare.com/client/v4/ai/run/@cf/meta/x", "https://api.cloudflare.com/client/v4/ai/run/@cf/meta/x"),
    ("http://h/v1?monkey=banana&model=x&max_tokens=9", "http://h/v1?monkey=banana&model=x&max_tokens=9"),  # not secrets
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


SECRET_URL = "https://alice:hunter2pw@judge.example.com/v1?api_key=k3yk3y#access_token=t0k3n"
SECRETS = ("hunter2pw", "k3yk3y", "t0k3n")


def test_every_url_field_of_every_section_is_written_redacted_and_handed_on_as_given(tmp_path):
    """One function (``redact_value``, from ``Section``'s serializer) for every URL-valued field:
    the judge's endpoints, TRL's vLLM server, Ray's cluster address, and a URL in ``extra``."""
    from factlab.credentials import UNREDACTED
    from factlab.manifest import finish_manifest, read_manifest, start_manifest
    from factlab.recipes.rar import RARConfig
    from factlab.sections import SweepRaySection

    cfg = config.load_config(config.__file__.replace("src/factlab/config.py", "params/02_binary_rar_lm.yaml"),
                             RARConfig, overrides={"judge": {"backend": "openai", "base_url": [SECRET_URL],
                                                             "health_check": False},
                                                   "grpo": {"vllm_server_base_url": SECRET_URL.replace("/v1", "")}})
    sections = [cfg, GRPOSection(vllm_server_base_url=SECRET_URL), SweepRaySection(address=SECRET_URL.replace(
        "https", "ray")), GRPOSection(allow_hub_upload=True, extra={"hub_revision": SECRET_URL}), JudgeSection(base_url=SECRET_URL)]
    for section in sections:
        for written in (dump_config(section), str(section.model_dump()), section.model_dump_json()):
            assert not any(x in written for x in SECRETS), written
    assert "***@judge.example.com" in dump_config(cfg) and "api_key=***" in dump_config(cfg)
    start_manifest(tmp_path, notebook="02_binary_rar", params="p.yaml", config={"raw": {"url": SECRET_URL}},
                   project=tmp_path)
    finish_manifest(tmp_path, "failed", f"ConnectError: cannot reach {SECRET_URL}")
    assert not any(x in json.dumps(read_manifest(tmp_path)) for x in SECRETS)
    # what is handed on (TRL's config, an evidence arm's section) keeps the URL as given
    assert cfg.grpo.model_dump(context=UNREDACTED)["vllm_server_base_url"] == SECRET_URL.replace("/v1", "")
    assert cfg.judge.base_url == [SECRET_URL]


@pytest.mark.parametrize("bad", [[[SECRET_URL]], {"first": SECRET_URL}, [SECRET_URL, {"k": SECRET_URL}], 7])
def test_a_malformed_base_url_never_echoes_its_credentials(tmp_path, bad):
    import yaml

    p = tmp_path / "p.yaml"
    p.write_text("base: {}\n".format(config.__file__.replace("src/factlab/config.py", "params/02_binary_rar_lm.yaml"))
                 + yaml.safe_dump({"judge": {"backend": "openai", "base_url": bad}}))
    from factlab.recipes.rar import RARConfig
    with pytest.raises(ConfigError, match=r"judge.base_url") as e:
        config.load_config(p, RARConfig)
    assert not any(x in str(e.value) for x in SECRETS), str(e.value)
    with pytest.raises(ValueError) as direct:  # pydantic's own message, where a section is built in code
        JudgeSection(backend="openai", base_url=bad)
    assert not any(x in str(direct.value) for x in SECRETS), str(direct.value)
    with pytest.raises(ValueError) as grpo:
        GRPOSection(vllm_server_base_url=f"ftp{SECRET_URL[5:]}")
    assert not any(x in str(grpo.value) for x in SECRETS), str(grpo.value)


@pytest.mark.parametrize("name, url, ok", [
    ("ANTHROPIC_API_KEY", "https://judge.example.com/v1", False),  # another provider's key
    ("STRIPE_API_KEY", "https://judge.example.com/v1", False),  # a key for another service
    ("OPENAI_API_KEY", "https://judge.example.com/v1", False),
    ("HF_TOKEN", "https://judge.example.com/v1", False),
    ("OPENAI_API_KEY", "https://api.openai.com/v1", True),
    ("ANTHROPIC_API_KEY", "https://api.anthropic.com/v1", True),
    ("HF_TOKEN", "https://router.huggingface.co/v1", True),
    ("HF_TOKEN", "https://someone-judge.hf.space/v1", False),  # anyone's Space
    ("AZURE_OPENAI_API_KEY", "https://vm.eastus.cloudapp.azure.com/v1", False),  # anyone's VM
    ("AZURE_OPENAI_API_KEY", "https://res.openai.azure.com/openai/v1", True),
    ("OPENAI_API_KEY", "https://api.openai.com.evil.example/v1", False),  # a look-alike host
    ("STRIPE_API_KEY", "http://127.0.0.1:8000/v1", True),  # this machine
    ("VLLM_API_KEY", "https://judge.example.com/v1", True),  # made for a self-hosted server
    ("FACTLAB_TEST_API_KEY", "https://judge.example.com/v1", True),
])
def test_a_key_goes_only_to_the_provider_its_name_says(monkeypatch, name, url, ok):
    monkeypatch.setenv(name, "sk-provider-secret")
    if ok:
        JudgeSection(backend="openai", base_url=url, api_key_env=name)
        assert OpenAIJudge("m", url, api_key_env=name, cache=None)._headers()["Authorization"].endswith("secret")
        return
    with pytest.raises(ValueError, match=rf"\${name} .*judge.allowed_key_envs"):
        JudgeSection(backend="openai", base_url=url, api_key_env=name)
    with pytest.raises(JudgeError, match="judge.allowed_key_envs"):  # at request time too: nothing is sent
        OpenAIJudge("m", url, api_key_env=name, cache=None)._headers()
    JudgeSection(backend="openai", base_url=url, api_key_env=name, allowed_key_envs=[name])  # the params' allow-list
    assert OpenAIJudge("m", url, api_key_env=name, allowed_key_envs=[name], cache=None)._headers()["Authorization"]
    monkeypatch.delenv(name)
    JudgeSection(backend="openai", base_url=url, api_key_env=name)  # unset: nothing would be sent


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

    j = OpenAIJudge("m", "http://alice:hunter2pw@127.0.0.1:9/v1?api_key=k3yk3y&client_secret=c5ecr5t", max_retries=0,
                    cache=None)
    monkeypatch.setattr(j, "_http", httpx.Client(transport=httpx.MockTransport(answer)))
    with caplog.at_level(logging.INFO, logger="httpx"):
        assert j.judge(["q"]) == ["yes"]
    assert "HTTP Request: POST" in caplog.text  # logged, with the URL redacted
    assert "hunter2pw" not in caplog.text and "k3yk3y" not in caplog.text and "***@127.0.0.1" in caplog.text
    assert "c5ecr5t" not in caplog.text


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


@pytest.mark.parametrize("text", ['judge:\n  base_url: "https://u:s3cret@h.example/v1" : x\n',
                                  'judge:\n  base_url: ["https://u:s3cret@h.example/v1"\n',
                                  'judge: {base_url: u:s3cret@h.example:8000/v1\n'])
def test_a_yaml_error_says_where_never_what(tmp_path, text):
    """PyYAML's message quotes the line it stopped on; a password there is never printed."""
    p = tmp_path / "p.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=r"not valid YAML: .*\(line \d+, column \d+\)") as e:
        config.read_params(p)
    assert "s3cret" not in str(e.value), str(e.value)


@pytest.mark.parametrize("url", ["https:/u:s3cret@h.example/v1", "u:s3cret@h.example:8000/v1",
                                 "https://u:pa/s3cret@h.example/v1"])
def test_a_base_url_without_a_host_is_refused_at_load_without_its_password(url):
    with pytest.raises(ValueError, match="not a URL|not an http:// or https:// URL with a host") as e:
        JudgeSection(backend="openai", base_url=url, api_key_env="VLLM_API_KEY")
    assert "s3cret" not in str(e.value), str(e.value)


def test_set_and_grid_values_never_show_url_credentials():
    from factlab.launch import _overrides
    from factlab.sweep import parse_grid, point_id

    for bad in (lambda: _overrides({}, ["judge.base_url=[https://u:s3cret@h/v1"]),
                lambda: parse_grid(["judge.base_url=[https://u:s3cret@h/v1"])):
        with pytest.raises(ConfigError) as e:
            bad()
        assert "s3cret" not in str(e.value), str(e.value)
    pid = point_id({"judge.base_url": "https://u:s3cret@h/v1"})  # a sweep point's folder name
    assert "s3cret" not in pid and pid != point_id({"judge.base_url": "https://u:other@h/v1"})


def test_a_run_refuses_credentials_in_a_url_before_it_starts(tmp_path):
    """config.yaml hides a URL's credentials, and the notebook, the training processes and every
    --resume read config.yaml: such a run would send *** to the judge. It is refused before a
    run folder is made (factlab run, factlab train, factlab sweep), naming the keys."""
    from factlab import runner
    from factlab.sweep import plan_sweep

    p = tmp_path / "p.yaml"
    p.write_text("base: {}\njudge: {{backend: openai, base_url: 'https://alice:s3cret@judge.example.com/v1', "
                 "api_key_env: VLLM_API_KEY, health_check: false}}\n"
                 "grpo: {{vllm_server_base_url: 'http://gen:8000?token=s3cret'}}\n".format(
                     config.__file__.replace("src/factlab/config.py", "params/02_binary_rar_lm.yaml")))
    out = tmp_path / "runs"
    with pytest.raises(ConfigError, match=r"grpo.vllm_server_base_url, judge.base_url: a URL with credentials") as e:
        runner.run_notebook("02_binary_rar", params=p, out=out, progress=False)
    assert "s3cret" not in str(e.value) and not out.exists()
    with pytest.raises(ConfigError, match="a URL with credentials"):
        plan_sweep("02_binary_rar", p, grid={"grpo.learning_rate": [1e-6, 2e-6]})
    with pytest.raises(ConfigError, match=r"judge.base_url: a URL with credentials"):
        plan_sweep("02_binary_rar", p, grid={"grpo.vllm_server_base_url": ["http://gen:8000"],
                                              "judge.base_url": ["https://judge.example.com/v1?api_key=s3cret"]})
    clean = config.load_config(p, runner.config_for_notebook("02_binary_rar"),
                               overrides={"judge": {"base_url": "https://judge.example.com/v1"},
                                          "grpo": {"vllm_server_base_url": "http://gen:8000"}})
    config.refuse_url_credentials(clean)  # no credentials: nothing to refuse


def test_check_prints_a_model_name_with_credentials_redacted(tmp_path, capsys):
    """``factlab check`` printed ``model.name`` as given in its summary line, password included,
    where config.yaml writes it redacted (issue 43 round-4 probe)."""
    from factlab.cli import main

    p = tmp_path / "p.yaml"
    p.write_text("base: {}\nmodel: {{name: 'https://alice:hunter2pw@h.example/m?api_key=k3yk3y'}}\n".format(
        config.__file__.replace("src/factlab/config.py", "params/00_quickstart_smoke.yaml")))
    assert main(["check", "00_quickstart", "--params", str(p)]) == 0
    out = capsys.readouterr().out
    assert "model https://***@h.example/m?api_key=***" in out
    assert "hunter2pw" not in out and "k3yk3y" not in out
