"""kopf handlers and settings, shell state, admission loop: the thin shell around the planner."""
