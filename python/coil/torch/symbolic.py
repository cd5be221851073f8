"""Symbolic sizes: FX graphs traced with torch's SymInts (torch.compile's dynamic shapes,
make_fx's tracing_mode="symbolic") as coil graphs whose inputs carry size symbols.

coil compiles such a graph once for every size (a size-generic model: docs/dynamic-shapes.md).
Here a symbolic size of the FX graph becomes a `SymDim`: the rows see it where they would see an
int in a shape, multiply and add it, and pass it on in attributes. Where a row would need its
value to decide something (`size == 3`, `int(size)`), SymDim raises Unsupported, and the graph
is compiled per size instead (dynamic.py): a symbolic size never turns into a guessed number.

What sizes may be assumed: like torch (and coil's own 0/1 rule), a size symbol stands for a size
of at least 2 (sizes 0 and 1 are specialized: torch traces them as constants, and coil compiles
a size-generic model's 0/1 bindings separately). So `s0 == 1` is False and `s0 > 1` is True
without a guard.
"""

import re

from .lowering import Unsupported


class _LazySympy:
    """sympy, imported at first use: only symbolic graphs need it, and on torch 1.13 (which
    does not import it itself) it added half a second to `import coil.torch`."""

    def __getattr__(self, name):
        import sympy as module
        globals()["sympy"] = module
        return getattr(module, name)


sympy = _LazySympy()

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_BIG = 2**62  # coil's bound on any size (docs/text-format.md)


def symint_expr(s):
    """The sympy expression of a torch SymInt (torch 2.x: s.node.expr; torch 1.13:
    s.get_pyobj().expr), or None for a plain int."""
    if isinstance(s, int) or type(s).__name__ == "int":
        return None
    if isinstance(s, (float, bool)):
        raise Unsupported(f"the non-integer value {s!r} where a size is read")
    node = getattr(s, "node", None)
    if node is not None and hasattr(node, "expr"):  # torch 2.x's SymInt
        return sympy.sympify(node.expr)
    if hasattr(s, "expr"):  # torch 1.13's PySymInt (an FX node's meta value)
        return sympy.sympify(s.expr)
    if hasattr(s, "get_pyobj"):  # torch 1.13's SymIntNode (a size of a FakeTensor)
        return sympy.sympify(s.get_pyobj().expr)
    raise Unsupported(f"a size of type {type(s).__name__} ({s})")


class SameSize(Unsupported):
    """Raised by a row where two sizes must be equal for the op to run (eager checks them at
    run time: attention's key and value lengths) but are different symbols in the FX graph
    (Dynamo made each input's size its own symbol and has no guard relating them). The graph is
    lowered again with one symbol standing for both (Symbols.assume_equal); coil's size binding
    then checks at each call that the inputs agree, an error naming them where they do not,
    as eager's own check would be."""

    def __init__(self, what, a, b):
        super().__init__(f"{what}: the sizes {a} and {b} must be equal")
        self.a, self.b = a, b


def require_same(what, a, b):
    """Raises SameSize where a and b are different symbolic sizes that the op needs equal."""
    if isinstance(a, SymDim) and isinstance(b, SymDim) and not a.same(b):
        raise SameSize(what, a, b)


class Symbols:
    """The coil names of one graph's size symbols (torch 2.x's s0, s1 keep theirs; 1.13's
    `t0.size(0)` become s0, s1, ... in order of appearance)."""

    def __init__(self):
        self.names = {}  # sympy Symbol -> coil name
        self.equal = {}  # sympy Symbol -> the symbol it is assumed equal to (SameSize)

    def assume_equal(self, a, b):
        """Takes a == b (SymDims) as given by eliminating one symbol, when that makes it an
        alias of another symbol (s66 + 1 == s0 + 1: s66 is s0). False where it would not (a
        size equal to a number, or to an expression: the graph is then compiled per size)."""
        if not (isinstance(a, SymDim) and isinstance(b, SymDim)):
            return False
        diff = sympy.expand(a.expr - b.expr)
        order = list(self.names)  # eliminate the symbol named last: s0 stays s0
        for x in sorted(diff.free_symbols, key=lambda x: -order.index(x) if x in order else 0):
            sol = sympy.solve(diff, x)
            if len(sol) == 1 and sol[0].is_Symbol:
                self.equal = {k: v.xreplace({x: sol[0]}) for k, v in self.equal.items()}
                self.equal[x] = sol[0]
                return True
        return False

    def name(self, symbol):
        if symbol not in self.names:
            text = str(symbol)
            if not _NAME.match(text) or text in self.names.values():
                i = len(self.names)
                while f"s{i}" in self.names.values():
                    i += 1
                text = f"s{i}"
            self.names[symbol] = text
        return self.names[symbol]

    def dim(self, size):
        """A size of an FX value's shape as an int or a SymDim."""
        e = symint_expr(size)
        if e is None:
            return int(size)
        return SymDim.of(e, self)


