"""Captured models shared by the execution tests (captured once per session: capture is the slow part)."""

from __future__ import annotations

import math
import signal

import pytest
import torch

from incsched.capture import capture
from incsched.capture.zoo import build


@pytest.fixture(autouse=True, scope="session")
def ctrl_c_reaches_the_tests():
    """Let the Ctrl-C tests deliver SIGINT even when pytest was started with it ignored.

    A shell starts background jobs with SIGINT ignored, Python then installs no handler, and every
    child process inherits the ignoring: the tests that press Ctrl-C on `solve()`, `incsched solve`
    and `incsched batch` would wait out their timeouts (seen when `.ci/run` ran as `cmd &`). A
    Python handler here is reset to the default at each child's exec, so the children get one too.
    """
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class Block(torch.nn.Module):
    """A pre-norm transformer block written out op by op, so that it splits into many nodes."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = (f(h).view(b, t, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


@pytest.fixture(scope="session")
def resnet18():
    torch.manual_seed(0)
    model, inputs = build("resnet18", batch_size=1, image_size=64)
    return capture(model, inputs, name="resnet18")


@pytest.fixture(scope="session")
def block():
    torch.manual_seed(0)
    return capture(Block().eval(), (torch.randn(2, 8, 32),), name="block", coarsen="none")
