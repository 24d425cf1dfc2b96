"""One probed call that runs as no ATen op, bracketed by torch.ops.nanprov: begin_call names it
and traces its kernels from there, the call runs, then `record` checks and records it. A call
that raises ends the bracket (abandon_call) and raises on; a probe that fails before the call
lets it run unprobed, after it ends the bracket; either failure goes to `fail` and never reaches
the training. Returns exactly what the call returned."""


def run_bracketed(ops, begin, call, record, fail):
    """begin(): opens the bracket (ops.begin_call(...)); call(): the wrapped function's result;
    record(result): records the call."""
    try:
        begin()
    except Exception as e:
        fail(e)
        return call()
    try:
        result = call()
    except BaseException:
        ops.abandon_call()
        raise
    try:
        record(result)
    except Exception as e:
        ops.abandon_call()
        fail(e)
    return result
