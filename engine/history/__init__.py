"""Run history: each scan's / check-plan's report and the snapshot it evaluated, kept in a store
(`--history URL`), read back for trends (`gpuwarden history`) and replays (`gpuwarden what-if`)."""
