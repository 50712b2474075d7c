"""Reliability layers: what sits between the transport and the orderings."""
