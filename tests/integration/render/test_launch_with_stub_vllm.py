"""Run generated launch, proxy and stop scripts for real, with `vllm` (or `python3` on the CPU cluster, or
`ascend-pd` for the proxy) replaced on PATH by a stub that records its argv and environment, then check what every
process was started with."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ascend_pd.deploy import load_deployment
from ascend_pd.render import RenderOptions, render_bundle, write_bundle
from tests.known_shapes import known_shape

pytestmark = pytest.mark.integration

# Records {"argv", "env"} as JSON in $STUB_RECORDS, then stays up like a server until signalled.
STUB = """#!{python}
import json, os, sys, time
record = {{"argv": sys.argv, "env": dict(os.environ), "pid": os.getpid(), "pgid": os.getpgid(0)}}
path = os.path.join(os.environ["STUB_RECORDS"], f"{{os.getpid()}}.json")
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.replace(path + ".tmp", path)
time.sleep(120)
"""


SPREAD_TP = Path(__file__).resolve().parents[2] / "unit" / "render" / "spread-tp-qwen3.yaml"


def render_to(example, out, node_ips=None, **options):
    path = example if isinstance(example, Path) else known_shape(example)
    loaded = load_deployment(path).with_node_addresses(node_ips or {})
    result = render_bundle(loaded, RenderOptions(target="bash", **options))
    write_bundle(result.files, out)


def stub_path(tmp_path, *names):
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    for name in names:
        (bin_dir / name).write_text(STUB.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    records = tmp_path / "records"
    records.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_RECORDS": str(records)}
    return env, records


def run_script(script, env):
    return subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)


def wait_for_records(records: Path, count: int) -> list[dict]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = sorted(records.glob("*.json"))
        if len(found) >= count:
            return [json.loads(p.read_text()) for p in found]
        time.sleep(0.1)
    raise AssertionError(f"only {len(list(records.glob('*.json')))} of {count} stub processes recorded a start")


def flag(argv, name):
    return argv[argv.index(name) + 1]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_and_check(out, node, env, records):
    stopped = run_script(out / f"stop-{node}.sh", {**env, "STOP_TIMEOUT": "10"})
    assert stopped.returncode == 0, stopped.stderr
    deadline = time.monotonic() + 15
    while any(alive(r["pid"]) for r in records) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(r["pid"]) for r in records), "stop left a process running"


def test_a2_decode_node_starts_both_dp_ranks_with_their_devices_ports_and_kv_configs(tmp_path):
    out = tmp_path / "out"
    render_to("atlas-800i-a2-x4-qwen3-32b", out)
    env, records_dir = stub_path(tmp_path, "vllm")
    launched = run_script(out / "launch-a2-02.sh", env)
    assert launched.returncode == 0, launched.stderr
    records = wait_for_records(records_dir, 2)
    try:
        by_port = {int(flag(r["argv"], "--port")): r for r in records}
        assert sorted(by_port) == [8100, 8101]
        for rank, port in enumerate((8100, 8101)):
            record = by_port[port]
            argv, process_env = record["argv"], record["env"]
            assert Path(argv[0]).name == "vllm" and argv[1:3] == ["serve", "/models/Qwen3-32B"]
            # decode-0: TP4 x DP2 on a2-02 (host 192.168.1.13); rank r owns devices 4r..4r+3
            assert process_env["ASCEND_RT_VISIBLE_DEVICES"] == ",".join(str(4 * rank + d) for d in range(4))
            assert process_env["HCCL_IF_IP"] == "192.168.1.13"
            assert process_env["HCCL_SOCKET_IFNAME"] == "enp189s0f0"
            assert process_env["HCCL_BUFFSIZE"] == "600"
            kv = json.loads(flag(argv, "--kv-transfer-config"))
            assert kv["kv_role"] == "kv_consumer"
            assert kv["engine_id"] == f"decode-0_dp{rank}"
            assert kv["kv_port"] == 28200 + 4 * rank
            assert kv["kv_connector_extra_config"]["ascend_pd_shapes"]["prefill"] == {"tp_size": 4, "dp_size": 1}
            assert record["pgid"] == record["pid"], "each engine runs in its own process group"
        assert (out / "logs" / "decode-0-dp1.log").exists()
        assert (out / "run" / "decode-0-dp0.pid").read_text().strip() in {str(r["pid"]) for r in records}
    finally:
        stop_and_check(out, "a2-02", env, records)


def test_interface_flag_reaches_every_process(tmp_path):
    out = tmp_path / "out"
    render_to("atlas-800t-a3-x4-deepseek-r1", out, interface="bond7", node_ips={"a3-00": "10.20.0.1"})
    env, records_dir = stub_path(tmp_path, "vllm")
    assert run_script(out / "launch-a3-00.sh", env).returncode == 0
    records = wait_for_records(records_dir, 2)
    try:
        for record in records:
            assert record["env"]["GLOO_SOCKET_IFNAME"] == record["env"]["TP_SOCKET_IFNAME"] == "bond7"
            assert record["env"]["HCCL_IF_IP"] == "10.20.0.1" == record["env"]["VLLM_HOST_IP"]
            assert record["env"]["HCCL_SOCKET_IFNAME"] == "bond7"
            assert flag(record["argv"], "--data-parallel-address") == "10.20.0.1"
        ranks = sorted(int(flag(r["argv"], "--data-parallel-rank")) for r in records)
        assert ranks == [0, 1]
    finally:
        stop_and_check(out, "a3-00", env, records)


def test_cpu_cluster_starts_the_api_server_module_with_cpu_env_and_no_ascend_env(tmp_path):
    out = tmp_path / "out"
    render_to("local-cpu-tiny-gqa", out)
    env, records_dir = stub_path(tmp_path, "python3")
    assert run_script(out / "launch-localhost-00.sh", env).returncode == 0
    records = wait_for_records(records_dir, 2)
    try:
        by_port = {int(flag(r["argv"], "--port")): r for r in records}
        assert sorted(by_port) == [8100, 8200]
        prefill = by_port[8100]
        assert prefill["argv"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert flag(prefill["argv"], "--model") == "models/tiny-llama-gqa"
        for engine in by_port.values():  # TP1: the worker inside the EngineCore process, as on an NPU
            assert (engine["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"], engine["env"]["OMP_NUM_THREADS"]) == ("0", "1")
            assert "VLLM_CPU_OMP_THREADS_BIND" not in engine["env"]  # binds only workers of their own
        assert prefill["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
        introduced = set(prefill["env"]) - set(os.environ)
        assert not {k for k in introduced if k.startswith(("ASCEND_", "HCCL_"))}
        kv = json.loads(flag(prefill["argv"], "--kv-transfer-config"))
        assert (kv["kv_connector"], kv["kv_connector_module_path"]) == ("AscendPDConnector", "ascend_pd.connector")
        assert kv["kv_connector_extra_config"]["protocol"] == "tcp"
    finally:
        stop_and_check(out, "localhost-00", env, records)


def test_proxy_launcher_starts_ascend_pd_proxy_on_the_deployment(tmp_path):
    out = tmp_path / "out"
    render_to("local-cpu-tiny-gqa", out)
    env, records_dir = stub_path(tmp_path, "ascend-pd")
    assert run_script(out / "launch-proxy.sh", env).returncode == 0
    record, = wait_for_records(records_dir, 1)
    try:
        assert record["argv"][1:] == ["proxy", "--deployment", str(out / "deployment.yaml"),
                                      "--backend-table", str(out / "backends.json"),
                                      "--host", "127.0.0.1", "--port", "8080"]
    finally:
        stop_and_check(out, "localhost-00", env, [record])


def test_headless_part_of_a_spread_rank_joins_the_head_on_the_first_node(tmp_path):
    out = tmp_path / "out"
    render_to(SPREAD_TP, out)
    env, records_dir = stub_path(tmp_path, "vllm")
    assert run_script(out / "launch-cm0-n01.sh", env).returncode == 0
    record, = wait_for_records(records_dir, 1)
    try:
        argv = record["argv"]
        assert "--headless" in argv
        assert (flag(argv, "--nnodes"), flag(argv, "--node-rank")) == ("2", "1")
        assert flag(argv, "--master-addr") == "192.168.16.11"  # cm0-n00 serves the rank's HTTP
        assert record["env"]["HCCL_IF_IP"] == "192.168.16.12"  # cm0-n01 itself
        assert record["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "0,1,2,3"
        assert json.loads(flag(argv, "--kv-transfer-config"))["kv_port"] == 36000
    finally:
        stop_and_check(out, "cm0-n01", env, [record])


def test_each_process_leads_its_group_when_the_launcher_returns_even_when_setsid_is_slow(tmp_path):
    """A stop (or a health check on the group) right after the launcher returns needs the group to exist: the
    launcher waits for setsid to have run in each process. Here setsid starts 1 s late, as on a loaded host."""
    out = tmp_path / "out"
    render_to("local-cpu-tiny-gqa", out)
    env, records_dir = stub_path(tmp_path, "python3")
    real_setsid = shutil.which("setsid")
    slow = tmp_path / "stub-bin" / "setsid"  # beside the stub, first on PATH
    slow.write_text(f"#!/bin/sh\nsleep 1\nexec {real_setsid} \"$@\"\n")
    slow.chmod(0o755)
    launched = run_script(out / "launch-localhost-00.sh", env)
    assert launched.returncode == 0, launched.stderr
    pids = [int((out / "run" / f"{name}.pid").read_text()) for name in ("prefill-0-dp0", "decode-0-dp0")]
    try:
        assert [os.getpgid(pid) for pid in pids] == pids
    finally:
        stop_and_check(out, "localhost-00", env, wait_for_records(records_dir, 2))
