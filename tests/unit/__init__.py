"""Unit tier: pure modules, no cluster."""
