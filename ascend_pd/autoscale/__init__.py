"""Closed loop around a running deployment: read what its proxy observes, re-plan, and apply the change through the
rendered launchers and the proxy's admin API without losing a request."""
