"""How the DSL's operations build the IR. Each operation is a function from the state of
the kind it is called on (``states.py``) and its arguments to the state of the result,
appending the new IR nodes, stores and topics to the draft on the way. Nothing here
imports a kind (``dsl/kinds.py``): the kinds call in and wrap what comes back.

One way, bottom up: ``states``; ``stream_ops`` and ``table_ops`` on it; ``aggregations``,
``windowed`` (on ``aggregations``) and ``joins`` on those; ``cogroup`` on the aggregations."""
