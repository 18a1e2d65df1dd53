"""LLM variant generator: the `openai` client against any OpenAI-compatible Chat Completions endpoint.

Defaults are seed 000's: gpt-4.1-mini, temperature 0.7, top_p 0.9, 2,048 output tokens, seed 101, five paraphrases
and one candidate per slot per task. The system prompt and task template are files in configs/prompts/. Every valid
raw response is stored with its request under the cache folder, keyed by the hash of the request and the endpoint,
and a cached response is never requested again (so an interrupted build resumes for free).

Failures: timeouts, rate limits and server errors are retried with exponential backoff, then the task's request
fails with an `LLMRequestError` and the build goes on with the next task. What no retry can mend stops the whole
build at once with an `LLMEndpointError`: connection refused or an unknown host, an authentication or permission
error, an unknown model or path (404), an answer that is not a Chat Completion (an HTML page from a wrong URL), or
failed attempts and back-off together past `budget_s` seconds in one build. A response is checked before it is
cached: only a Chat Completion whose content is a JSON object is stored; one that is not valid JSON or breaks the
schema becomes rejected candidates with reasons (not cached, so a rerun asks again), never a crash.

Endpoint and key: `base_url` (or $CLBENCH_LLM_BASE_URL, then $OPENAI_BASE_URL; default api.openai.com) and the
key from $OPENAI_API_KEY (a local server without keys gets a placeholder). The key, and credentials in the URL
(user:password@, ?key=...), are redacted from every message, cache record and variant file written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from string import Template

from clbench_jax.errors import ClbenchError
from clbench_jax.jsonio import write_json
from clbench_jax.language import frames as F
from clbench_jax.language.variants import Candidate
from clbench_jax.tasks.adapter import SUPPORTED_GOAL_PREDICATES
from clbench_jax.tasks.spec import TaskSpec

DEFAULT_ENDPOINT = "https://api.openai.com/v1"
REPO = Path(__file__).resolve().parents[2]


class LLMRequestError(ClbenchError):
    """The endpoint kept failing (timeouts, rate limits, server errors) or refused the request: this task fails."""


class LLMEndpointError(LLMRequestError):
    """No request to this endpoint can succeed (unreachable, unauthorised, not a Chat Completions server) or the
    build's failure budget is spent: the build stops."""

    stop_build = True


@dataclass(frozen=True)
class LLMConfig:
    model: str = "gpt-4.1-mini"
    temperature: float = 0.7
    top_p: float = 0.9
    max_tokens: int = 2048
    seed: int = 101
    n_paraphrases: int = 5
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    retries: int = 4                 # extra attempts after the first
    backoff_s: float = 2.0           # sleep backoff_s * 2**attempt between attempts
    budget_s: float = 600.0          # failed attempts and back-off of one build together; past it the build stops
    cache_dir: str = "runs/llm_cache"
    system_prompt: str = str(REPO / "configs" / "prompts" / "variants_system.txt")
    task_prompt: str = str(REPO / "configs" / "prompts" / "variants_task.txt")

    def endpoint(self) -> str | None:
        return self.base_url or os.environ.get("CLBENCH_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")

    def secrets(self) -> list[str]:
        key = os.environ.get(self.api_key_env)
        return [key] if key and len(key) >= 4 else []


_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_URL_SECRET_PARAM = re.compile(
    r"(?P<name>[?&](?:api[-_]?key|key|token|access[-_]?token|secret|password|sig)=)[^&\s\"']+", re.IGNORECASE)
_BEARER = re.compile(r"(?P<name>Bearer\s+)[A-Za-z0-9._~+/=-]{8,}")


def redact(text: str | None, secrets: list[str] = ()) -> str | None:
    """`text` with the given secrets, URL credentials (user:password@host, ?key=...) and bearer tokens replaced
    by ***: applied to everything this client writes or raises."""
    if text is None:
        return None
    for sec in secrets:
        text = text.replace(sec, "***")
    text = _URL_USERINFO.sub(lambda m: m.group("scheme") + "***@", text)
    text = _URL_SECRET_PARAM.sub(lambda m: m.group("name") + "***", text)
    return _BEARER.sub(lambda m: m.group("name") + "***", text)


