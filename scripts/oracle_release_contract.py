"""One SGLang release's request contract, read from its own code; runs INSIDE the oracle.

Not part of the library and never imported by it: `make_release_tables.py` runs
this file once per release with the oracle's interpreter, the release's folder
first on PYTHONPATH (built by scripts/oracle/setup.sh). It prints one
JSON object:

- `generate_req_input_fields`: `dataclasses.fields(GenerateReqInput)`, in order.
- `sampling_params_fields`: `SamplingParams.__struct_fields__` without its
  internal fields, which are the ones SGLang declares under its "Internal
  fields" comment and fills in itself in `__post_init__` or `normalize()`.
- `gate`: the HTTP contract gate, or null when the release has none wired into
  its `/generate` route: the top-level fields it type-checks, the sampling keys
  it accepts, what it does with an unknown top-level key, and its unknown-key
  message as a template.
- `init_checks`, `normalize_checks`, `verify_checks`: every `raise` reached
  from `SamplingParams.__post_init__`, `.normalize()` and `.verify()`, in source
  order, following calls into SGLang's module-level functions: its message
  template, its condition (source text), the request fields it reads and the
  deployment inputs it needs (`vocab_size`, `tokenizer`, `server` state).
- `tokenizer_manager_checks`: the raises of the tokenizer manager's
  `_set_default_priority`, `_validate_one_request` and `_create_tokenized_object`
  that depend on the request alone, and `priority_range` read from the first.
- `features`: what comes and goes between releases (output-flat, the flat
  field builders of the tokenizer manager, `watermark` at the top level and in
  `sampling_params`, `mm_processor_kwargs`, the gate, the priority range).

    PYTHONPATH=/tmp/sglang-oracle/releases/0.5.22 \\
        /tmp/sglang-oracle/bin/python scripts/oracle_release_contract.py
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import json
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

#: The marker SGLang puts above SamplingParams' internal fields.
INTERNAL_MARKER = "# --- Internal fields"
#: A key no release knows, used to read the gate's unknown-key behaviour.
SENTINEL = "zz_sentinel_key"

#: Message expressions that are not a plain field or constant, and their names.
NAMED_EXPRESSIONS = {
    "vocab_size - 1": "max_token_id",
    "type(self.sampling_seed).__name__": "sampling_seed_type",
    "len(self.stop_strs)": "count",
    "len(self.stop_regex_strs)": "count",
}

Env = dict[str, list[str]]


def _fail(message: str) -> NoReturn:
    raise SystemExit(f"oracle_release_contract: {message}")


def _tokens(node: ast.AST, env: Env, aliases: dict[str, str]) -> list[str]:
    """What an expression reads: `field:X` for request fields, `needs:Y` for deployment inputs."""
    found: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            owner = sub.value.id
            if owner == "self":
                found.append(f"field:{aliases.get(sub.attr, sub.attr)}")
            elif owner in env:
                found.extend(env[owner])
        elif isinstance(sub, ast.Name) and sub.id in env:
            found.extend(env[sub.id])
        elif (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Name)
            and sub.func.id.startswith("get_")
            and not sub.args
        ):
            found.append("needs:server")  # get_exec(), get_disagg(): the process's state
    return list(dict.fromkeys(found))


class UnnamedExpression(Exception):
    """A message reads an expression `NAMED_EXPRESSIONS` has no name for."""


def _template(node: ast.AST, scope: dict[str, Any]) -> str:
    """A raise's message as a `str.format` template; constants of SGLang inlined."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _template(node.left, scope) + _template(node.right, scope)
    if not isinstance(node, ast.JoinedStr):
        _fail(f"message is not a string: {ast.unparse(node)}")
    out = ""
    for part in node.values:
        if isinstance(part, ast.Constant):
            out += str(part.value).replace("{", "{{").replace("}", "}}")
            continue
        assert isinstance(part, ast.FormattedValue)
        if part.format_spec is not None:
            _fail(f"format spec in message: {ast.unparse(node)}")
        expr = ast.unparse(part.value)
        value = part.value
        conversion = "!r" if part.conversion == ord("r") else ""
        if isinstance(value, ast.Name) and isinstance(scope.get(value.id), (int, str)):
            out += str(scope[value.id]).replace("{", "{{").replace("}", "}}")
        elif isinstance(value, ast.Name):
            out += "{" + value.id + conversion + "}"
        elif (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id in ("self", "obj")
        ):
            out += "{" + value.attr + conversion + "}"
        elif expr in NAMED_EXPRESSIONS:
            out += "{" + NAMED_EXPRESSIONS[expr] + conversion + "}"
        else:
            raise UnnamedExpression(expr)
    return out


def _followable(name: str, scope: dict[str, Any]) -> Callable[..., Any] | None:
    target = scope.get(name)
    if inspect.isfunction(target) and target.__module__.startswith("sglang"):
        return target
    return None


