"""Shapes and kinds of a probe's tensors, inferred before anything runs: one table over the
op families' shape rules.

The entry points are in ``table``: the op table ``OPS``, ``infer`` (one op's output shape
and kind), ``infer_case`` (every quantity of a normalized case), ``tensor_shapes``,
``scratch_elements``, ``arity`` and the op sets ``INTEGER_INPUTS``, ``INTEGER_OUTPUT`` and
``LAYOUT_OPS``; the loader, the size limits and the layout fuzzer import it
(``from parity.probe.shapes import table``). What every rule shares, the kinds and the
errors (``ShapeError``, ``CaseShapeError``), is ``common``; the rules of each op family are
``layout``, ``conv`` (the spatial ops), ``dense`` and ``index`` (the index ops and losses).

Docstring only: a module of this package loads it first, so an import here would widen
every module's code hash (parity.core.codeversion)."""