class SymDim:
    """A symbolic size (a sympy expression over a graph's size symbols)."""

    __slots__ = ("expr", "symbols")

    def __init__(self, expr, symbols):
        self.expr, self.symbols = expr, symbols

    @staticmethod
    def of(expr, symbols):
        expr = sympy.sympify(expr)
        if symbols.equal:
            expr = expr.xreplace(symbols.equal)
        if expr.is_Integer:
            return int(expr)
        for s in expr.free_symbols:
            symbols.name(s)
        return SymDim(expr, symbols)

    # ---- what coil sees --------------------------------------------------------------------
    @property
    def text(self):
        """coil's text of the size (a symbol name, or an expression for messages)."""
        e = self.expr.xreplace({s: sympy.Symbol(self.symbols.name(s)) for s in
                                self.expr.free_symbols})
        return str(e).replace(" ", "")

    @property
    def symbol_name(self):
        """The coil name when the size is one symbol alone, else None."""
        return self.symbols.name(self.expr) if self.expr.is_Symbol else None

    def same(self, other):
        """Whether other (an int, a SymDim or coil's text of a size) is provably this size."""
        if isinstance(other, str):
            other = self.parse(other)
        if isinstance(other, SymDim):
            return sympy.simplify(self.expr - other.expr) == 0
        return False

    def parse(self, text):
        """A size as coil prints it ("s0", "2*s0", "64") in this graph's symbols."""
        text = text.strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        local = {name: sym for sym, name in self.symbols.names.items()}
        try:
            return SymDim.of(sympy.sympify(text.replace("//", "/"), locals=local)
                             if "//" not in text else
                             sympy.sympify(f"floor({text.replace('//', '/')})", locals=local),
                             self.symbols)
        except (sympy.SympifyError, TypeError) as e:
            raise Unsupported(f"coil's size {text!r}: {e}") from e

    def evaluate(self, values):
        """The size at symbol values {coil name: int}."""
        subs = {s: values[self.symbols.name(s)] for s in self.expr.free_symbols}
        return int(self.expr.xreplace(subs))

    # ---- arithmetic (sizes of views, numels, ...) --------------------------------------------
    def _lift(self, other):
        if isinstance(other, SymDim):
            return other.expr
        if isinstance(other, int) and not isinstance(other, bool):
            return sympy.Integer(other)
        raise Unsupported(f"the symbolic size {self} combined with {other!r}")

    def __add__(self, o):
        return SymDim.of(self.expr + self._lift(o), self.symbols)

    __radd__ = __add__

    def __sub__(self, o):
        return SymDim.of(self.expr - self._lift(o), self.symbols)

    def __rsub__(self, o):
        return SymDim.of(self._lift(o) - self.expr, self.symbols)

    def __mul__(self, o):
        return SymDim.of(self.expr * self._lift(o), self.symbols)

    __rmul__ = __mul__

    def __neg__(self):
        return SymDim.of(-self.expr, self.symbols)

    def __floordiv__(self, o):
        return SymDim.of(sympy.floor(self.expr / self._lift(o)), self.symbols)

    def __rfloordiv__(self, o):
        return SymDim.of(sympy.floor(self._lift(o) / self.expr), self.symbols)

    # ---- decisions: only what holds for every size >= 2 ---------------------------------------
    def _undecided(self, what):
        raise Unsupported(f"a decision on the symbolic size {self}: {what} (compiled per size)")

    def __eq__(self, o):
        if isinstance(o, SymDim):
            if self.same(o):
                return True
            self._undecided(f"== {o}")
        if isinstance(o, bool) or not isinstance(o, int):
            return False
        if o <= 1 and self._positive():  # a size symbol is >= 2
            return False
        self._undecided(f"== {o}")

    def __ne__(self, o):
        return not self.__eq__(o)

    def _positive(self):
        """Whether the size is provably >= 2 for symbols >= 2: a polynomial whose coefficients
        (integers) are all positive."""
        e = sympy.expand(self.expr)
        syms = sorted(e.free_symbols, key=str)
        if not syms or not e.is_polynomial(*syms):
            return False
        return all(c > 0 for c in sympy.Poly(e, *syms).coeffs())

    def _compare(self, o, op):
        if isinstance(o, int) and not isinstance(o, bool) and self._positive():
            if op in ("<", "<=") and o >= _BIG:
                return True
            if op in (">", ">=") and o <= (1 if op == ">" else 2):
                return True
            if op in ("<", "<=") and o <= 1:
                return False
        self._undecided(f"{op} {o}")

    def __lt__(self, o):
        return self._compare(o, "<")

    def __le__(self, o):
        return self._compare(o, "<=")

    def __gt__(self, o):
        return self._compare(o, ">")

    def __ge__(self, o):
        return self._compare(o, ">=")

    def __bool__(self):
        return True  # a size >= 2

    def __int__(self):
        self._undecided("its value")

    __index__ = __int__
    __float__ = __int__

    def __hash__(self):
        return hash(str(self.expr))

    def __repr__(self):
        return self.text

    __str__ = __repr__


