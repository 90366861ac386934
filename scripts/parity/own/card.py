"""The model card of a user's own model: what the plan needs of it before any job runs.

:func:`card` builds the model of config ``model.torch`` without its values (on PyTorch's
``meta`` device; on the CPU in float32 when the model cannot be built there) and lists:

* ``params``: every parameter, each tensor once, as ``[state_dict key, shape]`` in
  state_dict order (:func:`parity.own.torch_model.unique_parameters`);
* ``tied``: alias → the name a tied tensor is recorded under (``lm_head.weight`` →
  ``model.embed_tokens.weight``);
* ``frozen``: the parameters PyTorch does not train (``requires_grad=False``), in
  state_dict order; the port must not train them either (:mod:`parity.train.own_check`);
* ``buffers``: every buffer → its shape (not trained, not compared; config
  ``model.buffers`` names those handed to the Rust side);
* ``rust_config``: what the Rust side's ``build`` receives (``torch_model.rust_config``);
* ``vocab``: a ``transformers`` config's ``vocab_size`` (the token range), else None;
* ``randomness``: what makes its training forward pass random
  (``torch_model.active_randomness``); the plan refuses a model where this is not empty;
* ``versions``: torch's and transformers' versions.

Building a ``transformers`` model means importing it (seconds), so the plan runs this once
per model in a subprocess (``python -m parity.own.card SPEC OUT PROGRESS``, the spec from
one JSON file and writing the card to another, never to standard output, which a model
file may print on) and keeps the card by a hash of the spec and the factory's sources
(:mod:`parity.plan.own`), stopping it when it hangs (:mod:`parity.core.usercode`).
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from collections.abc import Mapping
from typing import Any

import torch

from parity.core import usercode
from parity.own import torch_model


def card(spec: Mapping[str, Any]) -> dict:
    """The model card of ``spec`` (config ``model.torch``); see the module docs. Raises
    :class:`parity.own.torch_model.OwnModelError`."""
    try:
        model = torch_model.build(spec, torch.float32, "meta")
        # The fixture builds it in float64: a dtype fixed in the model's code is refused
        # here, before any job, rather than by the fixture job.
        torch_model.build(spec, torch.float64, "meta")
    except torch_model.OwnModelError as e:
        if "cannot be built" not in str(e) and "raised" not in str(e):
            raise
        model = torch_model.build(spec, torch.float32, "cpu")
    params, tied = torch_model.unique_parameters(model)
    vocab = None
    if "transformers" in spec:
        vocab = getattr(model.config, "vocab_size", None)
    versions = {"torch": torch.__version__}
    if "transformers" in spec:
        import transformers

        versions["transformers"] = transformers.__version__
    return {
        "params": [[n, list(p.shape)] for n, p in params],
        "tied": tied,
        "frozen": [n for n, p in params if not p.requires_grad],
        "buffers": {n: list(s) for n, s in torch_model.buffers(model).items()},
        "rust_config": torch_model.rust_config(spec, model),
        "vocab": vocab,
        "randomness": torch_model.active_randomness(model),
        "versions": versions,
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m parity.own.card SPEC OUT [PROGRESS]``: the spec JSON in file ``SPEC`` →
    ``{"card": …}`` in file ``OUT``, or ``{"error": reason}`` (exit status 2) for a model
    that cannot be built, the reason on one line (its whitespace runs made one space). The
    card never goes to standard output, which is the user's code's to print on (the plan
    relays it, :func:`parity.core.userproc.run_watched`); each call into the user's code is
    a line in file ``PROGRESS`` (:func:`parity.core.usercode.report_to`); SIGUSR1 writes
    this process's Python stack to standard error (the plan asks for it before it stops a
    model that hangs)."""
    spec_path, out_path, *report = argv if argv is not None else sys.argv[1:]
    if hasattr(faulthandler, "register") and hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    if report:  # each call into the user's code said to the plan (usercode.progress)
        usercode.report_to(report[0])
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    try:
        result, status = {"card": card(spec)}, 0
        usercode.progress("writing the card")
    except torch_model.OwnModelError as e:
        # one line: a library's message (transformers') may span several
        result, status = {"error": " ".join(str(e).split())}, 2
    except SystemExit as e:  # not an Exception, so build() lets it through
        result = {"error": f"the model's code called sys.exit({e.code!r}) while it was built"}
        status = 2
    tmp = f"{out_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, sort_keys=True)
    os.replace(tmp, out_path)
    return status


if __name__ == "__main__":
    code = main()
    # Without the interpreter's teardown (torch's takes seconds on a busy machine, which
    # the plan would count against the user's code): the card is written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
