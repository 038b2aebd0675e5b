"""A model script for `tunesmith tune examples/mlp_model.py`: a small MLP, tuned for training."""

import torch

model = torch.nn.Sequential(
    torch.nn.Linear(256, 512),
    torch.nn.GELU(),
    torch.nn.Linear(512, 128),
)
example_inputs = (torch.randn(64, 256),)
train = True  # tune the backward's GEMMs too
