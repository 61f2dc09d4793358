"""CP-SAT models of the stage and placement problems (OR-Tools ``cp_model``)."""
