"""The REST API under ``/v1/`` and the controller process that serves it.

- ``app``      the FastAPI app: middleware, error shapes, users, tokens, audit, ping, metrics
- ``jobs``, ``claims``, ``workers``, ``agents``   routes for users, worker hosts and claim agents
- ``auth``, ``commands``, ``refusals``, ``views``, ``schemas``   identities, the mutate path,
  refusal audit, JSON shapes, request bodies
- ``server``   ``xce controller``: the store, the config and the ``Controller`` wired to the app on uvicorn
"""
