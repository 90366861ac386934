"""The fuzzer's op generators, one per op of the probe language: each draws an op's input
shapes and YAML arguments from a numpy Generator.

The entry points are in ``table``: the table ``GENERATORS`` (op → generator), the order
the ops' random streams are seeded in (``SEED_ORDER``, whose first entries are
``FIRST_OPS``), and the generators of the dense, element-wise, reduction, sort and layout
ops; ``generate`` imports it (``from parity.fuzz.generators.table import GENERATORS``).
The spatial ops' generators are ``spatial``; those of the ops with integer inputs and the
losses, with the values of their integer inputs, are ``index``; what every generator
shares (random sizes and shapes, the ``Generator`` type) is ``common``.

Docstring only: a module of this package loads it first, so an import here would widen
every module's code hash (parity.core.codeversion)."""
