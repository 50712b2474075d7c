"""`abcast bench`: the evaluation — the thesis's experiments on real processes, the peers
beside them, every trace checked by the Spark pipeline, one report.

Rules: `grid` decides which runs to make; `runner` makes them (clusters through
abcast.evaluation.launcher, pings through `ping`, peers through `peers`, the full
bench's simulations at 64 nodes through `sim_scale`); `analysis` derives the model
column, the knee and the peer ratios, `scale` the scale section's model and memory;
`report` writes the Markdown page and the plots; `cli` is the click command. The runs
themselves: `worker` is one benchmark node (a process hosting a Group under a
workload), `launcher` starts a cluster of them on loopback (`abcast cluster`),
`cluster` holds its configuration, result and figures. Spark and matplotlib are
imported only where they are used, so importing this package is cheap.
"""

from __future__ import annotations