def load_config(path: str | Path, **overrides) -> LLMConfig:
    """LLMConfig from a YAML file of its field names (flags given as `overrides` win)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as e:
        raise ClbenchError(f"cannot read the LLM config: {e.strerror}", file=str(path)) from None
    except yaml.YAMLError as e:
        raise ClbenchError(f"LLM config is not valid YAML: {e}", file=str(path)) from None
    if not isinstance(data, dict):
        raise ClbenchError("LLM config must be a mapping of LLMConfig fields", file=str(path))
    from clbench_jax.configs import at_least, check_ranges, typed_values

    known = {f.name for f in fields(LLMConfig)}
    for k in data:
        if k not in known:
            raise ClbenchError(f"unknown LLM config key; known: {sorted(known)}", file=str(path), field=k)
    cfg = LLMConfig(**typed_values(LLMConfig, {**data, **overrides}, file=str(path)))
    check_ranges(cfg, [("temperature", lambda c: 0 <= c.temperature <= 2, "in 0..2"),
                       ("top_p", lambda c: 0 < c.top_p <= 1, "in (0, 1]"), at_least("max_tokens", 1),
                       at_least("n_paraphrases", 1), ("timeout_s", lambda c: c.timeout_s > 0, "> 0"),
                       at_least("retries", 0), at_least("backoff_s", 0.0),
                       ("budget_s", lambda c: c.budget_s > 0, "> 0")], file=str(path))
    return cfg


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise ClbenchError(f"cannot read the {what}: {e.strerror}", file=path) from None


def build_messages(task: TaskSpec, tf: F.TaskFrames, cfg: LLMConfig) -> list[dict]:
    """The system prompt and the filled task template."""
    lines = []
    for i, f in enumerate(tf.frames):
        slots = ", ".join(f"{k}={f.slot(k).value}/{f.slot(k).text!r}" for k in F.SLOTS if f.slot(k) is not None)
        lines.append(f"  [{i}] {f.atom}{' (implicit: not said)' if f.implicit else ''}: {slots}")
    ents = [f"  {n} ({c})" for n, c in sorted({**task.objects, **task.fixtures}.items())]
    ents += [f"  {r} (region)" for r in sorted(task.regions)]
    user = Template(_read(cfg.task_prompt, "task prompt template")).substitute(
        task=task.name, instruction=task.instruction, goal="(And " + " ".join(map(str, task.goal)) + ")",
        frames="\n".join(lines), entities="\n".join(ents), predicates=", ".join(sorted(SUPPORTED_GOAL_PREDICATES)),
        n_paraphrases=cfg.n_paraphrases, slots=", ".join(F.SLOTS))
    return [{"role": "system", "content": _read(cfg.system_prompt, "system prompt")},
            {"role": "user", "content": user}]


def request_of(messages: list[dict], cfg: LLMConfig) -> dict:
    return {"model": cfg.model, "messages": messages, "temperature": cfg.temperature, "top_p": cfg.top_p,
            "max_tokens": cfg.max_tokens, "seed": cfg.seed}


def request_key(request: dict, endpoint: str | None = None) -> str:
    """Cache key of a request sent to `endpoint` (None: OpenAI's): another server is another answer."""
    text = json.dumps({"endpoint": (endpoint or DEFAULT_ENDPOINT).rstrip("/"), "request": request}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cache_path(request: dict, cfg: LLMConfig) -> Path:
    return Path(cfg.cache_dir) / f"{request_key(request, cfg.endpoint())}.json"


class Budget:
    """Seconds a build may still spend on failed attempts and back-off (shared by its requests)."""

    def __init__(self, seconds: float):
        self.left = float(seconds)

    def spend(self, seconds: float) -> None:
        self.left -= seconds


def _refused(e: BaseException) -> bool:
    """Connection refused or host unknown somewhere in the exception's causes (no retry can help)."""
    while e is not None:
        if isinstance(e, (ConnectionRefusedError, socket.gaierror)):
            return True
        e = e.__cause__ or e.__context__
    return False


def chat_content(body: str) -> str | None:
    """The message content of a Chat Completion body, or None if the body is not one."""
    try:
        content = json.loads(body)["choices"][0]["message"]["content"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def json_object(content: str) -> dict | None:
    try:
        doc = json.loads(_strip_fences(content))
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _client(cfg: LLMConfig):
    import openai

    key = os.environ.get(cfg.api_key_env)
    if not key:
        if not cfg.endpoint():
            raise LLMEndpointError(f"no API key: set ${cfg.api_key_env} (or a local endpoint with "
                                  "$CLBENCH_LLM_BASE_URL), or use --generator offline", field=cfg.api_key_env)
        key = "no-key"  # local OpenAI-compatible servers accept any key
    return openai.OpenAI(base_url=cfg.endpoint(), api_key=key, timeout=cfg.timeout_s, max_retries=0)


def complete(request: dict, cfg: LLMConfig, *, task: str, client=None, sleep=time.sleep, budget: Budget | None = None,
             clock=time.monotonic) -> dict:
    """The record {request, response (raw body, redacted), content} for a request: from the cache, else asked of
    the endpoint (and cached only if the content is a JSON object). Raises LLMRequestError (this task) or
    LLMEndpointError (the build): see the module docstring."""
    import openai

    path = cache_path(request, cfg)
    if path.is_file():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            pass  # a torn cache file (writes are atomic, so only from elsewhere): ask again
    secrets, where = cfg.secrets(), redact(cfg.endpoint() or DEFAULT_ENDPOINT)
    budget = budget or Budget(cfg.budget_s)
    client = client or _client(cfg)

    def fail(cls, why: str):
        return cls(redact(why, secrets) + f" at {where}", task=task, field="request")

    for attempt in range(cfg.retries + 1):
        t0 = clock()
        try:
            raw = client.chat.completions.with_raw_response.create(**request)
            body = raw.http_response.text
            break
        except openai.APITimeoutError as e:
            last = e
        except openai.APIConnectionError as e:
            if _refused(e):
                raise fail(LLMEndpointError, "cannot connect: connection refused or unknown host") from None
            last = e
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as e:
            raise fail(LLMEndpointError, f"the endpoint refused the request: HTTP {e.status_code} {e.message}; "
                                         f"check ${cfg.api_key_env}, the model and the base URL") from None
        except (openai.RateLimitError, openai.InternalServerError) as e:
            last = e
        except openai.APIStatusError as e:  # other 4xx: retrying cannot help
            raise fail(LLMRequestError, f"the endpoint refused the request: HTTP {e.status_code} {e.message}") from None
        budget.spend(clock() - t0)
        if attempt < cfg.retries:
            pause = min(cfg.backoff_s * 2 ** attempt, max(budget.left, 0.0))
            sleep(pause)
            budget.spend(pause)
        if budget.left <= 0:
            raise fail(LLMEndpointError, f"failed requests and back-off took the build's whole budget_s "
                                         f"({cfg.budget_s:g} s; last: {type(last).__name__})") from None
    else:
        why = f"HTTP {last.status_code}" if isinstance(last, openai.APIStatusError) else type(last).__name__
        raise fail(LLMRequestError, f"request failed after {cfg.retries + 1} attempts ({why})")
    body = redact(body, secrets)
    content = chat_content(body)
    if content is None:
        raise fail(LLMEndpointError, f"the endpoint answered with something that is not a Chat Completion "
                                     f"({body[:80]!r}...); check the base URL")
    record = {"request": request, "response": body, "content": content}
    if json_object(content) is not None:  # only a usable answer is cached; junk is asked again next time
        write_json(path, record)
    return record


def _strip_fences(text: str) -> str:
    t = text.strip()
    if t.startswith("```"):
        t = t.split("\n", 1)[1] if "\n" in t else ""
        t = t.rsplit("```", 1)[0]
    return t


def parse_response(content: str | None, prov: dict, n_paraphrases: int) -> list[Candidate]:
    """The model's JSON -> candidates; anything malformed becomes a rejected candidate with the reason."""
    def bad(why: str) -> list[Candidate]:
        out = [Candidate("paraphrase", (content or "")[:200], provenance=prov, rejected=why)]
        for s in F.SLOTS:
            out += [Candidate("contrast", "", slot=s, provenance=prov, rejected=why),
                    Candidate("collision", "", slot=s, provenance=prov, rejected=why)]
        return out

    if content is None:
        return bad("the response is not a Chat Completion")
    try:
        doc = json.loads(_strip_fences(content))
    except json.JSONDecodeError as e:
        return bad(f"response is not valid JSON ({e.msg} at line {e.lineno})")
    if not isinstance(doc, dict):
        return bad("response JSON is not an object")
    out: list[Candidate] = []
    paras = doc.get("paraphrases")
    if not isinstance(paras, list):
        out.append(Candidate("paraphrase", "", provenance=prov, rejected="'paraphrases' is not a list"))
        paras = []
    for p in paras[:n_paraphrases]:
        ok = isinstance(p, str) and p.strip()
        out.append(Candidate("paraphrase", p.strip() if ok else json.dumps(p)[:200], provenance=prov,
                             rejected=None if ok else "paraphrase is not a non-empty string"))
    for cond, need in (("contrast", ("slot", "text", "goal")), ("collision", ("slot", "text", "absent",
                                                                              "absent_kind"))):
        items = doc.get(cond + "s")
        if not isinstance(items, list):
            out += [Candidate(cond, "", slot=s, provenance=prov, rejected=f"'{cond}s' is not a list")
                    for s in F.SLOTS]
            continue
        for it in items:
            if not isinstance(it, dict) or it.get("slot") not in F.SLOTS:
                out.append(Candidate(cond, json.dumps(it)[:200], slot=None, provenance=prov,
                                     rejected="entry has no known 'slot'"))
                continue
            text = it.get("text")
            if text == "" or text is None:  # the model says there is no honest alternative
                out.append(Candidate(cond, "", slot=it["slot"], provenance=prov,
                                     rejected=f"model: {it.get('note') or 'no alternative'}"))
                continue
            missing = [k for k in need if not isinstance(it.get(k), str) or not it.get(k)]
            out.append(Candidate(cond, str(text), slot=it["slot"], goal_text=it.get("goal"),
                                 absent=it.get("absent"), absent_kind=it.get("absent_kind"), provenance=prov,
                                 rejected=f"missing or non-string {missing}" if missing else None))
    return out


class LLMGenerator:
    name = "llm"

    def __init__(self, cfg: LLMConfig | None = None, client=None, sleep=time.sleep, clock=time.monotonic):
        self.cfg = cfg or LLMConfig()
        self._client, self._sleep, self._clock = client, sleep, clock
        self.budget = Budget(self.cfg.budget_s)  # one per build (one generator per build)

    def describe(self) -> dict:
        d = asdict(self.cfg)
        d["base_url"] = redact(self.cfg.endpoint(), self.cfg.secrets())
        return {"name": self.name, **{k: v for k, v in d.items() if k != "api_key_env"}}

    def propose(self, task: TaskSpec, tf: F.TaskFrames) -> list[Candidate]:
        request = request_of(build_messages(task, tf, self.cfg), self.cfg)
        path = cache_path(request, self.cfg)
        if self._client is None and not path.is_file():
            self._client = _client(self.cfg)  # one client for the whole build, made on the first cache miss
        record = complete(request, self.cfg, task=task.name, client=self._client, sleep=self._sleep,
                          budget=self.budget, clock=self._clock)
        prov = {"generator": "llm", "model": self.cfg.model, "request": path.stem, "cache": str(path)}
        return parse_response(record["content"], prov, self.cfg.n_paraphrases)
