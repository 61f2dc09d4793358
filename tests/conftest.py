"""Captured models shared by the execution tests (captured once per session: capture is the slow part)."""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import signal
import tempfile

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


# Ray's socket paths (<temp>/rayXXXXXXXX/ray/session_<date>_<time>_<us>_<pid>/sockets/plasma_store)
# must fit in AF_UNIX's 107 bytes: a longer TMPDIR gives way to /tmp.
_RAY_TEMP_ROOT_MAX = 26
# One token for every Ray of the session: Ray caches the token a process read first.
_RAY_TOKEN = secrets.token_hex(32)


@contextlib.contextmanager
def _ray_sandbox():
    """Environment for a Ray a test starts: a fresh folder of its own, on loopback only.

    Yields the folder to hand Ray as its temp_dir (`_temp_dir` of ray.init, `temp_dir` of a
    cluster node). RAY_TMPDIR names the folder above it, for what Ray writes where it is not told:
    the sessions of a Ray the library starts itself (`incsched batch --engine ray` without an
    address), and the `ray_current_cluster` file of `ray.cluster_utils.Cluster`, written into
    RAY_TMPDIR/ray, which must exist (a FileNotFoundError on a machine where no Ray ever ran).

    Loopback: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes Ray take 127.0.0.1 as this machine's
    address (`ray._private.services.get_node_ip_address`), for the nodes a test starts, in child
    processes too, and for `ray.init(address="127.0.0.1:<port>")`, which otherwise swaps the
    loopback address for the machine's network address and never reaches a loopback cluster.
    Ray reads the variable when it is imported, so the constant is set too.

    Token authentication stays on, with a token in the environment (RAY_AUTH_TOKEN): without
    one, a new local Ray writes ~/.ray/auth_token, and a cluster node turns authentication on or
    off by whether that file exists.
    """
    root = tempfile.gettempdir()
    base = tempfile.mkdtemp(prefix="ray", dir=root if len(root) <= _RAY_TEMP_ROOT_MAX else "/tmp")
    temp_dir = os.path.join(base, "ray")
    os.mkdir(temp_dir)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("RAY_TMPDIR", base)
            patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            patch.setenv("RAY_AUTH_MODE", "token")
            patch.setenv("RAY_AUTH_TOKEN", _RAY_TOKEN)
            pytest.importorskip("ray")
            from ray._private import ray_constants

            patch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
            yield temp_dir
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_sandbox():
    """`with ray_sandbox() as temp_dir:` around a Ray a fixture of any scope starts (see `_ray_sandbox`)."""
    return _ray_sandbox


@pytest.fixture
def ray_env():
    """A test's own Ray folder and loopback, in os.environ for the Ray its child processes start."""
    with _ray_sandbox() as temp_dir:
        yield temp_dir


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
