"""Credentials in factlab: the one redaction of URLs (user:password@, secret-named query and
fragment parameters) in config dumps, manifests, logs and error messages, and the rules on which
environment variable may be sent as a judge's API key, to which hosts, over which scheme.

Bottom layer: ``config`` (every params section is written through ``redact_value``), ``judges``,
``manifest``, ``launch``, ``sweep`` and ``cli`` use it. ``short_repr`` is the bounded, redacted
``repr`` every params error message quotes a bad value with.
"""

from __future__ import annotations

import logging
import re
import reprlib
from typing import Any, Sequence
from urllib.parse import unquote_plus, urlsplit, urlunsplit

UNREDACTED = {"unredacted": True}  # model_dump(context=UNREDACTED): the URLs as given, credentials included

# A query or fragment parameter carries a secret when its name (percent-decoded, twice encoded too,
# without a trailing "=") is, or ends in after a non-letter, one of these words (api_key, client_secret,
# X-Amz-Credential, access_token, authorization, code: an Azure Functions key or an OAuth code, ...),
# or ends in one of them in camelCase (apiKey, accessToken, clientSecret).
_SECRET_NAME = re.compile(r"(?:(?:^|[^a-z0-9])(?:api[_-]?key|key|pwd|pass|sig|auth|bearer|session|cookie|jwt|code)|"
                          r"apikey|token|secret|password|passwd|passphrase|signature|credentials?|authorization|"
                          r"session[_-]?id)$")  # the long words also glued to a prefix: accesstoken, apitoken
_ARRAY_SUFFIX = re.compile(r"(?:\[[^\]]*\])+$")  # api_key[]=, token[0]=: the name without its brackets
_CAMEL_SECRET_NAME = re.compile(r"[a-z0-9](?:Key|Token|Secret|Password|Signature|Sig|Credentials?|Auth|Authorization)$")
_PARAM_SEPARATORS = re.compile(r"([&;])")
# a URL in free text; the look-behind makes each scheme start once, so a scan is linear in the text
_URL_IN_TEXT = re.compile(r"(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+")
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


def _secret_param(name: str) -> bool:
    name = _ARRAY_SUFFIX.sub("", unquote_plus(unquote_plus(name)).strip().rstrip("=").strip())
    return bool(_SECRET_NAME.search(name.lower()) or _CAMEL_SECRET_NAME.search(name))


def _redact_params(text: str) -> str:
    """A query string or fragment with the values of secret-named parameters as ``***``."""
    items = _PARAM_SEPARATORS.split(text)
    return "".join(f"{item.partition('=')[0]}=***" if "=" in item and _secret_param(item.partition("=")[0])
                   else item for item in items)


def redact_url(url: str | None) -> str | None:
    """``url`` with credentials hidden, the one redaction of factlab (config dumps, manifests,
    logs, errors, reports): ``user:password@`` and the values of secret-named query and
    fragment parameters (``_SECRET_NAME``: ``api_key=``, ``key=``, ``token=``, ``password=``,
    ``sig=``, ``authorization=``, ``client_secret=``, ``credentials=``, ``code=``, percent-encoded
    names such as ``api%5Fkey`` (or ``api%255Fkey``, ``key%3D``), ``#access_token=``, ``;api_key=`` path parameters, ...) become ``***``.
    A URL that does not parse is shown as its scheme only: one whose port is not a number (a
    password with an unencoded ``/``, ``?`` or ``#`` ends the host early: ``https://u:pa/ss@h``),
    or one without ``//`` that holds an ``@`` (``u:pass@h:8000``, ``https:/u:pass@h``)."""
    if not url:
        return url
    scheme = url.split("://", 1)[0][:20] + "://***" if "://" in url else "***"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (ValueError when the "port" is the start of a password)
    except ValueError:
        return scheme
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    elif not netloc and "@" in url:
        return scheme
    return urlunsplit((parts.scheme, netloc, _redact_params(parts.path), _redact_params(parts.query),
                       _redact_params(parts.fragment)))


def redact_value(value: Any) -> Any:
    """``value`` with every URL in its strings redacted (``redact_text``), through lists, tuples
    and mappings: what every params section is written as (``Section``'s serializer)."""
    if isinstance(value, str):
        return redact_text(value) if "://" in value else value
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(v) for v in value)
    return value


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through ``redact_url``."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)) or "", text)


class RedactCredentials(logging.Filter):
    """A logging filter that writes the URLs of a record's message with their credentials
    hidden (``redact_text``). factlab puts it on the ``httpx`` logger, whose INFO line names
    every request URL as given, password included."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


def redact_http_logs() -> None:
    """Hide URL credentials in the request log of httpx (the openai judge's HTTP client), once."""
    logger = logging.getLogger("httpx")
    if not any(isinstance(f, RedactCredentials) for f in logger.filters):
        logger.addFilter(RedactCredentials())


# Variables whose name says "API key" (``*_API_KEY``, or ``API_KEY``) may be sent as a judge's
# Bearer token; so may these token variables of LLM providers. Any other needs judge.allowed_key_envs.
API_KEY_ENV = re.compile(r"^(?:[A-Z][A-Z0-9_]*_)?API_KEY$")
PROVIDER_TOKEN_ENVS = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACEHUB_API_TOKEN",
                                 "REPLICATE_API_TOKEN", "DEEPINFRA_TOKEN", "DEEPINFRA_API_TOKEN",
                                 "CLOUDFLARE_API_TOKEN", "OPENROUTER_API_TOKEN"})


