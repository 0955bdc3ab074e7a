"""The runtime's operators: one compile function per IR node kind, grouped by family
(stateless, tables, windowed aggregations, suppression, joins), on a common base;
:mod:`.compiler` is their registry and turns a sub-topology into a task's chains."""
