"""Model backends behind one protocol, the plumbing the HTTP ones share, and the factory.

`make_backend("openai:MODEL")` or `make_backend("anthropic:MODEL")` gives a `Backend`; its
`complete()` turns a conversation into one `Reply`. A client is one module of this package and one
line of `CLIENTS`. A backend that asks no server (the agent's `replay:PATH`) is passed in by its
caller through `offline=`, so this package imports nothing above core.

Shared here:
- API keys come only from the environment (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`; `KERNELWRIGHT_API_KEY`
  overrides either). A key is never logged, never put in an exception text and never kept on a
  backend (it is read at each request), so no repr can show it. Without a key only a local server
  (localhost, 127.0.0.1, ::1) may be used; anything else fails with `LLMError(kind="auth")` before
  a connection is opened.
- Retries: HTTP 429, 5xx, connection errors and timeouts are retried with exponential backoff and
  jitter, honouring `Retry-After` up to a cap; other HTTP errors fail at once.
- The caller's slot name (`key=`) travels as the `X-Kernelwright-Slot` header, which real servers ignore.
- `preflight(backend)`: before a run measures anything, one short GET (the server's model list)
  shows that the server answers and takes the key; a backend without a `preflight` method (one that
  asks no server, such as a replay) needs no check.
"""

from __future__ import annotations

import email.utils
import http.client
import importlib
import json
import logging
import os
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from kernelwright.core.runs import LLMError, Message, Reply, ToolSpec

logger = logging.getLogger(__name__)

# provider -> (module, class) of its client, imported on first use; each takes (model, base_url=, timeout_s=,
# max_retries=, backoff_s=, price=)
CLIENTS = {"openai": ("kernelwright.llm.openai_chat", "OpenAIChatBackend"),
           "anthropic": ("kernelwright.llm.anthropic_messages", "AnthropicMessagesBackend")}
SLOT_HEADER = "X-Kernelwright-Slot"
KEY_OVERRIDE_ENV = "KERNELWRIGHT_API_KEY"
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
EXCERPT_CHARS = 300  # how much of a server's body an error message quotes
RETRYABLE_STATUSES = frozenset({408, 429})  # besides every 5xx
PREFLIGHT_TIMEOUT_S = 10.0  # the check before a run: one GET, no retries

Price = Callable[[int, int], "float | None"]
Offline = Callable[[str], "Backend"]  # a provider that asks no server: what follows "PROVIDER:" -> its backend


@runtime_checkable
class Backend(Protocol):
    """Something that answers a conversation with one reply."""

    name: str  # "PROVIDER:MODEL", e.g. "openai:gpt-4o" (an offline provider's "PROVIDER:PATH")
    supports_tools: bool  # whether tool specs are sent

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *, key: str = "",
                 max_tokens: int | None = None, temperature: float | None = None) -> Reply: ...


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often and how patiently a request is sent again."""

    max_retries: int = 4  # retries after the first attempt
    backoff_s: float = 1.0  # the first wait; it doubles each retry, with jitter
    max_wait_s: float = 60.0  # cap on any one wait, Retry-After included

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must not be negative, got {self.max_retries}")
        if self.backoff_s < 0:
            raise ValueError(f"backoff_s must not be negative, got {self.backoff_s}")
        if self.max_wait_s < 0:
            raise ValueError(f"max_wait_s must not be negative, got {self.max_wait_s}")

    def wait_s(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number `retry` (1-based); the server's Retry-After wins."""
        if retry_after is not None:
            return min(self.max_wait_s, max(0.0, retry_after))
        exponential = self.backoff_s * 2 ** (retry - 1)
        return min(self.max_wait_s, exponential * random.uniform(0.5, 1.0))


