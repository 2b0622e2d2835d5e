"""TTFT of long prompts split into the P call, the wait for KV on D and what D does after it (from the proxy's and
the connector's Prometheus metrics), collected per case and printed as one table at the end of the run."""

from __future__ import annotations

from dataclasses import dataclass

from .stack import LOGS, http_text, metric

_PROXY = ("ascend_pd_proxy_first_token_seconds", "ascend_pd_proxy_prefill_seconds")
_DECODE = ("vllm:ascend_pd_kv_wait_seconds", "vllm:ascend_pd_kv_exposed_seconds")


def snapshot(proxy_url: str, decode_url: str, proxy_token: str) -> dict[str, float]:
    """Sum and count of every histogram the split uses; the proxy's /metrics asks for its admin token."""
    texts = {_PROXY: http_text(f"{proxy_url}/metrics", token=proxy_token), _DECODE: http_text(f"{decode_url}/metrics")}
    return {f"{name}_{part}": metric(text, f"{name}_{part}")
            for names, text in texts.items() for name in names for part in ("sum", "count")}


def _mean(before: dict, after: dict, name: str) -> tuple[float, int]:
    count = after[f"{name}_count"] - before[f"{name}_count"]
    return (after[f"{name}_sum"] - before[f"{name}_sum"]) / count if count else float("nan"), int(count)


@dataclass(frozen=True)
class TtftSplit:
    """Mean seconds per request over one window."""

    mode: str
    requests: int
    prompt_tokens: int
    ttft: float  # proxy arrival to the first byte of D's answer
    prefill: float  # the proxy's P call, send to answer
    kv_wait: float  # D's worker: request taken up -> all its KV in place
    kv_waits: int
    exposed: float  # P's prefill end -> all its KV in place on D
    exposed_count: int

    @classmethod
    def between(cls, before: dict, after: dict, mode: str, prompt_tokens: int) -> "TtftSplit":
        ttft, requests = _mean(before, after, _PROXY[0])
        prefill, _ = _mean(before, after, _PROXY[1])
        kv_wait, kv_waits = _mean(before, after, _DECODE[0])
        exposed, exposed_count = _mean(before, after, _DECODE[1])
        return cls(mode, requests, prompt_tokens, ttft, prefill, kv_wait, kv_waits, exposed, exposed_count)

    @property
    def kv_in_place(self) -> float:
        """When D had the KV, from the proxy's arrival: after P's answer in pull (D starts then), while P still
        computes in push (both start together)."""
        return self.prefill + self.kv_wait if self.mode == "pull" else self.kv_wait

    @property
    def after_kv(self) -> float:
        """D's scheduling and first decode step, and the answer's way back."""
        return self.ttft - self.kv_in_place


RESULTS: dict[str, TtftSplit] = {}
RECOMPUTED: list[str] = []  # sets of prompts timed again because a KV read failed, printed with the table


def report() -> str:
    if not RESULTS:
        return ""
    ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
    lines = ["| case | prompt tokens | TTFT ms | P call ms | KV wait on D ms | exposed transfer ms | after KV ms |",
             "|---|---|---|---|---|---|---|"]
    for case, split in RESULTS.items():
        lines.append(f"| {case} | {split.prompt_tokens} | {ms(split.ttft)} | {ms(split.prefill)} | "
                     f"{ms(split.kv_wait)} | {ms(split.exposed)} | {ms(split.after_kv)} |")
    for pull_case, split in RESULTS.items():
        push_case = pull_case.replace("-pull", "-push")
        if split.mode == "pull" and push_case != pull_case and push_case in RESULTS:
            push = RESULTS[push_case]
            lines.append(f"\n{push_case} vs {pull_case}: TTFT {ms(push.ttft)} vs {ms(split.ttft)} ms "
                         f"(push/pull {push.ttft / split.ttft:.2f})")
    lines += [f"\n{note}" for note in RECOMPUTED]
    text = "\n".join(lines) + "\n"
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / "ttft.md").write_text(text)
    return text
