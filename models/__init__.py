"""Closed-form cost models (torch-free, numpy): collectives, iteration; `vgcsim predict`.

* :mod:`vgcsim.models.pointtopoint` — Hockney α-β point-to-point cost of one message;
* :mod:`vgcsim.models.collectives` — every collective of ``COLLECTIVE_KEYS`` as a vectorized
  function of per-rank payload sizes (registry :data:`vgcsim.models.collectives.COLLECTIVES`);
* :mod:`vgcsim.models.iteration` — step time with no, full or bucketed overlap;
* :mod:`vgcsim.models.crossover` — the compression ratio / density at which compression stops paying;
* :mod:`vgcsim.models.predict` — replaying a trace on a cluster into a result table;
* :mod:`vgcsim.models.scenario` — the paper's cost analysis from model sizes alone.
* :mod:`vgcsim.models.linkfit` — the α-β-γ link fit of a calibration's measurements.
"""
