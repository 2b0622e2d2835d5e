"""The bash target of a rollout without a shared file system: --copy-command puts the bundle, as just rewritten, on
the node before its launcher runs there, and a copy that fails stops the start before anything runs on the node.
`cp` stands in for rsync and a shell probe for ssh: no second host here."""

import pytest

from ascend_pd.autoscale.rollout import Launcher, StepFailed
from ascend_pd.deploy import load_deployment
from ascend_pd.render.processes import plan_processes

from .bundles import example_bundle


def test_each_start_copies_the_rewritten_bundle_to_the_node_before_its_launcher_runs(tmp_path):
    bundle = example_bundle(tmp_path, "bash").parent
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    # the "node" finds its launcher in its own copy of the bundle and prints that copy's marker
    probe = f"sh -c 'test -f {nodes}/{{node}}/launch-{{node}}.sh && cat {nodes}/{{node}}/marker' probe"
    launcher = Launcher(bundle, "bash", node_command=probe, copy_command=f"cp -rT {{bundle}} {nodes}/{{node}}")
    plan = plan_processes(load_deployment(bundle / "deployment.yaml"))
    (bundle / "marker").write_text("first render")
    assert launcher.start(plan, "decode-0") == ["first render"]
    (bundle / "marker").write_text("rewritten for the next change")
    assert launcher.start(plan, "prefill-0") == ["rewritten for the next change"]


def test_a_copy_that_fails_stops_the_start_before_anything_runs_on_the_node(tmp_path):
    bundle = example_bundle(tmp_path, "bash").parent
    ran = tmp_path / "ran-on-node"
    launcher = Launcher(bundle, "bash", node_command=f"touch {ran}", copy_command="false {bundle} {host}")
    plan = plan_processes(load_deployment(bundle / "deployment.yaml"))
    with pytest.raises(StepFailed, match=r"`false .* 127\.0\.0\.1` exited 1"):
        launcher.start(plan, "decode-0")
    assert not ran.exists()
