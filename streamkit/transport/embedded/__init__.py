"""The embedded transport: the runtime's Transport interface over :mod:`streamkit.broker`
(``embedded://DIR``). The broker's own names live in :mod:`streamkit.broker`."""
