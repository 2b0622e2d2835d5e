"""Run fake vLLM prefill/decode engines (tests/fakes/vllm_api.py) in one process, for benchmarks and soak runs.

Prints one JSON line {"prefill": [...], "decode": [...], "colocated": [...]} with each engine's url, kv_port and
engine_id once every engine listens, then serves until killed.

    python tools/fake_vllm.py --prefill 2 --decode 2 --token-delay 0.01 [--event-loop uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from ascend_pd.proxy.event_loop import EVENT_LOOPS, run
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the fake engines live in tests/fakes
from tests.fakes.vllm_api import Behaviour, FakeEngine  # noqa: E402


async def serve(args: argparse.Namespace) -> None:
    behaviour = Behaviour(prefill_delay=args.prefill_delay, token_delay=args.token_delay, fail_rate=args.fail_rate)
    engines: dict[str, list[FakeEngine]] = {"prefill": [], "decode": [], "colocated": []}
    for role in engines:
        for index in range(getattr(args, role)):
            engine = FakeEngine(role, kv_port=0, behaviour=behaviour, host=args.host, seed=args.seed + index)
            engines[role].append(await engine.start())
    ready = {role: [{"url": e.url, "kv_port": e.kv_port, "engine_id": e.engine_id} for e in group]
             for role, group in engines.items()}
    print(json.dumps(ready), flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefill", type=int, default=1, help="prefill engines")
    parser.add_argument("--decode", type=int, default=1, help="decode engines")
    parser.add_argument("--colocated", type=int, default=0, help="colocated engines")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--prefill-delay", type=float, default=0.0, help="seconds per prefill")
    parser.add_argument("--token-delay", type=float, default=0.0, help="seconds between output tokens")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="fraction of requests answered 500")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--event-loop", choices=EVENT_LOOPS, default="auto",
                        help="auto: uvloop when installed, so the engines cost less CPU next to the proxy")
    args = parser.parse_args(argv)
    try:
        run(serve(args), args.event_loop)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
