"""The layerwise metaserver takes D's coordinates only from the URL the proxy handed D: a post that names a waiting
request without its token is refused and changes nothing."""

from __future__ import annotations

import asyncio
import base64
import ssl
from urllib.parse import urlsplit

import aiohttp
import httpx
import pytest

from ascend_pd.proxy.metaserver import MAX_POST_BYTES, url_with_token
from tests.integration.proxy.test_front_door import self_signed

pytestmark = pytest.mark.asyncio

COMPLETION = {"model": "fake-model", "prompt": "hello layerwise", "max_tokens": 4}
WAITING = "pd-" + "ab" * 16


def coordinates(request_id: str = WAITING) -> dict:
    return {"request_id": f"cmpl-{request_id}-0", "do_remote_decode": True, "remote_host": "10.6.6.6",
            "remote_port": 6666, "remote_block_ids": [1, 2, 3]}


async def test_a_post_with_the_right_request_id_but_not_its_token_is_refused(rig):
    await rig.start(mode="layerwise")
    token, waiting = rig.proxy.metaserver.expect(WAITING)
    plain = rig.url + "/v1/metaserver"
    try:
        for url in (plain, url_with_token(plain, "guessed-" + token[8:])):
            async with rig.session.post(url, json=coordinates()) as answer:
                assert answer.status == 403
        await asyncio.sleep(0)
        assert not waiting.done()  # nothing reached the request
        async with rig.session.post(url_with_token(plain, token), json=coordinates()) as answer:
            assert answer.status == 200
        assert waiting.result() == coordinates()
    finally:
        rig.proxy.metaserver.forget(WAITING)


async def test_each_request_hands_d_a_url_of_its_own_and_the_real_flow_still_works(rig):
    await rig.start(mode="layerwise")
    for _ in range(2):
        status, _ = await rig.post(COMPLETION)
        assert status == 200
    urls = [d["kv_transfer_params"]["metaserver"] for d in rig.decodes[0].received]
    tokens = [urlsplit(url).username for url in urls]
    assert all(tokens) and tokens[0] != tokens[1]
    assert all(urlsplit(url).path == "/v1/metaserver" for url in urls)
    assert rig.prefills[0].received[0]["kv_transfer_params"]["remote_port"] == rig.decodes[0].kv_port
    assert len(rig.proxy.metaserver) == 0


async def test_vllm_ascends_http_client_sends_the_token_back(rig):
    """vllm-ascend's layerwise connector posts with httpx to the URL as given."""
    await rig.start(mode="layerwise")
    token, waiting = rig.proxy.metaserver.expect(WAITING)
    try:
        async with httpx.AsyncClient() as client:
            answer = await client.post(url_with_token(rig.url + "/v1/metaserver", token), json=coordinates())
        assert answer.status_code == 200 and waiting.result() == coordinates()
    finally:
        rig.proxy.metaserver.forget(WAITING)


async def test_an_oversized_post_is_refused_unread(rig):
    """Refused from its Content-Length: the public port's own body limit (a prompt's, 64 MiB) never comes into it."""
    await rig.start(mode="layerwise")
    token, waiting = rig.proxy.metaserver.expect(WAITING)
    host, port = urlsplit(rig.url).hostname, urlsplit(rig.url).port
    reader, writer = await asyncio.open_connection(host, port)
    try:
        basic = base64.b64encode(f"{token}:".encode()).decode()
        writer.write(f"POST /v1/metaserver HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {basic}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {MAX_POST_BYTES + 1}\r\n\r\n".encode())
        answer = await asyncio.wait_for(reader.read(), 5)  # no byte of the body was sent
        assert answer.startswith(b"HTTP/1.1 413 ")
        assert not waiting.done()
    finally:
        writer.close()
        rig.proxy.metaserver.forget(WAITING)


async def test_with_tls_on_the_public_port_d_is_handed_an_https_metaserver_url_it_can_post_to(rig, tmp_path,
                                                                                                 monkeypatch):
    """The metaserver is on the public port: with TLS there, an http:// URL would reach no server."""
    cert, key = self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=cert)
    await rig.start(mode="layerwise", ssl_certfile=cert, ssl_keyfile=key)
    decode = rig.decodes[0]
    await decode._session.close()  # D trusts the proxy's certificate, as the operator must set it up
    decode._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust))
    async with rig.session.post(rig.url + "/v1/completions", json=COMPLETION, ssl=trust) as answer:
        assert answer.status == 200
    handed = urlsplit(decode.received[0]["kv_transfer_params"]["metaserver"])
    assert handed.scheme == "https" and f"https://{handed.hostname}:{handed.port}" == rig.url
    # vllm-ascend's D posts with httpx, which trusts the bundle SSL_CERT_FILE names
    monkeypatch.setenv("SSL_CERT_FILE", cert)
    token, waiting = rig.proxy.metaserver.expect(WAITING)
    try:
        async with httpx.AsyncClient() as client:
            posted = await client.post(url_with_token(handed.geturl(), token), json=coordinates())
        assert posted.status_code == 200 and waiting.result() == coordinates()
    finally:
        rig.proxy.metaserver.forget(WAITING)
