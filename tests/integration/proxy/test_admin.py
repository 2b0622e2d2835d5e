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
