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
    from ascend_pd.proxy.testing import FakeEngine

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