def _function_ast(function: Callable[..., Any]) -> ast.FunctionDef | ast.AsyncFunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    node = tree.body[0]
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    return node


class RaiseCollector:
    """Every `raise` a function reaches, in source order, with its guards."""

    def __init__(self, aliases: dict[str, str], depth: int = 2, lenient: bool = False) -> None:
        self.aliases = aliases
        self.depth = depth
        self.lenient = lenient
        self.checks: list[dict[str, Any]] = []
        self.texts: dict[str, ast.expr] = {}  # local names bound to message strings

    def run(self, function: Callable[..., Any], env: Env, via: str | None = None) -> None:
        node = _function_ast(function)
        scope = function.__globals__
        self._block(node.body, env, [], scope, via, self.depth)

    def _block(
        self,
        body: list[ast.stmt],
        env: Env,
        guards: list[ast.expr],
        scope: dict[str, Any],
        via: str | None,
        depth: int,
    ) -> None:
        guards = list(guards)
        for statement in body:
            self._statement(statement, env, guards, scope, via, depth)
            if (
                isinstance(statement, ast.If)
                and statement.body
                and isinstance(statement.body[-1], ast.Return)
                and not statement.orelse
            ):
                guards.append(ast.UnaryOp(op=ast.Not(), operand=statement.test))

    def _statement(
        self,
        statement: ast.stmt,
        env: Env,
        guards: list[ast.expr],
        scope: dict[str, Any],
        via: str | None,
        depth: int,
    ) -> None:
        if isinstance(statement, ast.If):
            self._calls(statement.test, env, guards, scope, via, depth)
            self._block(statement.body, env, [*guards, statement.test], scope, via, depth)
            negated = ast.UnaryOp(op=ast.Not(), operand=statement.test)
            self._block(statement.orelse, env, [*guards, negated], scope, via, depth)
        elif isinstance(statement, ast.For):
            if isinstance(statement.target, ast.Name):
                env[statement.target.id] = _tokens(statement.iter, env, self.aliases)
            self._block(statement.body, env, guards, scope, via, depth)
        elif isinstance(statement, (ast.With, ast.Try)):
            self._block(statement.body, env, guards, scope, via, depth)
        elif isinstance(statement, ast.Raise):
            self._raise(statement, env, guards, scope, via)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            value = statement.value
            if value is not None:
                self._calls(value, env, guards, scope, via, depth)
                targets = statement.targets if isinstance(statement, ast.Assign) else []
                if isinstance(statement, ast.AnnAssign):
                    targets = [statement.target]
                for target in targets:
                    if isinstance(target, ast.Name) and isinstance(value, ast.JoinedStr):
                        self.texts[target.id] = value
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    for name in names:
                        if isinstance(name, ast.Name):
                            env[name.id] = _tokens(value, env, self.aliases)
        elif isinstance(statement, ast.Expr):
            self._calls(statement.value, env, guards, scope, via, depth)

    def _calls(
        self,
        expr: ast.expr,
        env: Env,
        guards: list[ast.expr],
        scope: dict[str, Any],
        via: str | None,
        depth: int,
    ) -> None:
        if depth == 0:
            return
        for call in ast.walk(expr):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            target = _followable(call.func.id, scope)
            if target is None:
                continue
            params = list(inspect.signature(target).parameters)
            inner: Env = {}
            for name, arg in zip(params, call.args, strict=False):
                inner[name] = _tokens(arg, env, self.aliases)
            for keyword in call.keywords:
                if keyword.arg is not None:
                    inner[keyword.arg] = _tokens(keyword.value, env, self.aliases)
            # The caller's guards hold for the callee's raises too.
            guard_tokens = [t for g in guards for t in _tokens(g, env, self.aliases)]
            before = len(self.checks)
            node = _function_ast(target)
            self._block(node.body, inner, [], target.__globals__, call.func.id, depth - 1)
            for check in self.checks[before:]:
                if guards:
                    outer = " and ".join(ast.unparse(g) for g in guards)
                    check["condition"] = f"({outer}) and ({check['condition']})"
                check["needs"] = sorted(
                    {*check["needs"], *(t[6:] for t in guard_tokens if t.startswith("needs:"))}
                )
                if via is not None:
                    check["via"] = f"{via}.{check['via']}"

    def _raise(
        self,
        statement: ast.Raise,
        env: Env,
        guards: list[ast.expr],
        scope: dict[str, Any],
        via: str | None,
    ) -> None:
        exc = statement.exc
        if not (isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and exc.args):
            _fail(f"raise of an unexpected shape: {ast.unparse(statement)}")
            return
        text = exc.args[0]
        if isinstance(text, ast.Name) and text.id in self.texts:
            text = self.texts[text.id]
        tokens = [t for g in guards for t in _tokens(g, env, self.aliases)]
        tokens += _tokens(text, env, self.aliases)
        # The innermost condition names the field first.
        inner = _tokens(guards[-1], env, self.aliases) if guards else []
        ordered = list(dict.fromkeys([*inner, *tokens]))
        try:
            message: str | None = _template(text, scope)
        except UnnamedExpression as error:
            message = None  # a deployment check's text; a request check's is required
            unnamed = str(error)
        self.checks.append(
            {
                "error": exc.func.id,
                "message": message,
                "condition": " and ".join(ast.unparse(g) for g in guards) or "True",
                "fields": [t[6:] for t in ordered if t.startswith("field:")],
                "needs": sorted({t[6:] for t in ordered if t.startswith("needs:")}),
                "via": via,
            }
        )
        if message is None and not self.checks[-1]["needs"] and not self.lenient:
            _fail(f"unnamed expression {unnamed!r} in a message; add it to NAMED_EXPRESSIONS")


