"""Only package that talks to the Kubernetes API server: clients, reads, idempotent applies."""
