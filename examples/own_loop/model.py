"""A small PyTorch model and the training loop its author wrote for it (docs/loop.md, "Your
own loop"): AdamW with no weight decay on the biases and the LayerNorm's weight, a cosine
schedule with a linear warm-up from 0 (transformers'), stepped after the optimizer.

``make_model`` builds the model (``model.torch.factory``), ``make_optimizer`` its optimizer
and scheduler (``model.torch.optimizer``); the gradient clipping and the number of steps
are the config's.
"""

import transformers
from torch import nn, optim

#: The loop's hyperparameters, as the author's training script fixes them (the candle port
#: hard-codes the same).
LR, WEIGHT_DECAY, WARMUP, TOTAL = 1e-2, 0.01, 4, 30


def make_model(inputs=8, hidden=16, outputs=4):
    """Linear → LayerNorm → tanh → Linear: state_dict keys ``0.weight``, ``0.bias``,
    ``1.weight``, ``1.bias`` (the norm), ``3.weight``, ``3.bias``."""
    return nn.Sequential(
        nn.Linear(inputs, hidden), nn.LayerNorm(hidden), nn.Tanh(), nn.Linear(hidden, outputs)
    )


def make_optimizer(model):
    """AdamW over two parameter groups, the decayed Linear weights first, then the biases
    and the norm's weight without decay; transformers' cosine schedule with warm-up."""
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and n != "1.weight"]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or n == "1.weight"]
    opt = optim.AdamW(
        [
            {"params": decay, "weight_decay": WEIGHT_DECAY},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=LR,
        betas=(0.9, 0.999),
        eps=1e-8,
    )
    return opt, transformers.get_cosine_schedule_with_warmup(opt, WARMUP, TOTAL)
