"""Size-generic Triton modules at run time: one module for every size, a variant where its
guards say no (docs/dynamic-shapes.md, "GPU").

A module that `coil compile --device cuda` writes with a size left unbound declares
`SIZE_SYMBOLS` ({'ks0': 'n', ...}); its call() binds the sizes from the inputs' shapes and checks
its guards first (runtime.guard_sizes): each size at least 2 (Inductor's 0/1 rule: a size of 0
or 1 is bound, as broadcasting and empty tensors change the code) and the kernels' int32
indexing. A call that fails one raises runtime.SizeGuardError before anything runs; this class
then runs the call on the variant for those sizes, made once by `make_variant(bound)`, where
`bound` ({'n': 1}) is what the variant binds: the sizes of 0 or 1 (the others stay symbolic),
or every size when an int32 guard failed.

    m = SizeGenericModule(runtime.load_module("gen/module.py"),
                          make_variant=lambda bound: runtime.load_module(path_for(bound)))
    outs = m(inputs)          # any sizes
    m.stats()                 # {'modules': 2, 'calls': {...}}
"""

from . import runtime


def variant_key(error):
    """The sizes a variant for `error` (a runtime.SizeGuardError) binds: those of 0 or 1, or all
    of them when the failing guard is not a 0/1 one."""
    small = {k: v for k, v in error.sizes.items() if v < 2}
    if error.guard.endswith(">= 2") and small:
        return small
    return dict(error.sizes)


class SizeGenericModule:
    def __init__(self, module, make_variant):
        if not hasattr(module, "SIZE_SYMBOLS"):
            raise ValueError(f"{getattr(module, '__name__', module)} is not a size-generic "
                             "module (no SIZE_SYMBOLS): compile it with a size unbound")
        self.module = module
        self.make_variant = make_variant
        self.variants = {}  # tuple(sorted(bound.items())) -> loaded module
        self.calls = {"generic": 0}

    def __call__(self, inputs):
        try:
            outs = self.module.call(list(inputs))
            self.calls["generic"] += 1
            return outs
        except runtime.SizeGuardError as e:
            bound = variant_key(e)
        key = tuple(sorted(bound.items()))
        mod = self.variants.get(key)
        if mod is None:
            mod = self.variants[key] = self.make_variant(dict(bound))
        name = ", ".join(f"{k}={v}" for k, v in key)
        self.calls[name] = self.calls.get(name, 0) + 1
        return mod.call(list(inputs))

    def stats(self):
        """Modules used (the generic one and each variant) and calls per module."""
        return {"modules": 1 + len(self.variants), "calls": dict(self.calls)}
