"""Model shapes: ModelSpec, quantization widths, the built-in catalog and a reader for local config.json files."""

from ascend_pd.models.catalog import get_model, model_catalog
from ascend_pd.models.hf_config import from_hf_config, spec_from_config
from ascend_pd.models.quant import QUANTIZATIONS, Quantization, get_quantization, kv_element_bytes
from ascend_pd.models.spec import MLASpec, ModelSpec, MoESpec

__all__ = ["MLASpec", "ModelSpec", "MoESpec", "QUANTIZATIONS", "Quantization", "from_hf_config", "get_model",
           "get_quantization", "kv_element_bytes", "model_catalog", "spec_from_config"]