def sampling_params_contract(params_class: type) -> dict[str, Any]:
    """SamplingParams' arguments, internal fields, and the checks of its three steps."""
    source = inspect.getsource(params_class)
    tree = ast.parse(textwrap.dedent(source))
    class_node = tree.body[0]
    assert isinstance(class_node, ast.ClassDef)
    lines = textwrap.dedent(source).splitlines()
    marker = next((i + 1 for i, line in enumerate(lines) if INTERNAL_MARKER in line), None)
    if marker is None:
        _fail(f"SamplingParams has no {INTERNAL_MARKER!r} comment")
    declared_after = [
        node.target.id
        for node in class_node.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and marker is not None
        and node.lineno > marker
    ]
    filled_in: set[str] = set()
    aliases: dict[str, str] = {}
    for method in ("__post_init__", "normalize"):
        for node in ast.walk(_function_ast(getattr(params_class, method))):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    filled_in.add(target.attr)
                    value = node.value
                    if (
                        method == "__post_init__"
                        and isinstance(value, ast.Attribute)
                        and isinstance(value.value, ast.Name)
                        and value.value.id == "self"
                    ):
                        aliases[target.attr] = value.attr
    internal = [name for name in declared_after if name in filled_in]
    fields = [name for name in params_class.__struct_fields__ if name not in internal]  # type: ignore[attr-defined]

    def collect(method: str, env: Env) -> list[dict[str, Any]]:
        collector = RaiseCollector(aliases)
        collector.run(getattr(params_class, method), env)
        return collector.checks

    steps = {
        "init_checks": collect("__post_init__", {}),
        "normalize_checks": collect("normalize", {"tokenizer": ["needs:tokenizer"]}),
        "verify_checks": collect("verify", {"vocab_size": ["needs:vocab_size"]}),
    }
    used = {
        node.id
        for checks in steps.values()
        for check in checks
        for node in ast.walk(ast.parse(check["condition"]))
        if isinstance(node, ast.Name)
    }
    constants = vars(sys.modules[params_class.__module__])
    return {
        "sampling_params_fields": fields,
        "sampling_params_internal_fields": internal,
        **steps,
        "limits": {
            name: value
            for name, value in constants.items()
            if name in used and name.isupper() and type(value) is int
        },
    }


def _evaluate(node: ast.expr) -> int:
    """A constant integer expression (`-(1 << 63)`), evaluated without eval()."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        operations: dict[type, Callable[[int, int], int]] = {
            ast.LShift: lambda a, b: a << b,
            ast.Pow: lambda a, b: int(a**b),
            ast.Sub: lambda a, b: a - b,
            ast.Add: lambda a, b: a + b,
        }
        if type(node.op) in operations:
            return operations[type(node.op)](left, right)
    raise ValueError(ast.unparse(node))


def _priority_range(method: Callable[..., Any]) -> list[int] | None:
    """[low, high] (inclusive) from `low <= obj.priority < high` in `_set_default_priority`."""
    for node in ast.walk(_function_ast(method)):
        if (
            isinstance(node, ast.Compare)
            and len(node.ops) == 2
            and ast.unparse(node.comparators[0]) == "obj.priority"
        ):
            low, high = _evaluate(node.left), _evaluate(node.comparators[1])
            low += 0 if isinstance(node.ops[0], ast.LtE) else 1
            high -= 1 if isinstance(node.ops[1], ast.Lt) else 0
            return [low, high]
    return None


def tokenizer_manager_contract(manager_class: type) -> dict[str, Any]:
    """The tokenizer manager's checks that depend on the request alone."""
    checks: list[dict[str, Any]] = []
    for method in ("_set_default_priority", "_validate_one_request", "_create_tokenized_object"):
        collector = RaiseCollector({}, depth=0, lenient=True)
        collector.run(getattr(manager_class, method), {"obj": []}, via=method)
        for check in collector.checks:
            condition = check["condition"]
            # `self` is the server here: reading it, or server state, needs the deployment.
            if check["fields"] or check["needs"]:
                continue
            if check["message"] is None:
                _fail(f"a request check's message reads an unnamed expression: {condition}")
            check["fields"] = _obj_fields(condition)
            checks.append(check)
    return {
        "tokenizer_manager_checks": checks,
        "priority_range": _priority_range(manager_class._set_default_priority),  # type: ignore[attr-defined]
    }


