"""OpenAI-compatible PD proxy: routes each request through prefill and decode instances, or to a colocated one."""
