"""The bottom layer every stage shares: errors, units, configuration, provenance, cluster
specifications, the collective vocabulary and the result-table format.

Nothing here imports a stage (traces, models, simulator, reports) or torch.
"""
