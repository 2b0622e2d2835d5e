"""One connector worker in its own process, driven the way vLLM drives it, for the integration tests.

Run as `python peer.py SPEC.json`, or forked by the tests with run_logged (cluster.py); it writes its KV caches and
what it reported to spec["out"] (torch.save).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fakes"))

from ascend_pd.connector.config import parse_config
from ascend_pd.connector.metadata import AscendPDMetadata, PullRecv, PushRecv, PushSend
from ascend_pd.connector.worker import worker_side_class
from ascend_pd.deploy.handoff import KVAddress
from ascend_pd.deploy.secrets import KV_SECRET_ENV
from kv_data import global_planes, layer_name, shard


def prompt_kv(spec: dict, layer: int) -> list[torch.Tensor]:
    """This rank's head shard of the global test data for one layer."""
    return [shard(plane, spec, spec["tp_rank"], spec["tp_size"]) for plane in global_planes(spec, layer)]


def build_caches(spec: dict, filled: bool) -> dict[str, tuple[torch.Tensor, ...]]:
    """This rank's caches: the prompt's KV (prefill), or a sentinel (decode, and prefill on the NPU twin, whose
    model writes each layer's KV as it computes it)."""
    caches = {}
    for layer in range(spec["layers"]):
        planes = [part.clone() if filled else torch.full_like(part, -7) for part in prompt_kv(spec, layer)]
        caches[layer_name(layer)] = tuple(planes)
    return caches


def use_npu_twin(spec: dict, caches) -> None:
    """Run on the NPU twin as a vLLM worker on device `npu_device` would: device selected on this (the model's)
    thread, caches in that device's memory."""
    import torch_npu_twin

    torch_npu_twin.install()
    torch.npu.set_device(spec["npu_device"])
    for planes in caches.values():
        for plane in planes:
            torch_npu_twin.place(plane, spec["npu_device"])


def compute_layer(spec: dict, caches, layer: int) -> None:
    """The model's forward pass writes a layer's KV into the cache; on the twin that write is a queued device op,
    and the last layer's takes `last_layer_device_s` of device time when it runs."""
    planes = caches[layer_name(layer)]
    if "npu_device" not in spec:
        return
    import torch_npu_twin

    device_s = spec.get("last_layer_device_s", 0) if layer == spec["layers"] - 1 else 0
    for plane, kv in zip(planes, prompt_kv(spec, layer)):
        def write(plane=plane, kv=kv):
            time.sleep(device_s)
            plane.copy_(kv)
        torch_npu_twin.launch(write, plane)


def make_worker(spec: dict):
    role = "kv_producer" if spec["role"] == "prefill" else "kv_consumer"
    config = parse_config(role, spec["engine_id"], spec["kv_port"], {
        "mode": spec["mode"], "protocol": "tcp",
        "ascend_pd_shapes": {"prefill": {"tp_size": spec["p_tp"], "dp_size": 1},
                             "decode": {"tp_size": spec["d_tp"], "dp_size": 1}},
        "abort_timeout_s": spec.get("abort_timeout_s", 60), "kv_load_timeout_s": spec.get("kv_load_timeout_s", 60),
        "transfer_timeout_s": spec.get("transfer_timeout_s", 30),
        "handshake_retries": spec.get("handshake_retries", 5), "handshake_timeout_s": 1.0})
    worker_class = worker_side_class(spec["mode"], spec["role"])
    return worker_class(config, spec.get("host", "127.0.0.1"), spec["tp_rank"], 0, num_kv_heads=spec["num_kv_heads"],
                        is_mla=spec["is_mla"], heads_outer=spec.get("heads_outer", False),
                        staging_bytes=spec.get("staging_bytes", 1 << 20))


LONGEST_HOOK_S = [0.0]  # the longest any call vLLM's engine loop makes took: none may wait on a peer


def timed(call, *args):
    started = time.monotonic()
    try:
        return call(*args)
    finally:
        LONGEST_HOOK_S[0] = max(LONGEST_HOOK_S[0], time.monotonic() - started)


