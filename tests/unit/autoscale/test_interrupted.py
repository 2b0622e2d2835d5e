"""SIGTERM or SIGINT while a change rolls out: the change ends as at a failed step (an instance not yet healthy is
stopped), the deployment file says what runs, and the loop stops; a second signal is not caught again."""

import io
import json
import os
import signal
import threading
import time

import pytest

from ascend_pd.autoscale.loop import stopping_on_signals
from ascend_pd.autoscale.proxy_admin import Interrupted, ProxyAdmin
from ascend_pd.autoscale.rollout import Launcher, Rollout, RolloutLog
from ascend_pd.autoscale.settings import RolloutTimeouts
from ascend_pd.deploy import load_deployment
from ascend_pd.planner.resize import counts_of

from .bundles import example_bundle, one_more_decode, recording_kubectl


def signal_once_launched(log: RolloutLog, number: int) -> threading.Thread:
    """Sends `number` to this process once the rollout has logged its launch done, so it lands in the wait for the
    new instance's health: after a fixed delay it could land in the launch itself on a busy machine."""
    def wait_then_signal() -> None:
        deadline = time.monotonic() + 30
        while not any(line.get("phase") == "launch" and line.get("status") == "ok" for line in log.lines):
            if time.monotonic() > deadline:
                return  # no signal: the rollout waits out its start timeout and the test fails
            time.sleep(0.01)
        os.kill(os.getpid(), number)

    thread = threading.Thread(target=wait_then_signal, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_a_new_instance_starts_stops_it_and_the_file_says_what_runs(tmp_path, number):
    deployment_file = example_bundle(tmp_path, "k8s")
    current = load_deployment(deployment_file)
    target, steps = one_more_decode(current)
    log = RolloutLog(io.StringIO())
    kubectl, calls = recording_kubectl(tmp_path)
    # nothing answers /health: without the signal the rollout would wait the whole start timeout
    rollout = Rollout(deployment_file, ProxyAdmin("http://127.0.0.1:9", None, timeout=1),
                      Launcher(deployment_file.parent, "k8s", kubectl=kubectl), log, RolloutTimeouts(start=60.0))
    before = signal.getsignal(number)
    signaller = signal_once_launched(log, number)
    with pytest.raises(Interrupted, match=signal.Signals(number).name), stopping_on_signals():
        rollout.run(current.deployment, target, steps)
    signaller.join(timeout=5)
    phases = [(line.get("phase"), line.get("status")) for line in log.lines[1:]]
    assert phases[:3] == [("launch", "ok"), ("healthy", "failed"), ("stop-unhealthy", "ok")]
    assert [json.loads(line)[0] for line in calls.read_text().splitlines()] == ["apply", "delete"]
    assert counts_of(load_deployment(deployment_file).deployment) == counts_of(current.deployment)
    assert signal.getsignal(number) == before


def test_a_second_signal_goes_to_the_handler_from_before():
    caught = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: caught.append("before"))
    try:
        with stopping_on_signals((signal.SIGUSR1,)):
            with pytest.raises(Interrupted):
                os.kill(os.getpid(), signal.SIGUSR1)
                threading.Event().wait(1)
            os.kill(os.getpid(), signal.SIGUSR1)  # while the rollout ends: not caught as a stop again
            threading.Event().wait(0.1)
        assert caught == ["before"]
    finally:
        signal.signal(signal.SIGUSR1, previous)
