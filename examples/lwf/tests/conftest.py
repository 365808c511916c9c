# INTERIM (until the params branch's MethodSpec and plug-in registry land on main): register lwf
# by hand before rmconsole.config builds RunConfig. Removed once the entry point does this.
import rmconsole.cl.methods as methods
from rmconsole_lwf.params import LwFParams

methods.REGISTRY.setdefault("lwf", methods.Entry("finetune:Finetune", LwFParams))

import rmconsole.cl.loop as loop  # noqa: E402

_original = loop.method_class


def _method_class(name):
    if name == "lwf":
        from rmconsole_lwf.method import LwF
        return LwF
    return _original(name)


loop.method_class = _method_class
