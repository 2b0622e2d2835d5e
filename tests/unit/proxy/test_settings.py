"""Proxy settings keep their secrets out of their repr, which logs and tracebacks show."""

from ascend_pd.proxy.settings import ProxySettings


def test_the_settings_repr_shows_neither_the_admin_token_nor_the_api_keys():
    settings = ProxySettings(admin_token="admin-secret-value", api_keys=("client-key-one", "client-key-two"))
    shown = repr(settings)
    assert "admin-secret-value" not in shown
    assert "client-key-one" not in shown and "client-key-two" not in shown
    assert "mode='pull'" in shown  # the rest is still there to read
