"""Let torchvision (and transformers, which imports it) import in a venv whose torchvision ops cannot load.

`make` installs the CPU build of torch 2.13.0 and torchvision 0.28.0, the release built for it. The
only torchvision 0.28.0 wheel on the package index is the CUDA build: its ``_C.so`` links
``libtorch_cuda.so``, which the CPU torch lacks, so its C++ ops (nms, roi_align, ...) cannot load.
torchvision is written to live without them (``torchvision.extension._has_ops()`` is False and each
op raises "Couldn't load custom C++ ops" when called), except that ``_meta_registrations`` registers
fake kernels for ``torchvision::nms`` and ``qnms`` unconditionally, and that fails with "operator
torchvision::nms does not exist" (pytorch/vision#9085). The real fix is a torchvision built for the
installed torch (``pip install torchvision==0.28.0 --index-url https://download.pytorch.org/whl/cpu``);
where there is none, this guard defines the two operators' schemas, without kernels, just before
``_meta_registrations`` runs, and only when torchvision itself found no ops. The models (pure
Python) work; the detection ops still raise torchvision's own error when called.

``python scripts/torchvision_guard.py install`` (run by the Makefile) copies this file into the
venv's site-packages with a ``.pth`` line that imports it at start-up (a finder that waits for
torchvision: nothing else is imported), and only if a plain ``import torchvision`` fails there with
that error; it removes an earlier copy where torchvision imports on its own (or is not installed).
"""

from __future__ import annotations

import sys

MODULE = "_incsched_torchvision_guard"
_TRIGGER = "torchvision._meta_registrations"
_keep: list = []


class _Guard:
    """A meta path finder that finds nothing: it acts when torchvision's meta registrations load.

    It stays in ``sys.meta_path``: removing itself while the import system walks that list would
    make the walk skip the next finder.
    """

    def find_spec(self, name, path=None, target=None):
        if name == _TRIGGER:
            define_missing_schemas()
        return None


def define_missing_schemas() -> None:
    """Define ``torchvision::nms`` and ``qnms`` (schemas only) where torchvision loaded no C++ ops."""
    extension = sys.modules.get("torchvision.extension")
    if extension is None or extension._has_ops():
        return
    import torch

    try:
        torch.ops.torchvision.nms  # noqa: B018  (defined already, e.g. by incsched.capture.zoo)
        return
    except (AttributeError, RuntimeError):
        pass
    library = torch.library.Library("torchvision", "DEF")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _keep.append(library)  # the schemas live as long as the Library object


def install_in(site_packages: str, python: str) -> bool:
    """Install the guard in ``site_packages`` if ``python`` cannot import torchvision without it.

    Returns whether the guard is installed. Removes an installed guard where it is not needed.
    """
    import os
    import shutil
    import subprocess

    module = os.path.join(site_packages, MODULE + ".py")
    pth = os.path.join(site_packages, MODULE + ".pth")
    for stale in (module, pth):
        if os.path.exists(stale):
            os.remove(stale)
    plain = subprocess.run([python, "-c", "import torchvision"], capture_output=True, text=True)
    if plain.returncode == 0 or "No module named 'torchvision'" in plain.stderr:
        return False
    if "torchvision::nms does not exist" not in plain.stderr:
        sys.exit(f"import torchvision fails for another reason than its ops:\n{plain.stderr[-2000:]}")
    shutil.copyfile(__file__, module)
    with open(pth, "w") as out:
        out.write(f"import {MODULE}\n")
    return True


if __name__ == "__main__":
    import sysconfig

    if sys.argv[1:] != ["install"]:
        sys.exit("usage: python scripts/torchvision_guard.py install")

    installed = install_in(sysconfig.get_paths()["purelib"], sys.executable)
    print("torchvision guard: " + ("installed (torchvision's C++ ops cannot load beside this torch)" if installed else "not needed"))
elif __name__ == MODULE:
    sys.meta_path.insert(0, _Guard())
