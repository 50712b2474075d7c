"""Consensus cores (sans-IO)."""
