"""Closed-form cost models (torch-free, numpy): collectives, compute, iteration; `vgcsim predict`.

* :mod:`models.pointtopoint` — Hockney α-β(-γ) point-to-point cost;
* :mod:`models.collectives` — every collective of ``schema.COLLECTIVE_KEYS`` as a vectorized
  function of per-rank payload sizes (registry :data:`models.collectives.COLLECTIVES`);
* :mod:`models.compute` — FLOP-based compute time and layer-wise gradient availability;
* :mod:`models.iteration` — step time with no, full or bucketed overlap; speedup, efficiency;
* :mod:`models.crossover` — the compression ratio / density at which compression stops paying;
* :mod:`models.predict` — replaying a trace on a cluster into a result table;
* :mod:`models.scenario` — the paper's cost analysis from model sizes alone.
"""
