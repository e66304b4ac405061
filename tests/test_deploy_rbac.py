"""The RBAC in deploy/ grants exactly the (API group, resource, verb) triples the code can request.

The triples are derived from the source, not listed here: every reference to a kubernetes_asyncio
API method in the package (outside tests/ and hack/) is found with `ast`; the client's own
generated code gives that method's HTTP method and path (so "create_namespaced_pod_binding" is a
POST to pods/{name}/binding); CustomObjectsApi's group and plural arguments are followed back
through parameters, attributes and imports to the string constants they come from. Modules under
exporter/ run as the exporter's service account, everything else as the scheduler's.

A method handed to an informer (referenced, not called) is listed and watched: the informer
module is checked to really pass watch=True. Anything the derivation cannot follow fails the test
with the file and line, so a new kind of call cannot slip past it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

import numasched

PACKAGE = Path(numasched.__file__).resolve().parent
DEPLOY = PACKAGE / "deploy"
# Source that never runs in the cluster under these service accounts.
EXCLUDED_TOP_LEVEL = frozenset({"tests", "hack", "docs", "deploy", ".venv", "build", "dist"})
# Commands an operator runs with their own credentials, never under a service account of deploy/
# (docs/defrag.md lists what they need).
OPERATOR_MODULES = frozenset({"scheduler/defrag_command.py"})

Triple = tuple[str, str, str]  # (API group, resource[/subresource], verb)

_CALL_API = re.compile(r"call_api\(\s*'(?P<path>[^']+)',\s*'(?P<method>[A-Z]+)'")


# --- what the client's methods request --------------------------------------------------------------


@dataclass(frozen=True)
class ApiMethod:
    api_class: type[Any]
    name: str
    path: str  # e.g. /apis/{group}/{version}/namespaces/{namespace}/{plural}/{name}/status
    http_method: str


@cache
def api_methods() -> dict[str, list[ApiMethod]]:
    """Every public request method of every kubernetes_asyncio API class, by method name."""
    found: dict[str, list[ApiMethod]] = {}
    for class_name in dir(client):
        api_class = getattr(client, class_name)
        if not (isinstance(api_class, type) and class_name.endswith("Api")):
            continue
        for name in dir(api_class):
            if name.startswith("_") or name.endswith("_with_http_info"):
                continue
            implementation = getattr(api_class, f"{name}_with_http_info", None)
            if implementation is None:
                continue
            match = _CALL_API.search(inspect.getsource(implementation))
            assert match is not None, f"{class_name}.{name}: no call_api in the generated code"
            found.setdefault(name, []).append(ApiMethod(api_class, name, match["path"], match["method"]))
    return found


def request_shape(path: str) -> tuple[str, str, str, bool]:
    """(group or a {parameter}, resource or a {parameter}, subresource, names one object) of a path."""
    parts = [part for part in path.split("/") if part]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[1] == "{namespace}":
        rest = rest[2:]
    resource = rest[0]
    subresource = rest[2] if len(rest) >= 3 else ""
    return group, resource, subresource, len(rest) >= 2


def verbs_of(http_method: str, names_one: bool, handed_to_informer: bool) -> set[str]:
    if http_method == "GET":
        if names_one:
            return {"get"}
        return {"list", "watch"} if handed_to_informer else {"list"}
    if http_method == "DELETE":
        return {"delete" if names_one else "deletecollection"}
    return {{"POST": "create", "PUT": "update", "PATCH": "patch"}[http_method]}


# --- the package's source --------------------------------------------------------------------------


@dataclass
class Module:
    name: str  # dotted, numasched.cache.kube.binder
    path: Path
    tree: ast.Module
    parents: dict[ast.AST, ast.AST]

    def enclosing(self, node: ast.AST, kind: type[ast.AST] | tuple[type[ast.AST], ...]) -> Any:
        current = self.parents.get(node)
        while current is not None and not isinstance(current, kind):
            current = self.parents.get(current)
        return current

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}"


@cache
def package_modules() -> tuple[Module, ...]:
    modules = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in EXCLUDED_TOP_LEVEL or any(part.endswith(".egg-info") for part in relative.parts):
            continue
        modules.append(module_of(path, path.read_text(encoding="utf-8")))
    return tuple(modules)


def module_of(path: Path, source: str) -> Module:
    tree = ast.parse(source, str(path))
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    dotted = ".".join(("numasched", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
    return Module(dotted, path, tree, parents)


class Unresolved(Exception):
    pass


FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


Origin = tuple[ast.expr, Module]


class Resolver:
    """Follows expressions back to where their values are made: constants, or calls such as
    CoreV1Api(...). Several expressions are followed together, so that a group and a plural
    passed through the same function come from the same call site, never crossed."""

    def __init__(self, modules: tuple[Module, ...]) -> None:
        self.modules = modules

    def strings(self, *items: Origin) -> set[tuple[str, ...]]:
        combinations = set()
        for terminals in self.follow(items):
            values = []
            for origin, where in terminals:
                if not (isinstance(origin, ast.Constant) and isinstance(origin.value, str)):
                    raise Unresolved(f"{where.where(origin)}: not a string constant: {ast.unparse(origin)!r}")
                values.append(origin.value)
            combinations.add(tuple(values))
        return combinations

    def api_classes(self, expr: ast.expr, module: Module) -> set[str]:
        """Names of the API classes an expression can hold (CoreV1Api for client.CoreV1Api(api_client))."""
        names = set()
        for ((origin, where),) in self.follow(((expr, module),)):
            func = origin.func if isinstance(origin, ast.Call) else None
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if not name.endswith("Api"):
                raise Unresolved(f"{where.where(origin)}: not an API object: {ast.unparse(origin)!r}")
            names.add(name)
        return names

    def follow(self, items: tuple[Origin, ...], depth: int = 0) -> list[tuple[Origin, ...]]:
        if depth > 16:
            raise Unresolved(f"{items[0][1].where(items[0][0])}: too deep")
        # Names and attributes first, parameters last: items passed through the same function
        # are then all parameters of it at once, and take their values from one caller at a time.
        owners = []
        for index, (expr, module) in enumerate(items):
            if isinstance(expr, ast.Constant | ast.Call):
                continue
            owner = self._parameter_of(expr, module)
            if owner is not None:
                owners.append(owner)
                continue
            unpacked = self._unpacking(expr, module)
            if unpacked is not None:
                return self._through_table(items, unpacked, module, depth)
            results = []
            for replacement in self._step(expr, module):
                replaced = (*items[:index], replacement, *items[index + 1 :])
                results += self.follow(replaced, depth + 1)
            return results
        if owners:
            return self._through_callers(items, owners[0], depth)
        return [items]

    @staticmethod
    def _unpacking(expr: ast.expr, module: Module) -> ast.Assign | None:
        """`a, b, c = TABLE[key]` binding the name, where TABLE is a dict of tuples: the statement."""
        if not isinstance(expr, ast.Name):
            return None
        function = module.enclosing(expr, (ast.FunctionDef, ast.AsyncFunctionDef))
        if function is None:
            return None
        for statement in ast.walk(function):
            if (
                isinstance(statement, ast.Assign)
                and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Tuple)
                and any(isinstance(e, ast.Name) and e.id == expr.id for e in statement.targets[0].elts)
                and isinstance(statement.value, ast.Subscript)
                and isinstance(statement.value.value, ast.Name)
            ):
                return statement
        return None

    def _through_table(
        self, items: tuple[Origin, ...], statement: ast.Assign, module: Module, depth: int
    ) -> list[tuple[Origin, ...]]:
        """Every row of the table, with all items the statement binds taken from that same row."""
        assert isinstance(statement.targets[0], ast.Tuple) and isinstance(statement.value, ast.Subscript)
        names = [e.id if isinstance(e, ast.Name) else "" for e in statement.targets[0].elts]
        table_name = statement.value.value
        assert isinstance(table_name, ast.Name)
        table = next(
            (
                s.value
                for s in module.tree.body
                if isinstance(s, ast.Assign | ast.AnnAssign) and _assigns_name(s, table_name.id)
            ),
            None,
        )
        if not isinstance(table, ast.Dict):
            raise Unresolved(f"{module.where(statement)}: {table_name.id} is not a dict written out in the module")
        results: list[tuple[Origin, ...]] = []
        for row in table.values:
            if not (isinstance(row, ast.Tuple) and len(row.elts) == len(names)):
                raise Unresolved(f"{module.where(row)}: a row of {table_name.id} is not a tuple of {len(names)}")
            replaced = []
            for expr, where in items:
                bound = where is module and isinstance(expr, ast.Name) and self._unpacking(expr, where) is statement
                if bound:
                    assert isinstance(expr, ast.Name)
                    replaced.append((row.elts[names.index(expr.id)], module))
                else:
                    replaced.append((expr, where))
            results += self.follow(tuple(replaced), depth + 1)
        return results

    @staticmethod
    def _parameter_of(expr: ast.expr, module: Module) -> tuple[FunctionNode, Module] | None:
        if not isinstance(expr, ast.Name):
            return None
        function = module.enclosing(expr, (ast.FunctionDef, ast.AsyncFunctionDef))
        while function is not None:
            if expr.id in _parameters(function):
                return function, module
            if any(
                isinstance(statement, ast.Assign | ast.AnnAssign) and _assigns_name(statement, expr.id)
                for statement in ast.walk(function)
            ):
                return None
            function = module.enclosing(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        return None

    def _step(self, expr: ast.expr, module: Module) -> list[Origin]:
        """One step back from a name or self.attribute that is no parameter."""
        if isinstance(expr, ast.Name):
            function = module.enclosing(expr, (ast.FunctionDef, ast.AsyncFunctionDef))
            while function is not None:
                for statement in ast.walk(function):
                    if isinstance(statement, ast.Assign | ast.AnnAssign) and _assigns_name(statement, expr.id):
                        assert statement.value is not None
                        return [(statement.value, module)]
                function = module.enclosing(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for statement in module.tree.body:
                if isinstance(statement, ast.Assign | ast.AnnAssign) and _assigns_name(statement, expr.id):
                    assert statement.value is not None
                    return [(statement.value, module)]
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    for alias in statement.names:
                        if (alias.asname or alias.name) == expr.id:
                            value = getattr(importlib.import_module(statement.module), alias.name)
                            return [(ast.Constant(value, lineno=statement.lineno), module)]
            raise Unresolved(f"{module.where(expr)}: cannot follow the name {expr.id!r}")
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            owner = module.enclosing(expr, ast.ClassDef)
            if owner is None:
                raise Unresolved(f"{module.where(expr)}: self outside a class")
            found: list[Origin] = []
            for node in ast.walk(owner):
                if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if any(_is_self_attribute(target, expr.attr) for target in targets):
                        found.append((node.value, module))
            if not found:
                raise Unresolved(f"{module.where(expr)}: self.{expr.attr} is never assigned")
            return found
        raise Unresolved(f"{module.where(expr)}: cannot follow {ast.unparse(expr)!r}")

    def _through_callers(
        self, items: tuple[Origin, ...], owner: tuple[FunctionNode, Module], depth: int
    ) -> list[tuple[Origin, ...]]:
        """Replace every item that is a parameter of the function by what one caller passes; per caller."""
        function, module = owner
        parameters = _parameters(function)
        owner_class = module.enclosing(function, ast.ClassDef)
        is_method = owner_class is not None and module.parents.get(function) is owner_class
        callee = owner_class.name if is_method and function.name == "__init__" else function.name
        shift = 1 if is_method else 0
        results: list[tuple[Origin, ...]] = []
        sites = 0
        for caller in self.modules:
            if not is_method and caller is not module:
                continue  # a plain function: called from its own module (nested helpers are)
            for node in ast.walk(caller.tree):
                if not isinstance(node, ast.Call):
                    continue
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if called != callee:
                    continue
                sites += 1
                replaced = []
                for expr, where in items:
                    if where is module and self._parameter_of(expr, where) == owner:
                        assert isinstance(expr, ast.Name)
                        name = expr.id
                        argument = next((k.value for k in node.keywords if k.arg == name), None)
                        position = parameters.index(name) - shift
                        if argument is None and position < len(node.args):
                            argument = node.args[position]
                        if argument is None:
                            raise Unresolved(f"{caller.where(node)}: {callee}() without {name}")
                        replaced.append((argument, caller))
                    else:
                        replaced.append((expr, where))
                results += self.follow(tuple(replaced), depth + 1)
        if not sites:
            raise Unresolved(f"{module.where(function)}: nothing calls {callee}()")
        return results


def _parameters(function: FunctionNode) -> list[str]:
    return [argument.arg for argument in (*function.args.posonlyargs, *function.args.args)]


def _is_self_attribute(target: ast.expr, attribute: str) -> bool:
    return (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
        and target.attr == attribute
    )


def _assigns_name(statement: ast.Assign | ast.AnnAssign, name: str) -> bool:
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    return any(isinstance(target, ast.Name) and target.id == name for target in targets)


# --- the derivation ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiUse:
    module: Module
    node: ast.Attribute
    method: ApiMethod
    arguments: tuple[ast.expr, ...]
    keywords: tuple[ast.keyword, ...]
    handed_to_informer: bool


def api_uses(module: Module, resolver: Resolver) -> Iterator[ApiUse]:
    methods = api_methods()
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Attribute) or node.attr not in methods:
            continue
        candidates = methods[node.attr]
        if len({(method.path, method.http_method) for method in candidates}) > 1:
            # create_namespaced_event is CoreV1Api's and EventsV1Api's: the receiver decides.
            classes = resolver.api_classes(node.value, module)
            candidates = [method for method in candidates if method.api_class.__name__ in classes]
            if len(candidates) != 1:
                raise Unresolved(f"{module.where(node)}: {node.attr} on {sorted(classes)}")
        parent = module.parents.get(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            yield ApiUse(module, node, candidates[0], tuple(parent.args), tuple(parent.keywords), False)
        elif isinstance(parent, ast.Call) and parent.args and parent.args[0] is node and _is_partial(parent.func):
            yield ApiUse(module, node, candidates[0], tuple(parent.args[1:]), tuple(parent.keywords), True)
        else:
            yield ApiUse(module, node, candidates[0], (), (), True)


def _is_partial(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "partial") or (
        isinstance(func, ast.Attribute) and func.attr == "partial"
    )


def argument(use: ApiUse, parameter: str) -> ast.expr:
    signature = inspect.signature(getattr(use.method.api_class, use.method.name))
    names = [name for name in signature.parameters if name not in ("self", "kwargs")]
    found = next((k.value for k in use.keywords if k.arg == parameter), None)
    if found is None and names.index(parameter) < len(use.arguments):
        found = use.arguments[names.index(parameter)]
    if found is None:
        raise Unresolved(f"{use.module.where(use.node)}: {use.method.name} without {parameter}")
    return found


def group_and_resources(use: ApiUse, resolver: Resolver) -> set[tuple[str, str]]:
    """(group, plural) pairs a use can request: literal in the path, or followed from its arguments."""
    group, resource, _, _ = request_shape(use.method.path)
    items: list[Origin] = []
    for value, parameter in ((group, "group"), (resource, "plural")):
        literal = value if not value.startswith("{") else None
        items.append((ast.Constant(literal) if literal is not None else argument(use, parameter), use.module))
    return {(pair[0], pair[1]) for pair in resolver.strings(*items)}


def derived_permissions(modules: tuple[Module, ...] | None = None) -> dict[str, set[Triple]]:
    """Per service account ("scheduler", "exporter"): the triples its code can request."""
    modules = package_modules() if modules is None else modules
    resolver = Resolver(modules)
    found: dict[str, set[Triple]] = {"scheduler": set(), "exporter": set(), "operator": set()}
    for module in modules:
        relative = module.path.relative_to(PACKAGE)
        if relative.as_posix() in OPERATOR_MODULES:
            account = "operator"
        else:
            account = "exporter" if relative.parts[0] == "exporter" else "scheduler"
        for use in api_uses(module, resolver):
            _, _, subresource, names_one = request_shape(use.method.path)
            for verb in verbs_of(use.method.http_method, names_one, use.handed_to_informer):
                for group_name, plural in group_and_resources(use, resolver):
                    found[account].add((group_name, f"{plural}/{subresource}" if subresource else plural, verb))
    return found


def informer_lists_with_watch() -> bool:
    for module in package_modules():
        if any(isinstance(node, ast.ClassDef) and node.name == "Informer" for node in ast.walk(module.tree)):
            keywords = [k for call in ast.walk(module.tree) if isinstance(call, ast.Call) for k in call.keywords]
            return any(k.arg == "watch" and isinstance(k.value, ast.Constant) and k.value.value for k in keywords)
    return False


# --- what deploy/ grants -------------------------------------------------------------------------------


def deploy_objects() -> list[dict[str, Any]]:
    objects = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        objects += [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    return objects


def granted(service_account: str, namespace: str) -> tuple[set[Triple], list[dict[str, Any]]]:
    """The triples every role bound to the service account grants, and those roles."""
    objects = deploy_objects()
    roles: list[dict[str, Any]] = []
    for binding in objects:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(
            subject.get("kind") == "ServiceAccount"
            and subject.get("name") == service_account
            and subject.get("namespace") == namespace
            for subject in binding.get("subjects", [])
        ):
            continue
        reference = binding["roleRef"]
        role_namespace = binding["metadata"].get("namespace") if reference["kind"] == "Role" else None
        (role,) = [
            obj
            for obj in objects
            if obj["kind"] == reference["kind"]
            and obj["metadata"]["name"] == reference["name"]
            and obj["metadata"].get("namespace") == role_namespace
        ]
        roles.append(role)
    triples = {
        (group, resource, verb)
        for role in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    return triples, roles


# --- the tests ------------------------------------------------------------------------------------------


def test_the_derivation_finds_the_calls_it_must() -> None:
    """Guards the derivation itself: calls known to exist in the code are among those it finds."""
    assert informer_lists_with_watch(), "the informer no longer passes watch=True: revisit verbs_of"
    derived = derived_permissions()
    assert ("", "pods/binding", "create") in derived["scheduler"]
    assert ("", "pods", "watch") in derived["scheduler"]
    assert ("coordination.k8s.io", "leases", "get") in derived["scheduler"]
    assert any(group == "nodeinfo.volcano.sh" and verb == "create" for group, _, verb in derived["exporter"])
    assert ("nodeinfo.volcano.sh", "numatopologies", "watch") in derived["scheduler"]
    assert {(g, r) for g, r, v in derived["exporter"] if v == "watch"} == {
        ("", "pods")
    }  # the agent's watch of its node's pods


def test_request_shapes_from_the_generated_client() -> None:
    binding = api_methods()["create_namespaced_pod_binding"][0]
    assert (binding.http_method, request_shape(binding.path)) == ("POST", ("", "pods", "binding", True))
    status = api_methods()["patch_namespaced_custom_object_status"][0]
    assert request_shape(status.path) == ("{group}", "{plural}", "status", True)
    assert request_shape(api_methods()["list_node"][0].path) == ("", "nodes", "", False)
    assert request_shape(api_methods()["list_namespace"][0].path) == ("", "namespaces", "", False)


@pytest.mark.parametrize(
    ("account", "service_account", "namespace"),
    [("scheduler", "numasched", "numasched-system"), ("exporter", "numasched-exporter", "kube-system")],
)
def test_rbac_grants_exactly_what_the_code_requests(account: str, service_account: str, namespace: str) -> None:
    derived = derived_permissions()[account]
    allowed, roles = granted(service_account, namespace)
    assert roles, f"no role is bound to {namespace}/{service_account}"
    missing = sorted(derived - allowed)
    unused = sorted(allowed - derived)
    assert not missing, f"{service_account} is refused what its code requests: {missing}"
    assert not unused, f"{service_account} is granted what its code never requests: {unused}"


def test_namespaced_state_is_granted_in_the_scheduler_namespace_only() -> None:
    """The Lease and the configuration ConfigMap live in numasched-system; a ClusterRole would
    grant them in every namespace (every ConfigMap in the cluster)."""
    _, roles = granted("numasched", "numasched-system")
    for role in roles:
        if role["kind"] != "ClusterRole":
            continue
        for rule in role["rules"]:
            assert not {"configmaps", "leases"} & set(rule["resources"]), rule


SAMPLE_SCHEDULER = """
import functools
from kubernetes_asyncio import client

