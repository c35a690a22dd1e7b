"""What each thing in the model is: enums and records, plain data, one module per concept.

They sit at the bottom of the model and import nothing of it but each other (a claim names its
``Op``, a snapshot too), so ``xce.model.state`` can hold them all and every concept can name
``State`` in its signatures without an import running back up.  How each one changes is its
concept's module above (``xce.model.jobs`` for ``entities.jobs``, ``xce.model.claims`` for
``entities.claims``...).
"""
