"""e2e tier: the integration scenarios on kind, where Docker and kind exist."""