def is_size_value(v):
    """Whether an FX node's meta value is a symbolic integer (a SymInt of torch 2.x, a
    PySymInt of 1.13): a size computed from shapes (sym_size, arithmetic on it)."""
    if v is None or isinstance(v, (bool, float, int)):
        return False
    return type(v).__name__ in ("SymInt", "PySymInt", "SymIntNode")


def graph_is_symbolic(gm):
    """Whether any value of the FX graph has a symbolic size, or is a symbolic integer."""
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        vals = v if isinstance(v, (tuple, list)) else [v]
        for x in vals:
            if is_size_value(x):
                return True
            shape = getattr(x, "shape", None)
            if shape is not None and not all(type(s) is int for s in shape):
                return True
    return False


def parse_size(L, text):
    """A size as coil prints it in a value's type, in the graph's symbols (L.symbols)."""
    symbols = getattr(L, "symbols", None)
    if symbols is None:
        raise Unsupported(f"the symbolic size {text} in a graph without size symbols")
    return SymDim(sympy.Integer(0), symbols).parse(text)


def _sizes_text(op, sizes, infer_one):
    """coil's `sizes` attribute (text) of a target with size symbols: integers and symbol names;
    a size that is an expression of symbols (s0*s1) is the one -1 a reshape infers."""
    parts, inferred = [], 0
    for s in sizes:
        if not isinstance(s, SymDim):
            parts.append(str(int(s)))
        elif s.symbol_name is not None:
            parts.append(s.symbol_name)
        elif infer_one and inferred == 0:
            parts.append("-1")
            inferred += 1
        else:
            raise Unsupported(f"{op} to {list(sizes)}: coil's sizes are integers and symbols, "
                              f"and a reshape infers one other size")
    return ", ".join(parts)


def resolve_attrs(L, op, inputs, attrs):
    """The attributes of a coil node whose values hold SymDims, in coil's terms: `full`,
    `reshape` and `expand` take their target as `sizes` text of integers and symbol names
    (a reshape's one expression of symbols, such as b*t, is its inferred -1), `slice` drops an
    end that is the dim's size. Any other symbolic attribute is Unsupported (the graph is then
    compiled per size)."""
    out = dict(attrs)
    for key, value in attrs.items():
        sizes = list(value) if isinstance(value, (list, tuple)) else None
        if op in ("full", "reshape", "expand") and key == "shape":
            symbolic = [s for s in sizes if isinstance(s, SymDim)]
            if op == "reshape" and len(symbolic) == 1:
                # (by identity: list.index would compare the symbol with each integer size)
                at = next(i for i, s in enumerate(sizes) if s is symbolic[0])
                sizes[at] = -1  # one symbolic size: inferred
                out[key] = sizes
                continue
            if op == "expand":  # an input's own size is kept (-1)
                have = L.shape(inputs[0])
                lead = len(sizes) - len(have)
                sizes = [-1 if isinstance(s, SymDim) and i >= lead and s.same(have[i - lead])
                         else s for i, s in enumerate(sizes)]
                if not any(isinstance(s, SymDim) for s in sizes):
                    out[key] = sizes
                    continue
            del out[key]
            out["sizes"] = _sizes_text(op, sizes, infer_one=op == "reshape")
        elif op == "slice" and key in ("start", "end") and isinstance(value, SymDim):
            # a bound that is the dim's size n minus 0 or 1 is python's bound 0 (to the end) or
            # -1 (torch's value n - 1 is never negative, so neither wraps); coil's slice takes
            # those on a symbolic dim (type_rules.cpp). Others are compiled per size.
            dim = attrs.get("dim", 0)
            have = L.shape(inputs[0])
            diff = SymDim.of(value.expr - (have[dim].expr if isinstance(have[dim], SymDim)
                                           else have[dim]), value.symbols)
            if not isinstance(diff, int) or not -1 <= diff <= 0:
                raise Unsupported(f"slice of dim {dim} of {list(have)} at the symbolic {key} "
                                  f"{value}")
            if key == "end" and diff == 0:
                del out[key]  # to the end
            else:
                out[key] = diff
        elif isinstance(value, SymDim) or (sizes and any(isinstance(s, SymDim) for s in sizes)):
            raise Unsupported(f"{op}: attribute {key}={value} holds a symbolic size (coil's "
                              "attributes are integers)")
    return out
