"""The REST API under ``/v1/`` and the controller process that serves it.

- ``app``       the FastAPI app: state, routers, middleware, error shapes, the OpenAPI document
- ``deps``      what routes depend on: the controller and the helpers beside it, from ``app.state``
- ``jobs``, ``claims``, ``snapshots``, ``workers``, ``agents``, ``history``, ``audit``, ``transfers``,
  ``service``, ``identity``   one ``APIRouter`` each: routes that translate HTTP, nothing more
- ``views``     every answer's JSON shape; ``schemas`` the request bodies and response models
- ``auth``, ``commands``, ``refusals``, ``paging``   identities, the mutate path, refusal audit, cursors
- ``server``    ``xce controller``: the store, the config and the ``Controller`` wired to the app on uvicorn
"""
