"""AscendPDConnector: the KVConnectorBase_V1 facade vLLM loads; it hands each call to the scheduler or worker side."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                               KVConnectorRole)
from vllm.utils.network_utils import get_ip

from ascend_pd.connector.amx import allow_amx_tiles
from ascend_pd.connector.config import parse_config, pause_for_platform
from ascend_pd.connector.metadata import AscendPDMetadata
from ascend_pd.connector.scheduler import make_scheduler_side
from ascend_pd.connector.stats_merged import AscendPDStats
from ascend_pd.connector.stats_tally import empty_tally
from ascend_pd.connector.worker import worker_side_class

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

logger = logging.getLogger(__name__)


# The metadata module stays free of vLLM so the worker and scheduler sides can be driven without an engine.
KVConnectorMetadata.register(AscendPDMetadata)


def _log_through_vllm() -> None:
    """vLLM sets up handlers for its own logger only: share them, so the connector's lines land in the engine's log
    with vLLM's format and level instead of being dropped (INFO) or printed bare (warnings)."""
    ours, engine = logging.getLogger("ascend_pd"), logging.getLogger("vllm")
    if ours.handlers or not engine.handlers:
        return
    for handler in engine.handlers:
        ours.addHandler(handler)
    ours.setLevel(engine.getEffectiveLevel())
    ours.propagate = False


class AscendPDConnector(KVConnectorBase_V1):
    """Moves prompt KV from prefill to decode instances, by pull (D reads) or layered push (P writes)."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig | None = None):
        super().__init__(vllm_config, role, kv_cache_config)
        _log_through_vllm()
        transfer = vllm_config.kv_transfer_config
        extra = transfer.kv_connector_extra_config or {}
        from vllm.platforms import current_platform

        parallel = vllm_config.parallel_config
        self.config = pause_for_platform(parse_config(transfer.kv_role, transfer.engine_id, transfer.kv_port, extra),
                                         current_platform.is_cpu(), parallel.data_parallel_size)
        if self.config.engine_id != transfer.engine_id:
            logger.info("AscendPD: engine %s goes by %s, as deployment.yaml names it", transfer.engine_id,
                        self.config.engine_id)
        host = get_ip()
        dp_rank = parallel.data_parallel_rank
        self.scheduler_side = None
        self.worker_side = None
        if role == KVConnectorRole.SCHEDULER:
            self.scheduler_side = make_scheduler_side(self.config, host, dp_rank,
                                                      vllm_config.cache_config.block_size)
            return
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

        if current_platform.is_cpu():
            allow_amx_tiles()  # before the worker side starts its threads
        model = vllm_config.model_config
        worker_class = worker_side_class(self.config.mode, self.config.role)
        self.worker_side = worker_class(
            self.config, host, get_tensor_model_parallel_rank(), dp_rank,
            num_kv_heads=model.get_total_num_kv_heads(), is_mla=model.use_mla,
            # vLLM's CPU attention keeps a block as [heads, tokens, 2 * head_size]; NPUs and GPUs use NHD.
            heads_outer=current_platform.is_cpu(),
            staging_bytes=self.config.staging_bytes, block_size=vllm_config.cache_config.block_size)

    # ---- worker side ----
    def _metadata(self) -> AscendPDMetadata | None:
        """This step's metadata, or None outside a scheduled step: graph capture and warm-up run the model with
        attention metadata but none of ours (vllm-ascend's MLA, SFA and GDN layers still call save_kv_layer then;
        docs/vllm-ascend.md), and there is nothing to move."""
        if not self.has_connector_metadata():
            return None
        metadata = self._get_connector_metadata()
        assert isinstance(metadata, AscendPDMetadata)
        self.worker_side.on_metadata(metadata)
        return metadata

    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        self.worker_side.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        self._metadata()

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads finish before vLLM schedules the request (async hits)

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None:
        metadata = self._metadata()
        if metadata is None:
            return
        if self.worker_side.trace is not None:
            self.worker_side.trace.event("layer_saved", layer=layer_name)
        self.worker_side.save_kv_layer(layer_name, metadata)

    def wait_for_save(self) -> None:
        metadata = self._metadata()
        if metadata is not None:
            self.worker_side.wait_for_save(metadata)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        sending, recving = self.worker_side.get_finished()
        return sending or None, recving or None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.worker_side.take_failed_blocks()

    def get_kv_connector_stats(self) -> AscendPDStats | None:
        if self.scheduler_side is not None:  # vLLM's scheduler asks after update_connector_output, every step
            held = self.scheduler_side.take_held_change()
            return None if held is None else AscendPDStats(data={**empty_tally(self.config.mode), "held": held})
        tally = self.worker_side.take_stats() if self.worker_side else None
        return AscendPDStats(data=tally.data) if tally else None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> AscendPDStats | None:
        return AscendPDStats(data=data) if data else AscendPDStats()

    @classmethod
    def build_prom_metrics(cls, vllm_config: VllmConfig, metric_types, labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]):
        from ascend_pd.connector.stats_prometheus import AscendPDPromMetrics

        return AscendPDPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def shutdown(self) -> None:
        if self.worker_side is not None:
            self.worker_side.shutdown()

    # ---- scheduler side ----
    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int, bool]:
        return self.scheduler_side.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        self.scheduler_side.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> AscendPDMetadata:
        if scheduler_output.total_num_scheduled_tokens == 0 and self.config.idle_step_pause_s:
            time.sleep(self.config.idle_step_pause_s)  # an empty step: only transfers are waited on (config.py)
        return self.scheduler_side.build_connector_meta(scheduler_output)

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self.scheduler_side.request_finished(request, block_ids)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        self.scheduler_side.update_connector_output(connector_output)
