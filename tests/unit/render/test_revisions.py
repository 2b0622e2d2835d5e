"""Bundle revisions and `ascend-pd rollback`: a render over a bundle keeps the one it replaces, a rollback puts it
back (files it did not have removed, secrets and the backend table kept), undoes itself, keeps a bounded number, and
says what changed and what to run; a bad DIR exits 2 with a message that names it."""

import copy
import os

import yaml
from click.testing import CliRunner

from ascend_pd.autoscale.lock import AutoscalerLock
from ascend_pd.cli.main import cli
from ascend_pd.render.revisions import KEPT_REVISIONS, REVISIONS_DIR, bundle_files, revisions

from .conftest import example_data


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


def instance(name: str, role: str, device: int, template: dict) -> dict:
    return dict(copy.deepcopy(template), name=name, engine_id=name, role=role, parallel={"tp": 1, "dp": 1},
                devices=[{"node": "localhost-00", "devices": [device]}], http_port=8100 + 100 * device,
                kv_port=9100 + 100 * device)


def local_pd() -> dict:
    """The local-cpu example's model and connector, served by prefill-0 on CPU device 0 and decode-0 on device 1."""
    data = example_data("local-cpu-tiny-gqa")
    template = data["instances"][0]
    data["metadata"]["name"] = "rollback-test"
    data["instances"] = [instance("prefill-0", "prefill", 0, template), instance("decode-0", "decode", 1, template)]
    return data


def pd_and_colocated(tmp_path):
    """local_pd(), and the same deployment served by colocated-0 on the prefill's device and port."""
    pd = local_pd()
    colocated = local_pd()
    colocated["instances"] = [instance("colocated-0", "colocated", 0, colocated["instances"][0])]
    paths = tmp_path / "pd.yaml", tmp_path / "colocated.yaml"
    for path, data in zip(paths, (pd, colocated)):
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return paths


def render(deployment, out, *flags):
    result = invoke("render", str(deployment), "--out", str(out), *flags)
    assert result.exit_code == 0, result.output
    return bundle_files(out)


def texts(files):
    return {path: file.data for path, file in files.items()}


