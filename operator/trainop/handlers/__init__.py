"""kopf handlers, indexes, timers and settings: the thin shell around the pure planner."""