TABLE = {
    "A": ("a.example.com", "v1", "apples", True),
    "B": ("b.example.com", "v1", "bananas", False),
}

def informers(api_client, make_informer):
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)

    def custom_list(group, version, plural):
        return functools.partial(custom.list_cluster_custom_object, group, version, plural)

    make_informer(core.list_node)
    make_informer(custom_list("c.example.com", "v1", "cherries"))

class Writer:
    def __init__(self, api_client):
        self._events = client.EventsV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    async def write(self, kind, namespace, name, body):
        group, version, plural, namespaced = TABLE[kind]
        await self._events.create_namespaced_event(namespace, body)
        await self._custom.replace_namespaced_custom_object(group, version, namespace, plural, name, body)
"""

SAMPLE_EXPORTER = """
from kubernetes_asyncio import client

class Publisher:
    def __init__(self, api, group, version, plural):
        self.api = api
        self.group = group
        self.version = version
        self.plural = plural

    async def publish(self, name, body):
        await self.api.get_cluster_custom_object(self.group, self.version, self.plural, name)
        await self.api.create_cluster_custom_object(self.group, self.version, self.plural, body)

def publishers(custom):
    return [Publisher(custom, "d.example.com", "v1", "dates"), Publisher(custom, "e.example.com", "v2", "eggs")]

