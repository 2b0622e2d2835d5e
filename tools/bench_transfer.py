"""Effective GB/s of the connector's pull and push for one prompt, against raw Transfer Engine batches of the same bytes.

Run: python tools/bench_transfer.py [--tokens 4096 --block-size 128 --repeats 5 --model llama-3.1-8b --model deepseek-r1]

A prefill and a decode worker run in two processes on 127.0.0.1 over Mooncake TCP (TP1 -> TP1). Pull is timed on
the decode side from the step that schedules the read to get_finished reporting it; push from the decode side's
announcement to get_finished, with the prefill step (every layer saved at once) started by the announcement. The
raw baselines are batch_transfer_sync_read/write of the same caches, one descriptor per cache tensor, issued by a
separate TransferEngine in the same processes. Runs alternate so machine load hits both alike.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import click

from ascend_pd.deploy.secrets import KV_SECRET_ENV, write_new_secret

_HOST = "127.0.0.1"


def kv_caches(model_id: str, tokens: int, block_size: int, fill: bool):
    """The model's per-layer caches for one prompt at TP1: GQA (K, V) NHD pairs, MLA (nope, rope) pairs, bf16."""
    import torch

    from ascend_pd.models import get_model

    model = get_model(model_id)
    blocks = -(-tokens // block_size)
    if model.mla:
        shapes = [(blocks, block_size, 1, model.mla.kv_lora_rank), (blocks, block_size, 1, model.mla.qk_rope_head_dim)]
    else:
        shapes = [(blocks, block_size, model.num_kv_heads, model.head_dim)] * 2
    make = (lambda s: torch.randint(-30000, 30000, s, dtype=torch.int16).view(torch.bfloat16)) if fill else \
        (lambda s: torch.zeros(s, dtype=torch.bfloat16))
    caches = {f"model.layers.{i}.self_attn.attn": tuple(make(s) for s in shapes) for i in range(model.num_layers)}
    return caches, blocks, model.num_kv_heads if not model.mla else 1, model.mla is not None


def make_worker(role: str, mode: str, port: int, num_kv_heads: int, is_mla: bool):
    from ascend_pd.connector.config import parse_config
    from ascend_pd.connector.worker import worker_side_class

    config = parse_config("kv_producer" if role == "prefill" else "kv_consumer", role, port,
                          {"mode": mode, "protocol": "tcp",
                           "ascend_pd_shapes": {"prefill": {"tp_size": 1}, "decode": {"tp_size": 1}}})
    worker_class = worker_side_class(mode, role)
    return worker_class(config, _HOST, 0, 0, num_kv_heads=num_kv_heads, is_mla=is_mla)


def raw_engine(caches):
    """A second TransferEngine in this process with the same caches registered: the baseline's mover."""
    from mooncake.engine import TransferEngine

    engine = TransferEngine()
    assert engine.initialize(_HOST, "P2PHANDSHAKE", "tcp", "") == 0
    tensors = [t for planes in caches.values() for t in planes]
    for t in tensors:
        assert engine.register_memory(t.data_ptr(), t.numel() * t.element_size()) == 0
    return engine, tensors


def wait_finished(worker, request_id: str, which: int) -> None:
    while request_id not in worker.get_finished()[which]:
        time.sleep(0.0005)


def serve(role: str, conn, model_id: str, tokens: int, block_size: int, ports: dict) -> None:
    """One process: a pull worker and a push worker over the same caches, plus a raw engine; obeys `conn`."""
    from ascend_pd.connector.metadata import AscendPDMetadata, PullRecv, PushRecv, PushSend
    from ascend_pd.deploy.handoff import KVAddress

    caches, blocks, heads, is_mla = kv_caches(model_id, tokens, block_size, fill=role == "prefill")
    workers = {}
    for mode in ("pull", "push"):
        workers[mode] = make_worker(role, mode, ports[role, mode], heads, is_mla)
        workers[mode].register_kv_caches(caches)
    engine, tensors = raw_engine(caches)
    block_ids = list(range(blocks))
    conn.send({"session": workers["pull"].metadata.session, "raw_session": f"{_HOST}:{engine.get_rpc_port()}",
               "addresses": [t.data_ptr() for t in tensors], "lengths": [t.numel() * t.element_size() for t in tensors],
               "nbytes": sum(t.numel() * t.element_size() for t in tensors)})
    while True:
        command, *args = conn.recv()
        if command == "stop":
            break
        started = time.perf_counter()
        if command == "raw":  # args: op, peer session, peer addresses
            op, session, remote = args
            batch = engine.batch_transfer_sync_read if op == "read" else engine.batch_transfer_sync_write
            assert batch(session, [t.data_ptr() for t in tensors], remote,
                         [t.numel() * t.element_size() for t in tensors]) == 0
        elif command == "pull":
            request_id = args[0]
            peer = KVAddress(engine_id="prefill", host=_HOST, port=ports["prefill", "pull"])
            workers["pull"].on_metadata(AscendPDMetadata(pull_recv=[PullRecv(request_id, request_id, peer,
                                                                              block_ids, block_ids)]))
            wait_finished(workers["pull"], request_id, 1)
        elif command == "expect":  # decode side of push: announce, let the parent start prefill, wait
            transfer_id = args[0]
            peer = KVAddress(engine_id="prefill", host=_HOST, port=ports["prefill", "push"])
            workers["push"].on_metadata(AscendPDMetadata(push_recv=[PushRecv(transfer_id, transfer_id, peer,
                                                                              block_ids, 0)]))
            conn.send("announced")
            wait_finished(workers["push"], transfer_id, 1)
        elif command == "prefill":  # prefill side of push: one step that saves every layer
            transfer_id = args[0]
            step = AscendPDMetadata(push_send=[PushSend(transfer_id, transfer_id, block_ids, 0, blocks, True)])
            worker = workers["push"]
            worker.on_metadata(step)
            for layer in caches:
                worker.save_kv_layer(layer, step)
            worker.wait_for_save(step)
            worker.on_metadata(AscendPDMetadata(held={transfer_id: 60.0}))
            wait_finished(worker, transfer_id, 0)
        conn.send(time.perf_counter() - started)
    for worker in workers.values():
        worker.shutdown()


def bench_model(model_id: str, tokens: int, block_size: int, repeats: int, base_port: int) -> dict:
    ctx = mp.get_context("spawn")
    ports = {(role, mode): base_port + 10 * i for i, (role, mode) in
             enumerate([("prefill", "pull"), ("prefill", "push"), ("decode", "pull"), ("decode", "push")])}
    links, procs = {}, []
    for role in ("prefill", "decode"):
        here, there = ctx.Pipe()
        proc = ctx.Process(target=serve, args=(role, there, model_id, tokens, block_size, ports), daemon=True)
        proc.start()
        links[role], procs = here, procs + [proc]
    info = {role: links[role].recv() for role in links}
    times = {"pull": [], "raw read": [], "push": [], "raw write": []}
    for i in range(repeats + 1):  # the first round warms connections up and is not counted
        links["decode"].send(("pull", f"pull-{i}"))
        pull = links["decode"].recv()
        links["decode"].send(("raw", "read", info["prefill"]["raw_session"], info["prefill"]["addresses"]))
        raw_read = links["decode"].recv()
        links["decode"].send(("expect", f"push-{i}"))
        assert links["decode"].recv() == "announced"
        links["prefill"].send(("prefill", f"push-{i}"))
        links["prefill"].recv()
        push = links["decode"].recv()
        links["prefill"].send(("raw", "write", info["decode"]["raw_session"], info["decode"]["addresses"]))
        raw_write = links["prefill"].recv()
        if i:
            for key, value in zip(times, (pull, raw_read, push, raw_write)):
                times[key].append(value)
    for link in links.values():
        link.send(("stop",))
    for proc in procs:
        proc.join(timeout=30)
    nbytes = info["prefill"]["nbytes"]
    return {key: nbytes / statistics.median(values) / 1e9 for key, values in times.items()} | {"bytes": nbytes}


@click.command()
@click.option("--model", "models", multiple=True, default=("llama-3.1-8b", "deepseek-r1"), show_default=True,
              help="Catalog model ids (a mid-size GQA model and an MLA model by default).")
@click.option("--tokens", default=4096, show_default=True, help="Prompt length.")
@click.option("--block-size", default=128, show_default=True, help="Tokens per KV block.")
@click.option("--repeats", default=5, show_default=True, help="Timed rounds (after one warm-up round).")
@click.option("--base-port", default=38000, show_default=True, help="First side-channel port (uses 31 ports).")
def main(models, tokens, block_size, repeats, base_port):
    """Print effective GB/s of pull and push and their ratio to raw Transfer Engine batches of the same bytes."""
    # The connectors talk only to holders of the deployment's KV secret; the spawned peers inherit this one.
    os.environ.setdefault(KV_SECRET_ENV, str(write_new_secret(Path(tempfile.mkdtemp()) / "kv.key")))
    print(f"{'model':<14} {'MB':>8} {'pull GB/s':>10} {'raw rd':>8} {'ratio':>6} {'push GB/s':>10} {'raw wr':>8} "
          f"{'ratio':>6}")
    for model_id in models:
        r = bench_model(model_id, tokens, block_size, repeats, base_port)
        print(f"{model_id:<14} {r['bytes'] / 1e6:>8.1f} {r['pull']:>10.3f} {r['raw read']:>8.3f} "
              f"{r['pull'] / r['raw read']:>6.2f} {r['push']:>10.3f} {r['raw write']:>8.3f} "
              f"{r['push'] / r['raw write']:>6.2f}")


if __name__ == "__main__":
    main()
