"""Exact structural matching of JSON values for the end-to-end checks.

An expected value is plain JSON (compared exactly: dict key sets, list lengths and order, integer
values and types) with a few markers where the simulator, not the program, picks a value:

    V("stream:s1")   any value, the same everywhere this name appears in one match; names with
                     the same prefix before ':' must take different values (two streams the
                     program created cannot share an id)
    Unordered([..])  a list compared as a multiset (with backtracking over the V bindings)
    Subset({..})     a dict of which only the listed keys are compared
    Pred(fn, text)   any value for which fn(value) is true
"""


class V:
    def __init__(self, name):
        self.name = name
        self.space = name.split(":", 1)[0]

    def __repr__(self):
        return f"V({self.name!r})"


class Unordered(list):
    pass


class Subset(dict):
    pass


class Pred:
    def __init__(self, fn, text):
        self.fn, self.text = fn, text

    def __repr__(self):
        return f"<{self.text}>"


class Mismatch(Exception):
    pass


def _bind(b, var, value, path):
    if var.name in b:
        if b[var.name] != value:
            raise Mismatch(f"{path}: {value!r}, but {var.name} is {b[var.name]!r} elsewhere")
        return b
    for other, v in b.items():
        if other.split(":", 1)[0] == var.space and v == value:
            raise Mismatch(f"{path}: {value!r} is already {other}, cannot also be {var.name}")
    nb = dict(b)
    nb[var.name] = value
    return nb


class _DeadEnds:
    """Keeps the deepest reason a match failed, and bounds the search."""

    LIMIT = 2_000_000

    def __init__(self):
        self.deepest, self.count, self.steps = None, 0, 0

    def add(self, msg):
        self.count += 1
        if self.deepest is None or _depth(msg) >= _depth(self.deepest):
            self.deepest = msg

    def step(self, path):
        self.steps += 1
        if self.steps > self.LIMIT:
            raise Mismatch(f"{path}: gave up after {self.LIMIT} match steps; deepest failure: "
                           f"{self.deepest}")


def _gen(actual, exp, b, path, errs):
    """Yields every binding that makes `actual` match `exp` (backtracking over V choices);
    records the reasons of dead ends in errs."""
    errs.step(path)
    if isinstance(exp, V):
        try:
            yield _bind(b, exp, actual, path)
        except Mismatch as e:
            errs.add(str(e))
        return
    if isinstance(exp, Pred):
        if exp.fn(actual):
            yield b
        else:
            errs.add(f"{path}: {actual!r} is not {exp.text}")
        return
    if isinstance(exp, dict):
        if not isinstance(actual, dict):
            errs.add(f"{path}: expected an object, got {actual!r}")
            return
        if not isinstance(exp, Subset):
            missing = sorted(set(exp) - set(actual))
            extra = sorted(set(actual) - set(exp))
            if missing or extra:
                errs.add(f"{path}: keys differ: missing {missing}, unexpected {extra} "
                            f"(got {actual!r})")
                return
        missing = [k for k in exp if k not in actual]
        if missing:
            errs.add(f"{path}: missing keys {missing} (got {actual!r})")
            return
        yield from _seq([actual[k] for k in exp], list(exp.values()),
                        [f"{path}.{k}" for k in exp], b, errs)
        return
    if isinstance(exp, Unordered):
        if not isinstance(actual, list) or len(actual) != len(exp):
            errs.add(f"{path}: expected {len(exp)} items in any order, got {actual!r}")
            return
        yield from _unordered(list(enumerate(actual)), list(exp), b, path, errs)
        return
    if isinstance(exp, list):
        if not isinstance(actual, list) or len(actual) != len(exp):
            errs.add(f"{path}: expected a list of {len(exp)}, got {actual!r}")
            return
        yield from _seq(actual, exp, [f"{path}[{i}]" for i in range(len(exp))], b, errs)
        return
    if type(actual) is not type(exp) or actual != exp:
        errs.add(f"{path}: got {actual!r}, expected {exp!r}")
        return
    yield b


def _seq(actuals, exps, paths, b, errs):
    if not exps:
        yield b
        return
    for nb in _gen(actuals[0], exps[0], b, paths[0], errs):
        yield from _seq(actuals[1:], exps[1:], paths[1:], nb, errs)


def _unordered(actuals, exps, b, path, errs):
    if not exps:
        yield b
        return
    matched = False
    for j, (i, a) in enumerate(actuals):
        for nb in _gen(a, exps[0], b, f"{path}[{i}]", errs):
            matched = True
            yield from _unordered(actuals[:j] + actuals[j + 1:], exps[1:], nb, path, errs)
    if not matched:
        errs.add(f"{path}: no remaining item matches {exps[0]!r}")


def _depth(msg):
    where = msg.split(":", 1)[0]
    return where.count(".") + where.count("[")


def match(actual, exp, b=None, path="$"):
    """Returns the first bindings that make `actual` match `exp`, or raises Mismatch naming
    the deepest point at which matching failed."""
    errs = _DeadEnds()
    for nb in _gen(actual, exp, {} if b is None else b, path, errs):
        return nb
    msg = errs.deepest or f"{path}: no match"
    if errs.count > 1:
        msg += f" (and {errs.count - 1} other dead ends)"
    raise Mismatch(msg)


class Failures:
    """Collects failed checks so that one run reports all of them."""

    def __init__(self):
        self.failures = []
        self.passed = 0

    def check(self, cond, msg):
        if cond:
            self.passed += 1
        else:
            self.failures.append(msg)
        return cond

    def eq(self, what, actual, expected):
        return self.check(actual == expected and type(actual) is type(expected),
                          f"{what}: got {actual!r}, expected {expected!r}")

    def match(self, what, actual, expected, bindings=None):
        try:
            b = match(actual, expected, bindings)
            self.passed += 1
            return b
        except Mismatch as e:
            self.failures.append(f"{what}: {e}")
            return None