def wait_for(worker, request_id: str, which: int, timeout_s: float, metadata=None, on_finished=None) -> float:
    """Step like vLLM until get_finished reports request_id; returns the seconds it took (inf if never).
    `on_finished` runs at once when it is reported, before anything else can wait for the device."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if metadata is not None:
            timed(worker.on_metadata, metadata)
        if request_id in timed(worker.get_finished)[which]:
            if on_finished is not None:
                on_finished()
            return time.monotonic() - started
        time.sleep(0.01)
    return float("inf")


def prefill(spec: dict, worker, caches) -> dict:
    request = spec["request"]
    if spec["mode"] == "pull":
        worker.on_metadata(AscendPDMetadata(held={request["id"]: spec.get("abort_timeout_s", 60)}))
        return {"released_after_s": wait_for(worker, request["id"], 0, spec["wait_s"])}
    # push: one prefill step, layer by layer, as the model computes them
    time.sleep(spec.get("prefill_start_delay_s", 0))
    blocks = request["src_blocks"]
    step = AscendPDMetadata(push_send=[PushSend(request["id"], request["transfer_id"], blocks, 0, len(blocks), True)])
    worker.on_metadata(step)
    layer_times = []
    for layer in range(spec["layers"]):
        if layer == spec.get("die_at_layer"):
            os._exit(1)  # the prefill process dies in the middle of the forward pass
        time.sleep(spec.get("layer_compute_s", 0))
        compute_layer(spec, caches, layer)
        worker.save_kv_layer(layer_name(layer), step)
        layer_times.append(time.monotonic())
    worker.wait_for_save(step)
    worker.on_metadata(AscendPDMetadata(held={request["id"]: spec.get("kv_load_timeout_s", 60)}))
    return {"released_after_s": wait_for(worker, request["id"], 0, spec["wait_s"]), "layer_times": layer_times}


def decode(spec: dict, worker, caches) -> dict:
    request = spec["request"]
    time.sleep(spec.get("decode_start_delay_s", 0))
    peer = KVAddress(engine_id=spec["p_engine_id"], host="127.0.0.1", port=spec["p_kv_port"], tp_size=spec["p_tp"],
                     rank_hosts=tuple(spec.get("p_rank_hosts", ())))
    if spec["mode"] == "pull":
        # P's prompt is computed when D takes the request up, as when the proxy hands D P's answer at once
        step = AscendPDMetadata(pull_recv=[PullRecv(request["id"], request["id"], peer, request["dst_blocks"],
                                                    request["src_blocks"], prefilled_at=time.time())])
    else:
        step = AscendPDMetadata(push_recv=[PushRecv(request["id"], request["transfer_id"], peer,
                                                    request["dst_blocks"], 0)])
    announced = time.monotonic()
    timed(worker.on_metadata, step)
    if not request["dst_blocks"]:  # aborted before allocation: nothing to wait for, P only hears it may free
        time.sleep(2)
        return {"received_after_s": None, "failed_blocks": sorted(worker.take_failed_blocks())}
    # What vLLM's next forward pass would find in the cache, taken the moment the request is reported received.
    seen = {}
    seconds = wait_for(worker, request["id"], 1, spec["wait_s"], on_finished=lambda: seen.update(
        {layer: tuple(plane.clone() for plane in planes) for layer, planes in caches.items()}))
    return {"received_after_s": seconds, "received_at": announced + seconds, "caches": seen,
            "failed_blocks": sorted(worker.take_failed_blocks()), "longest_hook_s": LONGEST_HOOK_S[0]}


def black_hole(spec: dict) -> None:
    """A prefill host that takes TCP connections on its side-channel port and never says a word, as a peer behind
    a firewall that drops replies, or a wedged process, looks to D."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", spec["kv_port"] + spec["tp_rank"]))
    listener.listen(64)
    print("ready", flush=True)
    time.sleep(spec["wait_s"])


def use_own_secret(spec: dict) -> None:
    """A peer of another deployment: its own KV secret, in place of the one the test session exports."""
    path = Path(spec["out"]).with_suffix(".key")
    path.touch(mode=0o600)
    path.write_text(spec["kv_secret"])
    os.environ[KV_SECRET_ENV] = str(path)


def main(spec_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    if "kv_secret" in spec:
        use_own_secret(spec)
    if spec.get("black_hole"):
        return black_hole(spec)
    worker = make_worker(spec)
    push_prefill = spec["role"] == "prefill" and spec["mode"] == "push"
    caches = build_caches(spec, filled=spec["role"] == "prefill" and not (push_prefill and "npu_device" in spec))
    if "npu_device" in spec:
        use_npu_twin(spec, caches)
    worker.register_kv_caches(caches)
    print("ready", flush=True)
    if spec.get("die_after_ready"):
        os._exit(1)
    result = prefill(spec, worker, caches) if spec["role"] == "prefill" else decode(spec, worker, caches)
    stats = worker.take_stats()
    result["stats"] = stats.data if stats else None
    result.setdefault("caches", caches)
    worker.shutdown()
    # whole or not at all: the test may kill a peer whose result it does not need at any moment
    torch.save(result, spec["out"] + ".part")
    os.replace(spec["out"] + ".part", spec["out"])


def run_logged(spec_path: str, log_path: str) -> None:
    """main() with this process's output, Python's and the Transfer Engine's, going to log_path."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, sys.stdout.fileno())
    os.dup2(log, sys.stderr.fileno())
    main(spec_path)


if __name__ == "__main__":
    main(sys.argv[1])