@dataclass(frozen=True, kw_only=True)
class HttpSettings:
    """Where and how an HTTP backend sends its requests."""

    base_url: str  # e.g. https://api.openai.com/v1, without a trailing slash
    timeout_s: float = 600.0  # socket timeout of one attempt
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # retries and backoff
    price: Price | None = None  # USD for (prompt, completion) tokens when the server reports no cost

    def __post_init__(self) -> None:
        scheme = urllib.parse.urlsplit(self.base_url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    @property
    def local(self) -> bool:
        return is_local_url(self.base_url)

    @classmethod
    def for_model(cls, model: str, base_url: str, *, timeout_s: float, max_retries: int, backoff_s: float, max_wait_s: float,
                  price: Price | None) -> "HttpSettings":
        """A client's settings from its constructor's arguments; ValueError for an empty model name."""
        if not model:
            raise ValueError("model must be a non-empty name, got ''")
        return cls(base_url=base_url, timeout_s=timeout_s, price=price,
                   retry=RetryPolicy(max_retries=max_retries, backoff_s=backoff_s, max_wait_s=max_wait_s))


@dataclass(frozen=True)
class Exchange:
    """A successful request: the parsed JSON answer and what it took to get it."""

    payload: Any  # the parsed JSON body
    attempts: int  # requests sent, retries included
    latency_s: float  # seconds from the first attempt to the answer


# ---- keys -------------------------------------------------------------------------------------

def is_local_url(url: str) -> bool:
    """Whether the URL's host is this machine (a local server needs no key)."""
    return (urllib.parse.urlsplit(url).hostname or "") in LOCAL_HOSTS


def resolve_key(env_var: str) -> str:
    """The API key from the environment: KERNELWRIGHT_API_KEY, else `env_var`, else ""."""
    return (os.environ.get(KEY_OVERRIDE_ENV) or os.environ.get(env_var) or "").strip()


def require_key(env_var: str, base_url: str) -> str:
    """The key for a request to `base_url`; "" is allowed only for a local server."""
    key = resolve_key(env_var)
    if key or is_local_url(base_url):
        return key
    raise LLMError("auth", f"no API key for {base_url}: set {env_var} (or {KEY_OVERRIDE_ENV}) in the environment; "
                           f"only a local server ({', '.join(sorted(LOCAL_HOSTS))}) may be used without one")


def slot_header(slot: str) -> dict[str, str]:
    """The slot header for a caller's slot name (quoted so any text fits in a header), or none."""
    return {SLOT_HEADER: urllib.parse.quote(slot, safe="/:-_.@")} if slot else {}


def redact(text: str, secret: str) -> str:
    """`text` with every copy of `secret` blanked out."""
    return text.replace(secret, "[redacted]") if secret else text


def excerpt(text: str, secret: str = "", limit: int = EXCERPT_CHARS) -> str:
    """At most `limit` characters of a server's text for an error message, key removed."""
    clean = redact(text, secret)
    return clean if len(clean) <= limit else clean[:limit] + f"... [{len(clean)} chars]"


def cost_usd(reported: Any, prompt_tokens: int, completion_tokens: int, price: Price | None) -> float | None:
    """The server's reported cost when there is one, else the price function's, else None."""
    if isinstance(reported, (int, float)) and not isinstance(reported, bool):
        return float(reported)
    return None if price is None else price(prompt_tokens, completion_tokens)


# ---- HTTP with retries ------------------------------------------------------------------------

def post_json(url: str, body: Mapping[str, Any], headers: Mapping[str, str], *, timeout_s: float,
              retry: RetryPolicy, secret: str = "") -> Exchange:
    """POST `body` as JSON and parse the JSON answer, retrying what may succeed next time."""
    data = json.dumps(body).encode()
    all_headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        outcome, retry_after = _attempt(url, data, all_headers, timeout_s, secret)
        if isinstance(outcome, Exchange):
            return Exchange(outcome.payload, attempt, time.monotonic() - start)
        failure = outcome
        if not failure.retryable or attempt > retry.max_retries:
            raise _give_up(failure, attempt)
        wait = retry.wait_s(attempt, retry_after)
        logger.warning("%s (attempt %d of %d); retrying in %.2f s", failure, attempt, retry.max_retries + 1, wait)
        time.sleep(wait)


def _attempt(url: str, data: bytes, headers: dict[str, str], timeout_s: float,
             secret: str) -> tuple[Exchange | LLMError, float | None]:
    """One request: the parsed answer, or the failure and the server's Retry-After."""
    try:
        status, response_headers, raw = _send_once(url, data, headers, timeout_s)
    except LLMError as exc:
        return exc, None
    if 200 <= status < 300:
        return Exchange(parse_json(raw, url, secret), 1, 0.0), None
    return http_error(status, raw, url, secret), parse_retry_after(response_headers.get("Retry-After"))


def _send_once(url: str, data: bytes | None, headers: dict[str, str], timeout_s: float) -> tuple[int, Any, bytes]:
    """Status, headers and body of one POST (a GET when `data` is None); connection failures and
    timeouts raise LLMError."""
    method = "GET" if data is None else "POST"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    logger.debug("%s %s (%d bytes)", method, url, len(data or b""))
    try:
        with _opener(url).open(request, timeout=timeout_s) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, _read_error_body(exc)
    except TimeoutError:
        raise LLMError("timeout", f"no answer from {url} within {timeout_s:g} s", retryable=True) from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise LLMError("timeout", f"no answer from {url} within {timeout_s:g} s", retryable=True) from None
        raise LLMError("connection", f"cannot reach {url}: {exc.reason}", retryable=True) from None
    except (OSError, http.client.HTTPException) as exc:
        raise LLMError("connection", f"connection to {url} failed: {type(exc).__name__}: {exc}", retryable=True) from None


def _opener(url: str) -> urllib.request.OpenerDirector:
    """A URL opener; local servers are reached directly, never through an environment proxy."""
    if is_local_url(url):
        return urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener()


def _read_error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except (OSError, http.client.HTTPException):
        return b""


def parse_json(raw: bytes, url: str, secret: str = "") -> Any:
    """A response body as JSON, or LLMError(kind="protocol") quoting the start of it."""
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        raise LLMError("protocol", f"answer from {url} is not JSON: {excerpt(text, secret)!r}") from None


def http_error(status: int, raw: bytes, url: str, secret: str = "") -> LLMError:
    """The error for an HTTP failure status; 408, 429 and 5xx are retryable, 401/403 are auth errors."""
    retryable = status in RETRYABLE_STATUSES or status >= 500
    kind = "auth" if status in (401, 403) else "http"
    text = excerpt(raw.decode("utf-8", errors="replace"), secret)
    return LLMError(kind, f"HTTP {status} from {url}: {text}", retryable=retryable, status=status)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (a number of seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _give_up(failure: LLMError, attempts: int) -> LLMError:
    """The error raised when no more attempts will be made."""
    if attempts == 1:
        return failure
    return LLMError(failure.kind, f"{failure} (gave up after {attempts} attempts)",
                    retryable=failure.retryable, status=failure.status)


# ---- the check before a run ---------------------------------------------------------------------

def probe(url: str, headers: Mapping[str, str], *, timeout_s: float, key_env: str, secret: str = "") -> None:
    """One GET of `url`, no retries: LLMError when nothing answers or the key is refused (401/403);
    any other answer (a 404 from a server without a model list included) shows the server is there."""
    status, _, raw = _send_once(url, None, {"Accept": "application/json", **headers}, timeout_s)
    if status in (401, 403):
        refused = http_error(status, raw, url, secret)
        raise LLMError("auth", f"{refused}; the key was refused: check {key_env} (or {KEY_OVERRIDE_ENV})", status=status)


def preflight(backend: Backend, timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Check that the backend's server answers and takes the key, before a run measures anything;
    ValueError says what to fix. Backends without a `preflight` method (those that ask no server) pass."""
    check = getattr(backend, "preflight", None)
    if check is None:
        return
    try:
        check(timeout_s)
    except LLMError as exc:
        hint = " (is the server running? --base-url names it)" if exc.kind in ("connection", "timeout") else ""
        raise ValueError(f"{backend.name} cannot be used: {exc}{hint}; nothing was measured and no run was made") from None


# ---- the factory ------------------------------------------------------------------------------

def parse_spec(spec: str, providers: Sequence[str] = tuple(CLIENTS)) -> tuple[str, str]:
    """PROVIDER:MODEL split in two; ValueError naming the spec and the known `providers`."""
    provider, sep, target = spec.partition(":")
    provider, target = provider.strip().lower(), target.strip()
    problem = ("missing ':'" if not sep else f"unknown provider {provider!r}" if provider not in providers
               else "no model (or path) after ':'" if not target else "")
    if problem:
        raise ValueError(f"bad model spec {spec!r}: {problem}; expected PROVIDER:MODEL with PROVIDER one of "
                         f"{', '.join(providers)} (e.g. openai:gpt-4o, anthropic:claude-sonnet-4-5)")
    return provider, target


def make_backend(spec: str, *, base_url: str | None = None, timeout_s: float = 600.0, max_retries: int = 4,
                 price: Price | None = None, backoff_s: float = 1.0, offline: Mapping[str, Offline] | None = None) -> Backend:
    """The backend for a PROVIDER:MODEL spec: a client of CLIENTS, or one of the caller's `offline`
    providers (which take only what follows the colon)."""
    offline = offline or {}
    provider, target = parse_spec(spec, (*CLIENTS, *offline))
    if provider in offline:
        if base_url:
            logger.warning("%s backend ignores base_url %s", provider, base_url)
        return offline[provider](target)
    module, name = CLIENTS[provider]
    client = getattr(importlib.import_module(module), name)
    return client(target, base_url=base_url, timeout_s=timeout_s, max_retries=max_retries, backoff_s=backoff_s, price=price)
