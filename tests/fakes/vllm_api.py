"""Fake vLLM engines for tests and benchmarks: aiohttp servers speaking vLLM's OpenAI API with kv_transfer_params.

A fake P really holds "KV" (the prompt) until a fake D fetches it over HTTP, so leaked or replayed handoffs are
observable: `held_kv` counts blocks P still holds, `stale_reads` counts D reads of blocks that were already read
once, i.e. replayed handoffs (vLLM would then answer 200 with output from the wrong KV, and so does the fake: it
decodes an empty prompt). Blocks lost because P was killed and restarted in between are a failed transfer instead
(D answers 500, counted in `lost_kv_reads`), as a real transfer to a restarted P fails.
Output tokens are a pure function of the prompt, so any proxied answer can be checked against a direct one.

Like vLLM, a request ends "length" at its output cap or "stop" at EOS, and a fake P returns kv_transfer_params
only when it ended length-capped (as vLLM's pull connectors do). A prompt listed in `Behaviour.eos_first` has EOS as
its first token: it ends "stop" with no text unless `min_tokens` >= 1 or `ignore_eos` holds EOS back, in which case
its tokens are the usual ones. Pushed KV (push, layerwise) is written during the prefill, however P ends.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import random
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from ascend_pd.proxy.openai_body import prompt_text

KV_WAIT_SECONDS = 5.0  # how long a fake D waits for pushed KV before it gives up with a 500


async def wait_healthy(session: aiohttp.ClientSession, url: str, seconds: float = 20.0) -> None:
    """Until the proxy at `url` answers /health with 200 (it may still be binding its port); TimeoutError after
    `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            async with session.get(url + "/health") as answer:
                if answer.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the proxy at {url} did not become healthy within {seconds:.0f} s")

def fake_tokens(prompt: str, count: int) -> list[str]:
    seed = zlib.crc32(prompt.encode())
    return [f" w{(seed + 7919 * i) % 1000}" for i in range(count)]


@dataclass
class Behaviour:
    prefill_delay: float = 0.0  # seconds before P answers (or a colocated engine starts decoding)
    token_delay: float = 0.0  # seconds between two output tokens
    fail_rate: float = 0.0  # fraction of completion requests answered with a 500 at once
    queue_delay: float = 0.0  # seconds a D request waits for free blocks before it fetches its KV
    eos_first: frozenset[str] = frozenset()  # prompts (their prompt_text) whose first output token is EOS
    honours_min_tokens: bool = True  # False: an engine that lets EOS end a request before min_tokens
    health_delay: float = 0.0  # seconds before /health answers (an API server busy on a loaded host)


class FakeEngine:
    def __init__(self, role: str, port: int = 0, kv_port: int | None = None, behaviour: Behaviour | None = None,
                 host: str = "127.0.0.1", model: str = "fake-model", seed: int = 0):
        self.role = role
        self.host = host
        self.port = port
        self.kv_port = kv_port
        self.behaviour = behaviour or Behaviour()
        self.model = model
        self.engine_id = f"{role}-{port}"
        self._rng = random.Random(seed)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._handles = itertools.count(1)
        self._held: OrderedDict[str, str] = OrderedDict()  # pull: block handle -> prompt, until D reads it
        self._read: OrderedDict[str, None] = OrderedDict()  # pull: handles D has read, kept across restarts
        self._arrivals: OrderedDict[str, asyncio.Future] = OrderedDict()  # push: transfer key -> KV arriving
        self.received: list[dict[str, Any]] = []  # completion request bodies, in arrival order
        self.finish_reasons: collections.Counter[str] = collections.Counter()  # of the answers sent
        self.cancelled = 0  # completion requests whose client (the proxy) went away before the end
        self.active = 0  # completion requests being served
        self.waiting = 0  # of those, D requests still queued for blocks or for their KV (vLLM's "waiting")
        self.stale_reads = 0
        self.lost_kv_reads = 0  # D reads of blocks a restart of P lost
        self.recomputes = 0  # decode requests that came without KV: D recomputed the prompt itself
        self._fail_next: list[int] = []
        self._break_after: int | None = None
        self._omit_kv_params = False
        self.cut_from: set[int] = set()  # ports of P engines whose KV this D cannot reach
        self.version: str | None = None  # vLLM's version on GET /version; None: no such endpoint (404)

    # --- lifecycle --------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def held_kv(self) -> int:
        return len(self._held)

    async def start(self) -> "FakeEngine":
        app = web.Application()
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/version", self._version)
        app.router.add_get("/kv/{handle}", self._read_kv)  # pull: D reads P's blocks
        app.router.add_get("/kv-push/{key}", self._wait_pushed)  # push: D waits for P's writes, on P's side channel
        app.router.add_post("/kv-push/{key}", self._receive_push)  # layerwise: P writes into D
        self._session = aiohttp.ClientSession()
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        self.port = self._runner.addresses[0][1]
        if self.kv_port is not None:
            await web.TCPSite(self._runner, self.host, self.kv_port, reuse_address=True).start()
            self.kv_port = self._runner.addresses[1][1]
        self.engine_id = f"{self.role}-{self.port}"
        return self

    async def stop(self) -> None:
        """Kill the engine: listening stops, open connections drop, held KV is lost."""
        if self._runner is not None:
            await self._runner.cleanup()
            await self._session.close()
            self._runner = None
        self._held.clear()

    # --- failure injection ------------------------------------------------------------------------------------
    def fail_next(self, count: int = 1, status: int = 500) -> None:
        self._fail_next.extend([status] * count)

    def break_next_stream_after(self, tokens: int) -> None:
        """The next streamed answer drops its connection after this many tokens."""
        self._break_after = tokens

    def omit_kv_params_next(self) -> None:
        self._omit_kv_params = True

    # --- handlers ---------------------------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.behaviour.health_delay)
        return web.Response(text="")

    async def _metrics(self, request: web.Request) -> web.Response:
        """vLLM's scheduler gauges, as one engine core, counting the requests this fake is serving right now. It has
        no block pool, so its KV cache usage is 0."""
        labels = f'{{engine="0",model_name="{self.model}"}}'
        gauges = (("vllm:num_requests_running", "Number of requests in model execution batches.",
                   self.active - self.waiting),
                  ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", self.waiting),
                  ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", 0))
        text = "".join(f"# HELP {name} {doc}\n# TYPE {name} gauge\n{name}{labels} {float(value)}\n"
                       for name, doc, value in gauges)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _version(self, request: web.Request) -> web.Response:
        if self.version is None:
            raise web.HTTPNotFound()
        return web.json_response({"version": self.version})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = msgspec.json.decode(await request.read())
        self.received.append(body)
        if self._fail_next or self._rng.random() < self.behaviour.fail_rate:
            status = self._fail_next.pop(0) if self._fail_next else 500
            return web.json_response({"error": {"message": "injected failure", "code": status}}, status=status)
        self.active += 1
        try:
            return await self._serve(request, body)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    async def _serve(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        params = body.get("kv_transfer_params") or {}
        prompt = prompt_text(body)
        if params.get("do_remote_decode"):
            await self._compute_prompt(prompt)
            return web.json_response(self._prefill(request, body, params, prompt))
        if params.get("do_remote_prefill"):
            self.waiting += 1
            try:
                await asyncio.sleep(self.behaviour.queue_delay)
                prompt = await self._receive_kv(request, params, prompt)
            finally:
                self.waiting -= 1
            if prompt is None:
                return await self._kv_load_failed(request, body)
        else:
            if self.role == "decode":
                self.recomputes += 1
            await self._compute_prompt(prompt)
        return await self._generate(request, body, prompt)

    # --- pacing: subclasses time the work like an engine would (see paced_engine.py beside this file) -----------------
    async def _compute_prompt(self, prompt: str) -> None:
        await asyncio.sleep(self.behaviour.prefill_delay)

    async def _next_token(self, prompt: str) -> None:
        """Before each output token after the first (and before the whole answer, once per token, when not
        streamed)."""
        if self.behaviour.token_delay:
            await asyncio.sleep(self.behaviour.token_delay)

    def _prefill(self, request, body, params, prompt) -> dict[str, Any]:
        answer = self._completion(body, *self._output(body, prompt))
        if "transfer_id" in params:  # push: the KV is written to D through this engine's side channel
            self._arrival(params["transfer_id"]).set_result(prompt)
        elif "remote_block_ids" in params:  # layerwise: D said where its blocks are; write them there
            asyncio.ensure_future(self._push_to(params, prompt))
        elif answer["choices"][0]["finish_reason"] == "length" and not self._omit_kv_params:
            # pull, and P ended length-capped: hold the KV until D reads it
            handle = f"{self.port}-{next(self._handles)}"
            self._held[handle] = prompt
            answer["kv_transfer_params"] = {"do_remote_prefill": True, "do_remote_decode": False,
                                            "remote_engine_id": self.engine_id, "remote_block_ids": [handle],
                                            "remote_host": self.host, "remote_port": self.port, "tp_size": 1}
        self._omit_kv_params = False
        return answer

    async def _kv_load_failed(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """As vLLM fails a request whose KV load failed under kv_load_failure_policy "fail": a 500, or, streaming,
        a 200 whose first event is the error."""
        error = {"error": {"message": "Internal server error", "type": "InternalServerError", "code": 500}}
        if not body.get("stream"):
            return web.json_response(error, status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(f"data: {json.dumps(error)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response

    async def _push_to(self, params: dict[str, Any], prompt: str) -> None:
        url = f"http://{params['remote_host']}:{params['remote_port']}/kv-push/{params['remote_block_ids'][0]}"
        async with self._session.post(url, data=prompt.encode()) as answer:
            await answer.read()

    async def _receive_kv(self, request, params, prompt) -> str | None:
        """The prompt whose KV D now holds, or None if it never came."""
        if "remote_block_ids" in params:
            return await self._pull_kv(params)
        if "transfer_id" in params:
            return await self._await_push(params)
        if "metaserver" in params:
            return await self._await_layerwise(request, params)
        return None

    async def _pull_kv(self, params) -> str | None:
        if params["remote_port"] in self.cut_from:
            return None  # the link to that P is down: the read fails
        url = f"http://{params['remote_host']}:{params['remote_port']}/kv/{params['remote_block_ids'][0]}"
        try:
            async with self._session.get(url) as answer:
                if answer.status == 200:
                    return await answer.text()
                gone = answer.status == 410
        except aiohttp.ClientError:
            return None  # P is gone: the transfer fails
        if not gone:  # P restarted since it prefilled: the transfer fails
            self.lost_kv_reads += 1
            return None
        self.stale_reads += 1
        return ""  # the blocks were read before, so freed or reused: decode runs on whatever is there

    async def _await_push(self, params) -> str | None:
        """Push: wait on P's side channel until P has written the KV of this transfer."""
        url = f"http://{params['remote_host']}:{params['remote_port']}/kv-push/{params['transfer_id']}"
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=KV_WAIT_SECONDS)) as answer:
                return await answer.text() if answer.status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None

    async def _await_layerwise(self, request, params) -> str | None:
        """Layerwise: tell the proxy's metaserver where this request's blocks are, then wait for P to write."""
        key = f"{self.port}-{next(self._handles)}"
        arrival = self._arrival(key)
        coordinates = {"request_id": f"cmpl-{request.headers.get('X-Request-Id', '')}-0",
                       "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": self.engine_id,
                       "remote_host": self.host, "remote_port": self.kv_port or self.port,
                       "remote_block_ids": [key]}
        try:
            async with self._session.post(params["metaserver"], json=coordinates) as answer:
                if answer.status != 200:
                    return None
            return await asyncio.wait_for(arrival, KV_WAIT_SECONDS)
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None
        finally:
            self._arrivals.pop(key, None)

    async def _read_kv(self, request: web.Request) -> web.Response:
        """200 and the KV; 410 for blocks already read (a replay); 404 for blocks this P does not know."""
        handle = request.match_info["handle"]
        prompt = self._held.pop(handle, None)
        if prompt is None:
            return web.Response(status=410 if handle in self._read else 404)
        self._read[handle] = None
        while len(self._read) > 100_000:
            self._read.popitem(last=False)
        return web.Response(text=prompt)

    async def _wait_pushed(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        try:
            prompt = await asyncio.wait_for(asyncio.shield(self._arrival(key)), KV_WAIT_SECONDS)
        except asyncio.TimeoutError:
            return web.Response(status=404)
        self._arrivals.pop(key, None)
        return web.Response(text=prompt)

    async def _receive_push(self, request: web.Request) -> web.Response:
        arrival = self._arrivals.get(request.match_info["key"])
        if arrival is None or arrival.done():
            return web.Response(status=404)
        arrival.set_result(await request.text())
        return web.Response()

    def _arrival(self, key: str) -> asyncio.Future:
        if key not in self._arrivals:
            self._arrivals[key] = asyncio.get_running_loop().create_future()
            while len(self._arrivals) > 10_000:
                self._arrivals.popitem(last=False)
        return self._arrivals[key]

    # --- output -----------------------------------------------------------------------------------------------
    def _output(self, body: dict[str, Any], prompt: str) -> tuple[list[str], str]:
        """The visible tokens and the finish reason. vLLM holds EOS back until min_tokens tokens exist (and
        always with ignore_eos), so an EOS-first prompt then gets a real first token and runs to its cap."""
        eos_held_back = body.get("ignore_eos") or (self.behaviour.honours_min_tokens and body.get("min_tokens"))
        if prompt in self.behaviour.eos_first and not eos_held_back:
            return [], "stop"
        count = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        return fake_tokens(prompt, count), "length"

    async def _generate(self, request: web.Request, body: dict[str, Any], prompt: str) -> web.StreamResponse:
        tokens, finish = self._output(body, prompt)
        if not body.get("stream"):
            for _ in tokens:
                await self._next_token(prompt)
            return web.json_response(self._completion(body, tokens, finish))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        break_after, self._break_after = self._break_after, None
        texts = tokens or [""]  # a stop at EOS still sends one chunk, with its finish reason
        for index, token in enumerate(texts):
            if break_after is not None and index == break_after:
                request.transport.close()
                return response
            last = index == len(texts) - 1
            if last:
                self.finish_reasons[finish] += 1
            chunk = self._chunk(body, token, finish if last else None)
            await response.write(b"data: " + msgspec.json.encode(chunk) + b"\n\n")
            if not last:
                await self._next_token(prompt)
        if (body.get("stream_options") or {}).get("include_usage"):  # vLLM's last chunk: no choice, the usage
            usage = self._completion(body, tokens, finish, count=False)["usage"]
            await response.write(b"data: " + msgspec.json.encode({"id": "cmpl-fake", "object": "text_completion",
                                                                  "model": self.model, "choices": [],
                                                                  "usage": usage}) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _completion(self, body, tokens: list[str], finish: str, count: bool = True) -> dict[str, Any]:
        if count:
            self.finish_reasons[finish] += 1
        text = "".join(tokens)
        # an EOS is an output token too, with no text
        usage = {"prompt_tokens": len(prompt_text(body).split()), "completion_tokens": len(tokens) + (finish == "stop")}
        if "messages" in body:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
            return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                    "model": self.model, "choices": [choice], "usage": usage}
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return {"id": "cmpl-fake", "object": "text_completion", "created": int(time.time()), "model": self.model,
                "choices": [choice], "usage": usage}

    def _chunk(self, body, token: str, finish: str | None) -> dict[str, Any]:
        if "messages" in body:
            choice = {"index": 0, "delta": {"content": token}, "finish_reason": finish}
            return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": self.model,
                    "choices": [choice]}
        return {"id": "cmpl-fake", "object": "text_completion", "model": self.model,
                "choices": [{"index": 0, "text": token, "logprobs": None, "finish_reason": finish}]}
