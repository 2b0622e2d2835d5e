"""Turn a validated deployment into what runs: bash launchers, Kubernetes manifests, HCCL rank tables, kv configs."""

from ascend_pd.render.bundle import TARGETS, RenderOptions, render_bundle, write_bundle
from ascend_pd.render.kv_config import kv_transfer_config
from ascend_pd.render.processes import Process, plan_processes
from ascend_pd.render.ranktable import rank_table

__all__ = ["Process", "RenderOptions", "TARGETS", "kv_transfer_config", "plan_processes", "rank_table",
           "render_bundle", "write_bundle"]
