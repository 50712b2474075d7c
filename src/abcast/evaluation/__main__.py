"""`python -m abcast.evaluation`: the `abcast bench` command, before the top-level CLI
registers it."""

from __future__ import annotations

from abcast.evaluation.cli import bench

if __name__ == "__main__":
    bench()
