"""A stand-in for a vLLM engine whose speed follows the cost model: it takes vLLM's own command line (what the
rendered launch scripts run), serves the fake engine's OpenAI API (tests/fakes/vllm_api.py), and times
the work as the cost model of its shape says: prompts are prefilled in batches of up to --max-num-batched-tokens, one
batch at a time; output tokens come in decode steps over every running sequence (at most --max-num-seqs), each step
as long as the model's decode step at that batch. The cost model is the local-cpu cluster's, with the calibration in
$ASCEND_PD_PACED_CALIBRATION and the model in $ASCEND_PD_PACED_MODEL.

Run by tests/fakes/vllm_shim/python3 in place of `python3 -m vllm.entrypoints.openai.api_server ARGS`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal

from ascend_pd.hardware import load_cluster
from ascend_pd.models import get_model
from ascend_pd.perf.calibration import load_calibration
from ascend_pd.perf.cost import CostModel
from ascend_pd.perf.shape import Shape
from vllm_api import FakeEngine  # tests/fakes, this script's directory
from ascend_pd.proxy.tokens import EstimatedTokens

ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", None: "colocated"}
STEP_SLACK = 0.005  # seconds of a late step that the next ones make up; a longer pause (the engine idle) starts anew


class PrefillBatches:
    """Prompts queue; one batch at a time takes the oldest up to the token budget and lasts the model's prefill."""

    def __init__(self, time_of, budget: int):
        self._time_of = time_of
        self._budget = budget
        self._queue: list[tuple[int, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None

    async def run(self, tokens: int) -> None:
        done = asyncio.get_running_loop().create_future()
        self._queue.append((tokens, done))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._work())
        await done

    async def _work(self) -> None:
        while self._queue:
            batch, used = [], 0
            while self._queue and (not batch or used + self._queue[0][0] <= self._budget):
                tokens, done = self._queue.pop(0)
                batch.append((tokens, done))
                used += tokens
            await asyncio.sleep(self._time_of([t for t, _ in batch]))
            for _, done in batch:
                if not done.done():
                    done.set_result(None)


class DecodeSteps:
    """Sequences wait for the next step; a step serves at most `seats` of them and lasts the model's step at that
    batch and their mean context."""

    def __init__(self, step_of, seats: int):
        self._step_of = step_of
        self._seats = seats
        self._waiting: list[tuple[int, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None

    async def next(self, context: int) -> None:
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((context, done))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._work())
        await done

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        ends = loop.time()
        while self._waiting:
            batch, self._waiting = self._waiting[:self._seats], self._waiting[self._seats:]
            # steps follow one another on the engine's clock: the time the served sequences take to send their
            # token and queue again (vLLM streams outputs while the next step runs) is not added to every step
            step = self._step_of(len(batch), sum(c for c, _ in batch) / len(batch))
            ends = max(ends, loop.time() - STEP_SLACK) + step
            await asyncio.sleep(max(0.0, ends - loop.time()))
            for _, done in batch:
                if not done.done():
                    done.set_result(None)
            # let the sequences just served send their token and queue for the next step, which an engine runs
            # over every running sequence: formed at once, the next step would hold none of them
            for _ in range(3):
                await asyncio.sleep(0)


class PacedEngine(FakeEngine):
    def __init__(self, role: str, port: int, cost: CostModel, shape: Shape, seqs: int, batched: int, model: str):
        super().__init__(role, port=port, model=model)
        self._tokens = EstimatedTokens()
        self._prefill_batches = PrefillBatches(lambda lens: cost.prefill_time(shape, lens).total, batched)
        self._decode_steps = DecodeSteps(lambda batch, context: cost.decode_step(shape, batch, context).total, seqs)

    async def _compute_prompt(self, prompt: str) -> None:
        await self._prefill_batches.run(self._tokens.count(prompt))

    async def _next_token(self, prompt: str) -> None:
        await self._decode_steps.next(self._tokens.count(prompt))


def vllm_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for flag in ("--model", "--served-model-name", "--kv-transfer-config", "--host"):
        parser.add_argument(flag)
    for flag, default in (("--port", 8000), ("--tensor-parallel-size", 1), ("--data-parallel-size", 1),
                          ("--max-num-seqs", 256), ("--max-num-batched-tokens", 2048)):
        parser.add_argument(flag, type=int, default=default)
    return parser.parse_known_args(argv)[0]


async def serve(args: argparse.Namespace) -> None:
    kv = json.loads(args.kv_transfer_config) if args.kv_transfer_config else {}
    cluster = load_cluster("local-cpu")
    calibration = load_calibration(os.environ.get("ASCEND_PD_PACED_CALIBRATION"), cluster.chip.id)
    cost = CostModel(get_model(os.environ.get("ASCEND_PD_PACED_MODEL", "tiny-llama-gqa")), cluster.chip, cluster,
                     calibration=calibration)
    shape = Shape(tp=args.tensor_parallel_size, dp=args.data_parallel_size)
    engine = PacedEngine(ROLES[kv.get("kv_role")], args.port, cost, shape, args.max_num_seqs,
                         args.max_num_batched_tokens, args.served_model_name or "fake-model")
    await engine.start()
    stopped = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stopped.set)
    await stopped.wait()
    await engine.stop()


if __name__ == "__main__":
    import sys

    asyncio.run(serve(vllm_arguments(sys.argv[1:])))
