"""Where the commands that call the proxy's admin API find its token: a file (never argv), the environment, or the
bundle render wrote; a file others can read, or two tokens that disagree, are refused with a clear error."""

import os
import subprocess
import sys

import pytest

from ascend_pd.cli.admin_token import admin_token
from ascend_pd.deploy.secrets import ADMIN_TOKEN, ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV
from ascend_pd.errors import InputError

TOKEN = "f" * 64


def token_file(path, text=TOKEN, mode=0o600):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def test_the_token_comes_from_the_file_given_else_from_the_bundle(tmp_path):
    given = token_file(tmp_path / "mine.token", "a" * 40)
    bundled = token_file(tmp_path / "bundle" / ADMIN_TOKEN)
    assert admin_token(None, str(given), tmp_path / "bundle") == "a" * 40
    assert admin_token(None, None, bundled.parents[1]) == TOKEN
    assert admin_token(None, None, tmp_path / "elsewhere") is None


def test_a_token_file_others_can_read_is_refused(tmp_path):
    with pytest.raises(InputError, match="open to other users") as refused:
        admin_token(None, str(token_file(tmp_path / "t", mode=0o644)))
    assert refused.value.field == "--admin-token-file"


def test_two_tokens_that_disagree_are_refused_and_agreeing_ones_are_one(tmp_path):
    path = str(token_file(tmp_path / "t"))
    assert admin_token(TOKEN, path) == TOKEN
    with pytest.raises(InputError, match="different tokens"):
        admin_token("other", path)


def test_replan_reads_the_bundles_token_and_says_which_file_to_fix_when_the_proxy_refuses_it(tmp_path):
    # a proxy that refuses every token: the error points at the token file, not at a flag that puts it in argv
    from http.server import BaseHTTPRequestHandler, HTTPServer
    from threading import Thread

    seen = []

    class Refusing(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Refusing)
    Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # shutdown() waits one poll
    bundle = tmp_path / "bundle"
    token_file(bundle / ADMIN_TOKEN)
    from ascend_pd.hardware import configs_dir

    (bundle / "deployment.yaml").write_text((configs_dir() / "deployments" / "local-cpu-tiny-gqa.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if k not in (ADMIN_TOKEN_ENV, ADMIN_TOKEN_FILE_ENV)}
    try:
        done = subprocess.run([sys.executable, "-m", "ascend_pd.cli.main", "replan", "--deployment",
                               str(bundle / "deployment.yaml"), "--observed",
                               f"http://127.0.0.1:{server.server_port}"], capture_output=True, text=True, env=env,
                              timeout=60)
    finally:
        server.shutdown()
    assert seen == [f"Bearer {TOKEN}"]
    assert done.returncode == 2 and "--admin-token-file" in done.stderr and "Traceback" not in done.stderr
