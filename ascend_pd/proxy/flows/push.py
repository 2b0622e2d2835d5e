"""Push flow (this project's connector): P and D start together, tied by a fresh transfer id; D learns P's side
channel from the deployment and P writes each layer's KV into D's blocks as soon as it is computed."""

from __future__ import annotations

from ascend_pd.deploy import handoff
from ascend_pd.proxy.failures import ClientError
from ascend_pd.proxy.flows.concurrent import first_answer_of_decode
from ascend_pd.proxy.flows.context import FlowEnv, RequestContext
from ascend_pd.proxy.flows.prefill import call_prefill
from ascend_pd.proxy.ids import new_transfer_id
from ascend_pd.proxy.openai_body import decode_body
from ascend_pd.proxy.upstream import Opened, open_answer


async def push(ctx: RequestContext, env: FlowEnv) -> Opened:
    prefill = env.pick("prefill", ctx)
    decode = env.pick("decode", ctx)
    kv = prefill.endpoint.kv
    if kv is None:
        raise ClientError(500, f"prefill backend {prefill.url} has no KV address; push mode needs the backends "
                               "from deployment.yaml", "proxy_configuration_error")
    transfer_id = new_transfer_id()  # fresh per attempt: a retried pair never reuses a transfer
    to_prefill = handoff.encode(handoff.PushToPrefill(transfer_id=transfer_id))
    to_decode = handoff.encode(handoff.push_to_decode(kv, transfer_id))
    lease = decode.lease(ctx.route.tokens)
    prefilling = env.start(call_prefill(ctx, env, prefill, to_prefill))
    decoding = env.start(open_answer(env.client, decode, ctx.path, decode_body(ctx.body, to_decode),
                                                 ctx.headers, ctx.streaming, handoff=True))
    return await first_answer_of_decode(ctx, env, prefill, prefilling, decoding, decode, lease)
