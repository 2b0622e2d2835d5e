"""The preflight parsers read the output formats npu-smi and hccn_tool print, as published in Ascend's docs."""

from ascend_pd.deploy.preflight.tools_output import (parse_ip, parse_key_values, parse_link, parse_npu_smi_info,
                                                     parse_ping_received, parse_tls_switch, version_key)

A2_TABLE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc1                 Version: 24.1.rc1                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B2C              | OK            | 86.8        35                0    / 0             |
| 0                         | 0000:66:00.0  | 0           0    / 0          59356/ 65536         |
+===========================+===============+====================================================+
| 1     910B2C              | Alarm         | 103.1       37                0    / 0             |
| 0                         | 0000:19:00.0  | 0           0    / 0          59351/ 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 1712733       | python                   | 48954                   |
+===========================+===============+====================================================+
"""

A3_ROWS = """\
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 3     Ascend910           | OK            | 170.2       41                0    / 0             |
| 0     6                   | 0000:9D:00.0  | 0           0    / 0          3161 / 65536         |
| 1     7                   | 0000:9F:00.0  | 0           0    / 0          2985 / 65536         |
+===========================+===============+====================================================+
"""


def test_a2_table_gives_one_device_per_npu_with_its_health_and_ignores_processes():
    rows = parse_npu_smi_info(A2_TABLE)
    assert [(r.npu, r.name, r.health, r.devices) for r in rows] == [(0, "910B2C", "OK", (0,)),
                                                                   (1, "910B2C", "Alarm", (1,))]


def test_a3_rows_give_two_devices_numbered_by_phy_id():
    row, = parse_npu_smi_info(A3_ROWS)
    assert (row.npu, row.devices) == (3, (6, 7))


def test_hccn_tool_answers():
    assert parse_link("link status: UP\n") == "UP"
    assert parse_link("link status: DOWN\n") == "DOWN"
    assert parse_ip("ipaddr:10.20.0.10\nnetmask:255.255.255.0\n") == "10.20.0.10"
    assert parse_ip("ipaddr:\nnetmask:\n") is None
    assert parse_tls_switch("dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1](0:non-preset, "
                            "1:preset), tls alarm time threshold[60]days") == 0
    assert parse_ping_received("3 packets transmitted, 0 received, 100.00% packet loss") == (3, 0)


def test_key_value_files_and_cann_version_order():
    assert parse_key_values("Version=24.1.rc2\nascendhal_version=7.35\n")["version"] == "24.1.rc2"
    ordered = ["8.0.RC3", "8.3.RC1", "8.3.RC2", "8.3.0", "8.5.0", "9.1.0"]
    assert sorted(reversed(ordered), key=version_key) == ordered
