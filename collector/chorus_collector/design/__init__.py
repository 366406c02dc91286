"""The campaign designer: from what an analyst wants to know (``request``) to each
mechanism's standard errors, report size and privacy over time (``designer``), checked on a
simulated window (``simulation``) drawn by the vectorized report sampler (``simulate``)."""
