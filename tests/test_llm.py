"""The LLM generator: the real `openai` client against a fake OpenAI-compatible server on 127.0.0.1."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clbench_jax.language import frames as F
from clbench_jax.language import variants as V
from clbench_jax.language.llm import LLMConfig, LLMEndpointError, LLMGenerator, LLMRequestError, redact, request_key

REPO = Path(__file__).resolve().parents[1]

GOOD = {
    "paraphrases": ["place the bowl on the stove", "set the bowl onto the stove", "move the bowl onto the stove",
                    "the bowl goes on the stove", "put the bowl on top of the stove"],
    "contrasts": [
        {"slot": "object", "text": "put the plate on the stove", "goal": "(And (On plate_1 flat_stove_1_cook_region))"},
        {"slot": "target", "text": "put the bowl in the microwave",
         "goal": "(And (In akita_black_bowl_1 microwave_1))"},
        {"slot": "action", "text": "", "goal": "", "note": "no other action"},
    ],
    "collisions": [
        {"slot": "object", "text": "put the microwave on the stove", "absent": "microwave", "absent_kind": "entity"},
        {"slot": "relation", "text": "put the bowl behind the stove", "absent": "behind", "absent_kind": "predicate"},
        {"slot": "target", "text": "put the bowl on the spatula", "absent": "spatula", "absent_kind": "entity"},
    ],
}


def completion(content: str) -> bytes:
    return json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-4.1-mini",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()


class FakeServer:
    """Answers POST /v1/chat/completions from a script of (status, body bytes, delay s); the last entry repeats."""

    def __init__(self, script):
        self.script, self.requests = list(script), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((self.path, json.loads(body)))
                status, payload, delay = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    servers = []

    def start(*script):
        servers.append(FakeServer(script))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def gen(server, tmp_path, **kw):
    sleeps = []
    g = LLMGenerator(LLMConfig(base_url=server.url, cache_dir=str(tmp_path / "cache"), backoff_s=0.01, **kw),
                     sleep=sleeps.append)
    return g, sleeps


@pytest.fixture(scope="module")
def task():
    from clbench_jax.tasks.suites import get_task

    return get_task("libero_goal:1")  # put the bowl on the stove


@pytest.fixture(scope="module")
def reset(task):
    from clbench_jax.sim.scene import build_scene
    from clbench_jax.tasks.suites import suite_tasks

    return V.ResetCheck(build_scene(suite_tasks("libero_goal")), task, n=2, seed=0)


def test_success_request_defaults_cache_and_validation(serve, tmp_path, task, reset):
    s = serve((200, completion(json.dumps(GOOD)), 0))
    g, _ = gen(s, tmp_path)
    cands = g.propose(task, F.task_frames(task))
    path, req = s.requests[0]
    assert path == "/v1/chat/completions"
    assert (req["model"], req["temperature"], req["top_p"], req["max_tokens"], req["seed"]) == (
        "gpt-4.1-mini", 0.7, 0.9, 2048, 101)
    assert req["messages"][0]["content"] == (REPO / "configs/prompts/variants_system.txt").read_text()
    assert '"put the bowl on the stove"' in req["messages"][1]["content"]
    assert "flat_stove_1_cook_region (region)" in req["messages"][1]["content"]
    # the raw response is stored verbatim with its request
    rec = json.loads((tmp_path / "cache" / f"{request_key(req, s.url)}.json").read_text())
    assert rec["request"] == req and rec["response"] == completion(json.dumps(GOOD)).decode()
    tv = V.build_task(task, 1, cands, reset, generator="llm")
    kept = {(v.condition, v.slot): v for v in tv.variants if v.retained}
    assert sum(v.condition == "paraphrase" for v in tv.variants if v.retained) == 5
    assert kept[("contrast", "object")].goal == (("on", "plate_1", "flat_stove_1_cook_region"),)
    bad = [v for v in tv.variants if v.condition == "contrast" and v.slot == "target"][0]
    assert not bad.retained and "microwave_1" in bad.reasons[0]             # absent entity: excluded
    assert kept[("collision", "object")].probe == "verified"
    assert kept[("collision", "relation")].probe == "verified"
    spat = [v for v in tv.variants if v.condition == "collision" and v.slot == "target"][0]
    assert not spat.retained and spat.probe == "unverified"                  # kept as a probe, outside
    action = [u for u in tv.unavailable if u["slot"] == "action"][0]
    assert action["reasons"] == ["model: no other action"]


def test_cached_response_is_never_requested_again(serve, tmp_path, task):
    s = serve((200, completion(json.dumps(GOOD)), 0))
    g, _ = gen(s, tmp_path)
    first = g.propose(task, F.task_frames(task))
    second = LLMGenerator(g.cfg).propose(task, F.task_frames(task))
    assert len(s.requests) == 1 and first == second


def test_invalid_json_becomes_rejected_candidates_and_is_not_cached(serve, tmp_path, task):
    s = serve((200, completion("Sure! Here are some variants: paraphrase 1 ..."), 0))
    g, _ = gen(s, tmp_path)
    tv = V.build_task(task, 1, g.propose(task, F.task_frames(task)), None, generator="llm")
    para = [v for v in tv.variants if v.condition == "paraphrase"]
    assert len(para) == 1 and not para[0].retained and "not valid JSON" in para[0].reasons[0]
    assert len(tv.unavailable) == 5 and all("not valid JSON" in u["reasons"][0] for u in tv.unavailable)
    # nothing of the LLM's is kept; seed 004's faces (swap, nonsense) come from the frames, whatever the generator
    assert not [v for v in tv.variants if v.retained and v.condition not in ("original", "swap", "nonsense")]
    # an unusable answer is not cached: the next build asks again
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())
    g.propose(task, F.task_frames(task))
    assert len(s.requests) == 2


def test_schema_break_becomes_rejected_candidates(serve, tmp_path, task):
    broken = {"paraphrases": ["put the bowl onto the stove", 7],
              "contrasts": [{"slot": "object", "text": "put the plate on the stove"}, {"slot": "colour"}],
              "collisions": "none"}
    s = serve((200, completion("```json\n" + json.dumps(broken) + "\n```"), 0))
    g, _ = gen(s, tmp_path)
    tv = V.build_task(task, 1, g.propose(task, F.task_frames(task)), None, generator="llm")
    para = [(v.retained, v.reasons) for v in tv.variants if v.condition == "paraphrase"]
    assert para[0] == (True, ()) and para[1][0] is False and "non-empty string" in para[1][1][0]
    obj = [v for v in tv.variants if v.condition == "contrast" and v.slot == "object"][0]
    assert not obj.retained and "missing or non-string ['goal']" in obj.reasons[0]
    coll = [u for u in tv.unavailable if u["slot"] == "target"][0]
    assert coll["reasons"]  # no kept target contrast
    assert not [v for v in tv.variants if v.condition == "collision" and v.retained]


def test_rate_limit_and_server_error_are_retried_with_backoff(serve, tmp_path, task):
    s = serve((429, b'{"error": {"message": "slow down"}}', 0), (500, b'{"error": {"message": "oops"}}', 0),
              (200, completion(json.dumps(GOOD)), 0))
    g, sleeps = gen(s, tmp_path)
    cands = g.propose(task, F.task_frames(task))
    assert len(s.requests) == 3 and sleeps == [0.01, 0.02]
    assert any(c.condition == "paraphrase" and not c.rejected for c in cands)


def test_persistent_failure_fails_that_task_with_a_clear_message(serve, tmp_path, task):
    s = serve((503, b'{"error": {"message": "down"}}', 0))
    g, sleeps = gen(s, tmp_path, retries=2)
    with pytest.raises(LLMRequestError, match=r"after 3 attempts \(HTTP 503\)") as e:
        g.propose(task, F.task_frames(task))
    assert e.value.task == task.name and len(s.requests) == 3 and len(sleeps) == 2
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())
    # a suite build records the failed task and goes on
    doc = V.build_suite("libero_goal", g, check_reset=False, progress=False, tasks=[1, 7])
    assert all("after 3 attempts" in t["error"] for t in doc["tasks"])
    s400 = serve((400, b'{"error": {"message": "bad model"}}', 0))
    g400, _ = gen(s400, tmp_path / "b")
    with pytest.raises(LLMRequestError, match="refused the request: HTTP 400"):
        g400.propose(task, F.task_frames(task))
    assert len(s400.requests) == 1  # a client error is not retried


def test_timeout_is_retried(serve, tmp_path, task):
    s = serve((200, completion(json.dumps(GOOD)), 1.5), (200, completion(json.dumps(GOOD)), 0))
    g, sleeps = gen(s, tmp_path, timeout_s=0.3)
    cands = g.propose(task, F.task_frames(task))
    assert len(s.requests) == 2 and sleeps == [0.01]
    assert len([c for c in cands if c.condition == "paraphrase"]) == 5


def test_yaml_config_and_cli_build_against_the_fake_server(serve, tmp_path, capsys):
    from clbench_jax.cli import main
    from clbench_jax.errors import ClbenchError
    from clbench_jax.language.llm import load_config

    s = serve((200, completion(json.dumps(GOOD)), 0))
    cfg = tmp_path / "llm.yaml"
    cfg.write_text(f"base_url: {s.url}\ntemperature: 0.2\ncache_dir: {tmp_path / 'c'}\n")
    c = load_config(cfg, model="local-model")
    assert (c.base_url, c.temperature, c.model, c.top_p, c.seed) == (s.url, 0.2, "local-model", 0.9, 101)
    bad = tmp_path / "bad.yaml"
    bad.write_text("temprature: 0.1\n")
    with pytest.raises(ClbenchError, match="unknown LLM config key") as e:
        load_config(bad)
    assert e.value.field == "temprature"
    out = tmp_path / "v.json"
    assert main(["variants", "build", "--suite", "libero_goal", "--generator", "llm", "--config", str(cfg),
                 "--tasks", "1", "--no-reset-check", "--out", str(out)]) == 0
    doc = V.read_variants(out)
    assert doc["generator"]["temperature"] == 0.2 and s.requests[0][1]["temperature"] == 0.2
    assert [v["text"] for v in doc["tasks"][0]["variants"] if v["condition"] == "paraphrase"] == GOOD["paraphrases"]


def test_html_page_stops_the_build_and_nothing_is_cached(serve, tmp_path, task, capsys):
    """A wrong base URL answering HTTP 200 with a web page: the build stops at the first task with an error naming
    the endpoint (not 0 paraphrases and exit 0), and the junk is not cached."""
    from clbench_jax.cli import main

    html = b"<!doctype html><html><body>Welcome to nginx!</body></html>"
    s = serve((200, html, 0))
    g, _ = gen(s, tmp_path)
    with pytest.raises(LLMEndpointError, match="not a Chat Completion") as e:
        V.build_suite("libero_goal", g, check_reset=False, progress=False, tasks=[1, 7, 8])
    assert s.url in str(e.value) and len(s.requests) == 1  # stopped at the first task
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())
    out = tmp_path / "v.json"
    assert main(["variants", "build", "--suite", "libero_goal", "--generator", "llm", "--base-url", s.url,
                 "--cache-dir", str(tmp_path / "cache"), "--tasks", "1", "--no-reset-check", "--out", str(out)]) == 2
    assert "not a Chat Completion" in capsys.readouterr().err and not out.exists()


def test_cache_key_includes_the_endpoint(serve, tmp_path, task):
    """The same request sent to another server is another answer: never served from the first server's cache."""
    a = serve((200, completion(json.dumps(GOOD)), 0))
    b = serve((200, completion(json.dumps(dict(GOOD, paraphrases=["set the bowl on the stove"]))), 0))
    ga, _ = gen(a, tmp_path)
    gb, _ = gen(b, tmp_path)  # same cache folder
    pa, pb = (g.propose(task, F.task_frames(task)) for g in (ga, gb))
    assert len(a.requests) == 1 and len(b.requests) == 1
    assert [c.text for c in pa if c.condition == "paraphrase"] == GOOD["paraphrases"]
    assert [c.text for c in pb if c.condition == "paraphrase"] == ["set the bowl on the stove"]
    assert len(list((tmp_path / "cache").iterdir())) == 2
    assert request_key({"x": 1}, a.url) != request_key({"x": 1}, b.url)


