"""The names of the metrics AscendPDConnector exports on an engine's /metrics (connector/stats_prometheus.py), for
the parts that read them over HTTP without importing the connector: `check` (deploy/check/kv_evidence.py) and the
autoscaler (autoscale/engine_kv.py). A counter's samples carry `_total`, a histogram's `_count` and `_sum`."""

KV_REQUEST_BYTES = "vllm:ascend_pd_kv_request_bytes"  # histogram: prompt KV bytes per request and decode rank
KV_FAILURES = "vllm:ascend_pd_kv_failures"  # counter: requests whose KV transfer failed and were recomputed
KV_HELD_REQUESTS = "vllm:ascend_pd_kv_held_requests"  # gauge: requests a prefill engine still holds KV for
