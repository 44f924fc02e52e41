"""trainop test suites."""