async def pods(api_client):
    return await client.CoreV1Api(api_client).list_pod_for_all_namespaces(field_selector="x")
"""


def test_the_derivation_on_a_small_example() -> None:
    """The derivation itself, on code whose requests are known: partials and informers, group and
    plural from one call site or one table row (never crossed), the API class decided by the
    receiver where two classes share a method name."""
    modules = (
        module_of(PACKAGE / "cache" / "kube" / "sample.py", SAMPLE_SCHEDULER),
        module_of(PACKAGE / "exporter" / "sample.py", SAMPLE_EXPORTER),
    )
    derived = derived_permissions(modules)
    assert derived["scheduler"] == {
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("c.example.com", "cherries", "list"),
        ("c.example.com", "cherries", "watch"),
        ("events.k8s.io", "events", "create"),
        ("a.example.com", "apples", "update"),
        ("b.example.com", "bananas", "update"),
    }
    assert derived["exporter"] == {
        ("d.example.com", "dates", "get"),
        ("d.example.com", "dates", "create"),
        ("e.example.com", "eggs", "get"),
        ("e.example.com", "eggs", "create"),
        ("", "pods", "list"),
    }


def test_the_derivation_refuses_what_it_cannot_follow() -> None:
    source = "def write(custom, group):\n    return custom.create_cluster_custom_object(group, 'v1', 'x', {})\n"
    with pytest.raises(Unresolved, match="nothing calls write"):
        derived_permissions((module_of(PACKAGE / "cache" / "kube" / "sample.py", source),))
    source += "write(None, 'g' + 'h')\n"
    with pytest.raises(Unresolved, match="cannot follow"):
        derived_permissions((module_of(PACKAGE / "cache" / "kube" / "sample.py", source),))


def test_operator_commands_request_what_their_docs_list() -> None:
    # numasched defrag lists PodDisruptionBudgets itself; docs/defrag.md names it among what the
    # operator running --apply needs, and no service account of deploy/ is granted it for that.
    assert derived_permissions()["operator"] == {("policy", "poddisruptionbudgets", "list")}
    docs = (PACKAGE / "docs" / "defrag.md").read_text(encoding="utf-8")
    assert "poddisruptionbudgets" in docs
