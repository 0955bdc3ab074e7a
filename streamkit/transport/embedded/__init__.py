"""The embedded transport: the runtime's Transport interface over :mod:`streamkit.broker`
(``embedded://DIR``). The broker's names are re-exported here for callers of the
transport."""
from streamkit.broker import *  # noqa: F401,F403
from streamkit.broker import __all__  # noqa: F401
