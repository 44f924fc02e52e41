"""`make bench-placement`: trainop's placement and topology-aware waiting against baselines.

Run: python -m bench.placement [--smoke] [--out DIR]. See bench/placement/__main__.py.
"""
