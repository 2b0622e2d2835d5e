"""Admin endpoints: absent without a token, refused with a wrong one, and they change routing."""

import pytest

pytestmark = pytest.mark.asyncio

BODY = {"model": "fake-model", "prompt": "hello", "max_tokens": 2}


async def test_admin_endpoints_do_not_exist_without_a_token(rig):
    await rig.start()
    async with rig.session.get(rig.url + "/admin/backends") as response:
        assert response.status == 404


async def test_admin_endpoints_refuse_a_wrong_token(rig):
    await rig.start(admin_token="s3cret")
    async with rig.session.get(rig.url + "/admin/backends", headers={"Authorization": "Bearer nope"}) as response:
        assert response.status == 401


async def test_drained_decode_gets_no_new_requests_and_an_added_one_does(rig):
    await rig.start(decodes=1, admin_token="s3cret")
    auth = {"Authorization": "Bearer s3cret"}
    old = rig.decodes[0]
    from tests.fakes.vllm_api import FakeEngine

    new = await FakeEngine("decode").start()
    rig.decodes.append(new)
    async with rig.session.post(rig.url + "/admin/backends", json={"url": new.url, "role": "decode"},
                                headers=auth) as response:
        assert response.status == 200
    async with rig.session.post(rig.url + "/admin/backends/drain", json={"url": old.url}, headers=auth) as response:
        assert (await response.json())["state"] == "draining"
    for _ in range(5):
        assert (await rig.post(BODY))[0] == 200
    assert len(old.received) == 0 and len(new.received) == 5
    async with rig.session.post(rig.url + "/admin/backends/remove", json={"url": old.url}, headers=auth) as response:
        assert response.status == 200
    async with rig.session.get(rig.url + "/admin/backends", headers=auth) as response:
        assert old.url not in {b["url"] for b in await response.json()}


async def test_a_proxy_of_colocated_instances_hands_off_once_a_prefill_and_a_decode_join(rig):
    # a colocated deployment's proxy runs its connector's flow: no restart when the autoscaler moves it to PD
    from tests.fakes.vllm_api import FakeEngine

    await rig.start(prefills=0, decodes=0, colocated=1, mode="pull", admin_token="s3cret")
    auth = {"Authorization": "Bearer s3cret"}
    assert (await rig.post(BODY))[0] == 200 and len(rig.colocated[0].received) == 1
    prefill, decode = await FakeEngine("prefill", kv_port=0).start(), await FakeEngine("decode", kv_port=0).start()
    rig.prefills.append(prefill)
    rig.decodes.append(decode)
    for engine in (prefill, decode):
        body = {"url": engine.url, "role": engine.role, "kv": {"engine_id": engine.engine_id, "host": engine.host,
                                                                "port": engine.kv_port}}
        async with rig.session.post(rig.url + "/admin/backends", json=body, headers=auth) as response:
            assert response.status == 200, await response.text()
    for _ in range(3):
        assert (await rig.post(BODY))[0] == 200
    assert (len(prefill.received), len(decode.received), len(rig.colocated[0].received)) == (3, 3, 1)


AUTH = {"Authorization": "Bearer s3cret"}


async def served_table(rig, base: str | None = None) -> dict:
    async with rig.session.get((base or rig.url) + "/admin/table", headers=AUTH) as response:
        assert response.status == 200
        table = await response.json()
    table.pop("worker_generations")
    return table


async def test_a_table_made_from_a_generation_the_proxy_has_moved_past_is_refused_and_changes_nothing(rig):
    await rig.start(decodes=2, admin_token="s3cret")
    kept, drained = rig.decodes
    read = await served_table(rig)  # generation 0
    # meanwhile an operator drains one decode: generation 1
    async with rig.session.post(rig.url + "/admin/backends/drain", json={"url": drained.url}, headers=AUTH) as answer:
        assert answer.status == 200
    after_drain = await served_table(rig)
    # a writer that read generation 0 puts back every backend in service: it would undo a drain it never saw
    stale = {**read, "generation": 1, "expected_generation": 0}
    async with rig.session.put(rig.url + "/admin/table", json=stale, headers=AUTH) as answer:
        assert answer.status == 409, await answer.text()
        assert (await answer.json())["generation"] == 1
    assert await served_table(rig) == after_drain
    for _ in range(4):
        assert (await rig.post(BODY))[0] == 200
    assert len(drained.received) == 0 and len(kept.received) == 4
    # without a condition at all it is refused too; made from what is served, it is taken
    async with rig.session.put(rig.url + "/admin/table", json={**read, "generation": 2}, headers=AUTH) as answer:
        assert answer.status == 400 and "expected_generation" in await answer.text()
    redone = {**after_drain, "generation": 2, "expected_generation": 1,
              "backends": [e for e in after_drain["backends"] if e["url"] != drained.url]}
    async with rig.session.put(rig.url + "/admin/table", json=redone, headers=AUTH) as answer:
        assert answer.status == 200 and await answer.json() == {"generation": 2, "applied": True}