def test_the_first_render_keeps_nothing_and_the_second_keeps_the_bundle_it_replaces(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    first = render(colocated, out)
    assert revisions(out) == []
    said = invoke("render", str(pd), "--out", str(out)).output
    (kept,) = revisions(out)
    assert texts(kept.files()) == texts(first)
    assert f"kept the bundle it replaced as revision 1: `ascend-pd rollback {out}` puts it back" in said
    assert "colocated-0" in (kept.path / "deployment.yaml").read_text()


def test_a_revision_holds_no_secret_and_no_backend_table(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(colocated, out)
    (out / "backends.json").write_text('{"generation": 3}')
    render(pd, out)
    (kept,) = revisions(out)
    assert not [p for p in kept.files() if "secret" in p or "backends" in p]
    assert (out / "k8s" / "secrets.yaml").exists() and (out / "k8s" / "backends.yaml").exists()


def test_rendering_the_same_bundle_again_keeps_no_revision(tmp_path):
    pd, _ = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(pd, out)
    said = invoke("render", str(pd), "--out", str(out)).output
    assert revisions(out) == [] and "kept the bundle" not in said


def test_rollback_puts_back_the_previous_bundle_and_removes_files_it_did_not_have(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    before = render(colocated, out)
    render(pd, out)
    assert (out / "k8s" / "prefill-0.yaml").exists()
    secret, table = (out / "secrets" / "kv.key").read_text(), '{"generation": 9}'
    (out / "backends.json").write_text(table)
    result = invoke("rollback", str(out))
    assert result.exit_code == 0, result.output
    assert texts(bundle_files(out)) == texts(before)
    assert not (out / "k8s" / "prefill-0.yaml").exists() and not (out / "k8s" / "decode-0.yaml").exists()
    assert os.access(out / "launch-localhost-00.sh", os.X_OK)
    # what the rollback leaves as it is
    assert (out / "secrets" / "kv.key").read_text() == secret and (out / "backends.json").read_text() == table


def test_a_second_rollback_undoes_the_first(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(colocated, out)
    newer = render(pd, out)
    assert invoke("rollback", str(out)).exit_code == 0
    assert invoke("rollback", str(out)).exit_code == 0
    assert texts(bundle_files(out)) == texts(newer)


def test_rollback_to_a_chosen_revision(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    first = render(colocated, out)
    render(pd, out)
    render(pd, out, "--target", "bash")  # the manifests stay from the render before: a third, different bundle
    (out / "README.md").write_text("edited by hand\n")
    render(pd, out)
    numbers = [r.number for r in revisions(out)]
    assert numbers == [1, 2, 3]
    assert invoke("rollback", str(out), "--to", "1").exit_code == 0
    assert texts(bundle_files(out)) == texts(first)


def test_the_kept_revisions_are_bounded_and_the_oldest_go(tmp_path):
    data = local_pd()
    out = tmp_path / "out"
    renders = KEPT_REVISIONS + 3  # each after the first keeps one: three more than are kept
    for seqs in range(1, renders + 1):
        data["instances"][1]["vllm"]["max_num_seqs"] = seqs
        (tmp_path / "d.yaml").write_text(yaml.safe_dump(data))
        render(tmp_path / "d.yaml", out, "--target", "bash")
    kept = revisions(out)
    assert [r.number for r in kept] == list(range(renders - KEPT_REVISIONS, renders))
    assert f"max_num_seqs: {renders - KEPT_REVISIONS}" in (kept[0].path / "deployment.yaml").read_text()
    assert len(list((out / REVISIONS_DIR).iterdir())) == KEPT_REVISIONS


def test_a_revision_cut_short_is_not_listed_and_the_next_one_is_kept(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(colocated, out)
    (out / REVISIONS_DIR / ".saving-1").mkdir(parents=True)
    (out / REVISIONS_DIR / ".saving-1" / "deployment.yaml").write_text("half")
    assert revisions(out) == []
    render(pd, out)
    assert [r.number for r in revisions(out)] == [1]


def test_list_shows_the_bundle_now_and_each_revision_newest_first(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(colocated, out)
    render(pd, out)
    assert invoke("rollback", str(out)).exit_code == 0
    result = invoke("rollback", str(out), "--list")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("now") and "colocated-0 (colocated)" in lines[0]
    assert lines[1].startswith("2 ") and "prefill-0 (prefill), decode-0 (decode)" in lines[1]
    assert "when a rollback replaced it" in lines[1]
    assert lines[2].startswith("1 ") and "when a render replaced it" in lines[2]


def test_rollback_says_which_instances_change_and_what_to_run_in_order(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(colocated, out)
    render(pd, out)
    output = invoke("rollback", str(out)).output
    assert "added    colocated-0" in output
    assert "removed  prefill-0" in output and "removed  decode-0" in output
    bash = output[output.index("to run it (bash):"):output.index("to run it (k8s):")]
    # the prefill engine holds the device and port the colocated one needs: it stops first; decode once the proxy
    # has left it
    stop_prefill = bash.index("stop-localhost-00.sh prefill-0-dp0")
    start = bash.index(f"bash {out}/launch-localhost-00.sh colocated-0-dp0")
    proxy = bash.index(f"bash {out}/launch-proxy.sh")
    stop_decode = bash.index("stop-localhost-00.sh decode-0-dp0")
    assert stop_prefill < start < proxy < stop_decode
    k8s = output[output.index("to run it (k8s):"):]
    replaced = out / REVISIONS_DIR / "2" / "k8s"
    assert k8s.index(f"delete --ignore-not-found -f {replaced}/prefill-0.yaml") < k8s.index(f"apply -f {out}/k8s/")
    assert k8s.index(f"apply -f {out}/k8s/") < k8s.index(f"delete --ignore-not-found -f {replaced}/decode-0.yaml")
    assert "kubectl rollout restart deployment/rollback-test-proxy" in k8s


def test_a_bundle_with_nothing_to_go_back_to_exits_2_and_says_so(tmp_path):
    pd, _ = pd_and_colocated(tmp_path)
    render(pd, tmp_path / "out")
    result = invoke("rollback", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "has no earlier revision" in result.output and "Traceback" not in result.output


def test_a_directory_that_is_no_bundle_exits_2_naming_it(tmp_path):
    for directory, said in ((tmp_path / "missing", "no such directory"),
                            (tmp_path, "holds no rendered bundle")):
        for args in ((), ("--list",)):
            result = invoke("rollback", str(directory), *args)
            assert result.exit_code == 2, result.output
            assert f"{directory}: field 'DIR': {said}" in result.output


def test_a_revision_not_kept_exits_2_and_lists_those_kept(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(colocated, out)
    render(pd, out)
    result = invoke("rollback", str(out), "--to", "7")
    assert result.exit_code == 2
    assert "has no revision 7" in result.output and "choose one of 1" in result.output


def test_rollback_waits_for_no_autoscaler_and_changes_nothing_while_one_runs(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(colocated, out)
    newer = render(pd, out)
    lock = AutoscalerLock(out / "deployment.yaml")
    try:
        result = invoke("rollback", str(out))
    finally:
        lock.close()
    assert result.exit_code == 2
    assert "an autoscaler runs this deployment" in result.output
    assert texts(bundle_files(out)) == texts(newer) and len(revisions(out)) == 1


def test_going_back_to_a_bash_only_bundle_prints_no_kubectl_step(tmp_path):
    pd, colocated = pd_and_colocated(tmp_path)
    out = tmp_path / "out"
    render(colocated, out, "--target", "bash")
    render(pd, out)
    result = invoke("rollback", str(out))
    assert result.exit_code == 0, result.output
    assert "to run it (bash):" in result.output and "kubectl" not in result.output
    assert not (out / "k8s" / "proxy.yaml").exists() and (out / "k8s" / "secrets.yaml").exists()



def test_an_instance_moved_to_other_devices_is_resized_stopped_then_started_again(tmp_path):
    before = local_pd()
    after = local_pd()
    after["instances"][1]["devices"] = [{"node": "localhost-00", "devices": [2]}]
    for name, data in (("before.yaml", before), ("after.yaml", after)):
        (tmp_path / name).write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    render(tmp_path / "after.yaml", out, "--target", "bash")
    render(tmp_path / "before.yaml", out, "--target", "bash")
    output = invoke("rollback", str(out)).output
    assert "resized  decode-0: decode, tp 1 dp 1 on localhost-00 [1] -> decode, tp 1 dp 1 on localhost-00 [2]" in output
    assert "prefill-0" not in output.split("to run it (bash):")[1]  # it runs as it did
    assert output.index("stop-localhost-00.sh decode-0-dp0") < output.index("launch-localhost-00.sh decode-0-dp0")


def test_a_revision_holds_every_file_render_writes_but_the_kept_ones(tmp_path):
    """What a revision keeps is found by file patterns: they must take in every file render writes, so a rollback
    never leaves a newer file beside an older bundle."""
    from ascend_pd.deploy import load_deployment
    from ascend_pd.render import render_bundle
    from ascend_pd.render.revisions import KEPT_AS_THEY_ARE

    pd, _ = pd_and_colocated(tmp_path)
    written = render_bundle(load_deployment(pd)).files
    out = tmp_path / "out"
    render(pd, out)
    assert set(bundle_files(out)) == set(written) - set(KEPT_AS_THEY_ARE)