def test_connection_refused_fails_fast_for_the_whole_build(tmp_path, task, monkeypatch):
    """Nothing listens on the port: one attempt, no back-off, and the build stops (not retries x tasks)."""
    import socket

    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    sleeps = []
    g = LLMGenerator(LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", cache_dir=str(tmp_path / "c")),
                     sleep=sleeps.append)
    t0 = time.monotonic()
    with pytest.raises(LLMEndpointError, match="connection refused") as e:
        V.build_suite("libero_goal", g, check_reset=False, progress=False, tasks=[1, 7, 8])
    assert sleeps == [] and time.monotonic() - t0 < 30 and f"127.0.0.1:{port}" in str(e.value)


def test_auth_error_echoing_the_key_is_redacted_everywhere(serve, tmp_path, task, monkeypatch, capsys):
    """A 401 whose body echoes the API key: one try, the build stops, and the key appears in no message, stderr or
    file written; credentials in the base URL are redacted from the variant file's generator record."""
    from clbench_jax.cli import main

    key = "sk-test-SECRET-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    body = json.dumps({"error": {"message": f"Incorrect API key provided: {key}", "code": "invalid_api_key"}})
    s = serve((401, body.encode(), 0))
    g, sleeps = gen(s, tmp_path)
    with pytest.raises(LLMEndpointError, match="HTTP 401") as e:
        V.build_suite("libero_goal", g, check_reset=False, progress=False, tasks=[1, 7])
    assert key not in str(e.value) and "***" in str(e.value) and len(s.requests) == 1 and sleeps == []
    out = tmp_path / "v.json"
    assert main(["variants", "build", "--suite", "libero_goal", "--generator", "llm", "--base-url", s.url,
                 "--cache-dir", str(tmp_path / "c2"), "--tasks", "1", "--no-reset-check", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "HTTP 401" in err and key not in err
    # credentials in a URL: a working server reached through user:password@ and ?api_key=
    ok = serve((200, completion(json.dumps(GOOD)), 0))
    url = ok.url.replace("http://", "http://user:hunter22@")
    assert redact(url) == ok.url.replace("http://", "http://***@")
    assert redact("https://h/v1?api_key=abc123&x=1", [key]) == "https://h/v1?api_key=***&x=1"
    gen_ok = LLMGenerator(LLMConfig(base_url=url, cache_dir=str(tmp_path / "c3")))
    doc = V.build_suite("libero_goal", gen_ok, check_reset=False, progress=False, tasks=[1])
    V.write_variants(out, doc)
    written = out.read_text() + "".join(p.read_text() for p in (tmp_path / "c3").iterdir())
    assert "hunter22" not in written and key not in written and "***@" in written


def test_failure_budget_bounds_the_total_time(serve, tmp_path, task):
    """Every attempt times out: back-off and failed attempts share budget_s across the build's tasks, so a dead
    server costs minutes, not retries x tasks x timeout."""
    clock = [0.0]
    s = serve((503, b'{"error": {"message": "down"}}', 0))
    g = LLMGenerator(LLMConfig(base_url=s.url, cache_dir=str(tmp_path / "c"), retries=3, backoff_s=10.0,
                               budget_s=45.0),
                     sleep=lambda t: clock.__setitem__(0, clock[0] + t), clock=lambda: clock[0])
    with pytest.raises(LLMEndpointError, match="budget_s") as e:
        V.build_suite("libero_goal", g, check_reset=False, progress=False, tasks=[1, 7, 8, 9])
    # task 1: 4 attempts, sleeps 10 + 20 (+ 40 would pass 45: cut to what is left), failing at the budget
    assert clock[0] == pytest.approx(45.0) and len(s.requests) == 3 and "budget_s (45 s" in str(e.value)
