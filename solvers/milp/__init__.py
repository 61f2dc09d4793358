"""The stage problem as a mixed-integer linear program through PuLP (CBC; HiGHS where installed),
used to cross-check CP-SAT's optima on small instances."""
