"""Read vLLM flags out of an instance's `vllm.extra_args` the way vLLM's own parser would."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ascend_pd.deploy.schema import Instance


def _flag_name(token: str) -> str:
    # vLLM's parser accepts --kv_cache_dtype for --kv-cache-dtype.
    return token.split("=", 1)[0].replace("_", "-")


def names_flag(args: list[str], *flags: str) -> bool:
    return any(token.startswith("-") and _flag_name(token) in flags for token in args)


def flag_value(args: list[str], *flags: str) -> str | None:
    """The value of a flag named `flags` (`--flag value` or `--flag=value`); the last one wins, as in argparse."""
    value = None
    for i, token in enumerate(args):
        if not token.startswith("-") or _flag_name(token) not in flags:
            continue
        if "=" in token:
            value = token.split("=", 1)[1]
        elif i + 1 < len(args):
            value = args[i + 1]
    return value


@dataclass(frozen=True)
class DraftConfig:
    """What decides the draft layers an engine builds (and the KV caches they own) and its lookahead."""

    method: str | None
    model: str | None
    num_speculative_tokens: int | None

    def describe(self) -> str:
        parts = [f"method {self.method}"] + ([f"model {self.model}"] if self.model else [])
        return ", ".join(parts + [f"num_speculative_tokens {self.num_speculative_tokens}"])


def _method(value: Any) -> str | None:
    # vLLM folds the per-model MTP method names (deepseek_mtp, ...) into "mtp": the same draft layers.
    if isinstance(value, str) and value.endswith("_mtp"):
        return "mtp"
    return value


def draft_config(instance: Instance) -> DraftConfig | None:
    """The instance's `--speculative-config`, or None without one. Unreadable JSON counts as a config of its own."""
    text = flag_value(instance.vllm.extra_args, "--speculative-config")
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return DraftConfig(method=text, model=None, num_speculative_tokens=None)
    tokens = data.get("num_speculative_tokens")
    return DraftConfig(method=_method(data.get("method")), model=data.get("model"),
                       num_speculative_tokens=tokens if isinstance(tokens, int) else None)
