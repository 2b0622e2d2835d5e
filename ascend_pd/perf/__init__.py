"""The cost model: memory fit, prefill and decode time, KV transfer time, and calibration."""
