"""Search over instance shapes and P:D counts, placement on the topology, the discrete-event simulator, reports."""
