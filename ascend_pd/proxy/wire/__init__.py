"""The proxy's own HTTP/1.1 data plane: a server for clients and a pooled client for backends."""
