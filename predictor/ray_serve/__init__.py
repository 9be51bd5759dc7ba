"""Ray Serve integration: the service core behind a Serve handle, and an interference-aware router.

* :mod:`~predictor.ray_serve.pinned` — a :class:`~predictor.service.Service` that answers from
  the :class:`~predictor.service.published.ModelVersion` it is given (what a replica holds);
* :mod:`~predictor.ray_serve.learner` — the learner actor: ingests observations, publishes versions;
* :mod:`~predictor.ray_serve.service_app` — the Serve deployment answering PredictLatency,
  CheckDeadline and RankPlacements from the learner's latest version;
* :mod:`~predictor.ray_serve.colocation` — what an inference replica reports running (its
  co-location state, through Serve's routing stats) and the router's ledger of what it sent;
* :mod:`~predictor.ray_serve.requests` — what an inference deployment is asked and answers;
  the deployment itself, the project's CPU models reporting their co-location state and their
  observations, is :mod:`collectors.ray_inference` (the workload side, beside the models);
* :mod:`~predictor.ray_serve.router` — the request router that ranks replicas by the service's
  predicted latency and deadline slack rather than by queue length.

Needs the ``ray`` extra (``pip install -e '.[ray]'``).
"""
