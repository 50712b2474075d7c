"""Ordering protocols: one sans-IO core per module, chosen by name (see `registry`)."""
