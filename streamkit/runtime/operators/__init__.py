"""The runtime's operators: one compile function per IR node kind, grouped by family
(stateless, tables, windowed aggregations, suppression, joins), on a common base.
:mod:`streamkit.runtime.compiler` is their registry."""
