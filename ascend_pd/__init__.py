"""ascend-pd: prefill/decode disaggregated vLLM serving on Huawei Ascend NPUs."""

__version__ = "0.1.0"