def api_key_env_problem(name: str, allowed: Sequence[str] = ()) -> str | None:
    """Why the variable ``name`` may not be sent as a judge's API key, or ``None`` when it may:
    it looks like an API key (``*_API_KEY``), is a known provider token, or is in ``allowed``."""
    if name in allowed or API_KEY_ENV.match(name) or name in PROVIDER_TOKEN_ENVS:
        return None
    return (f"${name} does not look like an API key variable, and its value would be sent as a Bearer token to the "
            f"judge server (health check included); use a variable named *_API_KEY or one of "
            f"{', '.join(sorted(PROVIDER_TOKEN_ENVS))}, or list {name} in judge.allowed_key_envs to send it anyway")


# Where a provider's key may go: the hosts (and their subdomains) of the provider the variable
# names; never a domain where anyone may run a server (``*.hf.space`` Spaces,
# ``*.cloudapp.azure.com`` VMs): list the variable in judge.allowed_key_envs for your own. A key made for a self-hosted judge server (``VLLM_API_KEY``, ``JUDGE_API_KEY``,
# ``FACTLAB_*API_KEY``) may go to any host; any other variable (``STRIPE_API_KEY``) only to
# this machine, or where judge.allowed_key_envs lists it.
PROVIDER_KEY_HOSTS: dict[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": ("openai.com",), "AZURE_OPENAI_API_KEY": ("openai.azure.com", "cognitiveservices.azure.com", "services.ai.azure.com"),
    "ANTHROPIC_API_KEY": ("anthropic.com",), "GEMINI_API_KEY": ("googleapis.com",),
    "GOOGLE_API_KEY": ("googleapis.com",), "MISTRAL_API_KEY": ("mistral.ai",),
    "TOGETHER_API_KEY": ("together.xyz", "together.ai"), "GROQ_API_KEY": ("groq.com",),
    "DEEPSEEK_API_KEY": ("deepseek.com",), "FIREWORKS_API_KEY": ("fireworks.ai",),
    "OPENROUTER_API_KEY": ("openrouter.ai",), "OPENROUTER_API_TOKEN": ("openrouter.ai",),
    "DEEPINFRA_API_KEY": ("deepinfra.com",), "DEEPINFRA_TOKEN": ("deepinfra.com",),
    "DEEPINFRA_API_TOKEN": ("deepinfra.com",), "COHERE_API_KEY": ("cohere.com", "cohere.ai"),
    "XAI_API_KEY": ("x.ai",), "PERPLEXITY_API_KEY": ("perplexity.ai",), "CEREBRAS_API_KEY": ("cerebras.ai",),
    "NVIDIA_API_KEY": ("nvidia.com",), "HF_TOKEN": ("huggingface.co",),
    "HUGGING_FACE_HUB_TOKEN": ("huggingface.co",), "HUGGINGFACEHUB_API_TOKEN": ("huggingface.co",),
    "REPLICATE_API_TOKEN": ("replicate.com",), "CLOUDFLARE_API_TOKEN": ("cloudflare.com",)}
SELF_HOSTED_KEY_ENV = re.compile(r"^(?:VLLM_API_KEY|JUDGE_API_KEY|FACTLAB_[A-Z0-9_]*API_KEY)$")


def key_destination_problem(name: str, url: str | None, allowed: Sequence[str] = ()) -> str | None:
    """Why the key in ``$name`` may not be sent to ``url``, or ``None`` when it may: the host is
    this machine, the variable is listed in ``allowed``, names the provider that serves
    ``url`` (``PROVIDER_KEY_HOSTS``), or is made for a self-hosted judge (``SELF_HOSTED_KEY_ENV``)."""
    try:
        host = (urlsplit(url or "").hostname or "").lower().rstrip(".")
    except ValueError:
        host = ""
    if name in allowed or host in LOOPBACK_HOSTS or SELF_HOSTED_KEY_ENV.match(name):
        return None
    hosts = PROVIDER_KEY_HOSTS.get(name)
    if hosts and any(host == h or host.endswith("." + h) for h in hosts):
        return None
    whose = (f"is the key of {', '.join(hosts)}, and {host or 'that URL'} is not" if hosts else
             f"names no judge provider (its key may be for another service)")
    return (f"${name} {whose}: its value would be sent to {redact_url(url)}; for a self-hosted server use "
            f"VLLM_API_KEY, JUDGE_API_KEY or FACTLAB_*_API_KEY, or list {name} in judge.allowed_key_envs to send "
            f"it there anyway")


def sends_key_in_clear(url: str | None) -> bool:
    """Whether a request to ``url`` would carry an API key over plain HTTP to another machine."""
    if not url:
        return False
    parts = urlsplit(url)
    return parts.scheme.lower() == "http" and (parts.hostname or "").lower() not in LOOPBACK_HOSTS


class _RedactedRepr(reprlib.Repr):
    """``reprlib``'s bounded repr with every URL in a string redacted before it is cut, so an
    error message never shows a password or key, whatever shape the bad value has."""

    def repr_str(self, x: str, level: int) -> str:
        if "://" in x:
            x = redact_text(x[:100_000])
        return super().repr_str(x, level)


_SHORT = _RedactedRepr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 60, 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6


def short_repr(value: Any, limit: int = 60) -> str:
    """A bounded ``repr`` for error messages: a few levels, items and characters, whatever
    ``value`` holds (``reprlib``; a plain ``repr`` of a huge or alias-shared structure would not
    end)."""
    s = _SHORT.repr(value)
    return s if len(s) <= limit else s[:limit - 3] + "..."