@pytest.mark.parametrize("url", ["https://127.0.0.1:9", "http://127.0.0.1:9/v1", "http://user:pw@127.0.0.1:9",
                                 "http://127.0.0.1", "http://127.0.0.1:9?x=1"])
async def test_a_backend_the_proxy_cannot_call_as_given_is_refused_when_written_and_the_table_stays(rig, url):
    await rig.start(admin_token="s3cret")
    before = await served_table(rig)
    table = {**before, "generation": 1, "expected_generation": 0,
             "backends": [*before["backends"], {"url": url, "role": "decode"}]}
    async with rig.session.put(rig.url + "/admin/table", json=table, headers=AUTH) as answer:
        assert answer.status == 400 and url in await answer.text()
    async with rig.session.post(rig.url + "/admin/backends", json={"url": url, "role": "decode"},
                                headers=AUTH) as answer:
        assert answer.status == 400 and url in await answer.text()
    assert await served_table(rig) == before
    for _ in range(3):  # no request is ever routed to it
        assert (await rig.post(BODY))[0] == 200


async def test_an_admin_listener_of_its_own_takes_the_admin_paths_off_the_public_port(rig):
    await rig.start(admin_token="s3cret", admin_port=0)
    admin = rig.runner.admin_url
    assert admin is not None and admin != rig.url
    async with rig.session.get(rig.url + "/admin/backends", headers=AUTH) as response:
        assert response.status == 404
    async with rig.session.get(rig.url + "/v1/workload", headers=AUTH) as response:
        assert response.status == 404
    async with rig.session.get(admin + "/admin/backends", headers=AUTH) as response:
        assert response.status == 200 and len(await response.json()) == 2
    async with rig.session.post(admin + "/v1/completions", json=BODY) as response:
        assert response.status == 404  # the admin listener serves nothing else
    assert (await rig.post(BODY))[0] == 200
    huge = b'{"url": "' + b"x" * (5 * 1024 * 1024) + b'"}'  # bounded: refused before it is read, let alone parsed
    async with rig.session.post(admin + "/admin/backends", data=huge, headers=AUTH) as response:
        assert response.status == 413
    async with rig.session.get(admin + "/admin/backends", headers=AUTH) as response:
        assert response.status == 200


async def test_metrics_and_health_detail_are_served_on_the_admin_listener_behind_the_token(rig):
    """A scrape sends the admin token: with an admin listener it goes there, never over the public port."""
    await rig.start(admin_token="s3cret", admin_port=0, public_detail=False)
    admin = rig.runner.admin_url
    async with rig.session.get(admin + "/metrics", headers=AUTH) as response:
        assert response.status == 200 and rig.decodes[0].url in await response.text()
    async with rig.session.get(admin + "/metrics") as response:
        assert response.status == 401
    async with rig.session.get(admin + "/health", headers=AUTH) as response:
        assert response.status == 200 and len((await response.json())["backends"]) == 2
    async with rig.session.get(admin + "/health") as response:
        assert response.status == 200 and "backends" not in await response.json()
    async with rig.session.get(rig.url + "/health") as response:  # probes still find it on the public port
        assert response.status == 200


async def test_an_admin_port_without_a_token_or_on_the_public_port_is_refused_at_start():
    from ascend_pd.errors import InputError
    from ascend_pd.proxy.serve import check_admin_listener
    from ascend_pd.proxy.settings import ProxySettings

    with pytest.raises(InputError, match="admin token") as refused:
        check_admin_listener(ProxySettings(admin_port=9100), 8080)
    assert refused.value.field == "--admin-port"
    with pytest.raises(InputError, match="public port"):
        check_admin_listener(ProxySettings(admin_port=8080, admin_token="t"), 8080)