def _obj_fields(condition: str) -> list[str]:
    found = [
        node.attr
        for node in ast.walk(ast.parse(condition))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "obj"
    ]
    found += [
        node.args[0].value
        for node in ast.walk(ast.parse(condition))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]
    return list(dict.fromkeys(found))


def _route_calls_gate(http_server: Path) -> bool:
    """Whether the `/generate` route of this release calls `generate_contract_error`."""
    tree = ast.parse(http_server.read_text(encoding="utf-8"))
    for node in tree.body:
        if not isinstance(node, ast.AsyncFunctionDef):
            continue
        routes = [
            arg.value
            for decorator in node.decorator_list
            if isinstance(decorator, ast.Call)
            for arg in decorator.args
            if isinstance(arg, ast.Constant)
        ]
        if "/generate" in routes:
            return any(
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "generate_contract_error"
                for call in ast.walk(node)
            )
    _fail("no /generate route in http_server.py")
    return False


def _load_by_path(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def gate_contract(package: Path) -> dict[str, Any] | None:
    """The HTTP contract gate as this release wires it, or None."""
    contract = package / "srt" / "entrypoints" / "api_contract.py"
    if not contract.exists() or not _route_calls_gate(package / "srt/entrypoints/http_server.py"):
        return None
    types = _load_by_path("sglang_release_api_types", package / "api" / "v1" / "api_types.py")
    sampling_keys = list(types._FIELDS_SamplingParams)

    def verdict(body: dict[str, Any]) -> str | None:
        try:
            types.GenerateRequest.from_json_value(body)
        except types.JsonContractError as error:
            return str(error)
        return None

    message = verdict({"sampling_params": {SENTINEL: 0}})
    listed = ", ".join(f"`{key}`" for key in sampling_keys)
    if message is None or listed not in message:
        _fail(f"the gate's unknown sampling key message is unexpected: {message!r}")
        return None
    template = message.replace(SENTINEL, "{key}").replace(listed, "{expected}")
    return {
        "fields": list(types.GenerateRequest.__struct_fields__),
        "unknown_field": "ignored" if verdict({SENTINEL: 0}) is None else "rejected",
        "sampling_keys": sampling_keys,
        "unknown_sampling_key": template,
        "watermark_keys": list(getattr(types, "_FIELDS_WatermarkRequestConfig", ())),
    }


def features(contract: dict[str, Any], tokenizer_manager: ModuleType) -> dict[str, Any]:
    """The request features that come and go between releases, as this release has them."""
    fields = contract["generate_req_input_fields"]
    builders = sorted(
        name
        for name, value in vars(tokenizer_manager).items()
        if inspect.isfunction(value)
        and name.startswith("_build_flat_")
        and name.endswith("top_logprobs_fields")
    )
    return {
        "output_flat": "return_flat_raw_output_top_logprobs" in fields,
        "flat_fields_builders": builders,
        "watermark_top_level": "watermark" in fields,
        "watermark_in_sampling_params": "watermark" in contract["sampling_params_fields"],
        "mm_processor_kwargs": "mm_processor_kwargs" in fields,
        "gate": contract["gate"] is not None,
        "priority_range_checked": contract["priority_range"] is not None,
    }


def _modules() -> Iterator[ModuleType]:
    for name in (
        "sglang.srt.managers.io_struct",
        "sglang.srt.sampling.sampling_params",
        "sglang.srt.managers.tokenizer_manager",
    ):
        yield importlib.import_module(name)


def main() -> None:
    warnings.simplefilter("ignore")
    sglang = importlib.import_module("sglang")
    package = Path(next(iter(sglang.__path__)))
    io_struct, sampling, tokenizer_manager = _modules()
    contract: dict[str, Any] = {
        "sglang": sglang.__version__,
        "generate_req_input_fields": [
            field.name for field in dataclasses.fields(io_struct.GenerateReqInput)
        ],
        **sampling_params_contract(sampling.SamplingParams),
        "gate": gate_contract(package),
        **tokenizer_manager_contract(tokenizer_manager.TokenizerManager),
    }
    contract["features"] = features(contract, tokenizer_manager)
    print(json.dumps(contract))


if __name__ == "__main__":
    main()
