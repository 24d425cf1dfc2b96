# nanprov bootstrap entry. `nanprov run` puts this folder first on PYTHONPATH, so every Python
# process the command starts (every torchrun worker included) runs this file at start-up.
# It does nothing unless NANPROV_RUN_DIR is set, then hands over to nanprov_boot, and finally
# runs any sitecustomize that this one shadows.
import os
import sys


def _nanprov_arm():
    if not os.environ.get("NANPROV_RUN_DIR"):
        return
    try:
        import nanprov_boot

        nanprov_boot.arm()
    except Exception as exc:  # never take the training down
        sys.stderr.write(f"nanprov: bootstrap failed, training continues uninstrumented: {exc}\n")


def _nanprov_chain():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec and spec.loader:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_nanprov_arm()
_nanprov_chain()
