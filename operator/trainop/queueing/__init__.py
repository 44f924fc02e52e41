"""Tenant queues: quotas per GPU product, priorities, fair share, preemption decisions (pure, clock injected)."""
