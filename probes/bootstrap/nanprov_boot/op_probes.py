"""`nanprov run --probe-op SPEC`: a library's own attention op in PyTorch's dispatcher (a
torch.library op with its own kernels) is probed like the SDPA ops: wrapped at the dispatcher,
named before it runs, its kernels traced, checked and captured (probes/attention_hook.cpp,
probeOperator). Forward only. FFPA needs none: it is probed by default (ffpa_probes.py), and the
`ffpa` preset of its old `ffpa_attn::attn` op is gone (cli/run_command.cpp says so and drops it).

SPEC is `NAMESPACE::OP[:q=ARG,k=ARG,v=ARG,o=ARG]` or a preset name (PRESETS, none today). ARG is a schema
argument name; by default query/key/value. O is the argument mapped to `o` (an out buffer the op
fills), else the op's first result. Libraries define their ops when imported, after torch: a spec
whose op is not registered yet is retried after every torch.library definition, and said at exit
if it never appeared.
"""

import os
import re

# Presets for attention ops nanprov knows the schema of: name -> spec.
PRESETS = {}
_SPEC = re.compile(r"^([A-Za-z_]\w*::[A-Za-z_][\w.]*)(?::(.*))?$")


def install(torch, lib, say):
    pending, why = {}, {}
    for text in filter(None, os.environ.get("NANPROV_PROBE_OPS", "").split(";")):
        match = _SPEC.match(PRESETS.get(text, text))
        if match:
            name = match.group(1)
            backend = text if text in PRESETS else name.split("::")[0]
            pending[name] = (text, match.group(2) or "", backend)
    if not pending:
        return None

    def retry():
        for name, (_text, roles, backend) in list(pending.items()):
            try:
                said = lib.nanprov_probe_op(name.encode(), roles.encode(), backend.encode()).decode(errors="replace")
            except Exception as e:  # never reaches the training
                said = f"{type(e).__name__}: {e}"
            if said:
                why[name] = said
            else:
                del pending[name]

    retry()
    if pending:
        library = torch.library

        def after(define):
            def wrapped(*args, **kwargs):
                result = define(*args, **kwargs)
                if pending:
                    retry()
                return result

            return wrapped

        library.define = after(library.define)
        library.Library.define = after(library.Library.define)

    def unmatched():
        for name, (text, _, _) in pending.items():
            say(f"--probe-op '{text}': {why.get(name, 'never registered')} in this process; nothing was checked for it")

    return unmatched
